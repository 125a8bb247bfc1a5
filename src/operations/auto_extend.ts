/**
 * using()'s automatic extension: extends the lock a threshold before its
 * validity ends, again and again, and aborts a signal when it cannot, at the
 * latest when the validity ends.
 */

import { LockLostError } from "../api/errors.ts";
import type { Lock } from "../api/lock.ts";
import type { UsingContext } from "../api/routine.ts";
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
