/** The monotonic clock every decision uses. */
export const now = (): number => performance.now();

const ORIGIN = performance.timeOrigin;

/** Converts a monotonic instant to the `Date.now()` time base. */
export const toEpoch = (monotonic: number): number => ORIGIN + monotonic;

/**
 * Turns ms into command arguments, keeping the last one: one per place that
 * sends them, as each mostly sends the same lease or timeout as before.
 */
export class MsArg {
  #ms = NaN;
  #arg = "";

  /** `ms` as a command argument. */
  of(ms: number): string {
    if (ms !== this.#ms) {
      this.#arg = String(ms);
      this.#ms = ms;
    }
    return this.#arg;
  }
}

/** The clock drift allowance for a lease of `duration` ms: `round(factor × duration) + 2`. */
export function drift(duration: number, driftFactor: number): number {
  return Math.round(driftFactor * duration) + 2;
}

/**
 * The monotonic instant until which a lease of `duration` ms, whose attempt
 * started at `start`, is valid: `start + duration − drift`.
 */
export function validUntil(start: number, duration: number, driftFactor: number): number {
  return start + duration - drift(duration, driftFactor);
}
