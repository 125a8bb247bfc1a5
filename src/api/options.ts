/**
 * The options of a Redlock and of each of its calls.
 *
 * @module
 */

import type { SubscriberFactory } from "../wait/subscriber.ts";

/** Settings of a Redlock; each can also be overridden per call. */
export interface RedlockOptions {
  /**
   * Clock drift allowance as a fraction of the lease: `round(driftFactor ×
   * duration) + 2` ms are subtracted from every lock's validity. From 0 up to 1.
   *
   * @default {0.01}
   */
  driftFactor?: number;
  /**
   * Attempts after the first before `acquire()` gives up; `-1` retries until
   * it succeeds or its signal aborts. Between two attempts an acquire sleeps
   * at most `retryDelay + retryJitter` (a release that wakes it ends the
   * sleep early), so this bounds the whole wait; so does `timeout`.
   *
   * @default {10}
   */
  retryCount?: number;
  /**
   * ms to wait between attempts, or a function of the number of attempts made
   * so far (1 after the first) that returns it.
   *
   * @default {200}
   */
  retryDelay?: number | ((attempt: number) => number);
  /**
   * Up to this many ms, drawn at random for each wait, are added to `retryDelay`.
   *
   * @default {100}
   */
  retryJitter?: number;
  /**
   * How many ms before the lock's validity ends `using()` extends it. Must be
   * below the lock's duration; when not set, `using()` takes 500 or half the
   * duration, whichever is less.
   *
   * @default {500}
   */
  automaticExtensionThreshold?: number;
  /**
   * ms one request to one server may take; a server that does not answer in
   * time counts as a vote against. Every request has this bound.
   *
   * @default {500}
   */
  requestTimeout?: number;
  /**
   * How an acquire waits for a resource another holder has: `"notify"`
   * queues for it (one resource) and sleeps until a release hands it the
   * key, first come first served, and is told so through Redis pub/sub (a
   * lock on several resources sleeps until one is released), but never
   * longer than `retryDelay` plus jitter. `"poll"` sleeps `retryDelay` plus
   * jitter.
   * `"notify"` falls back to polling for a client that cannot subscribe.
   * Safety never depends on a message: a lost one only costs the fallback
   * wait.
   *
   * @default {"notify"}
   */
  wait?: "notify" | "poll";
}

/** Settings of a Redlock that are fixed when it is made. */
export interface RedlockInit extends RedlockOptions {
  /**
   * Makes the subscriber connection of one server for `wait: "notify"`;
   * return `null` to poll that server's releases instead.
   *
   * @default {duplicateSubscriber (`duplicate()` of ioredis, node-redis and Bun clients; Upstash `subscribe()`)}
   */
  subscriber?: SubscriberFactory;
}

/** Options of {@linkcode Redlock.acquire} and {@linkcode Redlock.tryAcquire}. */
export interface AcquireOptions extends Omit<RedlockOptions, "automaticExtensionThreshold"> {
  /**
   * Hand out a fencing token with the lock ((`Lock.fencingToken`)):
   * a number that grows with every acquisition of any of these resources.
   * It costs one more round to the servers when there are several.
   *
   * @default {false}
   */
  fencing?: boolean;
  /**
   * Aborts the wait: the call rejects at once with `signal.reason` and
   * leaves nothing locked.
   *
   * @default {undefined}
   */
  signal?: AbortSignal;
  /**
   * ms (1 or more) the whole call may wait before it rejects with a
   * `TimeoutError` DOMException (like `AbortSignal.timeout()`), leaving
   * nothing locked. For one attempt without waiting, use `tryAcquire()`.
   *
   * @default {undefined}
   */
  timeout?: number;
}

/** Options of {@linkcode Redlock.extend}. */
export interface ExtendOptions extends AcquireOptions {
  /**
   * When true (the default) only a lock that is still ours is extended. When
   * false, keys of the lock that expired are taken again if they are free.
   *
   * @default {true}
   */
  onlyIfLocked?: boolean;
}

/** Options of {@linkcode Redlock.release}. */
export interface ReleaseOptions {
  /**
   * ms one request to one server may take.
   *
   * @default {the Redlock's requestTimeout}
   */
  requestTimeout?: number;
}

/** Options of {@linkcode Redlock.using}. */
export interface UsingOptions extends AcquireOptions {
  /**
   * How many ms before the lock's validity ends it is extended; must be
   * below `duration`.
   *
   * @default {the Redlock's, else 500 or half the duration, whichever is less}
   */
  automaticExtensionThreshold?: number;
}

/** Options of the introspection calls. */
export interface InspectOptions {
  /**
   * ms one request to one server may take.
   *
   * @default {the Redlock's requestTimeout}
   */
  requestTimeout?: number;
  /**
   * Aborts the call with `signal.reason`.
   *
   * @default {undefined}
   */
  signal?: AbortSignal;
}

/**
 * Options of the acquires of read-write locks and semaphores: those of
 * {@linkcode AcquireOptions} but fencing.
 */
export type HandleAcquireOptions = Omit<AcquireOptions, "fencing">;

/**
 * Options of `using()` of read-write locks and semaphores: those of
 * {@linkcode UsingOptions} but fencing.
 */
export type HandleUsingOptions = Omit<UsingOptions, "fencing">;
