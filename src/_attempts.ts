/**
 * The stats of an acquire's attempts while it goes on. A queued acquire may
 * make many and wait long, so each is kept as a few numbers; the
 * `ExecutionStats` are made when the lock or the error is.
 */

import type { ExecutionStats } from "./errors.ts";
import { VotesAgainst } from "./_votes.ts";

/** Marks an attempt kept whole in `#packed`; the next number is its index in `#whole`. */
const WHOLE = -1;

/** An acquire's attempts, oldest first. */
export class AttemptLog {
  readonly #membershipSize: number;
  readonly #quorumSize: number;
  /**
   * Per attempt: its elapsed µs, how many servers voted for and which, then
   * the conflicts (see `VotesAgainst.pack()`); or WHOLE and an index. (Whole
   * µs keep the array of small integers, half the size of one of doubles.)
   */
  #packed: number[] = [];
  /** Attempts that do not pack (a server failed): kept as they are. */
  #whole: ExecutionStats[] | undefined;

  constructor(membershipSize: number, quorumSize: number) {
    this.#membershipSize = membershipSize;
    this.#quorumSize = quorumSize;
  }

  push(stats: ExecutionStats): void {
    if (stats.membershipSize === this.#membershipSize && stats.quorumSize === this.#quorumSize) {
      const entry = [Math.round(stats.elapsed * 1000), stats.votesFor.length, ...stats.votesFor];
      // (concat, not push: the log is kept at its size, without room to grow.)
      if (packAgainst(stats.votesAgainst, entry)) {
        this.#packed = this.#packed.concat(entry);
        return;
      }
    }
    const whole = this.#whole ??= [];
    this.#packed = this.#packed.concat(WHOLE, whole.length);
    whole.push(stats);
  }

  /** Every attempt's stats. */
  list(): ExecutionStats[] {
    const packed = this.#packed;
    const list: ExecutionStats[] = [];
    for (let at = 0; at < packed.length;) {
      if (packed[at] === WHOLE) {
        list.push(this.#whole![packed[at + 1]!]!);
        at += 2;
        continue;
      }
      const elapsed = packed[at]! / 1000;
      const count = packed[at + 1]!;
      const votesFor = packed.slice(at + 2, at + 2 + count);
      const [votesAgainst, next] = VotesAgainst.unpack(packed, at + 2 + count);
      list.push({
        membershipSize: this.#membershipSize,
        quorumSize: this.#quorumSize,
        votesFor,
        votesAgainst,
        elapsed,
      });
      at = next;
    }
    return list;
  }
}

/** Appends `votes` to `out` as `VotesAgainst.pack()` does; false when they do not pack. */
function packAgainst(votes: ReadonlyMap<number, Error>, out: number[]): boolean {
  if (votes instanceof VotesAgainst) return votes.pack(out);
  if (votes.size > 0) return false;
  out.push(0);
  return true;
}
