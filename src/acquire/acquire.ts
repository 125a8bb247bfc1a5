/**
 * An acquire: the lean first attempt, kept to one round and the lock for
 * the usual case, through the hooks and events and within the caller's
 * timeout; anything else goes on in an {@linkcode Acquisition}.
 *
 * @module
 */

import { withRetryCount } from "../operations/retry.ts";
import { ResourceLockedError } from "../api/errors.ts";
import type { LockContext } from "../api/lock_context.ts";
import type { Lock } from "../api/lock.ts";
import { ACQUIRE, acquireCall, NO_SEAT } from "../protocol/scripts.ts";
import { Acquisition } from "./acquisition.ts";
import { setNxVote } from "./fast_path.ts";
import { abandon, type AcquireRequest, newLock, queueable, takesBySet, terms } from "./request.ts";
import { deadline } from "../util/delay.ts";
import { now, validUntil } from "../util/time.ts";

/**
 * Acquires the lock `request` asks for, through the hooks installed on the
 * Redlock and with its `"acquired"` event, within `request.timeout`.
 */
export function acquireLock(context: LockContext, request: AcquireRequest): Promise<Lock> {
  return context.lifecycle.acquire(request.keys, request.signal, () => {
    if (request.timeout === undefined) return acquire(context, request);
    const { signal, dispose } = deadline(request.signal, request.timeout);
    return acquire(context, { ...request, signal }).finally(dispose);
  });
}

/** {@linkcode acquireLock} with one attempt: null when another holder has the resource. */
export async function tryAcquireLock(
  context: LockContext,
  request: AcquireRequest,
): Promise<Lock | null> {
  try {
    return await acquireLock(context, {
      ...request,
      settings: withRetryCount(request.settings, 0),
    });
  } catch (error) {
    if (error instanceof ResourceLockedError) return null;
    throw error;
  }
}

/**
 * Acquires a lock. The first attempt is kept lean for the usual case: one
 * round, and the lock when it succeeds. Anything else (a conflict, too few
 * servers, a fencing token to confirm, a queue to join) goes on in an
 * {@linkcode Acquisition}, which takes that round as its first attempt.
 */
export function acquire(context: LockContext, request: AcquireRequest): Promise<Lock> {
  const { keys, duration, settings, signal, fencing } = request;
  if (signal?.aborted) return Promise.reject(signal.reason);
  if (queueable(request) && context.waiters.isHot(keys[0]!)) {
    // An acquire of this Redlock queued for the resource just now, so it is
    // likely still contended: queue at once.
    return new Acquisition(context, request).run(undefined);
  }
  const { servers } = context;
  const start = now();
  const plain = takesBySet(servers, request)
    ? setNxVote(keys[0]!, request.value, duration)
    : undefined;
  const send = plain?.send ??
    servers.sender(ACQUIRE, acquireCall(keys, request.value, terms(request, NO_SEAT)));
  // The lock is made as the round settles, without a `then` of the round.
  return servers.decide(send, {
    keys,
    timeout: settings.requestTimeout,
    signal,
    start,
    judge: plain?.judge,
    decide: (ballot) => {
      const until = validUntil(start, duration, settings.driftFactor);
      if (!fencing && ballot.ok && until > ballot.end) {
        // The stats are made when the lock's `attempts` are first read, if ever.
        return newLock(context.owner, request, () => [ballot.stats], until, undefined);
      }
      return new Acquisition(context, request).run({ start, ballot });
    },
    aborted: () => abandon(servers, request),
  });
}
