/**
 * using()'s automatic extension: extends the lock a threshold before its
 * validity ends, again and again, and aborts a signal when it cannot, at the
 * latest when the validity ends.
 */

import { LockLostError } from "../api/errors.ts";
import type { Lock } from "../api/lock.ts";
import type { UsingContext, UsingRoutine } from "../api/options.ts";
import { describeValue } from "../util/validate.ts";
import type { Settings } from "../api/settings.ts";
import { show } from "../quorum/servers.ts";

/**
 * The threshold using() extends at: the one set, which must be below the
 * duration, or else 500 ms or half the duration, whichever is less.
 */
export function extensionThreshold(settings: Settings, duration: number): number {
  const threshold = settings.automaticExtensionThreshold;
  if (!settings.thresholdSet) return Math.min(threshold, Math.floor(duration / 2));
  if (threshold >= duration) {
    throw new RangeError(
      `automaticExtensionThreshold must be below duration (${duration}), got ${threshold} ` +
        "(set in the options; leave it out for a default that fits the duration)",
    );
  }
  return threshold;
}

/** Extends `lock` (the extension function is given the stop signal). */
export type Extender = (lock: Lock, signal: AbortSignal) => Promise<Lock>;

/**
 * Keeps a lock alive: schedules each extension `threshold` ms before the
 * current lock's validity ends. When an extension fails, `signal` aborts
 * with its error (the lock can no longer be valid); when the validity ends
 * first, `signal` aborts with a {@linkcode LockLostError} then, and the
 * extension under way is stopped with the same error.
 */
export class AutoExtension {
  /** What the routine sees: the current lock and how many extensions succeeded. */
  readonly context: { lock: Lock; extensions: number } & UsingContext;
  /** Aborts when the lock is lost, or when the caller's signal aborts. */
  readonly signal: AbortSignal;
  readonly #threshold: number;
  readonly #extend: Extender;
  readonly #lost = new AbortController();
  readonly #stop = new AbortController();
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** Fires when the current lock's validity ends; re-armed after each extension. */
  #deadline: ReturnType<typeof setTimeout> | undefined;
  #extending: Promise<void> | undefined;

  constructor(lock: Lock, threshold: number, extend: Extender, signal: AbortSignal | undefined) {
    this.context = { lock, extensions: 0 };
    this.#threshold = threshold;
    this.#extend = extend;
    this.signal = signal ? AbortSignal.any([this.#lost.signal, signal]) : this.#lost.signal;
    this.#schedule();
  }

  /** Stops extending; resolves to the current lock once no extension is under way. */
  async stop(): Promise<Lock> {
    clearTimeout(this.#timer);
    clearTimeout(this.#deadline);
    this.#stop.abort();
    await this.#extending;
    return this.context.lock;
  }

  #schedule(): void {
    clearTimeout(this.#deadline);
    const remaining = this.context.lock.remainingTime;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#extending = this.#extend(this.context.lock, this.#stop.signal).then(
        (next) => this.#extended(next),
        (error) => {
          if (this.#stop.signal.aborted) return;
          clearTimeout(this.#deadline);
          this.#lost.abort(error);
        },
      );
    }, Math.max(0, remaining - this.#threshold));
    // Armed after the extension's timer, so that with equal times the extension starts first.
    this.#deadline = setTimeout(() => this.#expired(), remaining);
  }

  /** The validity ended before an extension succeeded: the routine must stop now. */
  #expired(): void {
    this.#deadline = undefined;
    clearTimeout(this.#timer);
    const { resources } = this.context.lock;
    const error = new LockLostError(
      `the lock of ${show(resources)} expired before an extension succeeded`,
      [],
    );
    this.#lost.abort(error);
    // The extension under way can no longer help; it rejects with the same error.
    this.#stop.abort(error);
  }

  #extended(next: Lock): void {
    this.context.lock = next;
    this.context.extensions++;
    if (!this.#stop.signal.aborted) this.#schedule();
  }
}

/** Splits using()'s `(options, routine)` or `(routine)` and checks the routine. */
export function usingArguments<O, R>(optionsOrRoutine: O | R, maybeRoutine: R | undefined): [
  O | undefined,
  R,
] {
  const [options, routine] = typeof optionsOrRoutine === "function"
    ? [undefined, optionsOrRoutine as R]
    : [optionsOrRoutine as O, maybeRoutine];
  if (typeof routine !== "function") {
    throw new TypeError(`routine must be a function, got ${describeValue(routine)}`);
  }
  return [options, routine];
}

/**
 * using()'s part after the acquire: runs `routine` while `extend` renews
 * the lock `threshold` ms before it ends, then releases it; a failed
 * release goes to `report` (the routine's result matters more). When
 * `signal` aborted by then, the routine never starts: the lock is released
 * and the promise rejects with the signal's reason, as an aborted acquire.
 */
export async function holdWhile<T>(
  lock: Lock,
  threshold: number,
  extend: Extender,
  signal: AbortSignal | undefined,
  routine: UsingRoutine<T>,
  release: (lock: Lock) => Promise<unknown>,
  report: (error: unknown) => void,
): Promise<T> {
  if (signal?.aborted) {
    try {
      await release(lock);
    } catch (error) {
      report(error);
    }
    throw signal.reason;
  }
  const extension = new AutoExtension(lock, threshold, extend, signal);
  try {
    return await routine(extension.signal, extension.context);
  } finally {
    const last = await extension.stop();
    try {
      await release(last);
    } catch (error) {
      report(error);
    }
  }
}
