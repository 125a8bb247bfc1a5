/**
 * Releasing a plain lock: one round of RELEASE on every server, settled on
 * a quorum. Keys that already expired count as released; keys held by
 * another value are never touched.
 *
 * @module
 */

import type { ExecutionResult } from "../api/errors.ts";
import type { Lock } from "../api/lock.ts";
import { RELEASE, releaseCall } from "../protocol/scripts.ts";
import type { Servers } from "../quorum/servers.ts";

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
