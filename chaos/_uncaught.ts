/**
 * Counts what would end a user's process: rejections nobody handled and
 * errors nobody caught (`unhandledrejection` and `error` events on
 * `globalThis`). Each is noted and prevented from ending the process, so
 * that a fault run reports every one of them and fails on any.
 *
 * @module
 */

/** Listens on `globalThis` until disposed. */
export class Uncaught implements Disposable {
  /** What was caught, as `unhandledrejection: <message>` or `error: <message>`. */
  readonly seen: string[] = [];
  readonly #onEach: (what: string) => void;

  /** @param onEach Called with each one as it comes. */
  constructor(onEach: (what: string) => void = () => {}) {
    this.#onEach = onEach;
    globalThis.addEventListener("unhandledrejection", this.#onRejection);
    globalThis.addEventListener("error", this.#onError);
  }

  [Symbol.dispose](): void {
    globalThis.removeEventListener("unhandledrejection", this.#onRejection);
    globalThis.removeEventListener("error", this.#onError);
  }

  readonly #onRejection = (event: PromiseRejectionEvent): void => {
    event.preventDefault();
    this.#note(`unhandledrejection: ${describe(event.reason)}`);
  };

  readonly #onError = (event: ErrorEvent): void => {
    event.preventDefault();
    this.#note(`error: ${describe(event.error ?? event.message)}`);
  };

  #note(what: string): void {
    this.seen.push(what);
    this.#onEach(what);
  }
}

function describe(value: unknown): string {
  return value instanceof Error
    ? `${value.name}: ${value.message.split("\n")[0]}`
    : String(value).split("\n")[0]!;
}
