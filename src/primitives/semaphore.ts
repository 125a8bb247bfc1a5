/**
 * Counting semaphores over N independent servers: at most `permits` valid
 * holders at once, whatever subset of servers each holder reached.
 *
 * @module
 */

import { RETRY_FOREVER, withRetryCount } from "../operations/retry.ts";
import { type ExecutionStats, ResourceLockedError } from "../api/errors.ts";
import { Lock } from "../api/lock.ts";
import type { HandleAcquireOptions, HandleUsingOptions } from "../api/options.ts";
import type { UsingRoutine } from "../api/routine.ts";
import type { LockContext } from "../api/lock_context.ts";
import { RELEASE, releaseCall } from "../protocol/scripts.ts";
import { queueLife } from "../protocol/encoding.ts";
import {
  ANY_SLOT,
  MISMATCH,
  permitsKey,
  SEM_ACQUIRE,
  semAcquireCall,
  slotKey,
} from "../protocol/semaphore_script.ts";
import { type Ballot, type Send, type Servers, toVote, type Vote } from "../quorum/servers.ts";
import { type Member, round, type Tally } from "../quorum/round.ts";
import {
  checkRequest,
  type Contender,
  contendLock,
  type HandleRequest,
  oneAttempt,
  type Refusal,
} from "./contend.ts";
import { extensionThreshold } from "../operations/auto_extend.ts";
import { extendLock, markPermit } from "../operations/extend.ts";
import { using, usingArguments } from "../operations/using.ts";
import { checkKeys, KNOWN } from "../api/settings.ts";
import { within } from "../util/delay.ts";
import { FastPath } from "../acquire/fast_path.ts";
import { drift, now, validUntil } from "../util/time.ts";
import { checkNumber, checkResource } from "../util/validate.ts";

/** The largest number of permits: each acquire reads every slot. */
export const MAX_PERMITS = 1_000;

/** The most permits whose acquires wait for a release notification (each slot is a channel). */
const NOTIFIED_PERMITS = 64;

/** Options of {@linkcode Redlock.semaphore}. */
export interface SemaphoreOptions {
  /**
   * How many holders at most: an integer from 1 to 1000. Every holder of
   * one name must use the same number.
   */
  permits: number;
}

/**
 * The holders of a semaphore use another number of permits than this
 * acquire asked for (seen on one server, which refused it).
 *
 * @example Telling a misconfiguration
 * ```ts no-eval
 * import { PermitsMismatchError, Redlock } from "@x/redlock";
 * declare const redlock: Redlock;
 * try {
 *   await redlock.semaphore("pdf", { permits: 3 }).acquire(1_000);
 * } catch (error) {
 *   if (error instanceof PermitsMismatchError) console.log(error.permits, error.found);
 * }
 * ```
 */
export class PermitsMismatchError extends RangeError {
  /** `"PermitsMismatchError"`. */
  override readonly name = "PermitsMismatchError";
  /** The permits this acquire asked for. */
  readonly permits: number;
  /** The permits the holders use. */
  readonly found: number;
  /** The server that told. */
  readonly server: number;

  /**
   * Makes the error.
   *
   * @param name The semaphore's name.
   * @param permits The permits asked for.
   * @param found The permits the holders use.
   * @param server The server that told.
   */
  constructor(name: string, permits: number, found: number, server: number) {
    super(
      `semaphore ${JSON.stringify(name)} was asked for with permits ${permits}, ` +
        `but its holders use permits ${found} (server ${server}); every holder of one ` +
        "name must use the same number",
    );
    this.permits = permits;
    this.found = found;
    this.server = server;
  }
}

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
   * Takes a permit for `duration` ms, retrying while all are held (as
   * `acquire()` retries; it polls).
   *
   * @param duration The lease in ms: an integer from 1 to 2^31 − 1.
   * @param options Per-call overrides, a signal and a timeout.
   * @returns The permit: a lock on one slot.
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
  async acquire(duration: number, options?: HandleAcquireOptions): Promise<Lock> {
    return await this.#contend(checkRequest(this.#context, duration, options, KNOWN.handle));
  }

  /**
   * Makes one attempt to take a permit.
   *
   * @param duration The lease in ms.
   * @param options Per-call overrides (retry settings are ignored).
   * @returns The permit, or `null` when every permit is held.
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
  async tryAcquire(duration: number, options?: HandleAcquireOptions): Promise<Lock | null> {
    const request = checkRequest(this.#context, duration, options, KNOWN.handle);
    try {
      return await this.#contend(oneAttempt(request));
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
   * Takes a permit with `options`, runs `routine` while extending it, and
   * releases it when the routine settles.
   *
   * @param duration The lease in ms, renewed before it ends.
   * @param options Per-call overrides; `signal` also aborts the routine's signal.
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
   * await redlock.semaphore("pdf", { permits: 4 }).using(10_000, { timeout: 1_000 }, () => {});
   * ```
   */
  using<T>(duration: number, options: HandleUsingOptions, routine: UsingRoutine<T>): Promise<T>;
  async using<T>(
    duration: number,
    optionsOrRoutine: HandleUsingOptions | UsingRoutine<T>,
    maybeRoutine?: UsingRoutine<T>,
  ): Promise<T> {
    const [options, routine] = usingArguments<HandleUsingOptions, UsingRoutine<T>>(
      optionsOrRoutine,
      maybeRoutine,
    );
    const context = this.#context;
    const request = checkRequest(context, duration, options, KNOWN.handleUsing);
    const { settings } = request;
    const extending = {
      duration,
      settings: withRetryCount(settings, RETRY_FOREVER),
      onlyIfLocked: true,
    };
    return await using(routine, {
      threshold: extensionThreshold(settings, duration),
      signal: options?.signal,
      acquire: () => this.#contend(request),
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

  #contend(request: HandleRequest): Promise<Lock> {
    const acquire = new PermitAcquire(this, this.#what, this.#context, request, this.#fast);
    return contendLock(this.#context, request, acquire);
  }
}

/**
 * What a semaphore handle knows for its fast first attempts: a permit is
 * one slot held on a quorum, so a `SET NX` of one slot on a quorum is a
 * permit as the script's is. Skipping the script skips the check of the
 * stored number of permits, so it is tried only while the permits key
 * that the handle's last script grant found or wrote lives on (SEM_ACQUIRE
 * keeps it two leases past a grant): a holder with another number still
 * finds it there. The slot tried is the one the last permit got.
 */
class FastPermit {
  readonly path = new FastPath();
  /** The slot the last permit of the handle got. */
  slot = 0;
  /** Until when (monotonic) the permits key lives, as the last script grant left it. */
  #checkedUntil = -Infinity;

  /** Whether an acquire of `duration` may take a slot by SET NX: its lease ends first. */
  open(servers: Servers, duration: number, timeout: number): boolean {
    return now() + timeout + duration <= this.#checkedUntil && this.path.open(servers);
  }

  /** A script round that started at `start` granted slot `slot` for `duration` ms. */
  granted(slot: number, start: number, duration: number, driftFactor: number): void {
    this.slot = slot;
    const kept = 2 * duration;
    this.#checkedUntil = Math.max(this.#checkedUntil, start + kept - drift(kept, driftFactor));
  }
}

/** One acquire of a permit. */
class PermitAcquire implements Contender {
  readonly what: string;
  readonly resources: readonly string[];
  readonly #semaphore: Semaphore;
  readonly #context: LockContext;
  readonly #servers: Servers;
  readonly #request: HandleRequest;
  readonly #fast: FastPermit;
  readonly #attempts: ExecutionStats[] = [];

  constructor(
    semaphore: Semaphore,
    what: string,
    context: LockContext,
    request: HandleRequest,
    fast: FastPermit,
  ) {
    this.what = what;
    this.resources = [semaphore.name];
    this.#semaphore = semaphore;
    this.#context = context;
    this.#servers = context.servers;
    this.#request = request;
    this.#fast = fast;
  }

  /**
   * Woken by the release of any slot (see SEM_ACQUIRE's watcher), up to
   * NOTIFIED_PERMITS slots; more would cost as many subscriptions: it polls.
   */
  get channels(): readonly string[] | undefined {
    const { name, permits } = this.#semaphore;
    return permits <= NOTIFIED_PERMITS
      ? Array.from({ length: permits }, (_, i) => slotKey(name, i))
      : undefined;
  }

  /**
   * One attempt: a round for the lowest free slot on each server; when no
   * quorum agrees on one, a round on each slot some server offered, most
   * offered first, until a quorum holds one. The first may try a round of
   * `SET NX` of one slot before (see FastPermit); its miss is no attempt.
   */
  async attempt(listening: boolean, _sleep: number, signal: AbortSignal | undefined) {
    const servers = this.#servers;
    const { quorum } = servers;
    const { duration, settings } = this.#request;
    let fresh = this.#attempts.length === 0;
    if (!listening && fresh && this.#fast.open(servers, duration, this.#timeout)) {
      const permit = await this.#fastAttempt(signal);
      if (permit !== undefined) return permit;
      fresh = false; // it may hold the slot it tried on some servers: SEM_ACQUIRE keeps it
    }
    let start = now();
    const stragglers = new Stragglers((members, keep) => this.#release(members, keep));
    const first = await round<Vote, [Ballot, Tally<Vote>]>(
      servers.members,
      this.#sender(ANY_SLOT, { fresh, queueLife: listening ? queueLife(this.#timeout) : 0 }),
      {
        timeout: this.#timeout,
        start,
        signal,
        onError: servers.emit,
        done: ({ answers, errors }) =>
          answers.size + errors.size === servers.members.length || agreed(answers, quorum),
        late: stragglers.late,
        judge: (reply, member) => toVote(reply, member.index),
        settle: (tally) => [
          servers.ballot(tally, start),
          { answers: new Map(tally.answers), errors: new Map(tally.errors) },
        ],
      },
    );
    let [last] = first;
    this.#mismatch(last);
    this.#attempts.push(last.stats);
    const { answers, errors } = first[1];
    const candidates = offers(answers);
    for (const [i, [slot, offeredBy]] of candidates.entries()) {
      let votesFor: readonly number[] = offeredBy;
      if (i > 0 || offeredBy.length < quorum) {
        signal?.throwIfAborted();
        start = now();
        const keys = [slotKey(this.#semaphore.name, slot)];
        last = await servers.vote(this.#sender(slot), keys, this.#timeout, signal, start);
        this.#mismatch(last);
        this.#attempts.push(last.stats);
        votesFor = last.stats.votesFor;
      }
      const until = validUntil(start, duration, settings.driftFactor);
      if (votesFor.length >= quorum && until > last.end) {
        if (last !== first[0]) {
          this.#release(servers.members.filter((m) => !votesFor.includes(m.index)), slot);
        } else {
          // The first round settled once a quorum agreed: servers that had
          // not answered then are released as they answer, if they took another slot.
          const other = (m: Member) =>
            (answers.has(m.index) && answers.get(m.index) !== slot) || errors.has(m.index);
          this.#release(servers.members.filter(other), slot);
          stragglers.keep(slot);
        }
        this.#fast.granted(slot, start, duration, settings.driftFactor);
        return this.#permit(slot, until);
      }
    }
    // A server that refused holds no slot for the value (SEM_ACQUIRE for a
    // slot drops the others first); the rest may.
    const { votesAgainst } = last.stats;
    const undone = this.#release(
      servers.members.filter((m) => !votesAgainst.isConflict(m.index)),
      -1,
    );
    return { stats: last.stats, start, heldFor: last.heldFor, undone } satisfies Refusal;
  }

  /**
   * A round of `SET NX` of the slot the handle's last permit got: the
   * permit when a quorum set it in time; else undefined, and the script
   * round that follows takes over what this one set.
   */
  async #fastAttempt(signal: AbortSignal | undefined): Promise<Lock | undefined> {
    const { duration, settings, value } = this.#request;
    const { slot } = this.#fast;
    const key = slotKey(this.#semaphore.name, slot);
    const won = await this.#fast.path.attempt(this.#servers, {
      key,
      value,
      keys: [key],
      duration,
      driftFactor: settings.driftFactor,
      timeout: this.#timeout,
      signal,
    });
    if (won === undefined) return undefined;
    this.#attempts.push(won.stats);
    return this.#permit(slot, won.until);
  }

  async abandon(last?: Refusal): Promise<void> {
    if (last !== undefined) await within(last.undone, this.#timeout);
    else await this.#servers.everyAnswer(this.#servers.members, this.#releaser(-1), this.#timeout);
  }

  get #timeout(): number {
    return this.#request.settings.requestTimeout;
  }

  #permit(slot: number, until: number): Lock {
    const { name, permits } = this.#semaphore;
    const permit = new Lock({
      owner: this.#context.owner,
      resources: [slotKey(name, slot)],
      value: this.#request.value,
      attempts: this.#attempts,
      validUntil: until,
    });
    return markPermit(permit, { name, permits });
  }

  /**
   * SEM_ACQUIRE for `want` (a watcher's when `queueLife` > 0; `fresh` in
   * the first round, when the value holds no slot); a mismatch
   * fails the server's request with its error.
   */
  #sender(want: number, options?: { fresh: boolean; queueLife: number }): Send {
    const { name, permits } = this.#semaphore;
    const { value, duration } = this.#request;
    const call = semAcquireCall(name, permits, value, duration, want, options);
    return (m: Member) =>
      m.runner.evalScript(SEM_ACQUIRE, call.keys, call.args).then((reply) => {
        if (typeof reply === "number" && reply <= MISMATCH) {
          throw new PermitsMismatchError(name, permits, MISMATCH - reply, m.index);
        }
        return reply;
      });
  }

  /** Throws the mismatch a server told of, having released what the round took. */
  #mismatch(ballot: Ballot): void {
    for (const error of ballot.stats.votesAgainst.values()) {
      if (error instanceof PermitsMismatchError) {
        this.#release(this.#servers.members, -1);
        throw error;
      }
    }
  }

  /**
   * Releases the value's slots (but `keep`) on `members` without waiting;
   * the promise settles once they answered.
   */
  #release(members: readonly Member[], keep: number): Promise<unknown> {
    if (members.length === 0) return Promise.resolve();
    return Promise.all(this.#servers.quietly(this.#releaser(keep), members));
  }

  #releaser(keep: number): Send {
    const { name, permits } = this.#semaphore;
    const slots = [];
    for (let i = 0; i < permits; i++) if (i !== keep) slots.push(slotKey(name, i));
    return this.#servers.sender(
      RELEASE,
      releaseCall(slots, this.#request.value, { reservation: 0 }),
    );
  }
}

/**
 * The servers that answered a first round after it settled: once the
 * permit's slot is known, what each took besides it is released (at once,
 * or when it answers); until then their answers wait here.
 */
class Stragglers {
  readonly #answers = new Map<Member, Vote | undefined>();
  readonly #release: (members: readonly Member[], keep: number) => unknown;
  #slot: number | undefined;

  constructor(release: (members: readonly Member[], keep: number) => unknown) {
    this.#release = release;
  }

  /** A late answer of `member` (undefined: its request failed). */
  readonly late = (member: Member, vote: Vote | undefined): void => {
    if (this.#slot === undefined) this.#answers.set(member, vote);
    else if (vote !== this.#slot) this.#release([member], this.#slot);
  };

  /** The permit is `slot`. */
  keep(slot: number): void {
    this.#slot = slot;
    for (const [member, vote] of this.#answers) if (vote !== slot) this.#release([member], slot);
  }
}

/** Whether a quorum of `votes` offered one slot. */
function agreed(votes: ReadonlyMap<number, Vote>, quorum: number): boolean {
  for (const vote of votes.values()) {
    if (typeof vote !== "number") continue;
    let count = 0;
    for (const other of votes.values()) if (other === vote) count++;
    if (count >= quorum) return true;
  }
  return false;
}

/** Slots offered by servers, most offered first (the lower on a tie), with their servers. */
function offers(votes: ReadonlyMap<number, Vote>): [number, number[]][] {
  const bySlot = new Map<number, number[]>();
  for (const [server, vote] of votes) {
    if (typeof vote !== "number") continue;
    let list = bySlot.get(vote);
    if (list === undefined) bySlot.set(vote, list = []);
    list.push(server);
  }
  return [...bySlot].sort((a, b) => b[1].length - a[1].length || a[0] - b[0]);
}
