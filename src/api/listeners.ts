/**
 * The listeners of a Redlock's events, counted by type, so that no
 * lifecycle event is made for nobody, and `on()`'s checks and wrapping.
 *
 * @module
 */

import type { RedlockErrorEvent } from "./error_event.ts";
import type { RedlockEventMap } from "./events.ts";
import { describeValue } from "../util/validate.ts";

/** The event types a Redlock dispatches. */
const EVENT_TYPES: ReadonlySet<string> = new Set<keyof RedlockEventMap>([
  "error",
  "acquired",
  "released",
  "extended",
  "lost",
]);

/**
 * The listeners of one event target, by type and, as the platform tells
 * them apart, by their capture flag. A `once` listener maps to the
 * listener that forgets it after its event (see `RedlockEvents`).
 */
export class Listeners {
  /** By type: the listeners without capture, then those with it. */
  readonly #byType = new Map<string, [ListenerMap, ListenerMap]>();

  /** Whether `listener` is listed for `type` with `capture`. */
  listed(type: string, listener: unknown, capture: boolean): boolean {
    return this.#byType.get(type)?.[+capture]?.has(listener) === true;
  }

  /** A listener of `type` was added; `forget` is what forgets a `once` listener. */
  added(
    type: string,
    listener: unknown,
    capture: boolean,
    forget: EventListener | undefined,
  ): void {
    let lists = this.#byType.get(type);
    if (lists === undefined) this.#byType.set(type, lists = [new Map(), new Map()]);
    lists[+capture]!.set(listener, forget);
  }

  /** A listener of `type` was removed; returns what forgot it if it was `once`. */
  removed(type: string, listener: unknown, capture: boolean): EventListener | undefined {
    const list = this.#byType.get(type)?.[+capture];
    const forget = list?.get(listener);
    list?.delete(listener);
    return forget;
  }

  /** Whether anybody listens for `type`. */
  has(type: string): boolean {
    if (this.#byType.size === 0) return false;
    const lists = this.#byType.get(type);
    return lists !== undefined && (lists[0].size > 0 || lists[1].size > 0);
  }
}

type ListenerMap = Map<unknown, EventListener | undefined>;

/** The capture flag of a listener's options, as `addEventListener()` reads it. */
export function captureOf(options: boolean | EventListenerOptions | undefined): boolean {
  return typeof options === "object" && options !== null
    ? options.capture === true
    : options === true;
}

/** A listener of `on()`: the error and its event for `"error"`, else the event. */
export type OnListener =
  | ((error: Error, event: RedlockErrorEvent) => void)
  | ((event: Event) => void);

/**
 * Adds `listener` for `type` to `target` as `on()` does (an `"error"`
 * listener is handed the error itself); returns what removes it.
 */
export function on(target: EventTarget, type: string, listener: OnListener): () => void {
  if (!EVENT_TYPES.has(type)) {
    throw new TypeError(
      `type must be one of ${[...EVENT_TYPES].join(", ")}, got ${describeValue(type)}`,
    );
  }
  if (typeof listener !== "function") {
    throw new TypeError(`listener must be a function, got ${describeValue(listener)}`);
  }
  const handler = type === "error"
    ? (event: Event) => {
      const e = event as RedlockErrorEvent;
      (listener as (error: Error, event: RedlockErrorEvent) => void)(e.error, e);
    }
    : listener as (event: Event) => void;
  target.addEventListener(type, handler);
  return () => target.removeEventListener(type, handler);
}
