/**
 * The servers of a Redlock, and how an operation puts a question to all of
 * them at once and counts their votes.
 */

import { type RedisClient, toScriptClient } from "../clients/clients.ts";
import {
  ExecutionError,
  type ExecutionResult,
  type ExecutionStats,
  missingPermission,
  PermissionError,
} from "../api/errors.ts";
import { RedlockErrorEvent } from "../api/error_event.ts";
import type { LuaScript, ScriptCall } from "../protocol/scripts.ts";
import { type Member, round, type Tally } from "./round.ts";
import { Conflict, freeIn, VotesAgainst } from "./votes.ts";
import { type Electorate, VoteRound } from "./vote_round.ts";
import { hashSlot } from "../protocol/hash_slot.ts";
import { conflictTtl } from "../protocol/encoding.ts";
import { now } from "../util/time.ts";
import { describeValue } from "../util/validate.ts";

/**
 * A server's answer to acquire or extend: for (with the server's fencing
 * token, 0 without fencing), or a conflict.
 */
export type Vote = number | Conflict;

/** Sends one request to one server. */
export type Send = (member: Member) => Promise<unknown>;

/** Reads a server's reply as its vote, or a promise of it when the server must be asked more. */
export type Judge = (reply: unknown, member: Member) => Vote | Promise<Vote>;

/** A round of votes and what to make of it as it settles (see {@linkcode Servers.decide}). */
export interface Decision<R> {
  readonly keys: readonly string[];
  /** ms each request may take. */
  readonly timeout: number;
  readonly signal: AbortSignal | undefined;
  /** When the round started (monotonic). */
  readonly start: number;
  /** How to read a reply; by default as a script's vote. */
  readonly judge?: Judge | undefined;
  /** What the round resolves to, made of its ballot. */
  readonly decide: (ballot: Ballot) => R | Promise<R>;
  /** Called for an answer that comes after the round settled (see `RoundOptions.late`). */
  readonly late?:
    | ((member: Member, vote: Vote | undefined, tally: Tally<Vote>) => void)
    | undefined;
  /**
   * Called when the round ends without a result, before it rejects: the
   * signal aborted it, or the servers refused it for lack of permission.
   */
  readonly aborted?: (() => void) | undefined;
}

/** The outcome of one round of acquire, extend or release votes. */
export interface Ballot {
  /** (Its `votesAgainst` answers `isConflict()` and `conflicts` without making errors.) */
  readonly stats: ExecutionStats & { readonly votesAgainst: VotesAgainst };
  /** Whether a quorum voted for. */
  readonly ok: boolean;
  /** The largest fencing token among the votes for. */
  readonly token: number;
  /** ms until enough conflicting keys expired for a quorum (see `freeIn()`), or Infinity. */
  readonly heldFor: number;
  /** When the round settled (monotonic). */
  readonly end: number;
}

/**
 * The vote in an ACQUIRE or EXTEND reply: the token (≥ 0) for, or
 * `-3 - pttl` against.
 */
export function toVote(reply: unknown, server: number): Vote {
  if (Number.isInteger(reply)) {
    const n = reply as number;
    return n >= 0 ? n : new Conflict(server, conflictTtl(n));
  }
  throw new TypeError(`server ${server} sent an unexpected reply: ${describeValue(reply)}`);
}

/** A reply that must be a number (a count or a TTL). */
export function toNumber(reply: unknown, server: number): number {
  if (typeof reply === "number") return reply;
  throw new TypeError(`server ${server} sent an unexpected reply: ${describeValue(reply)}`);
}

/** A release vote: for, once the reply is a count (of keys that held the value). */
const releaseVote = (reply: unknown, member: Member): Vote => (toNumber(reply, member.index), 0);

/** An acquire or extend vote: a script's reply, or a vote `setIfAbsent` already made. */
const asVote = (reply: unknown, member: Member): Vote =>
  reply instanceof Conflict ? reply : toVote(reply, member.index);

const CROSSSLOT = /^-?CROSSSLOT/;

/** A clearer error for a script sent to a cluster with keys in several hash slots. */
function crossSlot(error: Error, keys: readonly string[]): Error {
  if (!CROSSSLOT.test(error.message)) return error;
  return new TypeError(
    `resources ${show(keys)} are in different cluster hash slots; give them one ` +
      `hash tag, e.g. "{game42}:board" and "{game42}:turn"`,
    { cause: error },
  );
}

/** Resources as error messages show them. */
export function show(keys: readonly string[]): string {
  return keys.length === 1 ? JSON.stringify(keys[0]) : `[${keys.map((k) => JSON.stringify(k))}]`;
}

/**
 * The servers (or clusters) of a Redlock: each with its client and script
 * runner, the quorum, and the errors they raise as events on `target`.
 */
export class Servers implements Electorate {
  readonly members: readonly Member[];
  /** How many must agree: `⌊members / 2⌋ + 1`. */
  readonly quorum: number;
  /** Whether any is a Redis Cluster (keys of one lock need one hash slot). */
  readonly cluster: boolean;
  /** Whether every client has `setIfAbsent` and `pttl` (plain SET NX for one resource). */
  readonly plain: boolean;
  readonly #target: EventTarget;

  constructor(clients: readonly RedisClient[], target: EventTarget) {
    this.members = clients.map((client, index) => {
      try {
        return { index, client, runner: toScriptClient(client) };
      } catch (error) {
        throw new TypeError(`clients[${index}]: ${(error as Error).message}`, { cause: error });
      }
    });
    this.quorum = Math.floor(clients.length / 2) + 1;
    this.cluster = this.members.some((m) => m.runner.cluster === true);
    this.plain = this.members.every((m) =>
      typeof m.runner.setIfAbsent === "function" && typeof m.runner.pttl === "function"
    );
    this.#target = target;
  }

  /** Dispatches a server's failure as an `"error"` event. */
  readonly emit = (error: Error, member: Member): void => {
    this.#target.dispatchEvent(new RedlockErrorEvent(error, member.index, member.client));
  };

  /** Whether a round of votes can settle: a quorum for, or a quorum impossible. */
  readonly decided = ({ answers, errors }: Tally<Vote>): boolean => {
    let yes = 0;
    let no = errors.size;
    for (const vote of answers.values()) typeof vote === "number" ? yes++ : no++;
    return yes >= this.quorum || no > this.members.length - this.quorum;
  };

  /** Whether a quorum voted for in `tally`. */
  won({ answers }: Tally<Vote>): boolean {
    let yes = 0;
    for (const vote of answers.values()) if (typeof vote === "number") yes++;
    return yes >= this.quorum;
  }

  /** Checks that `keys` hash to one slot when a server is a cluster. */
  checkSlots(keys: readonly string[]): void {
    if (!this.cluster) return;
    const slots = new Set(keys.map(hashSlot));
    if (slots.size > 1) {
      throw new TypeError(
        `resources ${show(keys)} map to ${slots.size} Redis Cluster hash slots, and one lock ` +
          `needs one: give them a common hash tag, e.g. "{game42}:board" and "{game42}:turn"`,
      );
    }
  }

  /** A sender of `script` with `call`'s keys and arguments. */
  sender(script: LuaScript, call: ScriptCall): Send {
    const { keys, args } = call;
    return (m) => m.runner.evalScript(script, keys, args);
  }

  /**
   * One round of acquire or extend votes on `keys` (sent as scripts, or as
   * votes already made): success on a quorum of "for".
   */
  vote(
    send: Send,
    keys: readonly string[],
    timeout: number,
    signal: AbortSignal | undefined,
    start: number = now(),
    late?: (member: Member, vote: Vote | undefined, tally: Tally<Vote>) => void,
  ): Promise<Ballot> {
    return this.decide(send, { keys, timeout, signal, start, late, decide: (ballot) => ballot });
  }

  /**
   * One round of votes like {@linkcode Servers.vote}, resolving to what
   * `decision.decide` makes of the ballot as the round settles (a promise
   * less than a `then` of the vote).
   */
  decide<R>(send: Send, decision: Decision<R>): Promise<R> {
    const { signal } = decision;
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new VoteRound<R>(this, {
      keys: decision.keys,
      timeout: decision.timeout,
      signal,
      start: decision.start,
      send,
      judge: decision.judge ?? asVote,
      decide: decision.decide,
      late: decision.late,
      aborted: decision.aborted,
    }).promise;
  }

  /**
   * One round of releases of `keys`: settles on a quorum, like a vote, to
   * the round's stats; rejects with an `ExecutionError` without a quorum.
   */
  release(send: Send, timeout: number, keys: readonly string[]): Promise<ExecutionResult> {
    return new VoteRound<ExecutionResult>(this, {
      keys,
      timeout,
      signal: undefined,
      start: now(),
      send,
      judge: releaseVote,
      decide: ({ ok, stats }) => {
        if (!ok) {
          throw new ExecutionError(`release of ${show(keys)} did not reach a quorum`, [stats]);
        }
        return { attempts: [stats] };
      },
    }).promise;
  }

  /** Sends to `members` and waits for every answer (or time-out); failures become events. */
  async everyAnswer(members: readonly Member[], send: Send, timeout: number): Promise<void> {
    await round(members, send, { timeout, done: () => false, onError: this.emit });
  }

  /**
   * Sends to `members` without waiting; failures become error events.
   * Returns, per member, whether its request answered.
   */
  quietly(send: Send, members: readonly Member[]): Promise<boolean>[] {
    return members.map((member) => {
      let request: Promise<unknown>;
      try {
        request = send(member);
      } catch (error) {
        // A client that throws instead of rejecting: as `round()` does, a failure like any other
        // (an acquire ending in the queue sends these from an abort listener or a microtask).
        request = Promise.reject(error);
      }
      return request.then(() => true, (error) => {
        this.emit(error instanceof Error ? error : new Error(String(error)), member);
        return false;
      });
    });
  }

  /** Runs `script` on one server; `judge` checks and converts its reply. */
  run<T>(
    member: Member,
    script: LuaScript,
    call: ScriptCall,
    judge: (reply: unknown, server: number) => T,
  ): Promise<T> {
    return member.runner.evalScript(script, call.keys, call.args).then(
      (reply) => judge(reply, member.index),
      (error) => {
        throw error instanceof Error ? crossSlot(error, call.keys) : error;
      },
    );
  }

  /**
   * Counts a round's votes; throws a {@linkcode PermissionError} when
   * `NOPERM` refusals alone make a quorum impossible (asking again cannot help).
   */
  ballot(tally: Tally<Vote>, start: number): Ballot {
    const end = now();
    const votesFor: number[] = [];
    const conflicts: Conflict[] = [];
    let token = 0;
    let ttls: number[] | undefined;
    for (const [server, vote] of tally.answers) {
      if (typeof vote === "number") {
        votesFor.push(server);
        if (vote > token) token = vote;
      } else {
        conflicts.push(vote);
        if (vote.ttl > 0) (ttls ??= []).push(vote.ttl);
      }
    }
    const heldFor = freeIn(ttls, this.quorum - votesFor.length - tally.errors.size);
    const stats = {
      membershipSize: this.members.length,
      quorumSize: this.quorum,
      votesFor,
      votesAgainst: new VotesAgainst(conflicts, tally.errors),
      elapsed: end - start,
    };
    if (votesFor.length < this.quorum) this.refused(tally.errors, () => stats);
    return { stats, ok: votesFor.length >= this.quorum, token, heldFor, end };
  }

  /** The error a request's failure is reported and tallied as. */
  failure(error: Error, keys: readonly string[]): Error {
    return crossSlot(error, keys);
  }

  /** Throws when more servers refused for lack of permission than a quorum can spare. */
  refused(errors: ReadonlyMap<number, Error>, stats: () => ExecutionStats): void {
    let first: [number, Error] | undefined;
    let refusals = 0;
    for (const [server, error] of errors) {
      if (missingPermission(error) === undefined) continue;
      refusals++;
      first ??= [server, error];
    }
    if (first !== undefined && refusals > this.members.length - this.quorum) {
      throw new PermissionError(first[0], first[1], [stats()]);
    }
  }
}
