/**
 * The retry and give-up policy of every operation that retries: acquires
 * (`Acquisition`), read-write lock and semaphore contention (`contend()`)
 * and extensions. An operation makes at most `retryCount + 1` attempts
 * (`retryCount` −1: until it succeeds, is aborted or, extending, the lock
 * is lost), waits `retryDelay` plus up to `retryJitter` after a failed one,
 * and, giving up, says whether another holder kept the resource.
 *
 * @module
 */

import { ExecutionError, type ExecutionStats, ResourceLockedError } from "../api/errors.ts";
import type { Settings } from "../api/settings.ts";
import { describeValue } from "../util/validate.ts";

/** `retryCount` for retrying until success, an abort or a lost lock. */
export const RETRY_FOREVER = -1;

/** `settings` with `retryCount` set: 0 for one attempt, {@linkcode RETRY_FOREVER}. */
export function withRetryCount(settings: Settings, retryCount: number): Settings {
  return { ...settings, retryCount };
}

/** Whether another attempt may follow the `attempt`-th (from 1) that failed. */
export function mayRetry(settings: Settings, attempt: number): boolean {
  const { retryCount } = settings;
  return retryCount === RETRY_FOREVER || attempt <= retryCount;
}

/**
 * ms to sleep after the `attempt`-th failed attempt: `retryDelay` (or what
 * it returns) plus up to `retryJitter` at random.
 */
export function retryWait(settings: Settings, attempt: number): number {
  const { retryDelay, retryJitter } = settings;
  const base = typeof retryDelay === "function" ? retryDelay(attempt) : retryDelay;
  if (typeof base !== "number" || !Number.isFinite(base) || base < 0) {
    throw new RangeError(
      `retryDelay(${attempt}) must return a finite number of ms ≥ 0, got ${describeValue(base)}`,
    );
  }
  return base + Math.random() * retryJitter;
}

/** Why an acquire gave up. */
export interface GiveUp {
  /** Who kept the resource, as the message says, e.g. `another lock`. */
  readonly holder: string;
  /** How the servers voted against the last attempt: conflicts, and all votes against. */
  readonly last: { readonly conflicts: number; readonly size: number };
  /** How many servers there are, and how many must agree. */
  readonly servers: { readonly members: { readonly length: number }; readonly quorum: number };
  /** The stats of every attempt. */
  readonly attempts: readonly ExecutionStats[];
}

/**
 * The error an acquire that gave up rejects with: a
 * {@linkcode ResourceLockedError} when another holder kept the resource
 * (some server refused it, and server failures alone could not have made
 * a quorum impossible), else an {@linkcode ExecutionError}. `what` says
 * what failed, e.g. `acquire of "a"`.
 */
export function giveUpError(what: string, why: GiveUp): ExecutionError {
  const { last, servers, attempts } = why;
  const failures = last.size - last.conflicts;
  const held = last.conflicts > 0 && failures <= servers.members.length - servers.quorum;
  const message = `${what} failed`;
  return held
    ? new ResourceLockedError(`${message}: held by ${why.holder}`, attempts)
    : new ExecutionError(message, attempts);
}
