/**
 * Leader election on top of the public Redlock API: campaign for a lock,
 * run a routine while it is held (extended automatically), release, and
 * campaign again, until a signal says stop.
 *
 * @module
 */

import type { Lock } from "../api/lock.ts";
import type { UsingOptions } from "../api/options.ts";
import type { UsingContext, UsingRoutine } from "../api/routine.ts";
import { PermissionError } from "../api/errors.ts";
import { delay } from "../util/delay.ts";
import { checkDuration, describeValue } from "../util/validate.ts";

/** Options of {@linkcode lead} and `Redlock.lead()`. */
export interface LeadOptions extends Omit<UsingOptions, "fencing" | "retryCount" | "timeout"> {
  /**
   * Stops campaigning. The leader's routine sees the abort through its own
   * signal; `lead()` resolves once the routine has settled and the lock is
   * released. An abort after a campaign won the lock but before its routine
   * started releases the lock without running the routine. Without a
   * signal, `lead()` campaigns for ever.
   *
   * @default {undefined}
   */
  signal?: AbortSignal;
}

/** What the routine of a term gets besides its signal. */
export interface LeadContext {
  /** The current lock: replaced after each automatic extension. */
  readonly lock: Lock;
  /** The term: the lock's fencing token, strictly increasing from leader to leader. */
  readonly term: number;
  /** How many automatic extensions succeeded so far in this term. */
  readonly extensions: number;
}

/**
 * The work a leader does for one term. Its signal aborts with a
 * {@linkcode LockLostError} when leadership is lost (at the latest when the
 * lock's validity ends without a successful extension, before another
 * campaigner can lead), or with the reason of `options.signal` when
 * campaigning stops.
 */
export type LeadRoutine = (signal: AbortSignal, context: LeadContext) => Promise<void> | void;

/**
 * What {@linkcode lead} campaigns with: a `Redlock`, or anything with its
 * `using()`, `reportError()` and `settings.retryDelay`.
 */
export interface Campaigner {
  /** The settings in force: `retryDelay` spaces campaigns after failures. */
  readonly settings: { readonly retryDelay: number | ((attempt: number) => number) };
  /**
   * Acquires `resources`, runs `routine` while extending the lock, releases it.
   *
   * @param resources The resource.
   * @param duration The lease in ms.
   * @param options Per-call overrides.
   * @param routine The work.
   * @returns What the routine returns.
   */
  using<T>(
    resources: string,
    duration: number,
    options: UsingOptions,
    routine: UsingRoutine<T>,
  ): Promise<T>;
  /**
   * Reports an error that cannot be thrown (a failed routine).
   *
   * @param error The error.
   */
  reportError(error: unknown): void;
}

/** The longest pause after failing routines, in multiples of the lease. */
const MAX_BACKOFF_LEASES = 1;

/** The context of one term: `using()`'s, plus the term. */
class Term implements LeadContext {
  readonly term: number;
  readonly #using: UsingContext;

  constructor(using: UsingContext) {
    this.#using = using;
    this.term = using.lock.fencingToken!;
  }

  get lock(): Lock {
    return this.#using.lock;
  }

  get extensions(): number {
    return this.#using.extensions;
  }
}

/** One campaign: terms one after another, with a backoff after a failing routine. */
class Campaign {
  readonly #redlock: Campaigner;
  readonly #name: string;
  readonly #duration: number;
  readonly #routine: LeadRoutine;
  readonly #options: UsingOptions;
  readonly #signal: AbortSignal | undefined;
  /** Routines that failed in a row. */
  #failures = 0;

  constructor(
    redlock: Campaigner,
    name: string,
    duration: number,
    routine: LeadRoutine,
    options: LeadOptions,
  ) {
    this.#redlock = redlock;
    this.#name = name;
    this.#duration = duration;
    this.#routine = routine;
    this.#signal = options.signal;
    this.#options = { ...options, retryCount: -1, fencing: true };
  }

  async run(): Promise<void> {
    while (!this.#signal?.aborted) {
      const started = await this.#term();
      if (this.#signal?.aborted) return;
      if (this.#failures > 0 || !started) await this.#backoff();
    }
  }

  /** Campaigns and leads once; false when the routine never ran. */
  async #term(): Promise<boolean> {
    let started = false;
    try {
      await this.#redlock.using(this.#name, this.#duration, this.#options, (signal, using) => {
        started = true;
        return this.#routine(signal, new Term(using));
      });
      this.#failures = 0;
    } catch (error) {
      if (this.#signal?.aborted && (!started || error === this.#signal.reason)) return started;
      // Bad arguments surface before any request, on the first campaign; a missing ACL rule
      // (PermissionError) would refuse every campaign alike.
      if (!started && (error instanceof TypeError || error instanceof RangeError)) throw error;
      if (!started && error instanceof PermissionError) throw error;
      this.#failures++;
      this.#redlock.reportError(error);
    }
    return started;
  }

  /** Waits `retryDelay` doubled for each failure in a row, at most one lease. */
  async #backoff(): Promise<void> {
    const base = this.#options.retryDelay ?? this.#redlock.settings.retryDelay;
    const first = typeof base === "number" ? base : base(1);
    const ms = Math.min(
      first * 2 ** Math.max(0, this.#failures - 1),
      this.#duration * MAX_BACKOFF_LEASES,
    );
    await delay(ms, this.#signal).catch(() => {});
  }
}

/**
 * Campaigns for leadership of `name` until `options.signal` aborts: waits
 * for the lock (woken by its release), runs `routine` while holding it with
 * automatic extension, then releases it and campaigns again. The routine's
 * signal aborts with a {@linkcode LockLostError} at the latest when the
 * lock's validity ends without a successful extension: with clocks that
 * drift less than `driftFactor`, no other campaigner leads before that. A
 * routine's error is dispatched as an `"error"` event on the Redlock and
 * campaigning goes on after a backoff.
 *
 * @param redlock The Redlock to campaign with (see {@linkcode Campaigner}).
 * @param name The name of the leadership (one Redis key).
 * @param duration The lease in ms, renewed before it ends; a crashed leader
 * is replaced within about this long.
 * @param routine The leader's work for one term.
 * @param options Per-call overrides and the signal that stops campaigning.
 * @returns A promise that resolves once `options.signal` aborted, the
 * routine settled and the lock was released.
 * @throws {TypeError} On a bad argument, before any request.
 * @throws {RangeError} On an out-of-range argument, before any request.
 * @throws {PermissionError} When the servers refuse a campaign for a missing ACL rule (`NOPERM`).
 *
 * @example Leading until the process is told to stop
 * ```ts no-eval
 * import { lead, Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * const shutdown = new AbortController();
 * Deno.addSignalListener("SIGTERM", () => shutdown.abort());
 * await lead(redlock, "scheduler", 10_000, async (signal, { term }) => {
 *   console.log(`leading, term ${term}`);
 *   // (an abort that fired already never fires again: check it first)
 *   await new Promise((resolve) => {
 *     if (signal.aborted) resolve(undefined);
 *     else signal.addEventListener("abort", resolve, { once: true });
 *   });
 * }, { signal: shutdown.signal });
 * ```
 */
export async function lead(
  redlock: Campaigner,
  name: string,
  duration: number,
  routine: LeadRoutine,
  options: LeadOptions = {},
): Promise<void> {
  if (typeof name !== "string") {
    throw new TypeError(`name must be a string, got ${describeValue(name)}`);
  }
  if (name === "") throw new RangeError(`name must not be empty, got ""`);
  checkDuration(duration);
  if (typeof routine !== "function") {
    throw new TypeError(`routine must be a function, got ${describeValue(routine)}`);
  }
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`options must be an object, got ${describeValue(options)}`);
  }
  for (const key of ["fencing", "retryCount", "timeout"] as const) {
    if (key in options) {
      throw new TypeError(`options.${key} is set by lead() itself and cannot be given`);
    }
  }
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new TypeError(
      `options.signal must be an AbortSignal, got ${describeValue(options.signal)}`,
    );
  }
  await new Campaign(redlock, name, duration, routine, options).run();
}
