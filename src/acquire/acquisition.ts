/**
 * The acquire's state machine: every attempt after the lean first one
 * (see `acquire.ts`) until the lock is had or given up: retries, the wait
 * queue, handoffs, fencing.
 *
 * @module
 */

import type { ExecutionStats } from "../api/errors.ts";
import type { LockContext } from "../api/lock_context.ts";
import type { Lock } from "../api/lock.ts";
import {
  ACQUIRE,
  acquireCall,
  NO_SEAT,
  RELEASE_MODE,
  type ReleaseMode,
  WATCHER_SEAT,
} from "../protocol/scripts.ts";
import { type Ballot, type Send, type Servers, show, type Vote } from "../quorum/servers.ts";
import type { Listening, Sleeper } from "../wait/waiters.ts";
import type { Member, Tally } from "../quorum/round.ts";
import { Conflict, VotesAgainst } from "../quorum/votes.ts";
import { AttemptLog } from "./attempts.ts";
import { setNx } from "./fast_path.ts";
import { markHandedOver } from "./handover.ts";
import { listeningOf, type Phase } from "./phase.ts";
import { QueueSeat } from "./queue_seat.ts";
import { UndoLog } from "./undo_log.ts";
import {
  abandon,
  type AcquireRequest,
  newLock,
  queueable,
  releaser,
  takesBySet,
  terms,
} from "./request.ts";
import { fence } from "../operations/extend.ts";
import { giveUpError, mayRetry, RETRY_FOREVER, retryWait } from "../operations/retry.ts";
import { delay } from "../util/delay.ts";
import { now, validUntil } from "../util/time.ts";

/** An attempt's round: when it started and how the servers voted. */
export interface Attempt {
  readonly start: number;
  readonly ballot: Ballot;
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
export class Acquisition implements Sleeper {
  readonly #context: LockContext;
  readonly #request: AcquireRequest;
  readonly #attempts: AttemptLog;
  /** Settle the promise `run()` returned. */
  #resolve!: (lock: Lock) => void;
  #reject!: (reason: unknown) => void;
  /** How many rounds this acquire sent (the lean first attempt's not counted). */
  #rounds = 0;
  /**
   * Where this acquire is (see {@linkcode Phase}); only the `to…()`
   * methods change it. The wait queues may hold its value only while it is
   * `queued`.
   */
  #phase: Phase;
  /** Servers where this acquire undid what a failed attempt of its took. */
  readonly #undos = new UndoLog();
  /** When the sleep in the queue began. */
  #napStart = 0;
  /**
   * ms of sleep earned and not yet slept: each failed attempt earns its
   * retry wait, so that however a release-notified acquire spreads its
   * sleeps, it sleeps no longer in all than a polling one would.
   */
  #allowance: number;

  constructor(context: LockContext, request: AcquireRequest) {
    this.#context = context;
    this.#request = request;
    this.#attempts = new AttemptLog(context.servers.members.length, context.servers.quorum);
    this.#allowance = request.settings.retryCount === RETRY_FOREVER ? Infinity : 0;
    this.#phase = { kind: "trying", setNx: takesBySet(this.#servers, request) };
  }

  /** A key was found held: the next attempts send ACQUIRE, which tells the holder's TTL. */
  #toHeld(): void {
    const phase = this.#phase;
    if (phase.kind === "trying" && phase.setNx) this.#phase = { ...phase, setNx: false };
  }

  /** A subscription no server confirmed: it stays trying, and does not ask again. */
  #toUnheard(listening: Listening): void {
    const phase = this.#phase;
    if (phase.kind === "trying") this.#phase = { ...phase, listening };
  }

  /** Waits in the queue of its resource, with `seat`. */
  #toQueued(seat: QueueSeat): void {
    this.#phase = { kind: "queued", seat };
  }

  /** Watches its resources, woken by the releases `listening` hears. */
  #toWatching(listening: Listening): void {
    this.#phase = { kind: "watching", listening };
  }

  /** Has the lock. */
  #toGranted(): void {
    this.#phase = { kind: "granted", listening: listeningOf(this.#phase) };
  }

  /** Gave up or was aborted, and left (or is leaving) the queues. */
  #toEnded(): void {
    if (this.#phase.kind !== "granted") {
      this.#phase = { kind: "ended", listening: listeningOf(this.#phase) };
    }
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
        if (this.#phase.kind === "queued") this.#phase.seat.attempted(start);
        const lock = await this.#grant(start, ballot);
        if (lock !== undefined) return this.#end(lock);
        const taken = mayHaveTaken(this.#servers, ballot, this.#phase.kind === "queued");
        if (!mayRetry(this.#request.settings, n)) return await this.#giveUp(ballot, taken);
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
      this.#toEnded();
      listeningOf(this.#phase)?.done();
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
    const late = this.#phase.kind === "queued"
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
      this.#toEnded();
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
        this.#toEnded();
        throw signal.reason;
      }
      if (token === undefined || until <= now()) return undefined;
    }
    // The servers that took the lock dropped the queue entry; tell the others,
    // also those that had not answered (a release runs after the acquire on
    // its connection), keeping what they took.
    const { votesFor } = ballot.stats;
    this.#leave(this.#servers.members.filter((m) => !votesFor.includes(m.index)), true);
    return this.#lock(until, fencing ? ballot.token : undefined);
  }

  #lock(until: number, token: number | undefined): Lock {
    this.#toGranted();
    const log = this.#attempts;
    return newLock(this.#context.owner, this.#request, () => log.list(), until, token);
  }

  /**
   * Releases a partial (or too slow) lock where it may have landed; requests
   * on one connection run in order, so the release lands after the acquire.
   */
  #undo(taken: readonly Member[], ballot: Ballot): void {
    const { votesFor, votesAgainst } = ballot.stats;
    const mode = this.#phase.kind === "queued"
      ? stayMode(votesFor.length, votesAgainst.conflicts, this.#servers.quorum)
      : RELEASE_MODE.release;
    const sent = this.#servers.quietly(this.#releaser(mode), taken);
    taken.forEach((m, i) => this.#undos.sent(m.index, sent[i]!));
  }

  /** Retries ran out: rejects once the release has answered (or timed out). */
  async #giveUp(ballot: Ballot, taken: readonly Member[]): Promise<never> {
    const { keys, settings } = this.#request;
    const servers = this.#servers;
    await servers.everyAnswer(
      this.#phase.kind === "queued" ? servers.members : taken,
      this.#releaser(RELEASE_MODE.release),
      settings.requestTimeout,
    );
    this.#toEnded();
    throw giveUpError(`acquire of ${show(keys)}`, {
      holder: "another lock",
      last: ballot.stats.votesAgainst,
      servers,
      attempts: this.#attempts.list(),
    });
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
    if (conflicts > 0) this.#toHeld();
    const sleep = retryWait(settings, n);
    this.#allowance += sleep;
    if (settings.wait === "notify" && conflicts > 0) {
      const fallback = Math.min(
        Number.isFinite(ballot.heldFor) ? ballot.heldFor + 1 : sleep,
        this.#allowance,
      );
      const unseated = this.#phase.kind === "trying" && this.#phase.listening === undefined;
      if (queueable(this.#request)) {
        if (unseated && await this.#join()) return undefined;
        const phase = this.#phase;
        if (phase.kind === "queued") {
          const ms = Math.min(
            fallback,
            phase.seat.recheck(ballot.heldFor, settings.requestTimeout, now()),
          );
          this.#napStart = now();
          return phase.seat.listening.sleep(start, ms, signal, this) ? NAPPING : this.#handoff();
        }
      } else {
        if (unseated && await this.#watch()) return undefined;
        const phase = this.#phase;
        if (phase.kind === "watching") {
          await this.#sleep(phase.listening, start, fallback);
          return undefined;
        }
      }
    }
    await delay(sleep, signal);
    this.#allowance -= sleep;
    return undefined;
  }

  /** Sleeps until a release after `since` wakes it, at most `ms`; draws on the allowance. */
  #sleep(listening: Listening, since: number, ms: number): Promise<void> {
    const t = now();
    return listening.wait(since, ms, this.#request.signal).then(() => {
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
    const [listening] = await Promise.all([
      this.#context.waiters.listen(keys, settings.requestTimeout, value),
      this.#undos.settle(settings.requestTimeout),
    ]);
    if (!listening.subscribed) {
      this.#toUnheard(listening);
      return false;
    }
    this.#context.waiters.queued(keys[0]!);
    this.#toQueued(new QueueSeat(listening));
    return true;
  }

  /**
   * Listens for releases of the resources and retries as a watcher, whose
   * conflict leaves the marker that makes the holder's release publish;
   * false when no server confirmed the subscription.
   */
  async #watch(): Promise<boolean> {
    const { keys, settings } = this.#request;
    const listening = await this.#context.waiters.listen(keys, settings.requestTimeout);
    if (!listening.subscribed) {
      this.#toUnheard(listening);
      return false;
    }
    this.#toWatching(listening);
    return true;
  }

  /**
   * The lock a quorum of servers handed to this queued acquire (see
   * RELEASE), or undefined when fewer did, too little of the lease is left,
   * or a fencing token is needed (a reserved key is taken by the next
   * attempt). Each server handed it after it queued the value, so the keys
   * last at least until the seat's `since` plus the lease, unless this acquire
   * released them itself after a failed attempt: such servers do not count.
   */
  #handoff(): Lock | undefined {
    const { duration, settings, fencing } = this.#request;
    const phase = this.#phase;
    if (phase.kind !== "queued") return undefined;
    const { seat } = phase;
    const since = seat.since;
    if (fencing || since === undefined) return undefined;
    const servers = this.#servers;
    const votesFor = seat.listening.heard().filter((server) => !this.#undos.has(server));
    if (votesFor.length < servers.quorum) return undefined;
    const until = validUntil(since, duration, settings.driftFactor);
    const end = now();
    // A long wait leaves little of the lease: then an attempt renews it.
    if (until - end < duration / 2) return undefined;
    this.#attempts.push(handoffStats(servers, votesFor, end - since));
    const lock = this.#lock(until, undefined);
    markHandedOver(lock);
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
    if (this.#phase.kind === "granted") {
      if (typeof vote !== "number") {
        this.#servers.quietly(this.#releaser(RELEASE_MODE.leaveQueues), [member]);
      }
      return;
    }
    if (vote instanceof Conflict || round < this.#rounds || this.#servers.won(tally)) return;
    // After the acquire ended (aborted, gave up), what lands late is just released.
    let mode: ReleaseMode = RELEASE_MODE.release;
    if (this.#phase.kind === "queued") {
      let took = 1;
      let conflicts = 0;
      for (const answer of tally.answers.values()) {
        answer instanceof Conflict ? conflicts++ : took++;
      }
      mode = stayMode(took, conflicts, this.#servers.quorum);
    }
    const [sent] = this.#servers.quietly(this.#releaser(mode), [member]);
    this.#undos.sent(member.index, sent!);
  }

  /**
   * While queued, drops the queue entries on `members` (`keep` keeps keys
   * the value holds); the caller then changes the phase.
   */
  #leave(members: readonly Member[], keep = false): void {
    if (this.#phase.kind !== "queued") return;
    const mode = keep ? RELEASE_MODE.leaveQueues : RELEASE_MODE.release;
    this.#servers.quietly(this.#releaser(mode), members);
  }

  /**
   * What the next attempt sends: a plain SET NX, which costs the server a
   * fifth of the script, while the phase says `setNx`; else ACQUIRE with the current
   * seat, which also tells a holder's TTL (no PTTL after a conflict). Made
   * for each attempt: a waiting acquire keeps none.
   */
  #sender(): Send {
    const { keys, value, duration } = this.#request;
    const phase = this.#phase;
    if (phase.kind === "trying" && phase.setNx) {
      return setNx(keys[0]!, value, duration);
    }
    const seat = phase.kind === "queued"
      ? phase.seat
      : phase.kind === "watching"
      ? WATCHER_SEAT
      : NO_SEAT;
    return this.#servers.sender(ACQUIRE, acquireCall(keys, value, terms(this.#request, seat)));
  }

  #releaser(mode: ReleaseMode): Send {
    const phase = this.#phase;
    const ticket = phase.kind === "queued" ? phase.seat.ticket : undefined;
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

/**
 * How a queued acquire lets go of what a failed attempt took: it gives
 * way (keeping a key nobody queued is ahead for) when the servers that
 * took it and those held by another make a quorum, as they do when
 * waiters were handed different servers; else server errors stood in the
 * way, and keeping keys it cannot make a quorum of would stall the next
 * in line, so it frees them.
 */
function stayMode(took: number, conflicts: number, quorum: number): ReleaseMode {
  return took + conflicts >= quorum ? RELEASE_MODE.giveWay : RELEASE_MODE.keepPlace;
}

/**
 * The servers where a failed attempt may have taken keys: every one that
 * did not answer with a conflict. (In the queue, one that has not answered
 * yet is dealt with by `#late()`, which keeps the place there.)
 */
function mayHaveTaken(servers: Servers, ballot: Ballot, queued: boolean): Member[] {
  const { votesFor, votesAgainst } = ballot.stats;
  return servers.members.filter((m) =>
    !votesAgainst.isConflict(m.index) &&
    (!queued || votesFor.includes(m.index) || votesAgainst.has(m.index))
  );
}

/** The stats of a handoff: the servers that handed the key over voted for, nobody against. */
function handoffStats(servers: Servers, votesFor: number[], elapsed: number): ExecutionStats {
  return {
    membershipSize: servers.members.length,
    quorumSize: servers.quorum,
    votesFor,
    votesAgainst: new Map(),
    elapsed,
  };
}
