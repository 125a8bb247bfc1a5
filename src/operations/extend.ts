/**
 * Extending a lock, and confirming a fencing token on a quorum.
 */

import { ExecutionError, type ExecutionStats, LockLostError } from "../api/errors.ts";
import { checkLock, Lock, type LockOwner } from "../api/lock.ts";
import type { ExtendOptions } from "../api/options.ts";
import { checkDuration } from "../util/validate.ts";
import { EXTEND, extendCall, FENCE, fenceCall } from "../protocol/scripts.ts";
import { type PermitTerms, SEM_EXTEND, semExtendCall } from "../protocol/semaphore_script.ts";
import { type Send, type Servers, show } from "../quorum/servers.ts";
import { round } from "../quorum/round.ts";
import { checkCallOptions, checkSettings, type Settings } from "../api/settings.ts";
import { mayRetry, retryWait } from "./retry.ts";
import { deadline, delay } from "../util/delay.ts";
import type { LockContext } from "../api/lock_context.ts";
import { now, validUntil } from "../util/time.ts";

/** One extension's checked arguments. */
export interface ExtendRequest {
  readonly lock: Lock;
  readonly duration: number;
  readonly settings: Settings;
  /** False to take keys of the lock that expired again when they are free. */
  readonly onlyIfLocked: boolean;
  readonly signal: AbortSignal | undefined;
  /** ms the whole extension may take (the caller's `timeout`). */
  readonly timeout?: number | undefined;
  /** What the new lock is owned by (the Redlock, or the handle that made it). */
  readonly owner: LockOwner;
  /** Asks one server; its reply is a vote, as EXTEND's (by default EXTEND, see `extend()`). */
  readonly send?: Send | undefined;
}

/** Checks an extension's arguments before any request; `known` are the option names. */
export function checkExtend(
  context: LockContext,
  lock: Lock,
  duration: unknown,
  options: ExtendOptions | undefined,
  known: ReadonlySet<string>,
): Omit<ExtendRequest, "owner"> {
  checkLock(lock);
  const ms = checkDuration(duration);
  const opts = checkCallOptions(options, known);
  const settings = checkSettings(opts, context.settings, "options");
  const { signal, timeout } = opts;
  return { lock, duration: ms, settings, onlyIfLocked: opts.onlyIfLocked ?? true, signal, timeout };
}

/**
 * Extends a lock through the hooks installed on the Redlock and with its
 * `"extended"` or `"lost"` event, within `request.timeout`.
 */
export function extendLock(context: LockContext, request: ExtendRequest): Promise<Lock> {
  return context.lifecycle.extend(request.lock, async () => {
    const { signal, dispose } = deadline(request.signal, request.timeout);
    try {
      return await extend(context.servers, { ...request, signal });
    } finally {
      dispose();
    }
  });
}

/** Semaphore permits among the locks, with their terms: their extension renews the permits key. */
const permits = new WeakMap<Lock, PermitTerms>();

/** Marks `lock` as a permit of a semaphore, so that extending it renews the permits key. */
export function markPermit(lock: Lock, terms: PermitTerms): Lock {
  permits.set(lock, terms);
  return lock;
}

/** EXTEND on the lock's resources; SEM_EXTEND for a permit. */
function extender(servers: Servers, request: ExtendRequest): Send {
  const { lock, duration, onlyIfLocked } = request;
  const terms = permits.get(lock);
  if (terms === undefined) {
    return servers.sender(EXTEND, extendCall(lock.resources, lock.value, duration, onlyIfLocked));
  }
  const call = semExtendCall(lock.resources[0]!, terms, lock.value, duration, onlyIfLocked);
  return servers.sender(SEM_EXTEND, call);
}

/**
 * Extends a lock to `duration` ms from the start of the successful attempt,
 * retrying as the settings say; the new lock has the same value and token.
 * `request.send` asks one server (by default EXTEND on the lock's resources,
 * or SEM_EXTEND for a permit); its reply is a vote, as EXTEND's.
 */
export async function extend(servers: Servers, request: ExtendRequest): Promise<Lock> {
  const { lock, duration, settings, onlyIfLocked, signal, owner } = request;
  const send = request.send ?? extender(servers, request);
  signal?.throwIfAborted();
  const attempts: ExecutionStats[] = [];
  const what = `extend of ${show(lock.resources)}`;
  for (let n = 1;; n++) {
    if (onlyIfLocked && lock.remainingTime <= 0) {
      throw new LockLostError(`${what} failed: the lock expired or was released`, attempts);
    }
    const start = now();
    const ballot = await servers.vote(send, lock.resources, settings.requestTimeout, signal, start);
    attempts.push(ballot.stats);
    const until = validUntil(start, duration, settings.driftFactor);
    if (ballot.ok && until > ballot.end) {
      const extended = new Lock({
        owner,
        resources: lock.resources,
        value: lock.value,
        attempts: Object.freeze(attempts),
        validUntil: until,
        fencingToken: lock.fencingToken,
      });
      const terms = permits.get(lock);
      return terms === undefined ? extended : markPermit(extended, terms);
    }
    if (ballot.stats.votesAgainst.conflicts > servers.members.length - servers.quorum) {
      throw new LockLostError(`${what} failed: the lock is no longer ours`, attempts);
    }
    if (!mayRetry(settings, n)) {
      throw new ExecutionError(`${what} failed`, attempts);
    }
    await delay(retryWait(settings, n), signal);
  }
}

/**
 * Makes `token` (the largest counter of the acquiring quorum) known to a
 * quorum before the lock is handed out, so that any later quorum sees it.
 * Returns the token, or undefined when no quorum confirmed it in time.
 */
export async function fence(
  servers: Servers,
  resources: readonly string[],
  token: number,
  until: number,
  requestTimeout: number,
): Promise<number | undefined> {
  if (servers.members.length === 1) return token; // the acquire script wrote it
  const call = fenceCall(resources, token);
  const tally = await round(
    servers.members,
    (m) => servers.run(m, FENCE, call, (reply) => reply),
    {
      timeout: Math.max(1, Math.min(requestTimeout, until - now())),
      done: ({ answers }) => answers.size >= servers.quorum,
      onError: servers.emit,
    },
  );
  return tally.answers.size >= servers.quorum ? token : undefined;
}
