/**
 * What every workload cell shares: its outcome, its plan, the errors it
 * counts, fresh key prefixes, and the loop of acquire + release on fresh
 * keys that W1, W2, W4 and W6 run.
 *
 * @module
 */

import type { Guard } from "./_guard.ts";
import type { Instance, Settings } from "./_impls.ts";
import { sleep } from "./_stats.ts";

/** The workload names. */
export type Workload = "W1" | "W2" | "W3" | "W4" | "W5" | "W6";

/** What one repetition of one cell measured. */
export interface Outcome {
  metrics: Record<string, number>;
  errors: number;
  violations: number;
  /** The first error, for the report. */
  error?: string;
  /** Interleaved cells: ops/s of each slice, by turn (a turn without a slice is NaN). */
  slices?: number[];
}

/** The outcome of a cell that could not run: one error, `error`. */
export function failure(error: unknown): Outcome {
  return {
    metrics: {},
    errors: 1,
    violations: 0,
    error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
  };
}

/** Durations and sizes of a run. */
export interface Plan {
  readonly reps: number;
  readonly warmMs: number;
  readonly measureMs: number;
  readonly contentionMs: number;
  readonly holdMs: number;
  /** ms a W3 worker waits after a release before it asks again. */
  readonly thinkMs: number;
  readonly memoryCycles: number;
}

/** Monotonic ms. */
export const now = (): number => performance.now();

/** Retries are never needed on fresh keys; a failed attempt is an error. */
export const FRESH: Settings = { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 };

/** The lease of a fresh-key lock, ms. */
export const LEASE: number = 10_000;

/** The errors a cell saw: how many, and the first as the report shows it. */
export class Errors {
  count = 0;
  first?: string;
  /** Counts `error`; keeps it when it is the first. */
  add(error: unknown): void {
    this.count++;
    this.first ??= error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  }
}

/** A cell's outcome: its metrics, and the errors it and its instances saw. */
export function outcome(
  metrics: Record<string, number>,
  errors: Errors,
  instances: readonly Instance[],
  guard: Guard,
): Outcome {
  let count = errors.count;
  let first = errors.first;
  for (const i of instances) {
    count += i.errors.count;
    first ??= i.errors.first;
  }
  return {
    metrics,
    errors: count,
    violations: guard.violations,
    ...(first === undefined ? {} : { error: first }),
  };
}

/** A forced GC, when `--expose-gc` allows it. */
export function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
}

let sequence = 0;
/** A key prefix no earlier cell used. */
export const prefix = (name: string): string =>
  `bench:${name}:${Date.now().toString(36)}:${++sequence}`;

/**
 * Runs `loops` loops of acquire + release on fresh keys (`width` resources
 * per lock) until `ms` have passed or `cycles` were started; stops a loop at
 * its first error.
 */
export async function cycle(
  instance: Instance,
  options: {
    loops: number;
    width: number;
    ms?: number;
    cycles?: number;
    name: string;
    /** Gets the ms of every acquire call that succeeded. */
    latencies?: number[];
    /** ms a loop sleeps before each acquire (0: none). */
    idleMs?: number;
  },
  guard: Guard,
  errors: Errors,
): Promise<{ ops: number; elapsed: number }> {
  const { loops, width, name } = options;
  const base = prefix(name);
  const start = now();
  const end = options.ms === undefined ? Infinity : start + options.ms;
  const limit = options.cycles ?? Infinity;
  let started = 0;
  let ops = 0;
  await Promise.all(
    Array.from({ length: loops }, async (_, loop) => {
      for (let i = 0; now() < end && started < limit; i++) {
        started++;
        const key = `${base}:${loop}:${i}`;
        const keys = width === 1 ? [key] : Array.from({ length: width }, (_, j) => `${key}:${j}`);
        try {
          if (options.idleMs) await sleep(options.idleMs);
          const asked = now();
          const held = await instance.acquire(keys, LEASE);
          options.latencies?.push(now() - asked);
          guard.enter(keys);
          guard.exit(keys);
          await held.release();
          ops++;
        } catch (error) {
          errors.add(error);
          return;
        }
      }
    }),
  );
  return { ops, elapsed: now() - start };
}
