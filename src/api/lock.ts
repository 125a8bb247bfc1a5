/**
 * The lock a Redlock hands out.
 *
 * @module
 */

import type { ExecutionResult, ExecutionStats } from "./errors.ts";
import type { ExtendOptions, ReleaseOptions } from "./options.ts";
import { now, toEpoch } from "../util/time.ts";
import { describeValue } from "../util/validate.ts";

/**
 * What made a lock, and what its {@linkcode Lock.release},
 * {@linkcode Lock.extend} and {@linkcode Lock.isValid} delegate to: a
 * `Redlock`, or anything else that hands out locks.
 */
export interface LockOwner {
  /**
   * Releases `lock` on its servers.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The stats of the release.
   */
  release(lock: Lock, options?: ReleaseOptions): Promise<ExecutionResult>;
  /**
   * Extends `lock` to `duration` ms.
   *
   * @param lock The lock.
   * @param duration The new lease in ms.
   * @param options Per-call overrides.
   * @returns The extended lock.
   */
  extend(lock: Lock, duration: number, options?: ExtendOptions): Promise<Lock>;
  /**
   * Whether `lock` is still held.
   *
   * @param lock The lock.
   * @returns True while it holds.
   */
  isValid(lock: Lock): Promise<boolean>;
  /**
   * Reports an error that cannot be thrown (a failed release at the end of
   * `await using`).
   *
   * @param error The error.
   */
  reportError(error: unknown): void;
}

/** What a {@linkcode Lock} is made of; its owner fills it in. */
export interface LockInit {
  /** What made the lock, and releases and extends it. */
  readonly owner: LockOwner;
  /** The locked resources (Redis keys). */
  readonly resources: readonly string[];
  /** The random value that marks the lock as ours on every server. */
  readonly value: string;
  /**
   * The stats of every attempt it took, or what makes them when they are
   * first read (a lock kept long need not keep them as objects).
   */
  readonly attempts: readonly ExecutionStats[] | (() => readonly ExecutionStats[]);
  /** The `performance.now()` instant at which the lock stops being valid. */
  readonly validUntil: number;
  /** The fencing token, when one was asked for. */
  readonly fencingToken?: number | undefined;
}

/** What a lock shows of itself in logs: never its value, never its owner's clients. */
export interface LockSummary {
  /** The locked resources. */
  readonly resources: readonly string[];
  /** When the lock stops being valid, as an ISO 8601 date. */
  readonly expiration: string;
  /** The ms of validity left (0 once released or expired). */
  readonly remainingTime: number;
  /** The fencing token, when the lock has one. */
  readonly fencingToken?: number;
}

/** Reads a Lock's owner (set in the class's static block). */
let ownerOfLock: (lock: Lock) => LockOwner;

/** `list` itself when it is frozen already, else a frozen copy. */
function frozen<T>(list: readonly T[]): readonly T[] {
  return Object.isFrozen(list) ? list : Object.freeze([...list]);
}

/**
 * A lock held on a quorum of servers until {@linkcode Lock.expiration}.
 * Release it with {@linkcode Lock.release} or let `await using` do it.
 *
 * Logged (`JSON.stringify`, `String()`, `console.log`), a lock shows its
 * resources, expiration and fencing token, but not its value: whoever knows
 * the value can release and extend the lock.
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
  static {
    ownerOfLock = (lock) => lock.#owner;
  }

  /** The locked resources (Redis keys). */
  readonly resources: readonly string[];
  /**
   * The random value that marks the lock as ours on every server. Whoever
   * knows it can release and extend the lock: keep it out of logs.
   */
  readonly value: string;
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
  readonly #owner: LockOwner;
  readonly #validUntil: number;
  #attempts: readonly ExecutionStats[] | (() => readonly ExecutionStats[]);
  #released = false;

  /**
   * Made by a `Redlock` (or another {@linkcode LockOwner}); not meant to be
   * called directly.
   *
   * @param init What the lock is made of.
   */
  constructor(init: LockInit) {
    this.#owner = init.owner;
    this.resources = frozen(init.resources);
    this.value = init.value;
    const { attempts } = init;
    this.#attempts = typeof attempts === "function" ? attempts : frozen(attempts);
    this.#validUntil = init.validUntil;
    this.expiration = toEpoch(init.validUntil);
    this.fencingToken = init.fencingToken;
  }

  /**
   * The stats of every attempt it took, oldest first: what the servers
   * answered until each attempt settled. (An acquire that waits keeps them
   * in a compact form, and makes these objects when they are first read or
   * the `ExecutionError` when it gives up.)
   *
   * @returns The attempts, frozen.
   */
  get attempts(): readonly ExecutionStats[] {
    if (typeof this.#attempts === "function") this.#attempts = frozen(this.#attempts());
    return this.#attempts;
  }

  /** The ms of validity left on the monotonic clock; 0 once expired or released. */
  get remainingTime(): number {
    return this.#released ? 0 : Math.max(0, this.#validUntil - now());
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
    const releasing = this.#owner.release(this, options);
    if (options === undefined) return releasing;
    return releasing.catch((error) => {
      // Bad options: nothing was sent, so the lock still holds.
      if (error instanceof TypeError || error instanceof RangeError) this.#released = false;
      throw error;
    });
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
    return this.#owner.extend(this, duration, options);
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
    return this.#owner.isValid(this);
  }

  /**
   * Releases the lock unless {@linkcode Lock.release} was called already; for
   * `await using`. A failed release is reported as an `error` event on the
   * Redlock rather than thrown (the lock expires on its own).
   *
   * @returns A promise that settles once the release has.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#released) return;
    try {
      await this.release();
    } catch (error) {
      this.#owner.reportError(error);
    }
  }

  /**
   * What the lock shows in logs: resources, expiration, remaining time and
   * fencing token, never the value.
   *
   * @returns A plain summary of the lock.
   *
   * @example Logging a lock
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.acquire("a", 1_000);
   * console.log(JSON.stringify(lock)); // {"resources":["a"],"expiration":"…",…}
   * ```
   */
  toJSON(): LockSummary {
    const summary = {
      resources: this.resources,
      expiration: new Date(this.expiration).toISOString(),
      remainingTime: Math.round(this.remainingTime),
    };
    return this.fencingToken === undefined
      ? summary
      : { ...summary, fencingToken: this.fencingToken };
  }

  /**
   * A one-line description: resources, expiration and fencing token.
   *
   * @returns E.g. `Lock(["a"] until 2026-11-23T10:00:00.000Z)`.
   *
   * @example Printing a lock
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * console.log(String(await redlock.acquire("a", 1_000)));
   * ```
   */
  toString(): string {
    const { resources, expiration, fencingToken } = this.toJSON();
    const token = fencingToken === undefined ? "" : `, token ${fencingToken}`;
    return `Lock(${JSON.stringify(resources)} until ${expiration}${token})`;
  }

  /**
   * How `Deno.inspect` and `console.log` show the Lock: its summary.
   *
   * @param inspect Deno's inspect function.
   * @param options Deno's inspect options.
   * @returns The summary, inspected.
   */
  [Symbol.for("Deno.customInspect")](
    inspect: (value: unknown, options: unknown) => string,
    options: unknown,
  ): string {
    return `Lock ${inspect(this.toJSON(), options)}`;
  }

  /**
   * How Node's `util.inspect` and `console.log` show the Lock: its summary.
   *
   * @param _depth Node's current depth.
   * @param options Node's inspect options.
   * @param inspect Node's inspect function.
   * @returns The summary, inspected.
   */
  [Symbol.for("nodejs.util.inspect.custom")](
    _depth: number,
    options: unknown,
    inspect: (value: unknown, options: unknown) => string,
  ): string {
    return `Lock ${inspect(this.toJSON(), options)}`;
  }
}

/** What made `lock`, and releases and extends it. */
export function ownerOf(lock: Lock): LockOwner {
  return ownerOfLock(lock);
}

/** Checks that `lock` is a Lock. */
export function checkLock(lock: unknown, name = "lock"): Lock {
  if (!(lock instanceof Lock)) {
    throw new TypeError(`${name} must be a Lock, got ${describeValue(lock)}`);
  }
  return lock;
}
