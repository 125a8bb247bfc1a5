/**
 * Which locks a release handed over to a queued acquire (no round of
 * requests took them), for the `"acquired"` event's `handoff`.
 *
 * @module
 */

import type { Lock } from "../api/lock.ts";

const handedOver = new WeakSet<Lock>();

/** Marks `lock` as handed over by a release. */
export function markHandedOver(lock: Lock): void {
  handedOver.add(lock);
}

/** Whether a release handed `lock` over to its acquire. */
export function wasHandedOver(lock: Lock): boolean {
  return handedOver.has(lock);
}
