/**
 * Releasing a plain lock: one round of RELEASE on every server, settled on
 * a quorum. Keys that already expired count as released; keys held by
 * another value are never touched.
 *
 * @module
 */

import type { ExecutionResult } from "../api/errors.ts";
import type { Lock } from "../api/lock.ts";
import type { LockContext } from "../api/lock_context.ts";
import { RELEASE, releaseCall } from "../protocol/scripts.ts";
import type { Servers } from "../quorum/servers.ts";

/** {@linkcode release} through the hooks installed on the Redlock, with its `"released"` event. */
export function releaseLock(
  context: LockContext,
  lock: Lock,
  requestTimeout: number,
): Promise<ExecutionResult> {
  return context.lifecycle.release(lock, () => release(context.servers, lock, requestTimeout));
}

/** One round of RELEASE of `lock`, each request bounded by `requestTimeout` ms. */
export function release(
  servers: Servers,
  lock: Lock,
  requestTimeout: number,
): Promise<ExecutionResult> {
  const keys = lock.resources;
  const call = releaseCall(keys, lock.value, { reservation: requestTimeout });
  return servers.release(servers.sender(RELEASE, call), requestTimeout, keys);
}
