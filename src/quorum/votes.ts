import { LockConflictError } from "../api/errors.ts";

/**
 * A server's vote against because another value holds a key: what a
 * {@linkcode LockConflictError} tells, without being one yet.
 */
export class Conflict {
  constructor(readonly server: number, readonly ttl: number) {}
}

/**
 * ms until a quorum could be free: the TTL after which enough of the
 * conflicting keys have expired to give the votes a round lacked, counting
 * each failed server as one that may vote for next time. The shortest TTL
 * when fewer keys expire than that; Infinity when none does.
 *
 * @param ttls the positive TTLs of the conflicting keys, in any order (sorted
 * in place), or undefined for none
 * @param lacking how many more votes for a quorum needs
 */
export function freeIn(ttls: number[] | undefined, lacking: number): number {
  if (ttls === undefined || ttls.length === 0) return Infinity;
  ttls.sort((a, b) => a - b);
  return lacking > ttls.length ? ttls[0]! : ttls[Math.max(lacking, 1) - 1]!;
}

const NO_FAILURES: ReadonlyMap<number, Error> = new Map();

/**
 * The `votesAgainst` of an attempt: conflicts (in the order they arrived),
 * then failures. A conflict becomes its {@linkcode LockConflictError} only
 * when the map is read: making an Error costs more than the rest of a
 * vote's handling, and most attempts' stats are never read.
 * Printed with `console.log` (Deno or Node), it shows as the Map it stands for.
 */
export class VotesAgainst implements ReadonlyMap<number, Error> {
  readonly #conflicts: readonly Conflict[];
  readonly #failures: ReadonlyMap<number, Error>;
  #map: Map<number, Error> | undefined;

  constructor(conflicts: readonly Conflict[], failures: ReadonlyMap<number, Error>) {
    this.#conflicts = conflicts;
    this.#failures = failures;
  }

  /**
   * The same votes in less memory: the conflicts in an array of their
   * length, and no failure map of its own when there is none (a round's
   * tally no longer changes once it settled). For stats kept long, as a
   * queued acquire keeps every attempt's.
   */
  compact(): VotesAgainst {
    const failures = this.#failures.size === 0 ? NO_FAILURES : this.#failures;
    return new VotesAgainst(this.#conflicts.slice(), failures);
  }

  /**
   * Appends how many servers voted against with a conflict, then each one's
   * server and TTL, to `out`; false, appending nothing, when a server failed.
   */
  pack(out: number[]): boolean {
    if (this.#failures.size > 0) return false;
    out.push(this.#conflicts.length);
    for (const { server, ttl } of this.#conflicts) out.push(server, ttl);
    return true;
  }

  /** The votes `pack()` appended at `packed[at]`, and the index after them. */
  static unpack(packed: readonly number[], at: number): [VotesAgainst, number] {
    const count = packed[at]!;
    const conflicts: Conflict[] = [];
    for (let i = 0; i < count; i++) {
      conflicts.push(new Conflict(packed[at + 1 + 2 * i]!, packed[at + 2 + 2 * i]!));
    }
    return [new VotesAgainst(conflicts, NO_FAILURES), at + 1 + 2 * count];
  }

  /** How many servers voted against with a conflict. */
  get conflicts(): number {
    return this.#conflicts.length;
  }

  /** Whether `server` voted against with a conflict (not a failure). */
  isConflict(server: number): boolean {
    return this.#conflicts.some((c) => c.server === server);
  }

  get size(): number {
    return this.#conflicts.length + this.#failures.size;
  }

  has(server: number): boolean {
    return this.isConflict(server) || this.#failures.has(server);
  }

  get(server: number): Error | undefined {
    return this.#all().get(server);
  }

  forEach(
    callback: (value: Error, key: number, map: ReadonlyMap<number, Error>) => void,
    thisArg?: unknown,
  ): void {
    for (const [key, value] of this.#all()) callback.call(thisArg, value, key, this);
  }

  entries(): MapIterator<[number, Error]> {
    return this.#all().entries();
  }

  keys(): MapIterator<number> {
    return this.#all().keys();
  }

  values(): MapIterator<Error> {
    return this.#all().values();
  }

  [Symbol.iterator](): MapIterator<[number, Error]> {
    return this.#all()[Symbol.iterator]();
  }

  get [Symbol.toStringTag](): string {
    return "Map";
  }

  [Symbol.for("Deno.customInspect")](
    inspect: (value: unknown, options: unknown) => string,
    options: unknown,
  ): string {
    return inspect(this.#all(), options);
  }

  [Symbol.for("nodejs.util.inspect.custom")](
    _depth: number,
    options: unknown,
    inspect: (value: unknown, options: unknown) => string,
  ): string {
    return inspect(this.#all(), options);
  }

  #all(): Map<number, Error> {
    if (this.#map === undefined) {
      this.#map = new Map();
      for (const { server, ttl } of this.#conflicts) {
        this.#map.set(server, new LockConflictError(server, ttl));
      }
      for (const [server, error] of this.#failures) this.#map.set(server, error);
    }
    return this.#map;
  }
}
