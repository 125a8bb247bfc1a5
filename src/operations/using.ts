/**
 * `using()`, once for plain locks, read-write locks and semaphores: acquire,
 * run the routine while the lock is extended automatically, release when
 * the routine settles.
 *
 * @module
 */

import { RETRY_FOREVER, withRetryCount } from "./retry.ts";
import type { Lock, LockOwner } from "../api/lock.ts";
import type { LockContext } from "../api/lock_context.ts";
import { acquireLock } from "../acquire/acquire.ts";
import type { AcquireRequest } from "../acquire/request.ts";
import { extendLock } from "./extend.ts";
import { releaseLock } from "./release.ts";
import type { UsingRoutine } from "../api/routine.ts";
import { AutoExtension } from "./auto_extend.ts";
import { describeValue } from "../util/validate.ts";

/** How one kind of lock is held by `using()`. */
export interface UsingPlan {
  /** ms before the end of the lock's validity that it is extended. */
  readonly threshold: number;
  /** The caller's signal: it also aborts the routine's. */
  readonly signal: AbortSignal | undefined;
  /** Acquires the lock. */
  acquire(): Promise<Lock>;
  /** Extends the current lock; `signal` aborts when the routine settled. */
  extend(lock: Lock, signal: AbortSignal): Promise<Lock>;
  /** Releases the last lock. */
  release(lock: Lock): Promise<unknown>;
  /** Reports a failed release (the routine's result matters more). */
  report(error: unknown): void;
}

/**
 * The plan of a plain lock's `using()`: acquired as `request` says, extended
 * by the same settings (retrying until the lock is lost), owned by `owner`.
 */
export function plainPlan(
  context: LockContext,
  request: AcquireRequest,
  owner: LockOwner,
  threshold: number,
): UsingPlan {
  const { duration, settings } = request;
  const extending = {
    duration,
    settings: withRetryCount(settings, RETRY_FOREVER),
    onlyIfLocked: true,
  };
  return {
    threshold,
    signal: request.signal,
    acquire: () => acquireLock(context, request),
    extend: (lock, signal) => extendLock(context, { ...extending, lock, signal, owner }),
    release: (lock) => releaseLock(context, lock, settings.requestTimeout),
    report: (error) => owner.reportError(error),
  };
}

/**
 * Acquires as `plan` says, runs `routine` while the lock is renewed
 * `plan.threshold` ms before it ends, then releases it; a failed release
 * goes to `plan.report`. When `plan.signal` aborted by the time the lock is
 * had, the routine never starts: the lock is released and the promise
 * rejects with the signal's reason, as an aborted acquire.
 */
export async function using<T>(routine: UsingRoutine<T>, plan: UsingPlan): Promise<T> {
  const lock = await plan.acquire();
  const { signal } = plan;
  if (signal?.aborted) {
    try {
      await plan.release(lock);
    } catch (error) {
      plan.report(error);
    }
    throw signal.reason;
  }
  const extension = new AutoExtension(lock, plan.threshold, plan.extend, plan.signal);
  try {
    return await routine(extension.signal, extension.context);
  } finally {
    const last = await extension.stop();
    try {
      await plan.release(last);
    } catch (error) {
      plan.report(error);
    }
  }
}

/** Splits using()'s `(options, routine)` or `(routine)` and checks the routine. */
export function usingArguments<O, R>(optionsOrRoutine: O | R, maybeRoutine: R | undefined): [
  O | undefined,
  R,
] {
  if (typeof optionsOrRoutine === "function" && maybeRoutine !== undefined) {
    // Options after the routine would be ignored: lead() takes them last, using() before.
    throw new TypeError(
      `using() takes its options before the routine (…, options, routine); got a routine, ` +
        `then ${describeValue(maybeRoutine)}`,
    );
  }
  const [options, routine] = typeof optionsOrRoutine === "function"
    ? [undefined, optionsOrRoutine as R]
    : [optionsOrRoutine as O, maybeRoutine];
  if (typeof routine !== "function") {
    throw new TypeError(`routine must be a function, got ${describeValue(routine)}`);
  }
  return [options, routine];
}
