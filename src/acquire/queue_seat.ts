/**
 * An acquire's place in the wait queue of its one resource: its ticket
 * (the score of its value in the queue), its subscription to the Redlock's
 * wake channel, and when it queued.
 *
 * @module
 */

import type { Listening } from "../wait/waiters.ts";

/** The place of one acquire in its resource's wait queue; a `Seat` of ACQUIRE's. */
export class QueueSeat {
  readonly kind = "queued";
  /** The value's score in the queue: the time it queued, so that earlier waiters go first. */
  readonly ticket: string = String(Date.now());
  /** The subscription that hears releases hand the key to this acquire. */
  readonly listening: Listening;
  /** When the first attempt in the queue started: no server queued the value before. */
  #since: number | undefined;

  /** @param listening A subscription that at least one server confirmed. */
  constructor(listening: Listening) {
    this.listening = listening;
  }

  /** When the first attempt in the queue started; undefined before it. */
  get since(): number | undefined {
    return this.#since;
  }

  /** An attempt in the queue started at `start`. */
  attempted(start: number): void {
    this.#since ??= start;
  }

  /**
   * ms the acquire sleeps, when no release wakes it, before it asks
   * again: a key handed to (or reserved for) a waiter ahead that went away
   * expires unannounced, and a wake message may be lost. It asks after a
   * request timeout, then after as long as it has queued, up to half that
   * again at random (so a long queue does not flood the servers, waiters
   * that queued together do not ask together, and such a stall costs at
   * most about the wait so far); with a key that never expires (`heldFor`
   * not finite), whose queue outlives it by only a few request timeouts,
   * always after one.
   */
  recheck(heldFor: number, requestTimeout: number, now: number): number {
    if (!Number.isFinite(heldFor)) return requestTimeout + 1;
    const queuedFor = now - (this.#since ?? Infinity);
    return Math.max(requestTimeout, queuedFor) * (1 + Math.random() / 2) + 1;
  }
}
