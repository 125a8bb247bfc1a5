/**
 * The fast first attempt of read-write locks and permits: one plain
 * `SET key value PX lease NX` per server instead of a script, where a key
 * that is set proves the lock free (see docs/protocol.md), and where the
 * handle has not seen it held just now.
 */

import type { Send, Servers } from "./_servers.ts";
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

/**
 * Votes by `SET key value PX ms NX`: for when it was set, else a conflict
 * of unknown TTL (the script round that follows a miss tells the TTL).
 */
export function setIfAbsent(key: string, value: string, ms: number): Send {
  return (m) =>
    m.runner.setIfAbsent!(key, value, ms).then((set) =>
      setVote(set, m, () => new Conflict(m.index, -1))
    );
}

/** The vote of server `m`'s `SET … NX` reply `set`: for (0) when it was set, else `held()`. */
export function setVote<V>(set: unknown, m: Member, held: () => V): 0 | V {
  if (typeof set !== "boolean") {
    throw new TypeError(`server ${m.index} sent an unexpected reply: ${describeValue(set)}`);
  }
  return set ? 0 : held();
}
