/**
 * The events of a Redlock: `"error"` for per-server failures, and the
 * lifecycle events, with a typed `on()` and the bookkeeping of who listens
 * (no lifecycle event is made for nobody).
 *
 * @module
 */

import { RedlockErrorEvent } from "./error_event.ts";
import type { RedlockEventMap } from "./events.ts";
import { captureOf, Listeners, on, type OnListener } from "./listeners.ts";

/** The listeners of each RedlockEvents, for the lifecycle of its operations. */
let listenersOf: (target: RedlockEvents) => Listeners;

/**
 * The event target a {@linkcode Redlock} is: it dispatches
 * {@linkcode RedlockErrorEvent}s named `"error"` (per-server failures, never
 * fatal by themselves) and, only while somebody listens, the lifecycle
 * events `"acquired"`, `"released"`, `"extended"` and `"lost"` (see
 * {@linkcode RedlockEventMap}).
 *
 * @example Listening
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * redlock.on("error", (error) => console.warn(error.message));
 * ```
 */
export class RedlockEvents extends EventTarget {
  readonly #listeners = new Listeners();

  static {
    listenersOf = (target) => target.#listeners;
  }

  /**
   * Listens for `"error"` events and hands `listener` the error itself.
   *
   * @param type The event type: `"error"`.
   * @param listener Called with each error and its event.
   * @returns A function that removes the listener.
   * @throws {TypeError} When `type` is no event of a Redlock or `listener` is no function.
   *
   * @example Logging
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const off = redlock.on("error", (error) => console.warn(error.message));
   * off();
   * ```
   */
  on(type: "error", listener: (error: Error, event: RedlockErrorEvent) => void): () => void;
  /**
   * Listens for a lifecycle event: `"acquired"`, `"released"`, `"extended"`
   * or `"lost"` (see {@linkcode RedlockEventMap}).
   *
   * @param type The event type.
   * @param listener Called with each event.
   * @returns A function that removes the listener.
   * @throws {TypeError} When `type` is no event of a Redlock or `listener` is no function.
   *
   * @example Measuring waits
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * redlock.on("acquired", (event) => console.log(event.waited, event.attempts));
   * ```
   */
  on<K extends Exclude<keyof RedlockEventMap, "error">>(
    type: K,
    listener: (event: RedlockEventMap[K]) => void,
  ): () => void;
  on(
    type: keyof RedlockEventMap,
    listener: ((error: Error, event: RedlockErrorEvent) => void) | ((event: Event) => void),
  ): () => void {
    return on(this, type, listener as OnListener);
  }

  /**
   * Adds an event listener, as on any `EventTarget`; see
   * {@linkcode RedlockEventMap} for the events.
   *
   * @param type The event type.
   * @param listener The listener.
   * @param options The standard listener options.
   */
  override addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | AddEventListenerOptions,
  ): void {
    super.addEventListener(type, listener, options);
    const { once = false, signal } = typeof options === "object" && options !== null ? options : {};
    const capture = captureOf(options);
    // The platform drops these without calling removeEventListener(): the
    // list must not keep them, or events would be made for nobody.
    if (listener === null || signal?.aborted) return;
    // Added already (same type, listener and capture): the platform ignored it.
    if (this.#listeners.listed(type, listener, capture)) return;
    let forget: EventListener | undefined;
    if (once) {
      forget = () => this.#listeners.removed(type, listener, capture);
      super.addEventListener(type, forget, { once: true });
    }
    this.#listeners.added(type, listener, capture, forget);
    signal?.addEventListener("abort", () => this.removeEventListener(type, listener, { capture }), {
      once: true,
    });
  }

  /**
   * Removes an event listener, as on any `EventTarget`.
   *
   * @param type The event type.
   * @param listener The listener.
   * @param options The standard listener options.
   */
  override removeEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | EventListenerOptions,
  ): void {
    super.removeEventListener(type, listener, options);
    const forget = this.#listeners.removed(type, listener, captureOf(options));
    if (forget !== undefined) super.removeEventListener(type, forget);
  }

  /**
   * Dispatches an error that concerns a whole operation (not one server) as
   * an `"error"` event with `server` −1; used where throwing would hide a
   * more important result, e.g. a failed release after `using()`.
   *
   * @param error The error.
   *
   * @example Reporting
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * redlock.reportError(new Error("cleanup failed"));
   * ```
   */
  reportError(error: unknown): void {
    const e = error instanceof Error ? error : new Error(String(error), { cause: error });
    this.dispatchEvent(new RedlockErrorEvent(e, -1, this));
  }
}

export { listenersOf };
