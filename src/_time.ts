/** The monotonic clock every decision uses. */
export const now = (): number => performance.now();

const ORIGIN = performance.timeOrigin;

/** Converts a monotonic instant to the `Date.now()` time base. */
export const toEpoch = (monotonic: number): number => ORIGIN + monotonic;

let lastMs = NaN;
let lastArg = "";

/**
 * `ms` as a command argument. The last conversion is kept: most calls pass
 * the same lease or timeout as the one before.
 */
export function msArg(ms: number): string {
  if (ms !== lastMs) {
    lastArg = String(ms);
    lastMs = ms;
  }
  return lastArg;
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
