/**
 * A round of acquire, extend or release votes, kept lean for the usual
 * case (every server answers at once): votes in arrays counted as they
 * come, no map, and the ballot's stats made only when read.
 */

import type { ExecutionStats } from "../api/errors.ts";
import { RequestTimeoutError } from "../api/errors.ts";
import {
  listenAbort,
  type Member,
  type Pending,
  sendAll,
  type Tally,
  toError,
  unwatch,
  watch,
} from "./round.ts";
import { type Conflict, freeIn, VotesAgainst } from "./votes.ts";
import { now } from "../util/time.ts";

/** A server's answer to acquire or extend: for (its fencing token), or a conflict. */
type Vote = number | Conflict;

/** What a vote round needs of its servers (see `Servers`). */
export interface Electorate {
  readonly members: readonly Member[];
  readonly quorum: number;
  /** Reports a request's failure (as an event). */
  readonly emit: (error: Error, member: Member) => void;
  /** The error reported for a request's failure. */
  failure(error: Error, keys: readonly string[]): Error;
  /** Throws when refusals for lack of permission alone make a quorum impossible. */
  refused(errors: ReadonlyMap<number, Error>, stats: () => ExecutionStats): void;
}

/** What one round sends, how it reads the replies and what it makes of its ballot. */
export interface VoteCall<R> {
  readonly keys: readonly string[];
  /** ms each request may take. */
  readonly timeout: number;
  readonly signal: AbortSignal | undefined;
  /** When the round started (monotonic). */
  readonly start: number;
  readonly send: (member: Member) => Promise<unknown>;
  readonly judge: (reply: unknown, member: Member) => Vote | Promise<Vote>;
  readonly decide: (ballot: VoteBallot) => R | Promise<R>;
  readonly late?:
    | ((member: Member, vote: Vote | undefined, tally: Tally<Vote>) => void)
    | undefined;
  readonly aborted?: (() => void) | undefined;
}

const NO_FAILURES: ReadonlyMap<number, Error> = new Map();

/**
 * The outcome of a {@linkcode VoteRound}: `ok`, `token`, `heldFor` and
 * `end` counted as it settled, `stats` made when first read (most
 * successful rounds' stats never are).
 */
export class VoteBallot {
  readonly ok: boolean;
  readonly token: number;
  readonly heldFor: number;
  readonly end: number;
  readonly #electorate: Electorate;
  readonly #votes: readonly (Vote | undefined)[];
  readonly #order: readonly number[];
  readonly #errors: ReadonlyMap<number, Error>;
  readonly #start: number;
  #stats: (ExecutionStats & { readonly votesAgainst: VotesAgainst }) | undefined;

  constructor(round: VoteRound<unknown>, errors: ReadonlyMap<number, Error>, end: number) {
    // What the stats are made of, not the round: a lock may keep its ballot long.
    this.#electorate = round.electorate;
    this.#votes = round.votes;
    this.#order = round.order;
    this.#errors = errors;
    this.#start = round.start;
    this.end = end;
    let token = 0;
    let ttls: number[] | undefined;
    for (const vote of round.votes) {
      if (typeof vote === "number") {
        if (vote > token) token = vote;
      } else if (vote !== undefined && vote.ttl > 0) (ttls ??= []).push(vote.ttl);
    }
    this.token = token;
    this.heldFor = freeIn(ttls, round.electorate.quorum - round.yes - errors.size);
    this.ok = round.yes >= round.electorate.quorum;
  }

  /** The round's stats: votes for and against in the order they came, and its elapsed ms. */
  get stats(): ExecutionStats & { readonly votesAgainst: VotesAgainst } {
    return this.#stats ??= this.#make();
  }

  #make(): ExecutionStats & { readonly votesAgainst: VotesAgainst } {
    const votesFor: number[] = [];
    const conflicts: Conflict[] = [];
    for (const server of this.#order) {
      const vote = this.#votes[server]!;
      if (typeof vote === "number") votesFor.push(server);
      else conflicts.push(vote);
    }
    return {
      membershipSize: this.#electorate.members.length,
      quorumSize: this.#electorate.quorum,
      votesFor,
      votesAgainst: new VotesAgainst(conflicts, this.#errors),
      elapsed: this.end - this.#start,
    };
  }
}

/**
 * Sends one request to every member at once and settles when a quorum
 * voted for, when a quorum is impossible, or when every request answered,
 * failed or timed out (kept by the shared sweeper of `round.ts`); then
 * resolves to what `decide` makes of the ballot. Failures are reported as
 * they come, also after it settled, and so is the timeout of a request
 * that has not answered by the deadline: the round stays in the sweeper's
 * list until every member was heard of. An answer after it settled goes to
 * `late`. An abort rejects at once with `signal.reason`.
 */
export class VoteRound<R> implements Pending {
  readonly brief = true;
  readonly deadline: number;
  /** When it started (monotonic). */
  readonly start: number;
  prev: Pending | undefined = undefined;
  next: Pending | undefined = undefined;
  readonly promise: Promise<R>;
  readonly electorate: Electorate;
  /** Votes by server index; undefined for none (yet) or a failure. */
  readonly votes: (Vote | undefined)[];
  /** Server indices in the order their votes came. */
  readonly order: number[] = [];
  /** How many voted for. */
  yes = 0;
  #no = 0;
  /** Members not heard of yet (no answer, failure or timeout). */
  #unheard: number;
  /** Members heard of after it settled, by index (made at the first). */
  #heardLate: boolean[] | undefined;
  #errors: Map<number, Error> | undefined;
  #tally: Tally<Vote> | undefined;
  readonly #call: VoteCall<R>;
  #resolve!: (result: R | Promise<R>) => void;
  #reject!: (reason: unknown) => void;
  #onAbort: (() => void) | undefined;
  #settled = false;

  constructor(electorate: Electorate, call: VoteCall<R>) {
    const { members } = electorate;
    this.electorate = electorate;
    this.#call = call;
    this.#unheard = members.length;
    this.votes = new Array(members.length);
    this.start = call.start;
    this.deadline = call.start + call.timeout;
    // Requests first: the rest is done while they are in flight.
    sendAll(members, call.send, (member, reply) => this.#answer(member, reply), (member, error) => {
      this.#fail(member, error);
    });
    this.promise = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    watch(this, call.start);
    const { signal } = call;
    if (signal !== undefined) this.#listen(signal);
  }

  #listen(signal: AbortSignal): void {
    this.#onAbort = listenAbort(signal, () => {
      if (this.#settled) return;
      this.#finish();
      try {
        this.#call.aborted?.();
      } finally {
        this.#reject(signal.reason);
      }
    });
  }

  expire(): void {
    const { timeout } = this.#call;
    const settled = this.#settled;
    for (const member of this.electorate.members) {
      if (this.#heard(member.index)) continue;
      const error = new RequestTimeoutError(member.index, timeout);
      this.electorate.emit(error, member);
      if (settled) this.#hearLate(member.index);
      else {
        (this.#errors ??= new Map()).set(member.index, error);
        this.#unheard--;
      }
    }
    if (settled) return unwatch(this);
    this.#finish();
    this.#settle();
  }

  /** Whether `server` answered, failed or timed out. */
  #heard(server: number): boolean {
    return this.votes[server] !== undefined || this.#errors?.has(server) === true ||
      this.#heardLate?.[server] === true;
  }

  /** `server` is heard of after the round settled; the last one takes it out of the list. */
  #hearLate(server: number): void {
    if (this.#heard(server)) return;
    (this.#heardLate ??= [])[server] = true;
    if (--this.#unheard === 0) unwatch(this);
  }

  /** The tally as a map of answers and of failures, in the order they came (made once). */
  tally(): Tally<Vote> {
    if (this.#tally !== undefined) return this.#tally;
    const answers = new Map<number, Vote>();
    for (const server of this.order) answers.set(server, this.votes[server]!);
    const errors = this.#errors ?? new Map<number, Error>();
    this.#errors = errors;
    return this.#tally = { answers, errors };
  }

  #answer(member: Member, reply: unknown): void {
    let vote: Vote | Promise<Vote>;
    try {
      vote = this.#call.judge(reply, member);
    } catch (error) {
      this.#fail(member, toError(error));
      return;
    }
    if (vote instanceof Promise) {
      vote.then((v) => this.#count(member, v), (error) => this.#fail(member, toError(error)));
    } else this.#count(member, vote);
  }

  #count(member: Member, vote: Vote): void {
    if (this.#settled) {
      this.#hearLate(member.index);
      this.#call.late?.(member, vote, this.tally());
      return;
    }
    this.#unheard--;
    this.votes[member.index] = vote;
    this.order.push(member.index);
    if (typeof vote === "number") this.yes++;
    else this.#no++;
    this.#check();
  }

  #fail(member: Member, failed: Error): void {
    const error = this.electorate.failure(failed, this.#call.keys);
    this.electorate.emit(error, member);
    if (this.#settled) {
      this.#hearLate(member.index);
      this.#call.late?.(member, undefined, this.tally());
      return;
    }
    this.#unheard--;
    (this.#errors ??= new Map()).set(member.index, error);
    this.#no++;
    this.#check();
  }

  #check(): void {
    const { members, quorum } = this.electorate;
    if (this.#unheard === 0 || this.yes >= quorum || this.#no > members.length - quorum) {
      this.#finish();
      this.#settle();
    }
  }

  #settle(): void {
    let ballot: VoteBallot;
    try {
      ballot = new VoteBallot(this as VoteRound<unknown>, this.#errors ?? NO_FAILURES, now());
      if (!ballot.ok && this.#errors !== undefined) {
        this.electorate.refused(this.#errors, () => ballot.stats);
      }
    } catch (error) {
      // As a throw of `aborted` would: it rejects in the error's stead.
      let reason = error;
      try {
        this.#call.aborted?.();
      } catch (thrown) {
        reason = thrown;
      }
      this.#reject(reason);
      return;
    }
    try {
      this.#resolve(this.#call.decide(ballot));
    } catch (error) {
      this.#reject(error);
    }
  }

  #finish(): void {
    this.#settled = true;
    // Still listed while a request is out: its deadline reports it as timed out.
    if (this.#unheard === 0) unwatch(this);
    if (this.#onAbort !== undefined) {
      this.#call.signal!.removeEventListener("abort", this.#onAbort);
    }
  }
}
