/**
 * Votes by a plain `SET key value PX lease NX` per server instead of a
 * script: an acquire's attempts while its one resource looks free, and the
 * fast first attempt of read-write locks and permits, where a key that is
 * set proves the lock free (see docs/protocol.md) and the handle has not
 * seen it held just now.
 */

import {
  type Ballot,
  type Judge,
  type Send,
  type Servers,
  toNumber,
  type Vote,
} from "../quorum/servers.ts";
import type { Member } from "../quorum/round.ts";
import { Conflict } from "../quorum/votes.ts";
import { now, validUntil } from "../util/time.ts";
import { describeValue } from "../util/validate.ts";

/** ms a handle's acquires skip the fast attempt after one found its key held. */
export const FAST_PATH_PAUSE_MS = 1_000;

/**
 * Whether a handle's next acquire may try `SET NX` first: when every
 * client can send it and no such attempt of the handle found the key held
 * in the last {@linkcode FAST_PATH_PAUSE_MS} (then the script would run
 * anyway, one round later).
 */
export class FastPath {
  #pausedUntil = 0;

  /** Whether an acquire that has not tried yet and does not listen may try it. */
  open(servers: Servers): boolean {
    return servers.plain && now() >= this.#pausedUntil;
  }

  /** An attempt found the key held somewhere: acquires go straight to the script a while. */
  missed(): void {
    this.#pausedUntil = now() + FAST_PATH_PAUSE_MS;
  }

  /**
   * One round of `SET key value PX duration NX`: its stats and the lock's
   * validity when a quorum set it in time; else undefined (and, when it was
   * held somewhere, the fast attempts pause).
   */
  async attempt(servers: Servers, round: FastRound): Promise<FastWin | undefined> {
    const { key, duration } = round;
    const start = now();
    const send = setNx(key, round.value, duration, unknownTtl);
    const ballot = await servers.vote(send, round.keys, round.timeout, round.signal, start);
    const until = validUntil(start, duration, round.driftFactor);
    if (ballot.ok && until > ballot.end) return { stats: ballot.stats, until };
    if (ballot.stats.votesAgainst.conflicts > 0) this.missed();
    return undefined;
  }
}

/** What {@linkcode FastPath.attempt} sets, and for how long. */
export interface FastRound {
  /** The key set. */
  readonly key: string;
  readonly value: string;
  /** The lock's keys, as errors name them. */
  readonly keys: readonly string[];
  /** The lease in ms. */
  readonly duration: number;
  readonly driftFactor: number;
  /** ms each request may take. */
  readonly timeout: number;
  readonly signal: AbortSignal | undefined;
}

/** A fast attempt that got the lock. */
export interface FastWin {
  readonly stats: Ballot["stats"];
  /** When the lock's validity ends (monotonic). */
  readonly until: number;
}

/** What a server's refusal of `SET … NX` counts as: a conflict, maybe once the server said more. */
export type Held = (m: Member) => Vote | Promise<Vote>;

/** A refusal as a conflict of unknown TTL (the script round that follows a miss tells the TTL). */
const unknownTtl: Held = (m) => new Conflict(m.index, -1);

/**
 * Votes by `SET key value PX ms NX`: for (0) when the key was set, else
 * what `held` makes of the refusal (by default a conflict with the holder's
 * TTL, asked by {@linkcode holderTtl}). Apart as `send` and `judge` for a
 * round that reads the replies in place.
 */
export function setNxVote(
  key: string,
  value: string,
  ms: number,
  held?: Held,
): { send: Send; judge: Judge } {
  return {
    send: (m) => m.runner.setIfAbsent!(key, value, ms),
    judge: (set, m) => {
      if (typeof set !== "boolean") {
        throw new TypeError(`server ${m.index} sent an unexpected reply: ${describeValue(set)}`);
      }
      return set ? 0 : held === undefined ? holderTtl(key, m) : held(m);
    },
  };
}

/** {@linkcode setNxVote} as one request that resolves to the vote. */
export function setNx(key: string, value: string, ms: number, held?: Held): Send {
  const { send, judge } = setNxVote(key, value, ms, held);
  return (m) => send(m).then((set) => judge(set, m));
}

/**
 * A refusal of an acquire's `SET NX` on `m` as a conflict with the
 * holder's TTL, asked by PTTL. The PTTL is only read; nothing is written
 * after a SET, so a release sent on the same connection behind it still
 * lands last.
 */
export function holderTtl(key: string, m: Member): Promise<Vote> {
  return m.runner.pttl!(key).then((ttl) => new Conflict(m.index, toNumber(ttl, m.index)));
}
