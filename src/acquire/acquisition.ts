/**
 * The acquire path: the lean first attempt, and the state machine every
 * later attempt goes through (retries, the wait queue, handoffs, fencing,
 * giving up).
 */

import { ExecutionError, ResourceLockedError } from "../api/errors.ts";
import { Lock, type LockInit, type LockOwner } from "../api/lock.ts";
import {
  ACQUIRE,
  acquireCall,
  NO_SEAT,
  RELEASE,
  RELEASE_MODE,
  releaseCall,
  type ReleaseMode,
  type ReleaseTerms,
  type Seat,
} from "../protocol/scripts.ts";
import {
  type Ballot,
  type Send,
  type Servers,
  show,
  toNumber,
  type Vote,
} from "../quorum/servers.ts";
import type { Listening, Sleeper, Waiters } from "../wait/waiters.ts";
import type { Member, Tally } from "../quorum/round.ts";
import { Conflict, VotesAgainst } from "../quorum/votes.ts";
import { AttemptLog } from "./attempts.ts";
import { type Held, setIfAbsent, setIfAbsentVote } from "./fast_path.ts";
import { fence } from "../operations/extend.ts";
import { retryWait, type Settings } from "../api/settings.ts";
import { delay, within } from "../util/delay.ts";
import { now, validUntil } from "../util/time.ts";

/** What an acquire needs of its Redlock. */
export interface AcquireContext {
  readonly servers: Servers;
  readonly waiters: Waiters;
  /** What the locks delegate their release and extension to. */
  readonly owner: LockOwner;
}

/** One acquire's checked arguments. */
export interface AcquireRequest {
  readonly keys: readonly string[];
  readonly duration: number;
  readonly settings: Settings;
  readonly signal: AbortSignal | undefined;
  readonly fencing: boolean;
  /** ms the whole acquire may take (the caller's `timeout`). */
  readonly timeout: number | undefined;
  /**
   * Unique: the Redlock's id (which names the channel that wakes the acquire
   * when it queues), a count, and the lease a release hands the key to it
   * for (0: only reserve it, as a fencing token needs the acquire script).
   */
  readonly value: string;
}

/** Locks that a release handed over (no round of requests took them). */
const handedOver = new WeakSet<Lock>();

/** Whether a release handed `lock` over to its acquire. */
export function wasHandedOver(lock: Lock): boolean {
  return handedOver.has(lock);
}

/** An attempt's round: when it started and how the servers voted. */
interface Attempt {
  readonly start: number;
  readonly ballot: Ballot;
}

/**
 * Acquires a lock. The first attempt is kept lean for the usual case: one
 * round, and the lock when it succeeds. Anything else (a conflict, too few
 * servers, a fencing token to confirm, a queue to join) goes on in an
 * {@linkcode Acquisition}, which takes that round as its first attempt.
 */
export function acquire(context: AcquireContext, request: AcquireRequest): Promise<Lock> {
  const { keys, duration, settings, signal, fencing } = request;
  if (signal?.aborted) return Promise.reject(signal.reason);
  if (queueable(request) && context.waiters.isHot(keys[0]!)) {
    // An acquire of this Redlock queued for the resource just now, so it is
    // likely still contended: queue at once.
    return new Acquisition(context, request).run(undefined);
  }
  const { servers } = context;
  const start = now();
  const plain = setsIfAbsent(servers, request)
    ? setIfAbsentVote(keys[0]!, request.value, duration, holderTtl(keys[0]!))
    : undefined;
  const send = plain?.send ??
    servers.sender(ACQUIRE, acquireCall(keys, request.value, terms(request, NO_SEAT)));
  // The lock is made as the round settles, without a `then` of the round.
  return servers.decide(send, {
    keys,
    timeout: settings.requestTimeout,
    signal,
    start,
    judge: plain?.judge,
    decide: (ballot) => {
      const until = validUntil(start, duration, settings.driftFactor);
      if (!fencing && ballot.ok && until > ballot.end) {
        return newLock(context.owner, request, Object.freeze([ballot.stats]), until, undefined);
      }
      return new Acquisition(context, request).run({ start, ballot });
    },
    aborted: () => abandon(servers, request),
  });
}

/** Whether an acquire waits in the resource's queue when it is held (one resource, notify). */
function queueable({ settings, keys }: AcquireRequest): boolean {
  return settings.wait === "notify" && keys.length === 1;
}

/** Whether an acquire may take its free resource by a plain SET NX (see `_fast_path.ts`). */
function setsIfAbsent(servers: Servers, { fencing, keys }: AcquireRequest): boolean {
  return servers.plain && !fencing && keys.length === 1;
}

/** What `#wait()` returns when the acquire sleeps in the queue until `woken()`. */
const NAPPING = Symbol("napping");

/**
 * Every attempt after the first until the lock is had or given up: the
 * state of one acquire, each change of it in one method. Asleep in a wait
 * queue, an acquire is only this object (no suspended call): a release's
 * message or the fallback time wakes it (`woken()`), and it takes its
 * next turn.
 */
class Acquisition implements Sleeper {
  readonly #context: AcquireContext;
  readonly #request: AcquireRequest;
  readonly #attempts: AttemptLog;
  /** Settle the promise `run()` returned. */
  #resolve!: (lock: Lock) => void;
  #reject!: (reason: unknown) => void;
  /** How many rounds this acquire sent (the lean first attempt's not counted). */
  #rounds = 0;
  /** Where this acquire waits when a resource is held. */
  #seat: Seat = NO_SEAT;
  /**
   * Whether the next attempt sends a plain SET NX (see `#sender()`): while
   * the one resource looks free and no fencing token is asked for.
   */
  #setIfAbsent: boolean;
  /** Whether the wait queues may still hold this acquire's value. */
  #queued = false;
  #listening: Listening | undefined;
  #granted = false;
  /**
   * Servers this acquire sent a release to, and whether it answered: what
   * they hand it later may be gone (see `#join()`).
   */
  #releasedTo: Map<number, Promise<boolean>> | undefined;
  /** When the first attempt in the queue started: no server queued the value before. */
  #queuedAt: number | undefined;
  /** When the sleep in the queue began. */
  #napStart = 0;
  /**
   * ms of sleep earned and not yet slept: each failed attempt earns its
   * retry wait, so that however a release-notified acquire spreads its
   * sleeps, it sleeps no longer in all than a polling one would.
   */
  #allowance: number;

  constructor(context: AcquireContext, request: AcquireRequest) {
    this.#context = context;
    this.#request = request;
    this.#attempts = new AttemptLog(context.servers.members.length, context.servers.quorum);
    this.#allowance = request.settings.retryCount === -1 ? Infinity : 0;
    this.#setIfAbsent = setsIfAbsent(this.#servers, request);
  }

  get #servers(): Servers {
    return this.#context.servers;
  }

  /** Runs attempts after `first` (all of them, queued at once, when there is none). */
  run(first: Attempt | undefined): Promise<Lock> {
    const result = new Promise<Lock>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    // Only the compact form of `first` is kept.
    this.#next(first && kept(first));
    return result;
  }

  /**
   * Makes attempts until the acquire has the lock, gives up, or sleeps in
   * the queue: then `woken()` takes the next turn.
   */
  async #turn(first: Attempt | undefined): Promise<void> {
    try {
      const starting = this.#attempts.length === 0;
      if (starting && first === undefined && queueable(this.#request)) await this.#join();
      for (;;) {
        const { start, ballot } = first ?? await this.#attempt();
        first = undefined;
        this.#attempts.push(ballot.stats);
        const n = this.#attempts.length;
        if (this.#seat.kind === "queued") this.#queuedAt ??= start;
        const lock = await this.#grant(start, ballot);
        if (lock !== undefined) return this.#end(lock);
        const taken = this.#partial(ballot);
        const { retryCount } = this.#request.settings;
        if (retryCount !== -1 && n > retryCount) return await this.#giveUp(ballot, taken);
        this.#undo(taken, ballot);
        const next = await this.#wait(n, start, ballot);
        if (next === NAPPING) return;
        if (next !== undefined) return this.#end(next);
      }
    } catch (error) {
      this.#end(undefined, error);
    }
  }

  /** A release woke the queued acquire, or its time to ask again came. */
  woken(): void {
    this.#allowance -= now() - this.#napStart;
    // In a microtask, as a promise's continuation would run: not inside a message's handler.
    queueMicrotask(() => this.#resume());
  }

  /** After a sleep in the queue: the lock when a release handed it over, else the next turn. */
  #resume(): void {
    let lock: Lock | undefined;
    try {
      lock = this.#handoff();
    } catch (error) {
      return this.#end(undefined, error);
    }
    if (lock !== undefined) this.#end(lock);
    else this.#next(undefined);
  }

  /** Takes the next turn; whatever goes wrong settles the acquire (nobody awaits the turn). */
  #next(first: Attempt | undefined): void {
    this.#turn(first).catch((error) => this.#reject(error));
  }

  /** The signal aborted the sleep in the queue. */
  aborted(reason: unknown): void {
    this.#end(undefined, reason);
  }

  /**
   * Settles the acquire with `lock`, or else `error`, once it left the
   * queues and ended its interest in releases.
   */
  #end(lock: Lock | undefined, error?: unknown): void {
    try {
      this.#leave(this.#servers.members);
      this.#listening?.done();
    } catch (failure) {
      // Only a broken client throws here; the acquire settles all the same, and a lock it got
      // is let go rather than left to its lease.
      if (lock !== undefined) {
        this.#servers.quietly(this.#releaser(RELEASE_MODE.release), this.#servers.members);
      }
      return this.#reject(failure);
    }
    if (lock !== undefined) this.#resolve(lock);
    else this.#reject(error);
  }

  /** One round of votes; aborted mid-round, it releases whatever lands behind it. */
  async #attempt(): Promise<Attempt> {
    const { keys, settings, signal } = this.#request;
    const start = now();
    const round = ++this.#rounds;
    // In the queue, a server that answers after the round settled is dealt with by `#late()`.
    const late = this.#seat.kind === "queued"
      ? (member: Member, vote: Vote | undefined, tally: Tally<Vote>) =>
        this.#late(member, vote, tally, round)
      : undefined;
    try {
      const ballot = await this.#servers.vote(
        this.#sender(),
        keys,
        settings.requestTimeout,
        signal,
        start,
        late,
      );
      return kept({ start, ballot });
    } catch (error) {
      abandon(this.#servers, this.#request);
      this.#queued = false;
      throw error;
    }
  }

  /** The lock, when a quorum voted for in time (and, with fencing, confirmed the token). */
  async #grant(start: number, ballot: Ballot): Promise<Lock | undefined> {
    const { keys, duration, settings, fencing } = this.#request;
    const until = validUntil(start, duration, settings.driftFactor);
    if (!ballot.ok || until <= ballot.end) return undefined;
    if (fencing) {
      const token = await fence(this.#servers, keys, ballot.token, until, settings.requestTimeout);
      const { signal } = this.#request;
      if (signal?.aborted) {
        // Aborted while the token was confirmed: the keys are let go, as mid-round.
        abandon(this.#servers, this.#request);
        this.#queued = false;
        throw signal.reason;
      }
      if (token === undefined || until <= now()) return undefined;
    }
    // The servers that took the lock dropped the queue entry; tell the others,
    // also those that had not answered (a release runs after the acquire on
    // its connection), keeping what they took.
    const { votesFor } = ballot.stats;
    if (this.#queued) {
      this.#leave(this.#servers.members.filter((m) => !votesFor.includes(m.index)), true);
    }
    return this.#lock(until, fencing ? ballot.token : undefined);
  }

  #lock(until: number, token: number | undefined): Lock {
    this.#granted = true;
    const log = this.#attempts;
    return newLock(this.#context.owner, this.#request, () => log.list(), until, token);
  }

  /**
   * The servers where a failed attempt may have taken keys: every one that
   * did not answer with a conflict. (In the queue, one that has not answered
   * yet is dealt with by `#late()`, which keeps the place there.)
   */
  #partial(ballot: Ballot): Member[] {
    const { votesFor, votesAgainst } = ballot.stats;
    const queued = this.#seat.kind === "queued";
    return this.#servers.members.filter((m) =>
      !votesAgainst.isConflict(m.index) &&
      (!queued || votesFor.includes(m.index) || votesAgainst.has(m.index))
    );
  }

  /**
   * Releases a partial (or too slow) lock where it may have landed; requests
   * on one connection run in order, so the release lands after the acquire.
   */
  #undo(taken: readonly Member[], ballot: Ballot): void {
    const { votesFor, votesAgainst } = ballot.stats;
    const mode = this.#seat.kind === "queued"
      ? this.#stayMode(votesFor.length, votesAgainst.conflicts)
      : RELEASE_MODE.release;
    const sent = this.#servers.quietly(this.#releaser(mode), taken);
    if (taken.length > 0) this.#releasedTo ??= new Map();
    taken.forEach((m, i) => this.#releasedTo!.set(m.index, sent[i]!));
  }

  /**
   * How a queued acquire lets go of what a failed attempt took: it gives
   * way (keeping a key nobody queued is ahead for) when the servers that
   * took it and those held by another make a quorum, as they do when
   * waiters were handed different servers; else server errors stood in the
   * way, and keeping keys it cannot make a quorum of would stall the next
   * in line, so it frees them.
   */
  #stayMode(took: number, conflicts: number): ReleaseMode {
    return took + conflicts >= this.#servers.quorum ? RELEASE_MODE.giveWay : RELEASE_MODE.keepPlace;
  }

  /** Retries ran out: rejects once the release has answered (or timed out). */
  async #giveUp(ballot: Ballot, taken: readonly Member[]): Promise<never> {
    const { keys, settings } = this.#request;
    const servers = this.#servers;
    await servers.everyAnswer(
      this.#queued ? servers.members : taken,
      this.#releaser(RELEASE_MODE.release),
      settings.requestTimeout,
    );
    this.#queued = false;
    // Another holder kept it unless server errors alone made a quorum impossible.
    const { votesAgainst } = ballot.stats;
    const errors = votesAgainst.size - votesAgainst.conflicts;
    const held = votesAgainst.conflicts > 0 &&
      errors <= servers.members.length - servers.quorum;
    const message = `acquire of ${show(keys)} failed`;
    throw held
      ? new ResourceLockedError(`${message}: held by another lock`, this.#attempts.list())
      : new ExecutionError(message, this.#attempts.list());
  }

  /**
   * Waits before the next attempt: `retryDelay` plus jitter, or, woken by
   * releases, as long as the allowance lets it (see `#allowance`), less when
   * the holder's TTL ends first. The first wait for a held resource instead
   * takes a seat (queued, or watching) and retries at once. Returns the
   * lock when a release handed it over.
   */
  async #wait(
    n: number,
    start: number,
    ballot: Ballot,
  ): Promise<Lock | typeof NAPPING | undefined> {
    const { settings, signal } = this.#request;
    const conflicts = ballot.stats.votesAgainst.conflicts;
    if (conflicts > 0) this.#setIfAbsent = false;
    const sleep = retryWait(settings, n);
    this.#allowance += sleep;
    if (settings.wait === "notify" && conflicts > 0) {
      const fallback = Math.min(
        Number.isFinite(ballot.heldFor) ? ballot.heldFor + 1 : sleep,
        this.#allowance,
      );
      if (queueable(this.#request)) {
        if (this.#listening === undefined && await this.#join()) return undefined;
        if (this.#seat.kind === "queued") {
          const ms = Math.min(fallback, this.#recheck(ballot));
          this.#napStart = now();
          return this.#listening!.sleep(start, ms, signal, this) ? NAPPING : this.#handoff();
        }
      } else {
        if (this.#listening === undefined && await this.#watch()) return undefined;
        if (this.#listening!.subscribed) {
          await this.#sleep(start, fallback);
          return undefined;
        }
      }
    }
    await delay(sleep, signal);
    this.#allowance -= sleep;
    return undefined;
  }

  /**
   * ms a queued acquire sleeps, when no release wakes it, before it asks
   * again: a key handed to (or reserved for) a waiter ahead that went away
   * expires unannounced, and a wake message may be lost. It asks after a
   * request timeout, then after as long as it has queued, up to half that
   * again at random (so a long queue does not flood the servers, waiters
   * that queued together do not ask together, and such a stall costs at
   * most about the wait so far); with a key that never expires, whose queue
   * outlives it by only a few request timeouts, always after one.
   */
  #recheck(ballot: Ballot): number {
    const { requestTimeout } = this.#request.settings;
    if (!Number.isFinite(ballot.heldFor)) return requestTimeout + 1;
    const queuedFor = now() - (this.#queuedAt ?? Infinity);
    return Math.max(requestTimeout, queuedFor) * (1 + Math.random() / 2) + 1;
  }

  /** Sleeps until a release after `since` wakes it, at most `ms`; draws on the allowance. */
  #sleep(since: number, ms: number): Promise<void> {
    const t = now();
    return this.#listening!.wait(since, ms, this.#request.signal).then(() => {
      this.#allowance -= now() - t;
    });
  }

  /**
   * Subscribes to the Redlock's wake channel and takes a place in the
   * resource's wait queue with the next attempt; false when no server
   * confirmed the subscription.
   */
  async #join(): Promise<boolean> {
    const { keys, settings, value } = this.#request;
    // A release sent before the acquire queues, once answered, ran before
    // its place in the queues, so it cannot take back a key a server hands
    // it later: such servers count again. (One that has not answered may
    // still land late, e.g. as an EVAL sent after NOSCRIPT.)
    const sent = [...this.#releasedTo ?? []];
    const [listening, answered] = await Promise.all([
      this.#context.waiters.listen(keys, settings.requestTimeout, value),
      Promise.all(sent.map(([, reply]) => within(reply, settings.requestTimeout))),
    ]);
    sent.forEach(([server, reply], i) => {
      if (answered[i] === true && this.#releasedTo!.get(server) === reply) {
        this.#releasedTo!.delete(server);
      }
    });
    this.#listening = listening;
    if (!listening.subscribed) return false;
    this.#context.waiters.queued(keys[0]!);
    this.#seat = { kind: "queued", ticket: String(Date.now()) };
    this.#queued = true;
    this.#setIfAbsent = false;
    return true;
  }

  /**
   * Listens for releases of the resources and retries as a watcher, whose
   * conflict leaves the marker that makes the holder's release publish;
   * false when no server confirmed the subscription.
   */
  async #watch(): Promise<boolean> {
    const { keys, settings } = this.#request;
    this.#listening = await this.#context.waiters.listen(keys, settings.requestTimeout);
    if (!this.#listening.subscribed) return false;
    this.#seat = { kind: "watcher" };
    this.#setIfAbsent = false;
    return true;
  }

  /**
   * The lock a quorum of servers handed to this queued acquire (see
   * RELEASE), or undefined when fewer did, too little of the lease is left,
   * or a fencing token is needed (a reserved key is taken by the next
   * attempt). Each server handed it after it queued the value, so the keys
   * last at least until `#queuedAt` plus the lease, unless this acquire
   * released them itself after a failed attempt: such servers do not count.
   */
  #handoff(): Lock | undefined {
    const { duration, settings, fencing } = this.#request;
    if (fencing || this.#queuedAt === undefined) return undefined;
    const servers = this.#servers;
    const votesFor = this.#listening!.heard().filter((server) => !this.#releasedTo?.has(server));
    if (votesFor.length < servers.quorum) return undefined;
    const until = validUntil(this.#queuedAt, duration, settings.driftFactor);
    const end = now();
    // A long wait leaves little of the lease: then an attempt renews it.
    if (until - end < duration / 2) return undefined;
    this.#attempts.push({
      membershipSize: servers.members.length,
      quorumSize: servers.quorum,
      votesFor,
      votesAgainst: new Map(),
      elapsed: end - this.#queuedAt,
    });
    this.#queued = false;
    const lock = this.#lock(until, undefined);
    handedOver.add(lock);
    return lock;
  }

  /**
   * An answer of a queued attempt that came after its round settled: a vote
   * for means the server took the key, a conflict that it did not, none (a
   * failure) that it may have. Once the lock is granted (by a round or a
   * handoff, which may count this server), it keeps what it took, and a
   * server that did not take it leaves the queue. Before, what a lost round
   * took is released, keeping the place in the queues, unless a later round
   * was sent (its request ran after this one on that connection and speaks
   * for the server) or the round was won (`#grant()` deals with it).
   */
  #late(member: Member, vote: Vote | undefined, tally: Tally<Vote>, round: number): void {
    if (this.#granted) {
      if (typeof vote !== "number") {
        this.#servers.quietly(this.#releaser(RELEASE_MODE.leaveQueues), [member]);
      }
      return;
    }
    if (vote instanceof Conflict || round < this.#rounds || this.#servers.won(tally)) return;
    // After the acquire ended (aborted, gave up), what lands late is just released.
    let mode: ReleaseMode = RELEASE_MODE.release;
    if (this.#queued) {
      let took = 1;
      let conflicts = 0;
      for (const answer of tally.answers.values()) {
        answer instanceof Conflict ? conflicts++ : took++;
      }
      mode = this.#stayMode(took, conflicts);
    }
    const [sent] = this.#servers.quietly(this.#releaser(mode), [member]);
    (this.#releasedTo ??= new Map()).set(member.index, sent!);
  }

  /** Drops the queue entries on `members`; `keep` keeps keys the value holds. */
  #leave(members: readonly Member[], keep = false): void {
    if (this.#queued) {
      const mode = keep ? RELEASE_MODE.leaveQueues : RELEASE_MODE.release;
      this.#servers.quietly(this.#releaser(mode), members);
    }
    this.#queued = false;
  }

  /**
   * What the next attempt sends: a plain SET NX, which costs the server a
   * fifth of the script, while `#setIfAbsent`; else ACQUIRE with the current
   * seat, which also tells a holder's TTL (no PTTL after a conflict). Made
   * for each attempt: a waiting acquire keeps none.
   */
  #sender(): Send {
    const { keys, value, duration } = this.#request;
    return this.#setIfAbsent
      ? setIfAbsent(keys[0]!, value, duration, holderTtl(keys[0]!))
      : this.#servers.sender(ACQUIRE, acquireCall(keys, value, terms(this.#request, this.#seat)));
  }

  #releaser(mode: ReleaseMode): Send {
    const ticket = this.#seat.kind === "queued" ? this.#seat.ticket : undefined;
    return releaser(this.#servers, this.#request, { mode, ticket });
  }
}

/**
 * `attempt` with its stats compact (see `VotesAgainst.compact()`): a turn
 * that polls or watches keeps its last attempt while it sleeps. (A queued
 * sleep keeps none: its turn has returned.)
 */
function kept(attempt: Attempt): Attempt {
  const { ballot } = attempt;
  const { votesFor, votesAgainst } = ballot.stats;
  if (!(votesAgainst instanceof VotesAgainst)) return attempt;
  const stats = {
    ...ballot.stats,
    votesFor: votesFor.slice(),
    votesAgainst: votesAgainst.compact(),
  };
  return { start: attempt.start, ballot: { ...ballot, stats } };
}

/** ACQUIRE's terms for `request` with `seat`. */
function terms(request: AcquireRequest, seat: Seat) {
  return {
    duration: request.duration,
    fencing: request.fencing,
    seat,
    queueLife: 4 * request.settings.requestTimeout,
  };
}

function releaser(
  servers: Servers,
  request: AcquireRequest,
  terms: Omit<ReleaseTerms, "reservation">,
): Send {
  const reservation = request.settings.requestTimeout;
  return servers.sender(
    RELEASE,
    releaseCall(request.keys, request.value, { ...terms, reservation }),
  );
}

/** Aborted mid-round: whatever lands on a server is released behind it. */
function abandon(servers: Servers, request: AcquireRequest): void {
  servers.quietly(releaser(servers, request, { mode: RELEASE_MODE.release }), servers.members);
}

function newLock(
  owner: LockOwner,
  request: AcquireRequest,
  attempts: LockInit["attempts"],
  until: number,
  fencingToken: number | undefined,
): Lock {
  return new Lock({
    owner,
    resources: Object.freeze(request.keys),
    value: request.value,
    attempts,
    validUntil: until,
    fencingToken,
  });
}

/**
 * A refusal of the acquire's `SET NX` as a conflict with the holder's TTL,
 * asked by PTTL. The PTTL is only read; nothing is written after a SET, so
 * a release sent on the same connection behind it still lands last.
 */
function holderTtl(key: string): Held {
  return (m) => m.runner.pttl!(key).then((ttl) => new Conflict(m.index, toNumber(ttl, m.index)));
}
