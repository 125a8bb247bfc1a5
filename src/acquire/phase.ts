/**
 * Where an acquire is, as one discriminated union: each phase carries what
 * only it has (the SET NX flag, the subscription, the queue seat).
 *
 * @module
 */

import type { Listening } from "../wait/waiters.ts";
import type { QueueSeat } from "./queue_seat.ts";

/**
 * The phase of one acquire:
 * - `trying`: it tries without a seat, by a plain SET NX while its one
 *   resource looks free (`setNx`), else by ACQUIRE; `listening` is a
 *   subscription no server confirmed (it is not asked for again);
 * - `watching`: a watcher of its resources, woken when a release publishes;
 * - `queued`: in its one resource's wait queue, with its seat: a release
 *   hands the key over or reserves it for the first in line;
 * - `granted`: it has the lock (from a round or a handoff);
 * - `ended`: it gave up or was aborted, and left the queues.
 */
export type Phase =
  | {
    readonly kind: "trying";
    readonly setNx: boolean;
    readonly listening?: Listening | undefined;
  }
  | { readonly kind: "watching"; readonly listening: Listening }
  | { readonly kind: "queued"; readonly seat: QueueSeat }
  | { readonly kind: "granted"; readonly listening: Listening | undefined }
  | { readonly kind: "ended"; readonly listening: Listening | undefined };

/** The subscription of `phase`, if it has one: it ends with the acquire. */
export function listeningOf(phase: Phase): Listening | undefined {
  return phase.kind === "queued" ? phase.seat.listening : phase.listening;
}
