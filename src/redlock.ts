/**
 * The Redlock: a distributed lock over N independent Redis servers.
 *
 * @module
 */

import { type RedisClient, toScriptClient } from "./clients.ts";
import {
  ExecutionError,
  type ExecutionResult,
  type ExecutionStats,
  LockLostError,
  ResourceLockedError,
} from "./errors.ts";
import { RedlockErrorEvent } from "./error_event.ts";
import { Lock } from "./lock.ts";
import { lead, type LeadOptions, type LeadRoutine } from "./lead.ts";
import {
  ACQUIRE,
  EXTEND,
  FENCE,
  fenceKey,
  INSPECT,
  type LuaScript,
  queueKey,
  RELEASE,
} from "./scripts.ts";
import { duplicateSubscriber, type SubscriberFactory } from "./subscriber.ts";
import { type Listening, Waiters } from "./_waiters.ts";
import { deadline, delay, within } from "./_delay.ts";
import { type Member, round, type Tally } from "./_quorum.ts";
import { Conflict, VotesAgainst } from "./_votes.ts";
import { hashSlot } from "./_slot.ts";
import { drift, now, validUntil } from "./_time.ts";
import {
  checkDuration,
  checkNumber,
  checkResources,
  describeValue,
  MAX_DURATION,
} from "./_validate.ts";

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
   * it succeeds or its signal aborts.
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
   * below the lock's duration.
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
   * lock on several resources sleeps until one is released); or until the
   * holder's remaining TTL ends. `"poll"` sleeps `retryDelay` plus jitter.
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
   * @default {duplicateSubscriber (ioredis and node-redis `duplicate()`)}
   */
  subscriber?: SubscriberFactory;
}

/** Options of {@linkcode Redlock.acquire} and {@linkcode Redlock.tryAcquire}. */
export interface AcquireOptions extends Omit<RedlockOptions, "automaticExtensionThreshold"> {
  /**
   * Hand out a fencing token with the lock ({@linkcode Lock.fencingToken}):
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
   * ms the whole call may wait before it rejects with a `TimeoutError`
   * DOMException (like `AbortSignal.timeout()`), leaving nothing locked.
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
   * How many ms before the lock's validity ends it is extended.
   *
   * @default {the Redlock's automaticExtensionThreshold}
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

/** What `using()` tells its routine besides the signal. */
export interface UsingContext {
  /** The current lock: replaced after each automatic extension. */
  readonly lock: Lock;
  /** How many automatic extensions succeeded so far. */
  readonly extensions: number;
}

/** The routine `using()` runs while it holds the lock. */
export type UsingRoutine<T> = (signal: AbortSignal, context: UsingContext) => Promise<T> | T;

type Settings = Required<Omit<RedlockOptions, "retryDelay">> & {
  retryDelay: number | ((attempt: number) => number);
};

const NO_OPTIONS = Object.freeze({});

const DEFAULTS: Settings = {
  wait: "notify",
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
  requestTimeout: 500,
};

function checkSettings(options: unknown, base: Settings, name: string): Settings {
  if (options === undefined || options === NO_OPTIONS) return base;
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`${name} must be an object, got ${describeValue(options)}`);
  }
  const o = options as RedlockOptions;
  const s = { ...base };
  if (o.driftFactor !== undefined) {
    s.driftFactor = checkNumber(o.driftFactor, `${name}.driftFactor`, { below: 1 });
  }
  if (o.retryCount !== undefined) {
    s.retryCount = checkNumber(o.retryCount, `${name}.retryCount`, { min: -1, integer: true });
  }
  if (o.retryDelay !== undefined) {
    s.retryDelay = typeof o.retryDelay === "function"
      ? o.retryDelay
      : checkNumber(o.retryDelay, `${name}.retryDelay`, { below: MAX_DURATION + 1 });
  }
  if (o.retryJitter !== undefined) {
    s.retryJitter = checkNumber(o.retryJitter, `${name}.retryJitter`, { below: MAX_DURATION + 1 });
  }
  if (o.automaticExtensionThreshold !== undefined) {
    s.automaticExtensionThreshold = checkNumber(
      o.automaticExtensionThreshold,
      `${name}.automaticExtensionThreshold`,
      { below: MAX_DURATION + 1 },
    );
  }
  if (o.wait !== undefined) {
    if (o.wait !== "notify" && o.wait !== "poll") {
      throw new TypeError(`${name}.wait must be "notify" or "poll", got ${describeValue(o.wait)}`);
    }
    s.wait = o.wait;
  }
  if (o.requestTimeout !== undefined) {
    s.requestTimeout = checkNumber(o.requestTimeout, `${name}.requestTimeout`, {
      min: 1,
      below: MAX_DURATION + 1,
    });
  }
  return s;
}

function checkCallOptions<T extends { signal?: AbortSignal; timeout?: number }>(
  options: T | undefined,
): T {
  if (options === undefined) return NO_OPTIONS as T;
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`options must be an object, got ${describeValue(options)}`);
  }
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new TypeError(
      `options.signal must be an AbortSignal, got ${describeValue(options.signal)}`,
    );
  }
  if (options.timeout !== undefined) {
    checkNumber(options.timeout, "options.timeout", { below: MAX_DURATION + 1 });
  }
  return options;
}

function checkLock(lock: unknown, name = "lock"): Lock {
  if (!(lock instanceof Lock)) {
    throw new TypeError(`${name} must be a Lock, got ${describeValue(lock)}`);
  }
  return lock;
}

/**
 * A server's answer to acquire or extend: for (with the server's fencing
 * token, 0 without fencing), or a conflict.
 */
type Vote = number | Conflict;

/**
 * The vote in an ACQUIRE or EXTEND reply: the token (≥ 0) for, or
 * `-3 - pttl` against.
 */
function toVote(reply: unknown, server: number): Vote {
  if (Number.isInteger(reply)) {
    const n = reply as number;
    return n >= 0 ? n : new Conflict(server, -3 - n);
  }
  throw new TypeError(`server ${server} sent an unexpected reply: ${describeValue(reply)}`);
}

function toNumber(reply: unknown, server: number): number {
  if (typeof reply === "number") return reply;
  throw new TypeError(`server ${server} sent an unexpected reply: ${describeValue(reply)}`);
}

/** A release vote: for, once the reply is a count. */
const released = (reply: unknown, member: Member): Vote => (toNumber(reply, member.index), 0);

/** An acquire or extend vote: a script's reply, or a vote `#setIfAbsent` already made. */
const asVote = (reply: unknown, member: Member): Vote =>
  reply instanceof Conflict ? reply : toVote(reply, member.index);

/** A clearer error for a script sent to a cluster with keys in several hash slots. */
function crossSlot(error: Error, keys: readonly string[]): Error {
  if (!CROSSSLOT.test(error.message)) return error;
  return new TypeError(
    `resources ${show(keys)} are in different cluster hash slots; give them one ` +
      `hash tag, e.g. "{game42}:board" and "{game42}:turn"`,
    { cause: error },
  );
}

const asIs = (reply: unknown): unknown => reply;

const CROSSSLOT = /^-?CROSSSLOT/;

/** The checked arguments of an acquire. */
interface Checked<T> {
  readonly keys: string[];
  readonly settings: Settings;
  readonly opts: T;
}

/** The outcome of one round of acquire, extend or release votes. */
interface Ballot {
  /** (Its `votesAgainst` answers `isConflict()` and `conflicts` without making errors.) */
  readonly stats: ExecutionStats & { readonly votesAgainst: VotesAgainst };
  readonly ok: boolean;
  /** The largest fencing token among the votes for. */
  readonly token: number;
  /** The shortest positive TTL of a conflicting key, or Infinity. */
  readonly heldFor: number;
  /** When the round settled (monotonic). */
  readonly end: number;
}

/**
 * A distributed lock manager over N independent Redis servers (or clusters)
 * with the Redlock algorithm: a lock holds when a majority of servers agree,
 * and its validity is measured on the monotonic clock.
 *
 * Per-server failures are dispatched as {@linkcode RedlockErrorEvent}s named
 * `"error"`; they are never fatal by themselves.
 *
 * @example Taking turns on a resource
 * ```ts no-eval
 * import { Redis } from "npm:ioredis";
 * import { Redlock } from "@x/redlock";
 *
 * const redlock = new Redlock([new Redis(6379), new Redis(6380), new Redis(6381)]);
 * await using lock = await redlock.acquire("game:42", 5_000);
 * // … only one process at a time gets here …
 * ```
 */
export class Redlock extends EventTarget {
  /** The clients, as given to the constructor. */
  readonly clients: readonly RedisClient[];
  /** The settings in force, defaults filled in. */
  readonly settings: Readonly<Required<RedlockOptions>>;
  /** How many servers must agree: `⌊clients.length / 2⌋ + 1`. */
  readonly quorum: number;
  readonly #members: readonly Member[];
  readonly #cluster: boolean;
  /** Whether every client has `setIfAbsent` and `pttl` (plain SET NX for one resource). */
  readonly #plain: boolean;
  readonly #waiters: Waiters;
  /** A random id: the first part of the values of this Redlock's locks. */
  readonly #id: string = crypto.randomUUID();
  /** `settings.requestTimeout` as a script argument. */
  readonly #timeoutArg: string;
  /** How many acquires were made: the second part. */
  #acquires = 0;
  /** Whether a round of votes can settle: a quorum for, or a quorum impossible. */
  readonly #decided: (tally: Tally<Vote>) => boolean;
  readonly #onError = (error: Error, member: Member): void => this.#emit(error, member);

  /**
   * Makes a Redlock over independent Redis servers or clusters.
   *
   * @param clients One client per independent server or cluster: ioredis,
   * node-redis, deno-redis / Upstash, or your own {@linkcode ScriptClient}.
   * @param options Settings; see {@linkcode RedlockOptions} for defaults.
   * @throws {TypeError} When `clients` is empty, has duplicates or an object
   * that is no supported client, or an option has the wrong type.
   * @throws {RangeError} When an option is out of range.
   *
   * @example Three servers
   * ```ts no-eval
   * import { Redis } from "npm:ioredis";
   * import { Redlock } from "@x/redlock";
   * const redlock = new Redlock(
   *   [new Redis(6379), new Redis(6380), new Redis(6381)],
   *   { retryCount: 3, retryDelay: 100 },
   * );
   * ```
   */
  constructor(clients: readonly RedisClient[], options?: RedlockInit) {
    super();
    if (!Array.isArray(clients)) {
      throw new TypeError(`clients must be an array of clients, got ${describeValue(clients)}`);
    }
    if (clients.length === 0) throw new TypeError("clients must not be empty, got []");
    if (new Set(clients).size !== clients.length) {
      const i = clients.findIndex((c, j) => clients.indexOf(c) !== j);
      throw new TypeError(
        `clients[${i}] is the same client as clients[${clients.indexOf(clients[i]!)}]: ` +
          "each server must appear once",
      );
    }
    this.#members = clients.map((client, index) => {
      try {
        return { index, client, runner: toScriptClient(client) };
      } catch (error) {
        throw new TypeError(`clients[${index}]: ${(error as Error).message}`, { cause: error });
      }
    });
    this.#cluster = this.#members.some((m) => m.runner.cluster === true);
    this.#plain = this.#members.every((m) =>
      typeof m.runner.setIfAbsent === "function" && typeof m.runner.pttl === "function"
    );
    this.clients = Object.freeze([...clients]);
    this.settings = Object.freeze(checkSettings(options, DEFAULTS, "options"));
    this.#timeoutArg = String(this.settings.requestTimeout);
    this.quorum = Math.floor(clients.length / 2) + 1;
    const n = clients.length;
    const q = this.quorum;
    this.#decided = ({ answers, errors }) => {
      let yes = 0;
      let no = errors.size;
      for (const vote of answers.values()) typeof vote === "number" ? yes++ : no++;
      return yes >= q || no > n - q;
    };
    const factory = options?.subscriber ?? duplicateSubscriber;
    if (typeof factory !== "function") {
      throw new TypeError(
        `options.subscriber must be a function, got ${describeValue(factory)}`,
      );
    }
    this.#waiters = new Waiters(this.#id, this.#members, factory, this.#onError);
  }

  /**
   * Closes the subscriber connections of release-notified waiting (they are
   * also closed 100 ms after the last wait ends). The Redlock stays usable.
   *
   * @returns A promise that settles once they are closed.
   *
   * @example Scoping a Redlock
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const clients: Redlock["clients"];
   * await using redlock = new Redlock(clients);
   * ```
   */
  [Symbol.asyncDispose](): Promise<void> {
    return this.#waiters.close();
  }

  /**
   * Acquires a lock on `resources` for `duration` ms, retrying while another
   * holder has it.
   *
   * @param resources A resource (Redis key) or several, locked all or none.
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides, a signal and a timeout.
   * @returns The lock, valid for `duration` minus the time taken and drift.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ResourceLockedError} When retries ran out while another holder kept it.
   * @throws {ExecutionError} When retries ran out for want of a quorum of servers.
   * @throws {DOMException} The `signal.reason` (a `TimeoutError` for `timeout`).
   *
   * @example Acquiring with a deadline
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.acquire(["{game42}:board", "{game42}:turn"], 10_000, {
   *   timeout: 2_000,
   * });
   * await lock.release();
   * ```
   */
  acquire(
    resources: string | readonly string[],
    duration: number,
    options?: AcquireOptions,
  ): Promise<Lock> {
    let checked: Checked<AcquireOptions>;
    try {
      checked = this.#checkAcquire(resources, duration, options);
    } catch (error) {
      return Promise.reject(error);
    }
    const { keys, settings, opts } = checked;
    const fencing = opts.fencing === true;
    if (opts.timeout === undefined) {
      return this.#acquire(keys, duration, settings, opts.signal, fencing);
    }
    const { signal, dispose } = deadline(opts.signal, opts.timeout);
    return this.#acquire(keys, duration, settings, signal, fencing).finally(dispose);
  }

  /**
   * Makes exactly one attempt to acquire a lock.
   *
   * @param resources A resource (Redis key) or several, locked all or none.
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides (retry settings are ignored).
   * @returns The lock, or `null` when another holder has the resource.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When too few servers answered (not a busy resource).
   *
   * @example Doing something only if nobody else is
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.tryAcquire("cron:nightly", 60_000);
   * if (lock) {
   *   await using _ = lock;
   *   // run the job
   * }
   * ```
   */
  async tryAcquire(
    resources: string | readonly string[],
    duration: number,
    options?: AcquireOptions,
  ): Promise<Lock | null> {
    const { keys, settings, opts } = this.#checkAcquire(resources, duration, options);
    const { signal, dispose } = deadline(opts.signal, opts.timeout);
    try {
      return await this.#acquire(
        keys,
        duration,
        { ...settings, retryCount: 0 },
        signal,
        opts.fencing === true,
      );
    } catch (error) {
      if (error instanceof ResourceLockedError) return null;
      throw error;
    } finally {
      dispose();
    }
  }

  /**
   * Releases a lock on every server. Keys that already expired count as
   * released; keys held by another value are never touched.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The stats of the release.
   * @throws {TypeError} When `lock` is not a Lock.
   * @throws {ExecutionError} When a quorum of servers could not be reached.
   *
   * @example Releasing
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.acquire("a", 1_000);
   * await redlock.release(lock);
   * ```
   */
  release(lock: Lock, options?: ReleaseOptions): Promise<ExecutionResult> {
    let settings: Settings;
    try {
      checkLock(lock);
      settings = checkSettings(options, this.settings, "options");
    } catch (error) {
      return Promise.reject(error);
    }
    const keys = lock.resources;
    const start = now();
    return round<Vote, ExecutionResult>(this.#members, this.#releaser(keys, lock.value, settings), {
      timeout: settings.requestTimeout,
      start,
      onError: this.#onError,
      done: this.#decided,
      judge: released,
      settle: (tally) => {
        const { ok, stats } = this.#ballot(tally, start);
        if (!ok) {
          throw new ExecutionError(`release of ${show(keys)} did not reach a quorum`, [stats]);
        }
        return { attempts: [stats] };
      },
    });
  }

  /**
   * Extends a lock to `duration` ms from the start of the extension. By
   * default only a lock that is still ours on a quorum is extended.
   *
   * @param lock The lock.
   * @param duration The new lease in ms.
   * @param options Per-call overrides; `onlyIfLocked: false` takes expired
   * keys again when they are free.
   * @returns A new lock with the same value and the new expiration.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {LockLostError} When the lock expired or another value holds it.
   * @throws {ExecutionError} When retries ran out for want of a quorum.
   *
   * @example Extending
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * let lock = await redlock.acquire("a", 1_000);
   * lock = await redlock.extend(lock, 5_000);
   * ```
   */
  async extend(lock: Lock, duration: number, options?: ExtendOptions): Promise<Lock> {
    checkLock(lock);
    checkDuration(duration);
    const opts = checkCallOptions(options);
    const settings = checkSettings(opts, this.settings, "options");
    const onlyIfLocked = opts.onlyIfLocked ?? true;
    if (typeof onlyIfLocked !== "boolean") {
      throw new TypeError(
        `options.onlyIfLocked must be a boolean, got ${describeValue(onlyIfLocked)}`,
      );
    }
    const { signal, dispose } = deadline(opts.signal, opts.timeout);
    try {
      return await this.#extend(lock, duration, settings, onlyIfLocked, signal);
    } finally {
      dispose();
    }
  }

  /**
   * Acquires a lock, runs `routine` while extending the lock automatically,
   * and releases it when the routine settles. When an extension fails and
   * the lock can no longer be valid, the routine's signal aborts with a
   * {@linkcode LockLostError}; the routine decides what to do.
   *
   * @param resources A resource or several.
   * @param duration The lease in ms, renewed before it ends.
   * @param routine The work to do; gets a signal and the current lock.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, e.g. a threshold not below `duration`.
   * @throws {ExecutionError} When the lock could not be acquired.
   *
   * @example Doing long work under a short lease
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const total = await redlock.using("ledger", 5_000, async (signal) => {
   *   signal.throwIfAborted();
   *   return 42;
   * });
   * ```
   */
  using<T>(
    resources: string | readonly string[],
    duration: number,
    routine: UsingRoutine<T>,
  ): Promise<T>;
  /**
   * Acquires a lock with `options`, runs `routine` while extending the lock
   * automatically, and releases it when the routine settles.
   *
   * @param resources A resource or several.
   * @param duration The lease in ms, renewed before it ends.
   * @param options Per-call overrides; `signal` aborts the wait for the lock
   * and is combined with the routine's signal.
   * @param routine The work to do; gets a signal and the current lock.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, e.g. a threshold not below `duration`.
   * @throws {ExecutionError} When the lock could not be acquired.
   *
   * @example With options
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await redlock.using("ledger", 5_000, { automaticExtensionThreshold: 1_000 }, (signal) => {
   *   signal.throwIfAborted();
   * });
   * ```
   */
  using<T>(
    resources: string | readonly string[],
    duration: number,
    options: UsingOptions,
    routine: UsingRoutine<T>,
  ): Promise<T>;
  async using<T>(
    resources: string | readonly string[],
    duration: number,
    optionsOrRoutine: UsingOptions | UsingRoutine<T>,
    maybeRoutine?: UsingRoutine<T>,
  ): Promise<T> {
    const [options, routine] = typeof optionsOrRoutine === "function"
      ? [undefined, optionsOrRoutine]
      : [optionsOrRoutine, maybeRoutine];
    if (typeof routine !== "function") {
      throw new TypeError(`routine must be a function, got ${describeValue(routine)}`);
    }
    const { keys, settings, opts } = this.#checkAcquire(resources, duration, options);
    const threshold = settings.automaticExtensionThreshold;
    if (threshold >= duration) {
      throw new RangeError(
        `automaticExtensionThreshold must be below duration (${duration}), got ${threshold}`,
      );
    }
    const wait = deadline(opts.signal, opts.timeout);
    let lock: Lock;
    try {
      lock = await this.#acquire(keys, duration, settings, wait.signal, opts.fencing === true);
    } finally {
      wait.dispose();
    }

    const lost = new AbortController();
    const stop = new AbortController();
    const signal = opts.signal ? AbortSignal.any([lost.signal, opts.signal]) : lost.signal;
    const context = { lock, extensions: 0 };
    let timer: ReturnType<typeof setTimeout> | undefined;
    let extending: Promise<void> | undefined;
    const extendSettings = { ...settings, retryCount: -1 };
    const schedule = () => {
      timer = setTimeout(() => {
        timer = undefined;
        extending = this.#extend(context.lock, duration, extendSettings, true, stop.signal).then(
          (next) => {
            context.lock = next;
            context.extensions++;
            schedule();
          },
          (error) => {
            if (stop.signal.aborted) return;
            lost.abort(error);
          },
        );
      }, Math.max(0, context.lock.remainingTime - threshold));
    };
    schedule();

    let result: T;
    try {
      result = await routine(signal, context);
    } finally {
      clearTimeout(timer);
      stop.abort();
      await extending;
      try {
        await this.release(context.lock, settings);
      } catch (error) {
        this.reportError(error);
      }
    }
    return result;
  }

  /**
   * Whether `resource` is held by anyone on a quorum of servers.
   *
   * @param resource The resource (Redis key).
   * @param options Per-call overrides.
   * @returns True when a quorum holds it, false when a quorum has it free.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example Peeking
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * console.log(await redlock.isLocked("report:42"));
   * ```
   */
  async isLocked(resource: string, options?: InspectOptions): Promise<boolean> {
    const keys = checkResources([resource], "resource");
    const ttls = await this.#inspect(keys, "", options, `isLocked(${show(keys)})`);
    return ttls !== null;
  }

  /**
   * Whether `lock` is still ours on a quorum of servers and not expired.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns True while the lock holds.
   * @throws {TypeError} When `lock` is not a Lock.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example Checking before a write
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.acquire("a", 1_000);
   * if (await redlock.isValid(lock)) console.log("still mine");
   * ```
   */
  async isValid(lock: Lock, options?: InspectOptions): Promise<boolean> {
    checkLock(lock);
    if (lock.remainingTime <= 0) return false;
    const ttls = await this.#inspect(lock.resources, lock.value, options, "isValid(lock)");
    return ttls !== null && lock.remainingTime > 0;
  }

  /**
   * The ms a lock is still held by its value on a quorum, as the servers'
   * TTLs say, less the request's time and drift: it never overstates.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The ms left, or `null` when the lock is not ours on a quorum.
   * @throws {TypeError} When `lock` is not a Lock.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example Remaining time
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.acquire("a", 1_000);
   * console.log(await redlock.remainingTtl(lock));
   * ```
   */
  remainingTtl(lock: Lock, options?: InspectOptions): Promise<number | null> {
    checkLock(lock);
    return this.#inspect(lock.resources, lock.value, options, "remainingTtl(lock)", true);
  }

  /**
   * The ms `resource` is still held by anyone on a quorum, less the
   * request's time and drift; `Infinity` for a key without expiry.
   *
   * @param resource The resource (Redis key).
   * @param options Per-call overrides.
   * @returns The ms left, or `null` when no quorum holds it.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example How long until it frees up
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * console.log(await redlock.remainingTtlForResource("report:42"));
   * ```
   */
  remainingTtlForResource(resource: string, options?: InspectOptions): Promise<number | null> {
    const keys = checkResources([resource], "resource");
    return this.#inspect(keys, "", options, `remainingTtlForResource(${show(keys)})`, true);
  }

  /**
   * Listens for `"error"` events and hands `listener` the error itself.
   *
   * @param type The event type: `"error"`.
   * @param listener Called with each error and its event.
   * @returns A function that removes the listener.
   * @throws {TypeError} When `type` is not `"error"` or `listener` is no function.
   *
   * @example Logging
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const off = redlock.on("error", (error) => console.warn(error.message));
   * off();
   * ```
   */
  on(type: "error", listener: (error: Error, event: RedlockErrorEvent) => void): () => void {
    if (type !== "error") throw new TypeError(`type must be "error", got ${describeValue(type)}`);
    if (typeof listener !== "function") {
      throw new TypeError(`listener must be a function, got ${describeValue(listener)}`);
    }
    const handler = (event: Event) => {
      const e = event as RedlockErrorEvent;
      listener(e.error, e);
    };
    this.addEventListener("error", handler);
    return () => this.removeEventListener("error", handler);
  }

  /**
   * Dispatches an error that concerns a whole operation (not one server) as
   * an `"error"` event with `server` −1; used where throwing would hide a
   * more important result, e.g. a failed release after `using()`.
   *
   * @param error The error.
   *
   * @example Reporting
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * redlock.reportError(new Error("cleanup failed"));
   * ```
   */
  reportError(error: unknown): void {
    const e = error instanceof Error ? error : new Error(String(error), { cause: error });
    this.dispatchEvent(new RedlockErrorEvent(e, -1, this));
  }

  #checkAcquire<T extends AcquireOptions>(
    resources: unknown,
    duration: unknown,
    options: T | undefined,
  ): Checked<T> {
    const keys = checkResources(resources);
    checkDuration(duration);
    const opts = checkCallOptions(options);
    const settings = checkSettings(opts, this.settings, "options");
    if (opts.fencing !== undefined && typeof opts.fencing !== "boolean") {
      throw new TypeError(`options.fencing must be a boolean, got ${describeValue(opts.fencing)}`);
    }
    if (this.#cluster) checkSlots(opts.fencing ? [...keys, ...keys.map(fenceKey)] : keys);
    return { keys, settings, opts };
  }

  /**
   * The first attempt, kept lean for the usual case: one round, and the lock
   * when it succeeds. Anything else (a conflict, too few servers, a fencing
   * token to confirm, a queue to join) goes on in `#acquireLoop`, which takes
   * this round as its first attempt.
   */
  #acquire(
    keys: readonly string[],
    duration: number,
    settings: Settings,
    signal: AbortSignal | undefined,
    fencing: boolean,
  ): Promise<Lock> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    // Unique: the Redlock's random id and a count. The id names the channel
    // that wakes the acquire when it queues; the lease, the one a release
    // hands the key to it for (0: only reserve it, as a fencing token needs
    // the acquire script).
    const value = `${this.#id}:${(++this.#acquires).toString(36)}:${fencing ? 0 : duration}`;
    if (settings.wait === "notify" && keys.length === 1 && this.#waiters.isHot(keys[0]!)) {
      // An acquire of this Redlock queued for the resource just now, so it
      // is likely still contended: queue at once.
      return this.#acquireLoop(keys, duration, settings, signal, fencing, value, undefined);
    }
    const start = now();
    const send = this.#plain && !fencing && keys.length === 1
      ? this.#setIfAbsent(keys[0]!, value, duration)
      : this.#acquirer(keys, value, duration, fencing, "", settings);
    return this.#vote(send, keys, settings, signal, start).then(
      (ballot) => {
        const until = validUntil(start, duration, settings.driftFactor);
        if (!fencing && ballot.ok && until > ballot.end) {
          return new Lock({
            redlock: this,
            resources: Object.freeze(keys),
            value,
            attempts: Object.freeze([ballot.stats]),
            validUntil: until,
            fencingToken: undefined,
          });
        }
        return this.#acquireLoop(keys, duration, settings, signal, fencing, value, {
          start,
          ballot,
        });
      },
      (error) => {
        // Aborted mid-round: whatever lands on a server is released behind it.
        this.#releaseQuietly(this.#releaser(keys, value, settings), this.#members);
        throw error;
      },
    );
  }

  /**
   * Sends ACQUIRE of `value` to one server; with a ticket, in the resource's
   * wait queue, and with "*" as a watcher of every resource (see the script).
   */
  #acquirer(
    keys: readonly string[],
    value: string,
    duration: number,
    fencing: boolean,
    ticket: string,
    settings: Settings,
  ): (member: Member) => Promise<unknown> {
    const counters = fencing ? keys.map(fenceKey) : [];
    const scriptKeys = ticket === ""
      ? [...keys, ...counters]
      : ticket === "*"
      ? [...keys, ...counters, ...keys.map(queueKey)]
      : [...keys, ...counters, queueKey(keys[0]!)];
    // The usual case sends no more arguments than it reads.
    const args = !fencing && ticket === ""
      ? [value, String(duration)]
      : [value, String(duration), fencing ? "1" : "", ticket, String(4 * settings.requestTimeout)];
    return (m) => m.runner.evalScript(ACQUIRE, scriptKeys, args);
  }

  /**
   * Every attempt after the first (given as `first`, or none yet when the
   * acquire queues at once): retries, waiting in the queue or for a release,
   * fencing, giving up.
   */
  async #acquireLoop(
    keys: readonly string[],
    duration: number,
    settings: Settings,
    signal: AbortSignal | undefined,
    fencing: boolean,
    value: string,
    first: { readonly start: number; readonly ballot: Ballot } | undefined,
  ): Promise<Lock> {
    const attempts: ExecutionStats[] = [];
    const counters = fencing ? keys.map(fenceKey) : [];
    const acquireScript = (ticket: string) => {
      const sendScript = this.#acquirer(keys, value, duration, fencing, ticket, settings);
      if (ticket === "" || ticket === "*") return sendScript;
      // A queued acquire deals with answers that come after their round settled.
      return (m: Member) => {
        const sentIn = current;
        return sendScript(m).then((reply) => {
          const vote = toVote(reply, m.index);
          if (sentIn <= settled) late(m, typeof vote === "number");
          return vote;
        }, (error) => {
          if (sentIn <= settled) late(m, undefined);
          throw error;
        });
      };
    };
    /** The attempt in flight, and the last one whose round settled. */
    let current = 0;
    let settled = 0;
    /**
     * A late answer: `taken` true when the server took the key, false on a
     * conflict, undefined on an error (it may have). Once granted, the lock
     * keeps what it took, and leaves the other queues; before, what a
     * failed attempt took is released, and the acquire stays in the queues.
     */
    const late = (m: Member, taken: boolean | undefined) => {
      if (granted) {
        if (taken !== true) this.#releaseQuietly(this.#releaser(keys, value, settings, "2"), [m]);
      } else if (taken !== false) {
        const [sent] = this.#releaseQuietly(this.#releaser(keys, value, settings, "1"), [m]);
        releasedTo.set(m.index, sent!);
      }
    };
    let script = acquireScript("");
    // One resource without fencing: a plain SET NX, which costs the server a
    // fifth of the script, as long as the resource looks free. After a
    // conflict the script, which also tells the holder's TTL, saves the PTTL.
    let send: (member: Member) => Promise<unknown> = this.#plain && !fencing && keys.length === 1
      ? this.#setIfAbsent(keys[0]!, value, duration)
      : script;
    /** The place in the wait queue, by wall clock (comparable across hosts); "" when not queued. */
    let ticket = "";
    /** Whether the queues need no more telling that this acquire no longer waits. */
    let left = true;
    let listening: Listening | undefined;
    let granted = false;
    /**
     * Servers this acquire sent a release to, and whether it answered: what
     * they handed it may be gone (see `join()`).
     */
    const releasedTo = new Map<number, Promise<boolean>>();
    /** When the first attempt in the queue started: no server queued the value before. */
    let queuedAt: number | undefined;
    /** Drops the queue entries; `keep` keeps keys the value holds. */
    const leave = (members: readonly Member[], keep = false) => {
      if (!left) {
        this.#releaseQuietly(this.#releaser(keys, value, settings, keep ? "2" : ""), members);
      }
      left = true;
    };
    /**
     * Subscribes to the Redlock's wake channel and takes a place in the
     * resource's wait queue with the next attempt; false when no server
     * confirmed the subscription.
     */
    const join = async (): Promise<boolean> => {
      // A release sent before the acquire queues, once answered, ran before
      // its place in the queues, so it cannot take back a key a server hands
      // it later: such servers count again. (Awaited while subscribing; one
      // that has not answered may still land late, e.g. as an EVAL sent
      // after NOSCRIPT.)
      const sent = [...releasedTo];
      const [subscription, answered] = await Promise.all([
        this.#waiters.listen(keys, settings.requestTimeout, value),
        Promise.all(sent.map(([, reply]) => within(reply, settings.requestTimeout))),
      ]);
      sent.forEach(([server, reply], i) => {
        if (answered[i] === true && releasedTo.get(server) === reply) releasedTo.delete(server);
      });
      listening = subscription;
      if (!listening.subscribed) return false;
      this.#waiters.queued(keys[0]!);
      ticket = String(Date.now());
      left = false;
      send = script = acquireScript(ticket);
      return true;
    };
    const queueable = settings.wait === "notify" && keys.length === 1;
    try {
      // Without a first attempt, the acquire queues at once (see `#acquire`).
      if (first === undefined && queueable) await join();
      for (let attempt = 1;; attempt++) {
        let start: number;
        let ballot: Ballot;
        if (attempt === 1 && first !== undefined) {
          ({ start, ballot } = first);
        } else {
          start = now();
          try {
            current = attempt;
            ballot = await this.#vote(send, keys, settings, signal, start);
            settled = attempt;
          } catch (error) {
            // Aborted mid-round: whatever lands on a server is released behind it.
            this.#releaseQuietly(
              this.#releaser(keys, value, settings),
              this.#members,
            );
            left = true;
            throw error;
          }
        }
        attempts.push(ballot.stats);
        if (ticket !== "") queuedAt ??= start;
        const until = validUntil(start, duration, settings.driftFactor);
        if (ballot.ok && until > ballot.end) {
          const token = fencing ? await this.#fence(counters, ballot.token, until, settings) : 0;
          if (token !== undefined && (!fencing || until > now())) {
            // The servers that took the lock dropped the queue entry; tell the others.
            if (!left) {
              const against = ballot.stats.votesAgainst;
              leave(this.#members.filter((m) => against.has(m.index)), true);
            }
            granted = true;
            return new Lock({
              redlock: this,
              resources: Object.freeze(keys),
              value,
              attempts: Object.freeze(attempts),
              validUntil: until,
              fencingToken: fencing ? token : undefined,
            });
          }
        }
        // Undo a partial (or too slow) lock where it may have landed; requests on
        // one connection run in order, so the release lands after the acquire.
        // (In the queue, a server that has not answered yet is dealt with by
        // `late()`, which keeps the acquire's place there.)
        const { votesFor, votesAgainst } = ballot.stats;
        const { conflicts } = votesAgainst;
        const taken = this.#members.filter((m) =>
          !votesAgainst.isConflict(m.index) &&
          (ticket === "" || votesFor.includes(m.index) || votesAgainst.has(m.index))
        );
        const { retryCount } = settings;
        if (retryCount !== -1 && attempt > retryCount) {
          // Giving up: reject only once the release has answered (or timed out).
          await round(
            left ? taken : this.#members,
            this.#releaser(keys, value, settings),
            {
              timeout: settings.requestTimeout,
              done: () => false,
              onError: this.#onError,
            },
          );
          left = true;
          // Another holder kept it unless server errors alone made a quorum impossible.
          const errors = votesAgainst.size - conflicts;
          const held = conflicts > 0 && errors <= this.clients.length - this.quorum;
          const message = `acquire of ${show(keys)} failed`;
          throw held
            ? new ResourceLockedError(`${message}: held by another lock`, attempts)
            : new ExecutionError(message, attempts);
        }
        const sent = this.#releaseQuietly(
          this.#releaser(keys, value, settings, ticket === "" ? "" : "1"),
          taken,
        );
        taken.forEach((m, i) => releasedTo.set(m.index, sent[i]!));
        if (conflicts > 0) send = script;
        if (settings.wait === "notify" && conflicts > 0) {
          const fallback = Number.isFinite(ballot.heldFor)
            ? ballot.heldFor + 1
            : this.#retryWait(settings, attempt);
          if (queueable) {
            // Retry at once, in the queue.
            if (listening === undefined && await join()) continue;
            if (ticket !== "") {
              // Woken by the releases that handed the key to this acquire (or
              // reserved it); a waiter ahead that went away holds it up at most
              // that long, hence the bound.
              await listening!.wait(
                start,
                Math.min(fallback, settings.requestTimeout + 1),
                signal,
              );
              const lock = fencing ? undefined : this.#handed(listening!, queuedAt, duration, {
                keys,
                value,
                settings,
                attempts,
                releasedTo,
              });
              if (lock !== undefined) {
                granted = true;
                left = true;
                return lock;
              }
              continue;
            }
          } else {
            if (listening === undefined) {
              listening = await this.#waiters.listen(keys, settings.requestTimeout);
              if (listening.subscribed) {
                // Retry at once as a watcher: a conflict then leaves the marker
                // that makes the holder's release publish (see RELEASE).
                send = script = acquireScript("*");
                continue;
              }
            }
            if (listening.subscribed) {
              await listening.wait(start, fallback, signal);
              continue;
            }
          }
        }
        await delay(this.#retryWait(settings, attempt), signal);
      }
    } finally {
      leave(this.#members);
      if (listening !== undefined) {
        // A lock is handed out at once; dispose waits for the rest.
        const done = listening.done();
        if (!granted) await done;
      }
    }
  }

  /**
   * The lock a quorum of servers handed to a queued acquire (see RELEASE),
   * or undefined when fewer did or too little of its lease is left. Each
   * server handed it after it queued the value, so the keys last at least
   * until `queuedAt` plus the lease, unless the acquire released them
   * itself after a failed attempt: such servers do not count.
   */
  #handed(
    listening: Listening,
    queuedAt: number | undefined,
    duration: number,
    call: {
      keys: readonly string[];
      value: string;
      settings: Settings;
      attempts: ExecutionStats[];
      releasedTo: ReadonlyMap<number, unknown>;
    },
  ): Lock | undefined {
    const votesFor = listening.heard().filter((server) => !call.releasedTo.has(server));
    if (queuedAt === undefined || votesFor.length < this.quorum) return undefined;
    const until = validUntil(queuedAt, duration, call.settings.driftFactor);
    const end = now();
    // A long wait leaves little of the lease: then an attempt renews it.
    if (until - end < duration / 2) return undefined;
    call.attempts.push({
      membershipSize: this.#members.length,
      quorumSize: this.quorum,
      votesFor,
      votesAgainst: new Map(),
      elapsed: end - queuedAt,
    });
    return new Lock({
      redlock: this,
      resources: Object.freeze(call.keys),
      value: call.value,
      attempts: Object.freeze(call.attempts),
      validUntil: until,
      fencingToken: undefined,
    });
  }

  /**
   * Makes `token` (the largest counter of the acquiring quorum) known to a
   * quorum before the lock is handed out, so that any later quorum sees it.
   * Returns the token, or undefined when no quorum confirmed it in time.
   */
  async #fence(
    fenceKeys: readonly string[],
    token: number,
    until: number,
    settings: Settings,
  ): Promise<number | undefined> {
    if (this.#members.length === 1) return token; // the acquire script wrote it
    const tally = await round(
      this.#members,
      (m) => this.#run(m, FENCE, fenceKeys, [String(token)], asIs),
      {
        timeout: Math.max(1, Math.min(settings.requestTimeout, until - now())),
        done: ({ answers }) => answers.size >= this.quorum,
        onError: this.#onError,
      },
    );
    return tally.answers.size >= this.quorum ? token : undefined;
  }

  async #extend(
    lock: Lock,
    duration: number,
    settings: Settings,
    onlyIfLocked: boolean,
    signal: AbortSignal | undefined,
  ): Promise<Lock> {
    signal?.throwIfAborted();
    const attempts: ExecutionStats[] = [];
    const what = `extend of ${show(lock.resources)}`;
    const args = [lock.value, String(duration), onlyIfLocked ? "0" : "1"];
    for (let attempt = 1;; attempt++) {
      if (onlyIfLocked && lock.remainingTime <= 0) {
        throw new LockLostError(`${what} failed: the lock expired`, attempts);
      }
      const start = now();
      const ballot = await this.#vote(
        (m) => m.runner.evalScript(EXTEND, lock.resources, args),
        lock.resources,
        settings,
        signal,
        start,
      );
      attempts.push(ballot.stats);
      const until = validUntil(start, duration, settings.driftFactor);
      if (ballot.ok && until > ballot.end) {
        return new Lock({
          redlock: this,
          resources: lock.resources,
          value: lock.value,
          attempts: Object.freeze(attempts),
          validUntil: until,
          fencingToken: lock.fencingToken,
        });
      }
      if (ballot.stats.votesAgainst.conflicts > this.clients.length - this.quorum) {
        throw new LockLostError(`${what} failed: the lock is no longer ours`, attempts);
      }
      const { retryCount } = settings;
      if (retryCount !== -1 && attempt > retryCount) {
        throw new ExecutionError(`${what} failed`, attempts);
      }
      await delay(this.#retryWait(settings, attempt), signal);
    }
  }

  #retryWait(settings: Settings, attempt: number): number {
    const { retryDelay, retryJitter } = settings;
    const base = typeof retryDelay === "function" ? retryDelay(attempt) : retryDelay;
    if (typeof base !== "number" || !Number.isFinite(base) || base < 0) {
      throw new RangeError(
        `retryDelay(${attempt}) must return a finite number of ms ≥ 0, got ${describeValue(base)}`,
      );
    }
    return base + Math.random() * retryJitter;
  }

  /**
   * Acquire votes by `SET key value PX duration NX`: for when it was set,
   * else a conflict with the holder's TTL, asked by PTTL. The PTTL is only
   * read; nothing is written after a SET, so a release sent on the same
   * connection behind it still lands last.
   */
  #setIfAbsent(key: string, value: string, duration: number): (member: Member) => Promise<Vote> {
    return (m) =>
      m.runner.setIfAbsent!(key, value, duration).then((set) => {
        if (set === true) return 0;
        if (set !== false) {
          throw new TypeError(`server ${m.index} sent an unexpected reply: ${describeValue(set)}`);
        }
        return m.runner.pttl!(key).then((ttl) => new Conflict(m.index, toNumber(ttl, m.index)));
      });
  }

  /**
   * One round of acquire or extend votes on `keys` (sent as scripts, or as
   * votes already made): success on a quorum of "for".
   */
  #vote(
    send: (member: Member) => Promise<unknown>,
    keys: readonly string[],
    settings: Settings,
    signal: AbortSignal | undefined,
    start: number = now(),
  ): Promise<Ballot> {
    return round<Vote, Ballot>(this.#members, send, {
      timeout: settings.requestTimeout,
      start,
      signal,
      onError: this.#onError,
      done: this.#decided,
      judge: asVote,
      failure: (error) => crossSlot(error, keys),
      settle: (tally) => this.#ballot(tally, start),
    });
  }

  #ballot(tally: Tally<Vote>, start: number): Ballot {
    const end = now();
    const votesFor: number[] = [];
    const conflicts: Conflict[] = [];
    let token = 0;
    let heldFor = Infinity;
    for (const [server, vote] of tally.answers) {
      if (typeof vote === "number") {
        votesFor.push(server);
        if (vote > token) token = vote;
      } else {
        conflicts.push(vote);
        if (vote.ttl > 0 && vote.ttl < heldFor) heldFor = vote.ttl;
      }
    }
    const q = this.quorum;
    const stats = {
      membershipSize: this.#members.length,
      quorumSize: q,
      votesFor,
      votesAgainst: new VotesAgainst(conflicts, tally.errors),
      elapsed: end - start,
    };
    return { stats, ok: votesFor.length >= q, token, heldFor, end };
  }

  /**
   * One round of INSPECT: the quorum-th largest TTL among servers that hold
   * the keys (for `value`, or for anyone when it is ""), less the round's time
   * and drift; `null` when a quorum does not hold them. It settles as soon as
   * the yes/no answer is known, unless `everyServer` asks it to hear every
   * server out (bounded by requestTimeout) for the best TTL estimate.
   */
  async #inspect(
    keys: readonly string[],
    value: string,
    options: InspectOptions | undefined,
    what: string,
    everyServer = false,
  ): Promise<number | null> {
    const opts = checkCallOptions(options);
    const settings = checkSettings(opts, this.settings, "options");
    if (this.#cluster) checkSlots(keys);
    const q = this.quorum;
    const start = now();
    const tally = await round<number>(
      this.#members,
      (m) => this.#run(m, INSPECT, keys, [value], toNumber),
      {
        timeout: settings.requestTimeout,
        signal: opts.signal,
        onError: this.#onError,
        done: ({ answers }) => {
          if (everyServer) return false;
          let held = 0;
          for (const ttl of answers.values()) if (ttl !== -2) held++;
          return held >= q || answers.size - held >= q;
        },
      },
    );
    const elapsed = now() - start;
    const held = [...tally.answers.values()]
      .filter((ttl) => ttl !== -2)
      .map((ttl) => (ttl === -1 ? Infinity : ttl))
      .sort((a, b) => b - a);
    if (held.length >= q) {
      const ttl = held[q - 1]!;
      if (ttl === Infinity) return Infinity;
      const left = Math.floor(ttl - elapsed - drift(ttl, settings.driftFactor));
      return left > 0 ? left : null;
    }
    if (tally.answers.size - held.length >= q) return null;
    // every server that answered counts as "for": it could tell, one way or the other
    const answered = new Map([...tally.answers].map(([i]) => [i, 0]));
    const { stats } = this.#ballot({ answers: answered, errors: tally.errors }, start);
    throw new ExecutionError(`${what} did not get answers from a quorum`, [stats]);
  }

  /** Runs `script` on one server; `judge` checks and converts its reply. */
  #run<T>(
    member: Member,
    script: LuaScript,
    keys: readonly string[],
    args: readonly string[],
    judge: (reply: unknown, server: number) => T,
  ): Promise<T> {
    return member.runner.evalScript(script, keys, args).then(
      (reply) => judge(reply, member.index),
      (error) => {
        throw error instanceof Error ? crossSlot(error, keys) : error;
      },
    );
  }

  /**
   * Sends RELEASE of `value` to one server: marked keys it frees go to the
   * first of their wait queues (see ACQUIRE). `mode` "" also leaves the
   * queues, "1" stays in them (and keeps a reservation), "2" only leaves
   * them.
   */
  #releaser(
    keys: readonly string[],
    value: string,
    settings: Settings,
    mode: "" | "1" | "2" = "",
  ): (member: Member) => Promise<unknown> {
    const scriptKeys = keys.length === 1
      ? [keys[0]!, queueKey(keys[0]!)]
      : [...keys, ...keys.map(queueKey)];
    const timeout = settings === this.settings ? this.#timeoutArg : String(settings.requestTimeout);
    const args = mode === "" ? [value, timeout] : [value, timeout, mode];
    return (m) => m.runner.evalScript(RELEASE, scriptKeys, args);
  }

  /**
   * Runs `send` on `members` without waiting; failures become error events.
   * Returns, per member, whether its request answered.
   */
  #releaseQuietly(
    send: (member: Member) => Promise<unknown>,
    members: readonly Member[],
  ): Promise<boolean>[] {
    return members.map((member) =>
      send(member).then(() => true, (error) => {
        this.#emit(error instanceof Error ? error : new Error(String(error)), member);
        return false;
      })
    );
  }

  #emit(error: Error, member: Member): void {
    this.dispatchEvent(new RedlockErrorEvent(error, member.index, member.client));
  }

  /**
   * Campaigns for leadership of `name` until `options.signal` aborts: waits
   * for the lock (woken by its release), runs `routine` while holding it with
   * automatic extension, then releases it and campaigns again. The routine's
   * signal aborts with a {@linkcode LockLostError} when leadership is lost; a
   * routine's error is an `"error"` event, and campaigning goes on after a
   * backoff. See {@linkcode lead}.
   *
   * @param name The name of the leadership (one Redis key).
   * @param duration The lease in ms, renewed before it ends.
   * @param routine The leader's work for one term; `context.term` is a
   * fencing token that strictly increases from leader to leader.
   * @param options Per-call overrides and the signal that stops campaigning.
   * @returns A promise that resolves once `options.signal` aborted, the
   * routine settled and the lock was released.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   *
   * @example Running a scheduler on one instance at a time
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const shutdown = new AbortController();
   * Deno.addSignalListener("SIGINT", () => shutdown.abort());
   * await redlock.lead("scheduler", 10_000, async (signal, { term }) => {
   *   console.log(`leading in term ${term}`);
   *   await new Promise((resolve) => signal.addEventListener("abort", resolve));
   * }, { signal: shutdown.signal });
   * ```
   */
  lead(name: string, duration: number, routine: LeadRoutine, options?: LeadOptions): Promise<void> {
    return lead(this, name, duration, routine, options);
  }
}

function show(keys: readonly string[]): string {
  return keys.length === 1 ? JSON.stringify(keys[0]) : `[${keys.map((k) => JSON.stringify(k))}]`;
}

function checkSlots(keys: readonly string[]): void {
  const slots = new Set(keys.map(hashSlot));
  if (slots.size > 1) {
    throw new TypeError(
      `resources ${show(keys)} map to ${slots.size} Redis Cluster hash slots, and one lock ` +
        `needs one: give them a common hash tag, e.g. "{game42}:board" and "{game42}:turn"`,
    );
  }
}
