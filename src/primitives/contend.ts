/**
 * What read-write locks and semaphores share: the checks of an acquire's
 * arguments, and the loop around their attempts (retries, waiting, giving
 * up), through the hooks and events of their Redlock.
 *
 * @module
 */

import { ExecutionError, type ExecutionStats } from "../api/errors.ts";
import type { Lock } from "../api/lock.ts";
import type { LockContext } from "../api/lock_context.ts";
import type { HandleAcquireOptions } from "../api/options.ts";
import type { Waiters } from "../wait/waiters.ts";
import { checkCallOptions, checkSettings, type Settings } from "../api/settings.ts";
import { giveUpError, mayRetry, retryWait, withRetryCount } from "../operations/retry.ts";
import { deadline, delay } from "../util/delay.ts";
import { checkDuration } from "../util/validate.ts";

/** One acquire's checked arguments. */
export interface HandleRequest {
  readonly duration: number;
  readonly settings: Settings;
  readonly signal: AbortSignal | undefined;
  readonly timeout: number | undefined;
  readonly value: string;
}

/** Checks an acquire's arguments before any request; `known` are the option names. */
export function checkRequest(
  context: LockContext,
  duration: unknown,
  options: HandleAcquireOptions | undefined,
  known: ReadonlySet<string>,
): HandleRequest {
  checkDuration(duration);
  const opts = checkCallOptions(options, known);
  const settings = checkSettings(opts, context.settings, "options");
  return {
    duration: duration as number,
    settings,
    signal: opts.signal,
    timeout: opts.timeout,
    value: context.nextValue(duration as number),
  };
}

/** `request` for exactly one attempt (tryRead, tryAcquire, …). */
export function oneAttempt(request: HandleRequest): HandleRequest {
  return { ...request, settings: withRetryCount(request.settings, 0) };
}

/** A failed attempt: its stats and what the servers said. */
export interface Refusal {
  readonly stats: ExecutionStats & {
    readonly votesAgainst: { readonly conflicts: number; readonly size: number };
  };
  /** When the attempt started (monotonic). */
  readonly start: number;
  /** The shortest TTL of a conflicting holder, or Infinity. */
  readonly heldFor: number;
  /** Settles once the releases the attempt sent for what it may have taken have answered. */
  readonly undone: Promise<unknown>;
}

/** What the retry loop drives: one kind of acquire. */
export interface Contender {
  /**
   * One attempt, `listening` true when a release wakes the caller (then a
   * refusal asks the servers to publish the release), `sleep` the wait
   * that follows a refusal. Releases what a failed attempt took; when
   * `signal` aborts, rejects with its reason.
   */
  attempt(
    listening: boolean,
    sleep: number,
    signal: AbortSignal | undefined,
  ): Promise<Lock | Refusal>;
  /**
   * Releases whatever the acquire may hold, and resolves once the servers
   * answered (or timed out): after `last`, the refusal whose retries ran
   * out, what it did not undo already; without it (an abort, an error),
   * on every server.
   */
  abandon(last?: Refusal): Promise<void>;
  /** The keys whose release channels wake the acquire; undefined: it polls. */
  readonly channels: readonly string[] | undefined;
  /** The resources the hooks are told of: the handle's name. */
  readonly resources: readonly string[];
  /**
   * What the error messages call it, e.g. `read lock of "doc"`; also what
   * the waiters remember as hot once such an acquire waited.
   */
  readonly what: string;
}

/** {@linkcode contend}, through the hooks installed on the Redlock and with its `"acquired"` event. */
export function contendLock(
  context: LockContext,
  request: HandleRequest,
  contender: Contender,
): Promise<Lock> {
  return context.lifecycle.acquire(
    contender.resources,
    request.signal,
    () => contend(context, request, contender),
  );
}

/**
 * Attempts until one succeeds, as the settings say: at most `retryCount +
 * 1` attempts, sleeping `retryDelay` plus jitter between two (less when a
 * release wakes it, and never longer than the holder's TTL), bounded by
 * `timeout` and `signal`.
 */
export async function contend(
  context: LockContext,
  request: HandleRequest,
  contender: Contender,
): Promise<Lock> {
  // Before the deadline's timer: an aborted call leaves no timer running.
  request.signal?.throwIfAborted();
  const { signal, dispose } = deadline(request.signal, request.timeout);
  const { settings } = request;
  const notify = settings.wait === "notify";
  const { waiters } = context;
  const attempts: ExecutionStats[] = [];
  type Listening = Awaited<ReturnType<Waiters["listen"]>>;
  const listen = (): Promise<Listening> | undefined => {
    const channels = contender.channels;
    return channels === undefined ? undefined : waiters.listen(channels, settings.requestTimeout);
  };
  let listening: Listening | undefined;
  try {
    // An acquire like this one waited just now, so this one likely waits
    // too: it listens from its first attempt, which then asks to be woken.
    if (notify && waiters.isHot(contender.what)) listening = await listen();
    for (let n = 1;; n++) {
      const sleep = retryWait(settings, n);
      const outcome = await contender.attempt(listening?.subscribed === true, sleep, signal);
      if (!("stats" in outcome)) return outcome;
      attempts.push(outcome.stats);
      const { votesAgainst } = outcome.stats;
      if (!mayRetry(settings, n)) {
        await contender.abandon(outcome);
        throw giveUpError(`acquire of ${contender.what}`, {
          holder: "another holder",
          last: votesAgainst,
          servers: context.servers,
          attempts,
        });
      }
      if (notify && votesAgainst.conflicts > 0) {
        if (listening === undefined) {
          waiters.queued(contender.what);
          listening = await listen();
          if (listening?.subscribed === true) continue; // at once: this refusal did not ask to publish
        }
        if (listening?.subscribed === true) {
          const ms = Math.min(
            sleep,
            Number.isFinite(outcome.heldFor) ? outcome.heldFor + 1 : sleep,
          );
          await listening.wait(outcome.start, ms, signal);
          continue;
        }
      }
      await delay(sleep, signal);
    }
  } catch (error) {
    if (!(error instanceof ExecutionError)) contender.abandon().catch(() => {});
    throw error;
  } finally {
    dispose();
    listening?.done();
  }
}
