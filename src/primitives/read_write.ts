/**
 * Read-write locks over N independent servers: readers share, a writer
 * excludes readers and writers, and a waiting writer blocks new readers.
 *
 * @module
 */

import { RETRY_FOREVER, withRetryCount } from "../operations/retry.ts";
import { ExecutionError, type ExecutionResult, ResourceLockedError } from "../api/errors.ts";
import { checkLock, Lock, type LockOwner } from "../api/lock.ts";
import type {
  ExtendOptions,
  HandleAcquireOptions,
  HandleUsingOptions,
  ReleaseOptions,
} from "../api/options.ts";
import type { UsingRoutine } from "../api/routine.ts";
import type { LockContext } from "../api/lock_context.ts";
import {
  GATE,
  type Mode,
  RW_HOLDS,
  RW_HOW,
  RW_READ,
  RW_RELEASE,
  RW_RELEASE_MODE,
  RW_WRITE,
  rwCall,
  rwKeys,
  rwModeCall,
} from "../protocol/read_write_scripts.ts";
import type { Send, Servers } from "../quorum/servers.ts";
import { queueLife } from "../protocol/encoding.ts";
import {
  checkRequest,
  type Contender,
  contendLock,
  type HandleRequest,
  oneAttempt,
  type Refusal,
} from "./contend.ts";
import { extensionThreshold } from "../operations/auto_extend.ts";
import { extendLock } from "../operations/extend.ts";
import { using, usingArguments } from "../operations/using.ts";
import { FastPath } from "../acquire/fast_path.ts";
import {
  checkCallOptions,
  checkSettings,
  KNOWN,
  releaseSettings,
  type Settings,
} from "../api/settings.ts";
import { within } from "../util/delay.ts";
import { now, validUntil } from "../util/time.ts";
import { checkDuration, checkResource, describeValue } from "../util/validate.ts";

export type { Mode as ReadWriteMode };

/**
 * A read-write lock named `name` over a Redlock's servers; made by
 * `redlock.readWriteLock(name)`, it sends nothing until asked. Readers
 * share the lock; a writer excludes readers and writers; a writer that
 * waits blocks new readers, so writers do not starve. The locks it hands
 * out extend (keeping their mode), release and `await using` like plain
 * locks. Its keys are its own: `redlock.acquire(name)` does not exclude it.
 *
 * @example Readers and a writer
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * const rw = redlock.readWriteLock("doc:42");
 * {
 *   await using _ = await rw.read(5_000); // other readers may hold it too
 * }
 * await rw.using("write", 5_000, async (signal) => {
 *   signal.throwIfAborted(); // alone here
 * });
 * ```
 */
export class ReadWriteLock implements LockOwner {
  /** The lock's name; its keys share the name's hash tag (or the name as one). */
  readonly name: string;
  readonly #context: LockContext;
  readonly #keys: readonly string[];
  /** The keys, and the name as the hooks are told it. */
  readonly #names: HandleNames;
  /** The mode of each lock this handle made. */
  readonly #modes = new WeakMap<Lock, Mode>();
  /** Whether acquires try a plain `SET NX` of the writer's key first. */
  readonly #fast = new FastPath();

  /**
   * Made by `redlock.readWriteLock(name)`.
   *
   * @param context What the handle needs of its Redlock.
   * @param name The lock's name: a non-empty string.
   * @throws {TypeError} When `name` is no string.
   * @throws {RangeError} When `name` is empty.
   * @ignore
   */
  constructor(context: LockContext, name: string) {
    this.#context = context;
    this.name = checkResource(name, "name");
    this.#keys = rwKeys(name);
    this.#names = { keys: this.#keys, resources: Object.freeze([name]) };
    this.#context.servers.checkSlots(this.#keys);
  }

  /**
   * Takes a read lock, shared with other readers, retrying while a writer
   * holds the lock or waits for it (as `acquire()` retries).
   *
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides, a signal and a timeout.
   * @returns The read lock.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ResourceLockedError} When retries ran out while a writer kept it.
   * @throws {ExecutionError} When retries ran out for want of a quorum of servers.
   *
   * @example Reading
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await using _ = await redlock.readWriteLock("doc:42").read(5_000, { timeout: 1_000 });
   * ```
   */
  read(duration: number, options?: HandleAcquireOptions): Promise<Lock> {
    return this.#take("read", duration, options);
  }

  /**
   * Takes the write lock, which excludes readers and writers, retrying
   * while another holds it; while it waits, new readers are refused.
   *
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides, a signal and a timeout.
   * @returns The write lock.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ResourceLockedError} When retries ran out while others kept it.
   * @throws {ExecutionError} When retries ran out for want of a quorum of servers.
   *
   * @example Writing
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await using _ = await redlock.readWriteLock("doc:42").write(5_000);
   * ```
   */
  write(duration: number, options?: HandleAcquireOptions): Promise<Lock> {
    return this.#take("write", duration, options);
  }

  /**
   * Makes one attempt to take a read lock.
   *
   * @param duration The lease in ms.
   * @param options Per-call overrides (retry settings are ignored).
   * @returns The read lock, or `null` when a writer holds or waits.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When too few servers answered.
   *
   * @example Reading if nobody writes
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.readWriteLock("doc:42").tryRead(5_000);
   * ```
   */
  tryRead(duration: number, options?: HandleAcquireOptions): Promise<Lock | null> {
    return this.#try("read", duration, options);
  }

  /**
   * Makes one attempt to take the write lock.
   *
   * @param duration The lease in ms.
   * @param options Per-call overrides (retry settings are ignored).
   * @returns The write lock, or `null` when others hold it.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When too few servers answered.
   *
   * @example Writing if nobody else holds it
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.readWriteLock("doc:42").tryWrite(5_000);
   * ```
   */
  tryWrite(duration: number, options?: HandleAcquireOptions): Promise<Lock | null> {
    return this.#try("write", duration, options);
  }

  /**
   * Takes the lock in `mode`, runs `routine` while extending it, and
   * releases it when the routine settles; the routine's signal aborts when
   * the lock is lost, at the latest when its validity ends without a
   * successful extension.
   *
   * @param mode `"read"` or `"write"`.
   * @param duration The lease in ms, renewed before it ends.
   * @param routine The work; gets a signal and the current lock.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When the lock could not be taken.
   *
   * @example Reading under a short lease
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await redlock.readWriteLock("doc:42").using("read", 5_000, (signal) => {
   *   signal.throwIfAborted();
   * });
   * ```
   */
  using<T>(mode: Mode, duration: number, routine: UsingRoutine<T>): Promise<T>;
  /**
   * Takes the lock in `mode` with `options`, runs `routine` while
   * extending it, and releases it when the routine settles.
   *
   * @param mode `"read"` or `"write"`.
   * @param duration The lease in ms, renewed before it ends.
   * @param options Per-call overrides; `signal` also aborts the routine's signal.
   * @param routine The work; gets a signal and the current lock.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When the lock could not be taken.
   *
   * @example Writing with a deadline
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await redlock.readWriteLock("doc:42").using("write", 5_000, { timeout: 1_000 }, () => {});
   * ```
   */
  using<T>(
    mode: Mode,
    duration: number,
    options: HandleUsingOptions,
    routine: UsingRoutine<T>,
  ): Promise<T>;
  async using<T>(
    mode: Mode,
    duration: number,
    optionsOrRoutine: HandleUsingOptions | UsingRoutine<T>,
    maybeRoutine?: UsingRoutine<T>,
  ): Promise<T> {
    const [options, routine] = usingArguments<HandleUsingOptions, UsingRoutine<T>>(
      optionsOrRoutine,
      maybeRoutine,
    );
    checkMode(mode);
    const request = checkRequest(this.#context, duration, options, KNOWN.handleUsing);
    const settings = withRetryCount(request.settings, RETRY_FOREVER);
    return await using(routine, {
      threshold: extensionThreshold(request.settings, duration),
      signal: options?.signal,
      acquire: () => this.#contend(mode, request),
      extend: (lock, signal) => this.#extend(lock, duration, settings, true, signal),
      release: (lock) => this.#release(lock, request.settings),
      report: (error) => this.reportError(error),
    });
  }

  /**
   * Releases a lock this handle made, in its mode. A writer's release also
   * lifts its mark; a release that frees the lock wakes listening waiters.
   *
   * @param lock The lock.
   * @param options Per-call overrides.
   * @returns The stats of the release.
   * @throws {TypeError} When `lock` is not a lock of this handle, or an option is unknown.
   * @throws {ExecutionError} When a quorum of servers could not be reached.
   *
   * @example Releasing
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const rw = redlock.readWriteLock("doc:42");
   * await rw.release(await rw.read(1_000));
   * ```
   */
  release(lock: Lock, options?: ReleaseOptions): Promise<ExecutionResult> {
    let settings = this.#context.settings;
    try {
      this.#modeOf(lock);
      settings = releaseSettings(options, settings);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#release(lock, settings);
  }

  /**
   * Extends a lock this handle made to `duration` ms, in its mode; only
   * while it still holds on a quorum unless `onlyIfLocked` is false.
   *
   * @param lock The lock.
   * @param duration The new lease in ms.
   * @param options Per-call overrides.
   * @returns A new lock with the same value and mode.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {LockLostError} When the lock expired or is no longer held.
   * @throws {ExecutionError} When retries ran out for want of a quorum.
   *
   * @example Extending
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * let lock = await redlock.readWriteLock("doc:42").read(1_000);
   * lock = await lock.extend(5_000);
   * ```
   */
  async extend(lock: Lock, duration: number, options?: ExtendOptions): Promise<Lock> {
    this.#modeOf(lock);
    checkDuration(duration);
    const opts = checkCallOptions(options, KNOWN.handleExtend);
    const settings = checkSettings(opts, this.#context.settings, "options");
    return await this.#extend(lock, duration, settings, opts.onlyIfLocked ?? true, opts.signal);
  }

  /**
   * Whether a lock this handle made still holds on a quorum and has not expired.
   *
   * @param lock The lock.
   * @returns True while it holds.
   * @throws {TypeError} When `lock` is not a lock of this handle.
   * @throws {ExecutionError} When too few servers answered to tell.
   *
   * @example Checking
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const lock = await redlock.readWriteLock("doc:42").write(1_000);
   * console.log(await lock.isValid());
   * ```
   */
  async isValid(lock: Lock): Promise<boolean> {
    const mode = this.#modeOf(lock);
    if (lock.remainingTime <= 0) return false;
    const { servers, settings } = this.#context;
    const send = servers.sender(RW_HOLDS, rwModeCall(this.#keys, lock.value, mode));
    const ballot = await servers.vote(send, this.#keys, settings.requestTimeout, undefined);
    if (!ballot.ok && ballot.stats.votesAgainst.conflicts === 0) {
      throw new ExecutionError(`isValid(lock) of "${this.name}" did not reach a quorum`, [
        ballot.stats,
      ]);
    }
    return ballot.ok && lock.remainingTime > 0;
  }

  /**
   * Reports an error that cannot be thrown (a failed release after
   * `using()` or `await using`) as an `"error"` event of the Redlock.
   *
   * @param error The error.
   */
  reportError(error: unknown): void {
    this.#context.owner.reportError(error);
  }

  /**
   * What the handle shows in logs: its name.
   *
   * @returns E.g. `ReadWriteLock("doc:42")`.
   */
  toString(): string {
    return `ReadWriteLock(${JSON.stringify(this.name)})`;
  }

  async #take(mode: Mode, duration: number, options?: HandleAcquireOptions): Promise<Lock> {
    return await this.#contend(mode, checkRequest(this.#context, duration, options, KNOWN.handle));
  }

  async #try(mode: Mode, duration: number, options?: HandleAcquireOptions): Promise<Lock | null> {
    const request = checkRequest(this.#context, duration, options, KNOWN.handle);
    try {
      return await this.#contend(mode, oneAttempt(request));
    } catch (error) {
      if (error instanceof ResourceLockedError) return null;
      throw error;
    }
  }

  #contend(mode: Mode, request: HandleRequest): Promise<Lock> {
    const { servers } = this.#context;
    const acquire = new RwAcquire(servers, this.#names, request, mode, this.#fast, (lock) => {
      const made = new Lock({ ...lock, owner: this, resources: [this.name] });
      this.#modes.set(made, mode);
      return made;
    });
    return contendLock(this.#context, request, acquire);
  }

  #release(lock: Lock, settings: Settings): Promise<ExecutionResult> {
    const { servers, lifecycle } = this.#context;
    const send = releaser(servers, this.#keys, lock.value, this.#modes.get(lock)!);
    return lifecycle.release(
      lock,
      () => servers.release(send, settings.requestTimeout, [this.name]),
    );
  }

  async #extend(
    lock: Lock,
    duration: number,
    settings: Settings,
    onlyIfLocked: boolean,
    signal: AbortSignal | undefined,
  ): Promise<Lock> {
    const mode = this.#modes.get(lock)!;
    const { servers } = this.#context;
    const call = rwCall(this.#keys, lock.value, {
      duration,
      how: onlyIfLocked ? RW_HOW.extend : RW_HOW.extendOrTake,
      watchLife: 0,
      markLife: 1,
      marked: true,
    });
    const send = servers.sender(mode === "read" ? RW_READ : RW_WRITE, call);
    const next = await extendLock(this.#context, {
      lock,
      duration,
      settings,
      onlyIfLocked,
      signal,
      owner: this,
      send,
    });
    this.#modes.set(next, mode);
    return next;
  }

  #modeOf(lock: Lock): Mode {
    checkLock(lock);
    const mode = this.#modes.get(lock);
    if (mode === undefined) {
      throw new TypeError(`lock was not made by ${this}: release and extend it through its owner`);
    }
    return mode;
  }
}

function checkMode(mode: unknown): asserts mode is Mode {
  if (mode !== "read" && mode !== "write") {
    throw new TypeError(`mode must be "read" or "write", got ${describeValue(mode)}`);
  }
}

/** RW_RELEASE of the value's lock in `mode`; `undo` keeps a waiting writer's mark. */
function releaser(
  servers: Servers,
  keys: readonly string[],
  value: string,
  mode: Mode,
  undo = false,
): Send {
  const how = mode === "read"
    ? RW_RELEASE_MODE.read
    : undo
    ? RW_RELEASE_MODE.undoWrite
    : RW_RELEASE_MODE.write;
  return servers.sender(RW_RELEASE, rwModeCall(keys, value, how));
}

/** A handle's keys, and its name as the hooks are told it. */
interface HandleNames {
  readonly keys: readonly string[];
  readonly resources: readonly string[];
}

/** What a lock is made of before its handle names it. */
type LockParts = Omit<ConstructorParameters<typeof Lock>[0], "owner" | "resources">;

/**
 * One read or write acquire: each attempt is one round of READ or WRITE;
 * the first may try a round of `SET NX` of the writer's key before it.
 */
class RwAcquire implements Contender {
  readonly channels: readonly string[];
  readonly resources: readonly string[];
  readonly what: string;
  readonly #servers: Servers;
  readonly #keys: readonly string[];
  readonly #request: HandleRequest;
  readonly #mode: Mode;
  readonly #fast: FastPath;
  readonly #make: (parts: LockParts) => Lock;
  readonly #attempts: Refusal["stats"][] = [];

  constructor(
    servers: Servers,
    names: HandleNames,
    request: HandleRequest,
    mode: Mode,
    fast: FastPath,
    make: (parts: LockParts) => Lock,
  ) {
    const { keys } = names;
    this.#servers = servers;
    this.#keys = keys;
    this.resources = names.resources;
    this.#request = request;
    this.#mode = mode;
    this.#fast = fast;
    this.#make = make;
    // A reader waits for the writer's key or mark to go; a writer also for
    // the last reader to leave, which RW_RELEASE announces apart.
    this.channels = mode === "read" ? [keys[0]!] : [keys[0]!, keys[1]!];
    this.what = `${mode} lock ${JSON.stringify(keys[0])}`;
  }

  async attempt(listening: boolean, sleep: number, signal: AbortSignal | undefined) {
    const { duration, settings, value } = this.#request;
    const servers = this.#servers;
    if (!listening && this.#attempts.length === 0 && this.#fast.open(servers)) {
      const lock = await this.#fastAttempt(signal);
      if (lock !== undefined) return lock;
    }
    const timeout = settings.requestTimeout;
    const call = rwCall(this.#keys, value, {
      duration,
      how: RW_HOW.acquire,
      watchLife: listening ? queueLife(timeout) : 0,
      markLife: sleep + 2 * timeout,
      marked: this.#attempts.length > 0,
    });
    const start = now();
    const send = servers.sender(this.#mode === "read" ? RW_READ : RW_WRITE, call);
    const ballot = await servers.vote(send, this.#keys, timeout, signal, start);
    this.#attempts.push(ballot.stats);
    const until = validUntil(start, duration, settings.driftFactor);
    if (ballot.ok && until > ballot.end) {
      return this.#make({ value, attempts: this.#attempts, validUntil: until });
    }
    const { votesAgainst } = ballot.stats;
    const taken = servers.members.filter((m) => !votesAgainst.isConflict(m.index));
    const undone = Promise.all(servers.quietly(this.#releaser(true), taken));
    return { stats: ballot.stats, start, heldFor: ballot.heldFor, undone };
  }

  /**
   * A round of `SET NX` of the writer's key: a writer's value, or a lone
   * reader's. The lock when a quorum set it in time; else (it was held
   * somewhere) undefined, and the script round that follows takes over
   * what this one set (READ and WRITE renew the value's own key).
   */
  async #fastAttempt(signal: AbortSignal | undefined): Promise<Lock | undefined> {
    const { duration, settings, value } = this.#request;
    const [writer] = this.#keys;
    const won = await this.#fast.attempt(this.#servers, {
      key: writer!,
      value: this.#mode === "read" ? GATE.lone + value : value,
      keys: this.#keys,
      duration,
      driftFactor: settings.driftFactor,
      timeout: settings.requestTimeout,
      signal,
    });
    if (won === undefined) return undefined;
    this.#attempts.push(won.stats);
    return this.#make({ value, attempts: this.#attempts, validUntil: won.until });
  }

  async abandon(last?: Refusal): Promise<void> {
    const servers = this.#servers;
    const timeout = this.#request.settings.requestTimeout;
    // A reader that gave up holds nothing its last attempt did not undo; a
    // writer also has its mark to lift, wherever it was refused.
    if (last !== undefined && this.#mode === "read") await within(last.undone, timeout);
    else await servers.everyAnswer(servers.members, this.#releaser(), timeout);
  }

  #releaser(undo = false): Send {
    return releaser(this.#servers, this.#keys, this.#request.value, this.#mode, undo);
  }
}
