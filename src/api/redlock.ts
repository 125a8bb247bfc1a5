/**
 * The Redlock: a distributed lock over N independent Redis servers. This
 * file is the facade: each public method checks its arguments and hands
 * the work to the module that does it.
 *
 * @module
 */

import type { RedisClient } from "../clients/clients.ts";
import { type ExecutionResult, LockLostError, ResourceLockedError } from "./errors.ts";
import { RedlockErrorEvent } from "./error_event.ts";
import {
  LockAcquiredEvent,
  LockExtendedEvent,
  LockLostEvent,
  LockReleasedEvent,
  type RedlockEventMap,
} from "./events.ts";
import type { Lock, LockOwner } from "./lock.ts";
import { lead, type LeadOptions, type LeadRoutine } from "../primitives/lead.ts";
import type {
  AcquireOptions,
  ExtendOptions,
  InspectOptions,
  RedlockInit,
  RedlockOptions,
  ReleaseOptions,
  UsingOptions,
  UsingRoutine,
} from "./options.ts";
import { fenceKey, RELEASE, releaseCall } from "../protocol/scripts.ts";
import { duplicateSubscriber } from "../wait/subscriber.ts";
import { ReadWriteLock } from "../primitives/read_write.ts";
import { Semaphore, type SemaphoreOptions } from "../primitives/semaphore.ts";
import { CONTEXTS } from "../primitives/contend.ts";
import {
  acquire,
  type AcquireContext,
  type AcquireRequest,
  wasHandedOver,
} from "../acquire/acquisition.ts";
import { extensionThreshold, holdWhile, usingArguments } from "../operations/auto_extend.ts";
import { extend, type ExtendRequest } from "../operations/extend.ts";
import { HOOKS } from "./hooks.ts";
import { inspect } from "../operations/inspect.ts";
import {
  checkCallOptions,
  checkKeys,
  checkSettings,
  DEFAULTS,
  KNOWN,
  NO_OPTIONS,
  releaseSettings,
  type Settings,
} from "./settings.ts";
import { Servers, show } from "../quorum/servers.ts";
import { Waiters } from "../wait/waiters.ts";
import { deadline } from "../util/delay.ts";
import { now } from "../util/time.ts";
import {
  checkDuration,
  checkLock,
  checkResource,
  checkResources,
  describeValue,
} from "../util/validate.ts";

const EVENT_TYPES: ReadonlySet<string> = new Set<keyof RedlockEventMap>([
  "error",
  "acquired",
  "released",
  "extended",
  "lost",
]);

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
export class Redlock extends EventTarget implements LockOwner {
  /** The clients, as given to the constructor. */
  readonly clients: readonly RedisClient[];
  /** The settings in force, defaults filled in. */
  readonly settings: Readonly<Required<RedlockOptions>>;
  /** How many servers must agree: `⌊clients.length / 2⌋ + 1`. */
  readonly quorum: number;
  readonly #settings: Settings;
  readonly #servers: Servers;
  readonly #waiters: Waiters;
  /** A random id: the first part of the values of this Redlock's locks. */
  readonly #id: string = crypto.randomUUID();
  /** How many acquires were made: the second part. */
  #acquires = 0;
  readonly #context: AcquireContext;
  /**
   * The listeners of each event type, so that no event is made for nobody;
   * a `once` listener maps to the listener that forgets it after its event.
   */
  readonly #listeners = new Map<string, Map<unknown, EventListener | undefined>>();

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
    if (options !== undefined) checkKeys(options, KNOWN.redlock, "options");
    this.#servers = new Servers(clients, this);
    this.#settings = checkSettings(options ?? NO_OPTIONS, DEFAULTS, "options");
    const { thresholdSet: _, ...settings } = this.#settings;
    this.settings = Object.freeze(settings);
    this.clients = Object.freeze([...clients]);
    this.quorum = this.#servers.quorum;
    const factory = options?.subscriber ?? duplicateSubscriber;
    if (typeof factory !== "function") {
      throw new TypeError(
        `options.subscriber must be a function, got ${describeValue(factory)}`,
      );
    }
    this.#waiters = new Waiters(this.#id, this.#servers.members, factory, this.#servers.emit);
    this.#context = { servers: this.#servers, waiters: this.#waiters, owner: this };
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
   * holder has it: at most `retryCount + 1` attempts, sleeping at most
   * `retryDelay + retryJitter` between two of them (less when a release
   * wakes it), and never longer than `options.timeout` in all.
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
    let request: AcquireRequest;
    try {
      request = this.#checkAcquire(resources, duration, options, KNOWN.acquire);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#acquire(request, request.timeout);
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
    const request = this.#checkAcquire(resources, duration, options, KNOWN.acquire);
    const { timeout } = request;
    try {
      return await this.#acquire({
        ...request,
        settings: { ...request.settings, retryCount: 0 },
      }, timeout);
    } catch (error) {
      if (error instanceof ResourceLockedError) return null;
      throw error;
    }
  }

  /**
   * Releases a lock on every server. Keys that already expired count as
   * released; keys held by another value are never touched.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The stats of the release.
   * @throws {TypeError} When `lock` is not a Lock, or an option is unknown.
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
    let settings = this.#settings;
    try {
      checkLock(lock);
      settings = releaseSettings(options, settings);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#release(lock, settings);
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
   * let lock = await redlock.acquire("a", 1_000);
   * lock = await redlock.extend(lock, 5_000);
   * ```
   */
  async extend(lock: Lock, duration: number, options?: ExtendOptions): Promise<Lock> {
    checkLock(lock);
    checkDuration(duration);
    const opts = checkCallOptions(options, KNOWN.extend);
    const settings = checkSettings(opts, this.#settings, "options");
    const { signal, dispose } = deadline(opts.signal, opts.timeout);
    try {
      return await this.#extend({
        lock,
        duration,
        settings,
        onlyIfLocked: opts.onlyIfLocked ?? true,
        signal,
      });
    } finally {
      dispose();
    }
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
   * and is combined with the routine's signal. When it aborts after the lock
   * was taken but before the routine started, the lock is released, the
   * routine never runs and the call rejects with `signal.reason`.
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
    const [options, routine] = usingArguments<UsingOptions, UsingRoutine<T>>(
      optionsOrRoutine,
      maybeRoutine,
    );
    const request = this.#checkAcquire(resources, duration, options, KNOWN.using);
    const { timeout } = request;
    const { settings } = request;
    const threshold = extensionThreshold(settings, duration);
    const lock = await this.#acquire(request, timeout);
    const extendSettings = { ...settings, retryCount: -1 };
    return holdWhile(
      lock,
      threshold,
      (current, signal) =>
        this.#extend({
          lock: current,
          duration,
          settings: extendSettings,
          onlyIfLocked: true,
          signal,
        }),
      options?.signal,
      routine,
      (last) => this.#release(last, settings),
      (error) => this.reportError(error),
    );
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
    return await this.#inspect(keys, "", options, `isLocked(${show(keys)})`) !== null;
  }

  /**
   * Whether `lock` is still ours on a quorum of servers and not expired.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns True while the lock holds.
   * @throws {TypeError} When `lock` is not a Lock, or an option is unknown.
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
    const ttl = await this.#inspect(lock.resources, lock.value, options, "isValid(lock)");
    return ttl !== null && lock.remainingTime > 0;
  }

  /**
   * The ms a lock is still held by its value on a quorum, as the servers'
   * TTLs say, less the request's time and drift: it never overstates.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The ms left, or `null` when the lock is not ours on a quorum.
   * @throws {TypeError} When `lock` is not a Lock, or an option is unknown.
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
    return this.#inspect(keys, "", options, `remainingTtlForResource(${show(keys)})`, true);
  }

  /**
   * Listens for `"error"` events and hands `listener` the error itself.
   *
   * @param type The event type: `"error"`.
   * @param listener Called with each error and its event.
   * @returns A function that removes the listener.
   * @throws {TypeError} When `type` is no event of a Redlock or `listener` is no function.
   *
   * @example Logging
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const off = redlock.on("error", (error) => console.warn(error.message));
   * off();
   * ```
   */
  on(type: "error", listener: (error: Error, event: RedlockErrorEvent) => void): () => void;
  /**
   * Listens for a lifecycle event: `"acquired"`, `"released"`, `"extended"`
   * or `"lost"` (see {@linkcode RedlockEventMap}).
   *
   * @param type The event type.
   * @param listener Called with each event.
   * @returns A function that removes the listener.
   * @throws {TypeError} When `type` is no event of a Redlock or `listener` is no function.
   *
   * @example Measuring waits
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * redlock.on("acquired", (event) => console.log(event.waited, event.attempts));
   * ```
   */
  on<K extends Exclude<keyof RedlockEventMap, "error">>(
    type: K,
    listener: (event: RedlockEventMap[K]) => void,
  ): () => void;
  on(
    type: keyof RedlockEventMap,
    listener: ((error: Error, event: RedlockErrorEvent) => void) | ((event: Event) => void),
  ): () => void {
    if (!EVENT_TYPES.has(type)) {
      throw new TypeError(
        `type must be one of ${[...EVENT_TYPES].join(", ")}, got ${describeValue(type)}`,
      );
    }
    if (typeof listener !== "function") {
      throw new TypeError(`listener must be a function, got ${describeValue(listener)}`);
    }
    const handler = type === "error"
      ? (event: Event) => {
        const e = event as RedlockErrorEvent;
        (listener as (error: Error, event: RedlockErrorEvent) => void)(e.error, e);
      }
      : listener as (event: Event) => void;
    this.addEventListener(type, handler);
    return () => this.removeEventListener(type, handler);
  }

  /**
   * Adds an event listener, as on any `EventTarget`; see
   * {@linkcode RedlockEventMap} for the events.
   *
   * @param type The event type.
   * @param listener The listener.
   * @param options The standard listener options.
   */
  override addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | AddEventListenerOptions,
  ): void {
    super.addEventListener(type, listener, options);
    const { once = false, signal } = typeof options === "object" ? options : {};
    // The platform drops these without calling removeEventListener(): the
    // list must not keep them, or events would be made for nobody.
    if (listener === null || signal?.aborted) return;
    let listeners = this.#listeners.get(type);
    if (listeners === undefined) this.#listeners.set(type, listeners = new Map());
    if (listeners.has(listener)) return; // added already: the platform ignored it
    let forget: EventListener | undefined;
    if (once) {
      forget = () => listeners.delete(listener);
      super.addEventListener(type, forget, { once: true });
    }
    listeners.set(listener, forget);
    signal?.addEventListener("abort", () => this.removeEventListener(type, listener), {
      once: true,
    });
  }

  /**
   * Removes an event listener, as on any `EventTarget`.
   *
   * @param type The event type.
   * @param listener The listener.
   * @param options The standard listener options.
   */
  override removeEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | EventListenerOptions,
  ): void {
    super.removeEventListener(type, listener, options);
    const listeners = this.#listeners.get(type);
    const forget = listeners?.get(listener);
    if (forget !== undefined) super.removeEventListener(type, forget);
    listeners?.delete(listener);
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

  /**
   * What the Redlock shows in logs: how many servers, the quorum and the
   * settings, never its clients (their options may hold passwords).
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
   * How `Deno.inspect` and `console.log` show the Redlock: its summary.
   *
   * @param inspect Deno's inspect function.
   * @param options Deno's inspect options.
   * @returns The summary, inspected.
   */
  [Symbol.for("Deno.customInspect")](
    inspect: (value: unknown, options: unknown) => string,
    options: unknown,
  ): string {
    return `Redlock ${inspect(this.toJSON(), options)}`;
  }

  /**
   * How Node's `util.inspect` and `console.log` show the Redlock: its summary.
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
    return `Redlock ${inspect(this.toJSON(), options)}`;
  }

  /** Checks an acquire's arguments; returns the request and its timeout. */
  #checkAcquire(
    resources: unknown,
    duration: unknown,
    options: AcquireOptions | undefined,
    known: ReadonlySet<string>,
  ): AcquireRequest {
    const keys = checkResources(resources);
    checkDuration(duration);
    const opts = checkCallOptions(options, known);
    const settings = checkSettings(opts, this.#settings, "options");
    const fencing = opts.fencing === true;
    this.#servers.checkSlots(fencing ? [...keys, ...keys.map(fenceKey)] : keys);
    const value = this.#nextValue(fencing ? 0 : duration as number);
    const request = {
      keys,
      duration: duration as number,
      settings,
      signal: opts.signal,
      fencing,
      value,
      timeout: opts.timeout,
    };
    return request;
  }

  /** Acquires, bounded by `timeout` when given, through the hooks and with the event. */
  #acquire(request: AcquireRequest, timeout: number | undefined): Promise<Lock> {
    const hooks = HOOKS.get(this);
    if (hooks === undefined) return this.#acquireNow(request, timeout);
    return hooks.acquire(request.keys, () => this.#acquireNow(request, timeout), request.signal);
  }

  #acquireNow(request: AcquireRequest, timeout: number | undefined): Promise<Lock> {
    const listened = this.#listened("acquired");
    const start = listened ? now() : 0;
    let acquiring: Promise<Lock>;
    if (timeout === undefined) acquiring = acquire(this.#context, request);
    else {
      const { signal, dispose } = deadline(request.signal, timeout);
      acquiring = acquire(this.#context, { ...request, signal }).finally(dispose);
    }
    if (!listened) return acquiring;
    return acquiring.then((lock) => {
      const waited = now() - start;
      this.dispatchEvent(new LockAcquiredEvent({ lock, waited, handoff: wasHandedOver(lock) }));
      return lock;
    });
  }

  /** Extends, through the hooks and with the events. */
  #extend(request: ExtendRequest): Promise<Lock> {
    const hooks = HOOKS.get(this);
    const run = () =>
      extend(this.#servers, this, request).then((lock) => {
        if (this.#listened("extended")) {
          this.dispatchEvent(new LockExtendedEvent(lock, request.lock));
        }
        return lock;
      }, (error) => {
        if (error instanceof LockLostError && this.#listened("lost")) {
          this.dispatchEvent(new LockLostEvent(request.lock, error));
        }
        throw error;
      });
    return hooks === undefined ? run() : hooks.extend(request.lock, run);
  }

  #listened(type: string): boolean {
    if (this.#listeners.size === 0) return false;
    const set = this.#listeners.get(type);
    return set !== undefined && set.size > 0;
  }

  /** Releases, through the hooks and with the event. */
  #release(lock: Lock, settings: Settings): Promise<ExecutionResult> {
    const hooks = HOOKS.get(this);
    if (hooks === undefined) return this.#releaseNow(lock, settings);
    return hooks.release(lock, () => this.#releaseNow(lock, settings));
  }

  /** One round of RELEASE: settles on a quorum. */
  #releaseNow(lock: Lock, settings: Settings): Promise<ExecutionResult> {
    const keys = lock.resources;
    const call = releaseCall(keys, lock.value, { reservation: settings.requestTimeout });
    const releasing = this.#servers.release(
      this.#servers.sender(RELEASE, call),
      settings.requestTimeout,
      keys,
    );
    if (!this.#listened("released")) return releasing;
    return releasing.then((result) => {
      this.dispatchEvent(new LockReleasedEvent(lock));
      return result;
    });
  }

  #inspect(
    keys: readonly string[],
    value: string,
    options: InspectOptions | undefined,
    what: string,
    everyServer = false,
  ): Promise<number | null> {
    const opts = checkCallOptions(options, KNOWN.inspect);
    const settings = checkSettings(opts, this.#settings, "options");
    this.#servers.checkSlots(keys);
    return inspect(this.#servers, {
      keys,
      value,
      settings,
      signal: opts.signal,
      what,
      everyServer,
    });
  }

  /**
   * Campaigns for leadership of `name` until `options.signal` aborts: waits
   * for the lock (woken by its release), runs `routine` while holding it with
   * automatic extension, then releases it and campaigns again. The routine's
   * signal aborts with a {@linkcode LockLostError} when leadership is lost,
   * at the latest when the lock's validity ends without a successful
   * extension (as in {@linkcode Redlock.using}); a routine's error is an
   * `"error"` event, and campaigning goes on after a backoff. See
   * {@linkcode lead}.
   *
   * @param name The name of the leadership (one Redis key).
   * @param duration The lease in ms, renewed before it ends.
   * @param routine The leader's work for one term; `context.term` is a
   * fencing token that strictly increases from leader to leader.
   * @param options Per-call overrides and the signal that stops campaigning
   * (an abort between a won campaign and its routine's start releases the
   * lock without running the routine).
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
   *   // (an abort that fired already never fires again: check it first)
   *   await new Promise((resolve) => {
   *     if (signal.aborted) resolve(undefined);
   *     else signal.addEventListener("abort", resolve, { once: true });
   *   });
   * }, { signal: shutdown.signal });
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
   * const rw = redlock.readWriteLock("doc:42");
   * await using _ = await rw.read(5_000);
   * ```
   */
  readWriteLock(name: string): ReadWriteLock {
    this.#shareContext();
    return new ReadWriteLock(this, name);
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
    this.#shareContext();
    return new Semaphore(this, name, options);
  }

  /** Lets the handles this Redlock makes use its servers, waiters and settings. */
  #shareContext(): void {
    if (CONTEXTS.has(this)) return;
    CONTEXTS.set(this, {
      servers: this.#servers,
      waiters: this.#waiters,
      settings: this.#settings,
      redlock: this,
      nextValue: (lease) => this.#nextValue(lease),
    });
  }

  /**
   * A new lock value: the Redlock's id (naming its wake channel), a count,
   * and the lease a release hands the key over for (0: reserve it only).
   */
  #nextValue(lease: number): string {
    return `${this.#id}:${(++this.#acquires).toString(36)}:${lease}`;
  }
}
