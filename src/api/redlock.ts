/**
 * The Redlock: a distributed lock over N independent Redis servers. This
 * file is the facade: each public method checks its arguments and hands
 * the work to the module that does it.
 *
 * @module
 */

import type { RedisClient } from "../clients/clients.ts";
import type { ExecutionResult } from "./errors.ts";
import { checkLock, type Lock, type LockOwner, ownerOf } from "./lock.ts";
import { RedlockEvents } from "./redlock_events.ts";
import { showSummary } from "./summary.ts";
import type {
  AcquireOptions,
  ExtendOptions,
  InspectOptions,
  RedlockInit,
  RedlockOptions,
  ReleaseOptions,
  UsingOptions,
} from "./options.ts";
import { RedlockContext } from "./redlock_context.ts";
import type { UsingRoutine } from "./routine.ts";
import { KNOWN, releaseSettings } from "./settings.ts";
import { acquireLock, tryAcquireLock } from "../acquire/acquire.ts";
import { checkAcquire } from "../acquire/request.ts";
import { extensionThreshold } from "../operations/auto_extend.ts";
import { checkExtend, extendLock } from "../operations/extend.ts";
import { inspectFor } from "../operations/inspect.ts";
import { releaseLock } from "../operations/release.ts";
import { plainPlan, using, usingArguments } from "../operations/using.ts";
import { lead, type LeadOptions, type LeadRoutine } from "../primitives/lead.ts";
import { ReadWriteLock } from "../primitives/read_write.ts";
import { Semaphore, type SemaphoreOptions } from "../primitives/semaphore.ts";
import { show } from "../quorum/servers.ts";
import { checkResource, describeValue } from "../util/validate.ts";

/** What a Redlock shows of itself in logs: never its clients. */
export interface RedlockSummary {
  /** How many servers (or clusters) it has. */
  readonly servers: number;
  /** How many must agree. */
  readonly quorum: number;
  /** The settings in force. */
  readonly settings: Readonly<Required<RedlockOptions>>;
}

/**
 * A distributed lock manager over N independent Redis servers (or clusters)
 * with the Redlock algorithm: a lock holds when a majority of servers agree,
 * and its validity is measured on the monotonic clock.
 *
 * Per-server failures are dispatched as {@linkcode RedlockErrorEvent}s named
 * `"error"`; they are never fatal by themselves. Lifecycle events
 * (`"acquired"`, `"released"`, `"extended"`, `"lost"`) are dispatched only
 * while somebody listens.
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
export class Redlock extends RedlockEvents implements LockOwner {
  /** The clients, as given to the constructor. */
  readonly clients: readonly RedisClient[];
  /** The settings in force, defaults filled in. */
  readonly settings: Readonly<Required<RedlockOptions>>;
  /** How many servers must agree: `⌊clients.length / 2⌋ + 1`. */
  readonly quorum: number;
  readonly #context: RedlockContext;

  /**
   * Makes a Redlock over independent Redis servers or clusters.
   *
   * @param clients One client per independent server or cluster: ioredis,
   * node-redis, deno-redis / Upstash, or your own {@linkcode ScriptClient}.
   * @param options Settings; see {@linkcode RedlockOptions} for defaults.
   * @throws {TypeError} When `clients` is empty, has duplicates or an object
   * that is no supported client, or an option is unknown or has the wrong type.
   * @throws {RangeError} When an option is out of range.
   *
   * @example Three servers
   * ```ts no-eval
   * import { Redis } from "npm:ioredis";
   * import { Redlock } from "@x/redlock";
   * const servers = [new Redis(6379), new Redis(6380), new Redis(6381)];
   * const redlock = new Redlock(servers, { retryCount: 3, retryDelay: 100 });
   * ```
   */
  constructor(clients: readonly RedisClient[], options?: RedlockInit) {
    super();
    this.#context = new RedlockContext(clients, options, this);
    const { thresholdSet: _, ...settings } = this.#context.settings;
    this.settings = Object.freeze(settings);
    this.clients = Object.freeze([...clients]);
    this.quorum = this.#context.servers.quorum;
  }

  /**
   * Closes the subscriber connections of release-notified waiting (also
   * closed 100 ms after the last wait). The Redlock stays usable.
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
    return this.#context.waiters.close();
  }

  /**
   * Acquires a lock on `resources` for `duration` ms, retrying while another holder has it:
   * at most `retryCount + 1` attempts, sleeping at most `retryDelay + retryJitter` between
   * two (less when a release wakes it), and never longer than `options.timeout` in all.
   *
   * @param resources A resource (Redis key) or several, locked all or none.
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides, a signal and a timeout.
   * @returns The lock, valid for `duration` minus the time taken and drift.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ResourceLockedError} When retries ran out while another holder kept it.
   * @throws {ExecutionError} When retries ran out for want of a quorum of servers.
   * @throws {DOMException} The `signal.reason` (a `TimeoutError` for `timeout`).
   *
   * @example Acquiring with a deadline
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const board = ["{game42}:board", "{game42}:turn"];
   * await using _ = await redlock.acquire(board, 10_000, { timeout: 2_000 });
   * ```
   */
  acquire(
    resources: string | readonly string[],
    duration: number,
    options?: AcquireOptions,
  ): Promise<Lock> {
    let request;
    try {
      request = checkAcquire(this.#context, resources, duration, options, KNOWN.acquire);
    } catch (error) {
      return Promise.reject(error);
    }
    return acquireLock(this.#context, request);
  }

  /**
   * Makes exactly one attempt to acquire a lock.
   *
   * @param resources A resource (Redis key) or several, locked all or none.
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides (retry settings are ignored).
   * @returns The lock, or `null` when another holder has the resource.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When too few servers answered (not a busy resource).
   *
   * @example Doing something only if nobody else is
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await using lock = await redlock.tryAcquire("cron:nightly", 60_000);
   * if (lock) console.log("running the job");
   * ```
   */
  async tryAcquire(
    resources: string | readonly string[],
    duration: number,
    options?: AcquireOptions,
  ): Promise<Lock | null> {
    const request = checkAcquire(this.#context, resources, duration, options, KNOWN.acquire);
    return await tryAcquireLock(this.#context, request);
  }

  /**
   * Releases a lock on every server. Keys that already expired count as
   * released; keys held by another value are never touched.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The stats of the release.
   * @throws {TypeError} When `lock` is not a Redlock's Lock (a read-write lock's goes to its
   * `ReadWriteLock`), or an option is unknown.
   * @throws {ExecutionError} When a quorum of servers could not be reached.
   *
   * @example Releasing
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await redlock.release(await redlock.acquire("a", 1_000));
   * ```
   */
  release(lock: Lock, options?: ReleaseOptions): Promise<ExecutionResult> {
    let timeout: number;
    try {
      checkPlainLock(lock);
      timeout = releaseSettings(options, this.#context.settings).requestTimeout;
    } catch (error) {
      return Promise.reject(error);
    }
    return releaseLock(this.#context, lock, timeout);
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
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {LockLostError} When the lock expired or another value holds it.
   * @throws {ExecutionError} When retries ran out for want of a quorum.
   *
   * @example Extending
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const longer = await redlock.extend(await redlock.acquire("a", 1_000), 5_000);
   * ```
   */
  async extend(lock: Lock, duration: number, options?: ExtendOptions): Promise<Lock> {
    checkPlainLock(lock);
    const request = checkExtend(this.#context, lock, duration, options, KNOWN.extend);
    return await extendLock(this.#context, { ...request, owner: this });
  }

  /**
   * Acquires a lock, runs `routine` while extending the lock automatically,
   * and releases it when the routine settles. The routine's signal aborts
   * with a {@linkcode LockLostError} when an extension finds the lock gone,
   * and at the latest when the lock's validity (monotonic clock, drift
   * allowance taken off) ends without a successful extension, whatever the
   * extension requests are still doing: with clocks that drift less than
   * `driftFactor`, no other client can hold the lock before the signal
   * aborts (a process stopped past that instant learns it late; fencing
   * tokens cover that case). The routine decides what to do.
   *
   * @param resources A resource or several.
   * @param duration The lease in ms, renewed before it ends.
   * @param routine The work to do; gets a signal and the current lock.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When the lock could not be acquired.
   *
   * @example Doing long work under a short lease
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const total: number = await redlock.using("ledger", 5_000, () => 42);
   * ```
   */
  using<T>(
    resources: string | readonly string[],
    duration: number,
    routine: UsingRoutine<T>,
  ): Promise<T>;
  /**
   * Acquires a lock with `options`, then as {@linkcode Redlock.using} does.
   *
   * @param resources A resource or several.
   * @param duration The lease in ms, renewed before it ends.
   * @param options Per-call overrides; `signal` aborts the wait for the lock and is combined
   * with the routine's signal. When it aborts after the lock was taken but before the
   * routine started, the lock is released, the routine never runs and the call rejects
   * with `signal.reason`.
   * @param routine The work to do; gets a signal and the current lock.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, e.g. a threshold set not below `duration`.
   * @throws {ExecutionError} When the lock could not be acquired.
   *
   * @example With options
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await redlock.using("ledger", 5_000, { automaticExtensionThreshold: 1_000 }, () => {});
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
    const [options, routine] = usingArguments<UsingOptions, UsingRoutine<T>>(
      optionsOrRoutine,
      maybeRoutine,
    );
    const request = checkAcquire(this.#context, resources, duration, options, KNOWN.using);
    const threshold = extensionThreshold(request.settings, duration);
    return await using(routine, plainPlan(this.#context, request, this, threshold));
  }

  /**
   * Whether `resource` is held by anyone on a quorum of servers.
   *
   * @param resource The resource (Redis key).
   * @param options Per-call overrides.
   * @returns True when a quorum holds it, false when a quorum has it free.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
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
    const keys = [checkResource(resource, "resource")];
    const what = `isLocked(${show(keys)})`;
    const question = { keys, value: "", what, everyServer: false };
    return await inspectFor(this.#context, question, options) !== null;
  }

  /**
   * Whether `lock` is still ours on a quorum of servers and not expired.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns True while the lock holds.
   * @throws {TypeError} When `lock` is not a Redlock's Lock (a read-write lock's goes to its
   * `ReadWriteLock`), or an option is unknown.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example Checking before a write
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * console.log(await redlock.isValid(await redlock.acquire("a", 1_000)));
   * ```
   */
  async isValid(lock: Lock, options?: InspectOptions): Promise<boolean> {
    checkPlainLock(lock);
    if (lock.remainingTime <= 0) return false;
    const question = {
      keys: lock.resources,
      value: lock.value,
      what: "isValid(lock)",
      everyServer: false,
    };
    const ttl = await inspectFor(this.#context, question, options);
    return ttl !== null && lock.remainingTime > 0;
  }

  /**
   * The ms a lock is still held by its value on a quorum, as the servers'
   * TTLs say, less the request's time and drift: it never overstates.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The ms left, or `null` when the lock is not ours on a quorum.
   * @throws {TypeError} When `lock` is not a Redlock's Lock (a read-write lock's goes to its
   * `ReadWriteLock`), or an option is unknown.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example Remaining time
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * console.log(await redlock.remainingTtl(await redlock.acquire("a", 1_000)));
   * ```
   */
  remainingTtl(lock: Lock, options?: InspectOptions): Promise<number | null> {
    checkPlainLock(lock);
    const what = "remainingTtl(lock)";
    const question = { keys: lock.resources, value: lock.value, what, everyServer: true };
    return inspectFor(this.#context, question, options);
  }

  /**
   * The ms `resource` is still held by anyone on a quorum, less the
   * request's time and drift; `Infinity` for a key without expiry.
   *
   * @param resource The resource (Redis key).
   * @param options Per-call overrides.
   * @returns The ms left, or `null` when no quorum holds it.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
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
    const keys = [checkResource(resource, "resource")];
    const what = `remainingTtlForResource(${show(keys)})`;
    return inspectFor(this.#context, { keys, value: "", what, everyServer: true }, options);
  }

  /**
   * What the Redlock shows in logs (also in `Deno.inspect` and Node's
   * `util.inspect`): how many servers, the quorum and the settings, never
   * its clients (their options may hold passwords).
   *
   * @returns A plain summary.
   *
   * @example Logging a Redlock
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * console.log(JSON.stringify(redlock)); // {"servers":3,"quorum":2,"settings":{…}}
   * ```
   */
  toJSON(): RedlockSummary {
    return { servers: this.clients.length, quorum: this.quorum, settings: this.settings };
  }

  /**
   * A one-line description.
   *
   * @returns E.g. `Redlock(3 servers, quorum 2)`.
   *
   * @example Printing a Redlock
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * console.log(String(redlock));
   * ```
   */
  override toString(): string {
    return `Redlock(${this.clients.length} servers, quorum ${this.quorum})`;
  }

  /**
   * Campaigns for leadership of `name` until `options.signal` aborts, and
   * runs `routine` while it leads; its signal aborts at the latest when the
   * lock's validity ends without a successful extension. See {@linkcode lead}.
   *
   * @param name The name of the leadership (one Redis key).
   * @param duration The lease in ms, renewed before it ends.
   * @param routine The leader's work for one term; `context.term` is a fencing token
   * that strictly increases from leader to leader.
   * @param options Per-call overrides and the signal that stops campaigning (an abort
   * between a won campaign and its routine's start releases the lock, the routine unrun).
   * @returns A promise that resolves once `options.signal` aborted, the routine settled
   * and the lock was released.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   *
   * @example Running a scheduler on one instance at a time
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * declare const shutdown: AbortSignal;
   * await redlock.lead("scheduler", 10_000, (signal, { term }) => {
   *   console.log(`leading in term ${term}, until ${signal.aborted}`);
   * }, { signal: shutdown });
   * ```
   */
  lead(name: string, duration: number, routine: LeadRoutine, options?: LeadOptions): Promise<void> {
    return lead(this, name, duration, routine, options);
  }

  /**
   * A read-write lock named `name` on this Redlock's servers: readers
   * share it, a writer excludes everyone. Sends nothing until asked.
   *
   * @param name The lock's name (its keys share its hash tag).
   * @returns The handle.
   * @throws {TypeError} When `name` is no string.
   * @throws {RangeError} When `name` is empty.
   *
   * @example Readers and writers
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await using _ = await redlock.readWriteLock("doc:42").read(5_000);
   * ```
   */
  readWriteLock(name: string): ReadWriteLock {
    return new ReadWriteLock(this.#context, name);
  }

  /**
   * A semaphore named `name` of `options.permits` on this Redlock's
   * servers: at most that many holders at once. Sends nothing until asked.
   *
   * @param name The semaphore's name (its keys share its hash tag).
   * @param options The number of permits, the same for every holder.
   * @returns The handle.
   * @throws {TypeError} When `name` is no string or `permits` no number.
   * @throws {RangeError} When `name` is empty or `permits` no integer from 1 to 1000.
   *
   * @example Four at a time
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await using _ = await redlock.semaphore("pdf", { permits: 4 }).acquire(10_000);
   * ```
   */
  semaphore(name: string, options: SemaphoreOptions): Semaphore {
    return new Semaphore(this.#context, name, options);
  }
}

showSummary(Redlock, "Redlock");

/**
 * Checks that `lock` is a Lock a Redlock made (a plain lock or a permit):
 * a read-write lock's keys and scripts are its own, and only its
 * `ReadWriteLock` can release or extend it.
 */
function checkPlainLock(lock: unknown): void {
  const owner = ownerOf(checkLock(lock));
  if (!(owner instanceof Redlock)) {
    throw new TypeError(
      `lock was made by ${describeValue(owner)}, not a Redlock: release and extend it through ` +
        "its owner (lock.release(), lock.extend())",
    );
  }
}
