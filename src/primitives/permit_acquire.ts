/**
 * One acquire of a semaphore's permits: the rounds that take `count`
 * slots, each on a quorum, all or none, and undo what a failed round took.
 *
 * @module
 */

import type { ExecutionStats } from "../api/errors.ts";
import { Lock } from "../api/lock.ts";
import { RELEASE, releaseCall } from "../protocol/scripts.ts";
import {
  ANY_SLOT,
  MISMATCH,
  SEM_ACQUIRE,
  SEM_LEAVE,
  semAcquireCall,
  semLeaveCall,
  slotKey,
} from "../protocol/semaphore_script.ts";
import { type Ballot, type Send, type Servers, toVote, type Vote } from "../quorum/servers.ts";
import { type Member, round, type Tally } from "../quorum/round.ts";
import type { LockContext } from "../api/lock_context.ts";
import { queueLife } from "../protocol/encoding.ts";
import type { Contender, HandleRequest, Refusal } from "./contend.ts";
import { markPermit } from "../operations/extend.ts";
import { mayRetry } from "../operations/retry.ts";
import { within } from "../util/delay.ts";
import { FastPath } from "../acquire/fast_path.ts";
import { drift, now, validUntil } from "../util/time.ts";
import { describeValue } from "../util/validate.ts";

/** The most permits whose acquires wait for a release notification (each slot is a channel). */
const NOTIFIED_PERMITS = 64;

/** A send with nothing to send. */
const settled: Send = () => Promise.resolve();

/** The semaphore an acquire is for: its name and number of permits. */
export interface SemaphoreShape {
  readonly name: string;
  readonly permits: number;
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
 * What a semaphore handle knows for its fast first attempts: a permit is
 * one slot held on a quorum, so a `SET NX` of one slot on a quorum is a
 * permit as the script's is. Skipping the script skips the check of the
 * stored number of permits, so it is tried only while the permits key
 * that the handle's last script grant found or wrote lives on (SEM_ACQUIRE
 * keeps it two leases past a grant): a holder with another number still
 * finds it there. The slot tried is the one the last permit got.
 */
export class FastPermit {
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

/**
 * One acquire of `count` permits. A round's votes name sets of slots: for
 * one permit the slot itself, for several an id this acquire gave the set
 * (see `#idOf`), so that a quorum agreeing on one
 * set is a quorum agreeing on one number.
 */
export class PermitAcquire implements Contender {
  readonly what: string;
  readonly resources: readonly string[];
  readonly #semaphore: SemaphoreShape;
  readonly #context: LockContext;
  readonly #servers: Servers;
  readonly #request: HandleRequest;
  readonly #fast: FastPermit;
  readonly #count: number;
  /** Its place in the wait queue: its start on this clock, or "" for one attempt. */
  readonly #ticket: string;
  readonly #attempts: ExecutionStats[] = [];
  /** The sets of slots the servers offered (several permits), by id. */
  readonly #sets: (readonly number[])[] = [];
  readonly #ids = new Map<string, number>();
  /** ms a queued value stays alive without another attempt. */
  #aliveFor = 0;
  /**
   * Per server, its latest SEM_ACQUIRE and whether the value may wait in its
   * queue: until that request's grant comes back (also when it times out).
   */
  readonly #queue = new Map<Member, { latest: number; queued: boolean }>();
  #sent = 0;

  constructor(
    semaphore: SemaphoreShape,
    what: string,
    context: LockContext,
    request: HandleRequest,
    fast: FastPermit,
    count: number,
  ) {
    this.what = what;
    this.resources = [semaphore.name];
    this.#semaphore = semaphore;
    this.#context = context;
    this.#servers = context.servers;
    this.#request = request;
    this.#fast = fast;
    this.#count = count;
    // one attempt (tryAcquire) never waits: it takes no place in the queue
    this.#ticket = mayRetry(request.settings, 1) ? (Date.now() + Math.random() / 2).toFixed(3) : "";
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
   * One attempt: a round for the lowest free `count` slots on each
   * server; when no quorum agrees on one set, a round on each set some
   * server offered, most offered first, until a quorum holds one. The
   * first attempt for one permit may try a round of `SET NX` of one slot
   * before (see FastPermit); its miss is no attempt.
   */
  async attempt(listening: boolean, sleep: number, signal: AbortSignal | undefined) {
    const servers = this.#servers;
    const { quorum } = servers;
    const { duration, settings } = this.#request;
    let fresh = this.#attempts.length === 0;
    // queued until the next attempt, with room for a late wake-up and slow requests
    this.#aliveFor = Math.ceil(2 * sleep + 4 * this.#timeout);
    const fast = !listening && fresh && this.#count === 1;
    if (fast && this.#fast.open(servers, duration, this.#timeout)) {
      const permit = await this.#fastAttempt(signal);
      if (permit !== undefined) return permit;
      fresh = false; // it may hold the slot it tried on some servers: SEM_ACQUIRE keeps it
    }
    let start = now();
    const stragglers = new Stragglers((members, keep) => this.#release(members, keep, true));
    const first = await round<Vote, [Ballot, Tally<Vote>]>(
      servers.members,
      this.#sender(undefined, { fresh, queueLife: listening ? queueLife(this.#timeout) : 0 }),
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
        const keys = this.#keys(slot);
        last = await servers.vote(this.#sender(slot), keys, this.#timeout, signal, start);
        this.#mismatch(last);
        this.#attempts.push(last.stats);
        votesFor = last.stats.votesFor;
      }
      const until = validUntil(start, duration, settings.driftFactor);
      if (votesFor.length >= quorum && until > last.end) {
        if (last !== first[0]) {
          this.#release(servers.members.filter((m) => !votesFor.includes(m.index)), slot, true);
        } else {
          // The first round settled once a quorum agreed: servers that had
          // not answered then are released as they answer, if they took another slot.
          const other = (m: Member) =>
            (answers.has(m.index) && answers.get(m.index) !== slot) || errors.has(m.index);
          this.#release(servers.members.filter(other), slot, true);
          stragglers.keep(slot);
        }
        if (this.#count === 1) this.#fast.granted(slot, start, duration, settings.driftFactor);
        return this.#permit(slot, until);
      }
    }
    // A server that refused holds no slot for the value (SEM_ACQUIRE drops
    // them); the rest may. The value stays queued for its next attempt.
    const { votesAgainst } = last.stats;
    const undone = this.#release(
      servers.members.filter((m) => !votesAgainst.isConflict(m.index)),
      -1,
      false,
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
    const servers = this.#servers;
    if (last === undefined) {
      await servers.everyAnswer(servers.members, this.#releaser(-1, true), this.#timeout);
      return;
    }
    const queuedOn = servers.members.filter((m) => this.#queuedOn(m));
    const left = queuedOn.length === 0
      ? undefined
      : servers.everyAnswer(queuedOn, this.#leaver(), this.#timeout);
    await Promise.all([within(last.undone, this.#timeout), left]);
  }

  /** The keys of the slots `id` names. */
  #keys(id: number): string[] {
    return this.#slotsOf(id).map((slot) => slotKey(this.#semaphore.name, slot));
  }

  /** The slots `id` names: the slot itself for one permit. */
  #slotsOf(id: number): readonly number[] {
    return this.#count === 1 ? [id] : this.#sets[id]!;
  }

  /** The id of a set of slots (a server's reply): the slot itself for one permit. */
  #idOf(reply: readonly unknown[], server: number): number {
    const slots = reply.map(Number);
    if (slots.length !== this.#count || !slots.every(Number.isInteger)) {
      throw new TypeError(`server ${server} sent an unexpected reply: ${describeValue(reply)}`);
    }
    if (this.#count === 1) return slots[0]!;
    const key = slots.join(",");
    let id = this.#ids.get(key);
    if (id === undefined) {
      id = this.#sets.push(slots) - 1;
      this.#ids.set(key, id);
    }
    return id;
  }

  get #timeout(): number {
    return this.#request.settings.requestTimeout;
  }

  #permit(slot: number, until: number): Lock {
    const permit = new Lock({
      owner: this.#context.owner,
      resources: this.#keys(slot),
      value: this.#request.value,
      attempts: this.#attempts,
      validUntil: until,
    });
    // SEM_EXTEND renews the permit's slots and the permits key.
    const { name, permits } = this.#semaphore;
    return markPermit(permit, { name, permits });
  }

  /**
   * SEM_ACQUIRE for the set `want` names, or any (a watcher's when
   * `queueLife` > 0; `fresh` in the first round, when the value holds no
   * slot); a set of slots replied becomes its id; a mismatch fails the
   * server's request with its error.
   */
  #sender(want: number | undefined, options?: { fresh: boolean; queueLife: number }): Send {
    const { name, permits } = this.#semaphore;
    const { value, duration } = this.#request;
    const call = semAcquireCall(name, permits, value, duration, {
      want: want === undefined ? ANY_SLOT : this.#slotsOf(want),
      count: this.#count,
      ticket: this.#ticket,
      aliveFor: this.#aliveFor,
      ...options,
    });
    const queues = this.#ticket !== "";
    return (m: Member) => {
      const sent = ++this.#sent;
      if (queues) this.#queue.set(m, { latest: sent, queued: true });
      return m.runner.evalScript(SEM_ACQUIRE, call.keys, call.args).then((reply) => {
        if (typeof reply === "number" && reply <= MISMATCH) {
          throw new PermitsMismatchError(name, permits, MISMATCH - reply, m.index);
        }
        // A grant takes the value out of the queue; a refusal leaves it in.
        const entry = this.#queue.get(m);
        if (entry?.latest === sent) entry.queued = typeof reply === "number" && reply < 0;
        return Array.isArray(reply) ? this.#idOf(reply, m.index) : reply;
      });
    };
  }

  /** Whether the value may wait in `member`'s queue. */
  #queuedOn(member: Member): boolean {
    return this.#queue.get(member)?.queued === true;
  }

  /** Throws the mismatch a server told of, having released what the round took. */
  #mismatch(ballot: Ballot): void {
    for (const error of ballot.stats.votesAgainst.values()) {
      if (error instanceof PermitsMismatchError) {
        this.#release(this.#servers.members, -1, true);
        throw error;
      }
    }
  }

  /**
   * Releases the value's slots (but those of the set `keep`) on `members`
   * without waiting, and when `leave`, takes it out of their wait queues;
   * the promise settles once they answered.
   */
  #release(members: readonly Member[], keep: number, leave: boolean): Promise<unknown> {
    if (members.length === 0) return Promise.resolve();
    return Promise.all(this.#servers.quietly(this.#releaser(keep, leave), members));
  }

  #releaser(keep: number, leave: boolean): Send {
    const { name, permits } = this.#semaphore;
    const kept = keep === -1 ? [] : this.#slotsOf(keep);
    const slots = [];
    for (let i = 0; i < permits; i++) if (!kept.includes(i)) slots.push(slotKey(name, i));
    // Keeping every slot (a grant of all permits) leaves nothing to release:
    // RELEASE with no keys is an error on the server.
    const release = slots.length === 0 ? undefined : this.#servers.sender(
      RELEASE,
      releaseCall(slots, this.#request.value, { reservation: 0 }),
    );
    const left = leave ? this.#leaver() : undefined;
    if (left === undefined) return release ?? settled;
    return (m: Member) => {
      if (!this.#queuedOn(m)) return release?.(m) ?? Promise.resolve();
      return release === undefined ? left(m) : Promise.all([release(m), left(m)]);
    };
  }

  /** SEM_LEAVE: out of the wait queue. */
  #leaver(): Send {
    return this.#servers.sender(SEM_LEAVE, semLeaveCall(this.#semaphore.name, this.#request.value));
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
