/**
 * Counting semaphores over N independent servers: at most `permits` valid
 * holders at once, whatever subset of servers each holder reached.
 *
 * @module
 */

import { ResourceLockedError } from "../api/errors.ts";
import type { Lock } from "../api/lock.ts";
import type { HandleAcquireOptions, HandleUsingOptions } from "../api/options.ts";
import type { UsingRoutine } from "../api/routine.ts";
import type { LockContext } from "../api/lock_context.ts";
import { permitsKey, slotKey } from "../protocol/semaphore_script.ts";
import { checkRequest, contendLock, type HandleRequest, oneAttempt } from "./contend.ts";
import { FastPermit, PermitAcquire } from "./permit_acquire.ts";
import { RETRY_FOREVER, withRetryCount } from "../operations/retry.ts";
import { extensionThreshold } from "../operations/auto_extend.ts";
import { extendLock } from "../operations/extend.ts";
import { using, usingArguments } from "../operations/using.ts";
import { checkKeys, KNOWN } from "../api/settings.ts";
import { checkNumber, checkResource, describeValue } from "../util/validate.ts";

export { PermitsMismatchError } from "./permit_acquire.ts";

/** The largest number of permits: each acquire reads every slot. */
export const MAX_PERMITS = 1_000;

/** Options of {@linkcode Redlock.semaphore}. */
export interface SemaphoreOptions {
  /**
   * How many holders at most: an integer from 1 to 1000. Every holder of
   * one name must use the same number.
   */
  permits: number;
}

/** Options of a semaphore's `acquire()` and `tryAcquire()`. */
export interface SemaphoreAcquireOptions extends HandleAcquireOptions {
  /**
   * How many permits to take, all or none: an integer from 1 to the
   * semaphore's `permits`.
   *
   * @default {1}
   */
  permits?: number;
}

/** Options of a semaphore's `using()`. */
export interface SemaphoreUsingOptions extends HandleUsingOptions {
  /**
   * How many permits to take, all or none: an integer from 1 to the
   * semaphore's `permits`.
   *
   * @default {1}
   */
  permits?: number;
}

/** The option names of a semaphore's acquires: a handle's and `permits`. */
const KNOWN_ACQUIRE: ReadonlySet<string> = new Set([...KNOWN.handle, "permits"]);
const KNOWN_USING: ReadonlySet<string> = new Set([...KNOWN.handleUsing, "permits"]);

/**
 * A counting semaphore named `name` over a Redlock's servers; made by
 * `redlock.semaphore(name, { permits })`, it sends nothing until asked. It
 * is `permits` slots, each a Redlock mutex; a permit is one slot held on a
 * quorum, so at most `permits` holders hold at once, whatever servers each
 * reached. A permit is a plain {@linkcode Lock} of its Redlock: it
 * extends, releases and `await using`s as one.
 *
 * @example Four renders at a time
 * ```ts no-eval
 * import { Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * const renders = redlock.semaphore("pdf-render", { permits: 4 });
 * await using _permit = await renders.acquire(10_000, { timeout: 5_000 });
 * ```
 */
export class Semaphore {
  /** The semaphore's name; its keys share the name's hash tag (or the name as one). */
  readonly name: string;
  /** How many holders at most. */
  readonly permits: number;
  readonly #context: LockContext;
  /** What its acquires' errors call it. */
  readonly #what: string;
  /** When its acquires may take a slot by `SET NX` alone, and which. */
  readonly #fast = new FastPermit();

  /**
   * Made by `redlock.semaphore(name, { permits })`.
   *
   * @param context What the handle needs of its Redlock.
   * @param name The semaphore's name: a non-empty string.
   * @param options The number of permits.
   * @throws {TypeError} When `name` is no string, `options` no object, or `permits` no number.
   * @throws {RangeError} When `name` is empty or `permits` no integer from 1 to 1000.
   * @ignore
   */
  constructor(context: LockContext, name: string, options: SemaphoreOptions) {
    this.#context = context;
    this.name = checkResource(name, "name");
    checkKeys(options, KNOWN.semaphore, "options");
    if (options.permits === undefined) {
      throw new TypeError("options.permits must be given: how many holders at most");
    }
    this.permits = checkNumber(options.permits, "options.permits", {
      min: 1,
      below: MAX_PERMITS + 1,
      integer: true,
    });
    this.#context.servers.checkSlots([permitsKey(name), slotKey(name, 0)]);
    this.#what = `a permit of ${this}`;
  }

  /**
   * Takes a permit (or `options.permits` of them, all or none) for
   * `duration` ms, retrying while too few are free; waiting acquires are
   * served first come, first served, whatever number each asks for.
   *
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides, a signal, a timeout and how many permits.
   * @returns The permit: a lock on one slot (on `permits` slots for several).
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {PermitsMismatchError} When the holders use another number of permits.
   * @throws {ResourceLockedError} When retries ran out while every permit was held.
   * @throws {ExecutionError} When retries ran out for want of a quorum of servers.
   *
   * @example Taking a permit
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const permit = await redlock.semaphore("pdf", { permits: 4 }).acquire(10_000);
   * await permit.release();
   * ```
   */
  async acquire(duration: number, options?: SemaphoreAcquireOptions): Promise<Lock> {
    const request = checkRequest(this.#context, duration, options, KNOWN_ACQUIRE);
    return await this.#contend(request, this.#count(options));
  }

  /**
   * Makes one attempt to take a permit (or `options.permits`, all or none).
   *
   * @param duration The lease in ms.
   * @param options Per-call overrides (retry settings are ignored) and how many permits.
   * @returns The permit, or `null` when too few are free (or others wait for them).
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {PermitsMismatchError} When the holders use another number of permits.
   * @throws {ExecutionError} When too few servers answered.
   *
   * @example Rendering only if a permit is free
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * const permit = await redlock.semaphore("pdf", { permits: 4 }).tryAcquire(10_000);
   * ```
   */
  async tryAcquire(duration: number, options?: SemaphoreAcquireOptions): Promise<Lock | null> {
    const request = checkRequest(this.#context, duration, options, KNOWN_ACQUIRE);
    const count = this.#count(options);
    try {
      return await this.#contend(oneAttempt(request), count);
    } catch (error) {
      if (error instanceof ResourceLockedError) return null;
      throw error;
    }
  }

  /**
   * Takes a permit, runs `routine` while extending it, and releases it
   * when the routine settles; the routine's signal aborts when it is lost,
   * at the latest when its validity ends without a successful extension.
   *
   * @param duration The lease in ms, renewed before it ends.
   * @param routine The work; gets a signal and the current permit.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When no permit could be taken.
   *
   * @example Rendering under a permit
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await redlock.semaphore("pdf", { permits: 4 }).using(10_000, (signal) => {
   *   signal.throwIfAborted();
   * });
   * ```
   */
  using<T>(duration: number, routine: UsingRoutine<T>): Promise<T>;
  /**
   * Takes a permit (or `options.permits`) with `options`, runs `routine`
   * while extending it, and releases it when the routine settles.
   *
   * @param duration The lease in ms, renewed before it ends.
   * @param options Per-call overrides and how many permits; `signal` also aborts the routine's signal.
   * @param routine The work; gets a signal and the current permit.
   * @returns What the routine returns.
   * @throws {TypeError} On a bad argument or an unknown option, before any request.
   * @throws {RangeError} On an out-of-range argument, before any request.
   * @throws {ExecutionError} When no permit could be taken.
   *
   * @example With a deadline
   * ```ts no-eval
   * import { Redlock } from "@x/redlock";
   * declare const redlock: Redlock;
   * await redlock.semaphore("pdf", { permits: 8 }).using(10_000, { permits: 3 }, () => {});
   * ```
   */
  using<T>(duration: number, options: SemaphoreUsingOptions, routine: UsingRoutine<T>): Promise<T>;
  async using<T>(
    duration: number,
    optionsOrRoutine: SemaphoreUsingOptions | UsingRoutine<T>,
    maybeRoutine?: UsingRoutine<T>,
  ): Promise<T> {
    const [options, routine] = usingArguments<SemaphoreUsingOptions, UsingRoutine<T>>(
      optionsOrRoutine,
      maybeRoutine,
    );
    const context = this.#context;
    const request = checkRequest(context, duration, options, KNOWN_USING);
    const count = this.#count(options);
    const { settings } = request;
    const extending = {
      duration,
      settings: withRetryCount(settings, RETRY_FOREVER),
      onlyIfLocked: true,
    };
    return await using(routine, {
      threshold: extensionThreshold(settings, duration),
      signal: options?.signal,
      acquire: () => this.#contend(request, count),
      extend: (lock, signal) =>
        extendLock(context, { ...extending, lock, signal, owner: context.owner }),
      // Through the permit, which then counts as released.
      release: (lock) => lock.release({ requestTimeout: settings.requestTimeout }),
      report: (error) => context.owner.reportError(error),
    });
  }

  /**
   * A one-line description.
   *
   * @returns E.g. `Semaphore("pdf", 4 permits)`.
   */
  toString(): string {
    return `Semaphore(${JSON.stringify(this.name)}, ${this.permits} permits)`;
  }

  #contend(request: HandleRequest, count: number): Promise<Lock> {
    const what = count === 1 ? this.#what : `${count} permits of ${this}`;
    const acquire = new PermitAcquire(this, what, this.#context, request, this.#fast, count);
    return contendLock(this.#context, request, acquire);
  }

  /** The permits an acquire asks for: `options.permits`, 1 by default. */
  #count(options: { readonly permits?: number } | undefined): number {
    const count = options?.permits;
    if (count === undefined) return 1;
    if (typeof count !== "number") {
      throw new TypeError(`options.permits must be a number, got ${describeValue(count)}`);
    }
    if (!Number.isInteger(count) || count < 1 || count > this.permits) {
      throw new RangeError(
        `options.permits must be an integer from 1 to ${this.permits} (the permits of ${this}), ` +
          `got ${count}`,
      );
    }
    return count;
  }
}
