/**
 * The lifecycle events a Redlock dispatches besides `"error"`: a lock
 * acquired, released, extended or lost. Each carries the {@linkcode Lock}
 * (which logs without its value). They cost nothing when nobody listens:
 * a Redlock makes none then.
 *
 * @module
 */

import type { Lock } from "./lock.ts";
import type { LockLostError } from "./errors.ts";
import type { RedlockErrorEvent } from "./error_event.ts";

/** How a lock came to its holder. */
export interface AcquiredDetail {
  /** The lock. */
  readonly lock: Lock;
  /** ms from the call until the lock was had (monotonic clock). */
  readonly waited: number;
  /** Whether a release handed the lock over (no round of requests took it). */
  readonly handoff: boolean;
}

/**
 * Dispatched as `"acquired"` when an acquire (also inside `using()`) got
 * its lock.
 *
 * @example Logging contention
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * redlock.on("acquired", ({ lock, waited, handoff }) => {
 *   if (waited > 100) console.log(`${lock} after ${waited} ms (handoff: ${handoff})`);
 * });
 * ```
 */
export class LockAcquiredEvent extends Event {
  /** The lock acquired: resources, attempts, fencing token. */
  readonly lock: Lock;
  /** ms from the call until the lock was had (monotonic clock). */
  readonly waited: number;
  /** Whether a release handed the lock over (no round of requests took it). */
  readonly handoff: boolean;

  /**
   * Makes the event.
   *
   * @param detail The lock, the time waited and how it came.
   */
  constructor(detail: AcquiredDetail) {
    super("acquired");
    this.lock = detail.lock;
    this.waited = detail.waited;
    this.handoff = detail.handoff;
  }

  /** How many attempts the acquire made (a handoff counts as one). */
  get attempts(): number {
    return this.lock.attempts.length;
  }
}

/**
 * Dispatched as `"released"` once a release reached a quorum.
 *
 * @example Counting releases
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * let released = 0;
 * redlock.on("released", () => released++);
 * ```
 */
export class LockReleasedEvent extends Event {
  /** The lock released. */
  readonly lock: Lock;

  /**
   * Makes the event.
   *
   * @param lock The lock released.
   */
  constructor(lock: Lock) {
    super("released");
    this.lock = lock;
  }
}

/**
 * Dispatched as `"extended"` when an extension (also `using()`'s
 * automatic one) succeeded.
 *
 * @example Watching extensions
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * redlock.on("extended", ({ lock, previous }) => console.log(`${previous} → ${lock}`));
 * ```
 */
export class LockExtendedEvent extends Event {
  /** The lock as extended. */
  readonly lock: Lock;
  /** The lock before the extension. */
  readonly previous: Lock;

  /**
   * Makes the event.
   *
   * @param lock The lock as extended.
   * @param previous The lock before.
   */
  constructor(lock: Lock, previous: Lock) {
    super("extended");
    this.lock = lock;
    this.previous = previous;
  }
}

/**
 * Dispatched as `"lost"` when a lock turned out not to be held any more:
 * `extend()` rejected with a {@linkcode LockLostError}, or `using()` (or
 * `lead()`) could not keep it and aborted its routine's signal.
 *
 * @example Alerting on lost locks
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * redlock.on("lost", ({ lock, error }) => console.error(`lost ${lock}: ${error.message}`));
 * ```
 */
export class LockLostEvent extends Event {
  /** The lock that was lost. */
  readonly lock: Lock;
  /** Why: the extension's error. */
  readonly error: Error;

  /**
   * Makes the event.
   *
   * @param lock The lock that was lost.
   * @param error Why.
   */
  constructor(lock: Lock, error: LockLostError | Error) {
    super("lost");
    this.lock = lock;
    this.error = error;
  }
}

/** The events of a Redlock by type, for typed listeners. */
export interface RedlockEventMap {
  /** A server failed a request, or an operation reported an error. */
  error: RedlockErrorEvent;
  /** A lock was acquired. */
  acquired: LockAcquiredEvent;
  /** A lock was released. */
  released: LockReleasedEvent;
  /** A lock was extended. */
  extended: LockExtendedEvent;
  /** A lock was lost. */
  lost: LockLostEvent;
}
