/**
 * The stats of an acquire's attempts while it goes on. A queued acquire may
 * make many and wait long, so each is kept as a few numbers; the
 * `ExecutionStats` are made when the lock or the error is.
 */

import type { ExecutionStats } from "../api/errors.ts";
import { VotesAgainst } from "../quorum/votes.ts";

/** Marks an attempt kept whole in `#packed`; the next number is its index in `#whole`. */
const WHOLE = -1;

/** An acquire's attempts, oldest first. */
export class AttemptLog {
  readonly #membershipSize: number;
  readonly #quorumSize: number;
  /** Per attempt: its elapsed ms. */
  #elapsed: number[] = [];
  /**
   * Per attempt: how many servers voted for and which, then the conflicts
   * (see `VotesAgainst.pack()`); or WHOLE and an index. (Whole numbers
   * only, apart from `#elapsed`: an array of small integers takes half the
   * room of one with a fraction in it.)
   */
  #packed: number[] = [];
  /** Attempts that do not pack (a server failed): kept as they are. */
  #whole: ExecutionStats[] | undefined;

  constructor(membershipSize: number, quorumSize: number) {
    this.#membershipSize = membershipSize;
    this.#quorumSize = quorumSize;
  }

  push(stats: ExecutionStats): void {
    this.#elapsed = append(this.#elapsed, [stats.elapsed]);
    if (stats.membershipSize === this.#membershipSize && stats.quorumSize === this.#quorumSize) {
      const entry = [stats.votesFor.length, ...stats.votesFor];
      if (packAgainst(stats.votesAgainst, entry)) {
        this.#packed = append(this.#packed, entry);
        return;
      }
    }
    const whole = this.#whole ??= [];
    this.#packed = append(this.#packed, [WHOLE, whole.length]);
    whole.push(stats);
  }

  /** How many attempts were logged. */
  get length(): number {
    return this.#elapsed.length;
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
      const elapsed = this.#elapsed[list.length]!;
      const count = packed[at]!;
      const votesFor = packed.slice(at + 1, at + 1 + count);
      const [votesAgainst, next] = VotesAgainst.unpack(packed, at + 1 + count);
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

/**
 * `list` with `items` at its end: a short list copied at its new size (an
 * array grown by push keeps room for 16 more, more than most acquires'
 * whole log), a long one grown in place (a copy per push would cost the
 * square of its length).
 */
function append(list: number[], items: readonly number[]): number[] {
  if (list.length >= 64) {
    list.push(...items);
    return list;
  }
  return list.concat(items);
}

/** Appends `votes` to `out` as `VotesAgainst.pack()` does; false when they do not pack. */
function packAgainst(votes: ReadonlyMap<number, Error>, out: number[]): boolean {
  if (votes instanceof VotesAgainst) return votes.pack(out);
  if (votes.size > 0) return false;
  out.push(0);
  return true;
}
