/**
 * A distributed lock for Deno (and Node and Bun through JSR): the Redlock
 * algorithm over N independent Redis servers. A lock holds when a majority
 * of servers agree, its validity is measured on the monotonic clock, and it
 * works with your own ioredis, node-redis, deno-redis or Upstash clients.
 *
 * ```ts no-eval
 * import { Redis } from "npm:ioredis";
 * import Redlock from "jsr:@x/redlock";
 *
 * const servers = [6379, 6380, 6381].map((port) => new Redis(port));
 * const redlock = new Redlock(servers);
 *
 * {
 *   await using lock = await redlock.acquire("game:42", 5_000, { timeout: 2_000 });
 *   console.log(`mine for ${lock.remainingTime} ms`);
 * } // released here
 *
 * await redlock.using("ledger", 5_000, async (signal) => {
 *   // extended automatically; `signal` aborts if the lock is lost
 *   signal.throwIfAborted();
 * });
 * for (const server of servers) server.disconnect();
 * ```
 *
 * @module
 */

export { Redlock, Redlock as default, type RedlockSummary } from "./src/api/redlock.ts";
export { RedlockEvents } from "./src/api/redlock_events.ts";
export { ReadWriteLock, type ReadWriteMode } from "./src/primitives/read_write.ts";
export {
  MAX_PERMITS,
  PermitsMismatchError,
  Semaphore,
  type SemaphoreOptions,
} from "./src/primitives/semaphore.ts";
export type {
  AcquireOptions,
  ExtendOptions,
  HandleAcquireOptions,
  HandleUsingOptions,
  InspectOptions,
  RedlockInit,
  RedlockOptions,
  ReleaseOptions,
  UsingOptions,
} from "./src/api/options.ts";
export type { UsingContext, UsingRoutine } from "./src/api/routine.ts";
export { Lock, type LockInit, type LockOwner, type LockSummary } from "./src/api/lock.ts";
export {
  type Campaigner,
  lead,
  type LeadContext,
  type LeadOptions,
  type LeadRoutine,
} from "./src/primitives/lead.ts";
export {
  ExecutionError,
  type ExecutionResult,
  type ExecutionStats,
  LockConflictError,
  LockLostError,
  PermissionError,
  RequestTimeoutError,
  ResourceLockedError,
} from "./src/api/errors.ts";
export { RedlockErrorEvent } from "./src/api/error_event.ts";
export {
  type AcquiredDetail,
  LockAcquiredEvent,
  LockExtendedEvent,
  LockLostEvent,
  LockReleasedEvent,
  type RedlockEventMap,
} from "./src/api/events.ts";
export {
  bunRedisClient,
  type BunRedisLike,
  denoRedisClient,
  type DenoRedisLike,
  glideClient,
  type GlideLike,
  ioredisClient,
  type IoredisLike,
  nodeRedisClient,
  type NodeRedisLike,
  type RedisClient,
  type ScriptClient,
  toScriptClient,
} from "./src/clients/clients.ts";
export type { LuaScript } from "./src/protocol/scripts.ts";
export {
  duplicateSubscriber,
  type ReleaseSubscriber,
  type SubscriberFactory,
} from "./src/wait/subscriber.ts";
