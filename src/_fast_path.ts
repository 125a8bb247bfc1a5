/**
 * The fast first attempt of read-write locks and permits: one plain
 * `SET key value PX lease NX` per server instead of a script, where a key
 * that is set proves the lock free (see docs/protocol.md), and where the
 * handle has not seen it held just now.
 */

import type { Judge, Send, Servers, Vote } from "./_servers.ts";
import type { Member } from "./_quorum.ts";
import { Conflict } from "./_votes.ts";
import { now } from "./_time.ts";
import { describeValue } from "./_validate.ts";

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
}

/** What a server's refusal of `SET … NX` counts as: a conflict, maybe once the server said more. */
export type Held = (m: Member) => Vote | Promise<Vote>;

/** A refusal as a conflict of unknown TTL (the script round that follows a miss tells the TTL). */
export const unknownTtl: Held = (m) => new Conflict(m.index, -1);

/**
 * Votes by `SET key value PX ms NX`: for (0) when the key was set, else
 * what `held` makes of the refusal. Apart as `send` and `judge` for a round
 * that reads the replies in place.
 */
export function setIfAbsentVote(
  key: string,
  value: string,
  ms: number,
  held: Held,
): { send: Send; judge: Judge } {
  return {
    send: (m) => m.runner.setIfAbsent!(key, value, ms),
    judge: (set, m) => {
      if (typeof set !== "boolean") {
        throw new TypeError(`server ${m.index} sent an unexpected reply: ${describeValue(set)}`);
      }
      return set ? 0 : held(m);
    },
  };
}

/** {@linkcode setIfAbsentVote} as one request that resolves to the vote. */
export function setIfAbsent(key: string, value: string, ms: number, held: Held): Send {
  const { send, judge } = setIfAbsentVote(key, value, ms, held);
  return (m) => send(m).then((set) => judge(set, m));
}
