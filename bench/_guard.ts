/**
 * The mutual-exclusion check every cell runs: a holder count per resource
 * that must never exceed 1.
 *
 * @module
 */

/** Counts holders per resource and every time a second one came in. */
export class Guard {
  readonly #holders = new Map<string, number>();
  /** How many times a resource had more than one holder. */
  violations = 0;

  /** A holder of `keys` comes in. */
  enter(keys: readonly string[]): void {
    for (const key of keys) {
      const count = (this.#holders.get(key) ?? 0) + 1;
      if (count > 1) this.violations++;
      this.#holders.set(key, count);
    }
  }

  /** The holder of `keys` goes out (before it releases). */
  exit(keys: readonly string[]): void {
    for (const key of keys) {
      const count = (this.#holders.get(key) ?? 0) - 1;
      if (count <= 0) this.#holders.delete(key);
      else this.#holders.set(key, count);
    }
  }
}
