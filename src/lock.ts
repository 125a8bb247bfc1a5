/**
 * The lock a Redlock hands out.
 *
 * @module
 */

import type { ExecutionResult, ExecutionStats } from "./errors.ts";
import type { ExtendOptions, Redlock, ReleaseOptions } from "./redlock.ts";
import { now, toEpoch } from "./_time.ts";

/** What a {@linkcode Lock} is made of; Redlock fills it in. */
export interface LockInit {
  /** The Redlock that took the lock. */
  readonly redlock: Redlock;
  /** The locked resources (Redis keys). */
  readonly resources: readonly string[];
  /** The random value that marks the lock as ours on every server. */
  readonly value: string;
  /** The stats of every attempt it took. */
  readonly attempts: readonly ExecutionStats[];
  /** The `performance.now()` instant at which the lock stops being valid. */
  readonly validUntil: number;
  /** The fencing token, when one was asked for. */
  readonly fencingToken?: number | undefined;
}

/** `list` itself when it is frozen already, else a frozen copy. */
function frozen<T>(list: readonly T[]): readonly T[] {
  return Object.isFrozen(list) ? list : Object.freeze([...list]);
}

/**
 * A lock held on a quorum of servers until {@linkcode Lock.expiration}.
 * Release it with {@linkcode Lock.release} or let `await using` do it.
 *
 * @example Releasing at the end of a block
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * {
 *   await using lock = await redlock.acquire("report:42", 5_000);
 *   console.log(lock.remainingTime);
 * } // released here, also when the block throws
 * ```
 */
export class Lock implements AsyncDisposable {
  /** The Redlock that took the lock. */
  readonly redlock: Redlock;
  /** The locked resources (Redis keys). */
  readonly resources: readonly string[];
  /**
   * The random value that marks the lock as ours on every server. A key
   * somebody queued for holds it with `"!"` appended.
   */
  readonly value: string;
  /** The stats of every attempt it took, oldest first. */
  readonly attempts: readonly ExecutionStats[];
  /**
   * When the lock stops being valid, in ms since the epoch (the `Date.now()`
   * time base), computed from the monotonic clock.
   */
  readonly expiration: number;
  /**
   * A number that grows with every acquisition of these resources, when the
   * lock was taken with `fencing: true`; `undefined` otherwise.
   */
  readonly fencingToken: number | undefined;
  #validUntil: number;
  #released = false;

  /**
   * Made by {@linkcode Redlock}; not meant to be called directly.
   *
   * @param init What the lock is made of.
   */
  constructor(init: LockInit) {
    this.redlock = init.redlock;
    this.resources = frozen(init.resources);
    this.value = init.value;
    this.attempts = frozen(init.attempts);
    this.#validUntil = init.validUntil;
    this.expiration = toEpoch(init.validUntil);
    this.fencingToken = init.fencingToken;
  }

  /** The ms of validity left on the monotonic clock; 0 once expired. */
  get remainingTime(): number {
    return Math.max(0, this.#validUntil - now());
  }

  /**
   * Releases the lock on every server. Keys that already expired count as
   * released; keys held by another value are left alone.
   *
   * @param options Per-call overrides.
   * @returns The stats of the release.
   * @throws {ExecutionError} When a quorum of servers could not be reached.
   *
   * @example Releasing
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.acquire("a", 1_000);
   * await lock.release();
   * ```
   */
  release(options?: ReleaseOptions): Promise<ExecutionResult> {
    this.#released = true;
    return this.redlock.release(this, options);
  }

  /**
   * Extends the lock to `duration` ms from now, only while it is still ours.
   *
   * @param duration The new lease in ms, from the start of the extension.
   * @param options Per-call overrides.
   * @returns A new lock with the new expiration and the same value.
   * @throws {LockLostError} When the lock expired or is no longer ours.
   * @throws {ExecutionError} When a quorum of servers could not be reached.
   *
   * @example Extending
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * let lock = await redlock.acquire("a", 1_000);
   * lock = await lock.extend(5_000);
   * ```
   */
  extend(duration: number, options?: ExtendOptions): Promise<Lock> {
    return this.redlock.extend(this, duration, options);
  }

  /**
   * Whether the lock is still ours on a quorum of servers and not expired.
   *
   * @returns True while the lock holds.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example Checking
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.acquire("a", 1_000);
   * console.log(await lock.isValid());
   * ```
   */
  isValid(): Promise<boolean> {
    return this.redlock.isValid(this);
  }

  /**
   * Releases the lock unless {@linkcode Lock.release} was called already; for
   * `await using`. A failed release is dispatched as an `error` event on the
   * Redlock rather than thrown (the lock expires on its own).
   *
   * @returns A promise that settles once the release has.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#released) return;
    try {
      await this.release();
    } catch (error) {
      this.redlock.reportError(error);
    }
  }
}
