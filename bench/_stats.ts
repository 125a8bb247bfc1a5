/**
 * Small statistics over repetitions and samples.
 *
 * @module
 */

/** The median; NaN for no values. */
export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

/** The `p`-th percentile (nearest rank); NaN for no values. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  if (p === 50 && sorted.length % 2 === 0) {
    const i = sorted.length / 2;
    return (sorted[i - 1]! + sorted[i]!) / 2;
  }
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** Sleeps `ms` ms. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
