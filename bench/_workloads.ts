/**
 * The workloads W1–W6. Each runs one implementation on given servers for
 * one repetition (warm-up included) and returns its metrics, its errors and
 * the mutual-exclusion violations it saw. W1, W2, W4 (interleaved), the
 * acquire latency and W5 are here; W3 and handoffs in `_contention.ts`,
 * W6 in `_memory.ts`, what they share in `_cell.ts`.
 *
 * @module
 */

import { command } from "../scripts/redis.ts";
import {
  collect,
  cycle,
  Errors,
  FRESH,
  now,
  type Outcome,
  outcome,
  type Plan,
  prefix,
  type Workload,
} from "./_cell.ts";
import { Guard } from "./_guard.ts";
import type { Impl, Instance } from "./_impls.ts";
import { percentile, sleep } from "./_stats.ts";

export { failure, type Outcome, type Plan, type Workload } from "./_cell.ts";
export { contention, handoff, type HandoffPlan, probeNotify } from "./_contention.ts";
export { memory } from "./_memory.ts";

/** The loops and resources per lock of the throughput workloads (run {@linkcode interleaved}). */
export const THROUGHPUT_SHAPES: Partial<Record<Workload, { loops: number; width: number }>> = {
  W1: { loops: 1, width: 1 },
  W2: { loops: 64, width: 1 },
  W4: { loops: 1, width: 5 },
};

/** ms of one slice of an interleaved throughput cell. */
export const SLICE_MS = 50;

/**
 * W1, W2, W4 for several implementations at once: all are opened and warmed
 * up, then each measures `plan.measureMs` in slices of {@linkcode SLICE_MS},
 * taking turns (the order rotated every turn, from `rep` on). A machine
 * whose speed drifts (a noisy neighbour, a frequency change) then slows
 * every implementation alike, which a cell of one implementation after
 * another does not. (No GC is forced between slices: a forced full GC every
 * few slices makes V8 drop the compiled code of functions that did not run
 * in the last ones, and recompiling it would be measured.) Returns the
 * outcomes in the order of `impls`.
 */
export async function interleaved(
  impls: readonly Impl[],
  ports: readonly number[],
  plan: Plan,
  shape: { loops: number; width: number },
  rep: number,
): Promise<Outcome[]> {
  const opened: (Instance | Error)[] = [];
  for (const impl of impls) {
    opened.push(
      await impl.open(ports, FRESH).catch((error) =>
        error instanceof Error ? error : new Error(String(error))
      ),
    );
  }
  const n = impls.length;
  const guards = impls.map(() => new Guard());
  const errors = impls.map(() => new Errors());
  const ops = impls.map(() => 0);
  const elapsed = impls.map(() => 0);
  const turns = Math.max(1, Math.round(plan.measureMs / SLICE_MS));
  const slices = impls.map(() => new Array<number>(turns).fill(NaN));
  try {
    for (const [i, instance] of opened.entries()) {
      if (instance instanceof Error) errors[i]!.add(instance);
      else {
        const name = `${impls[i]!.id}:warm`;
        await cycle(instance, { ...shape, ms: plan.warmMs, name }, guards[i]!, errors[i]!);
      }
    }
    collect();
    for (let turn = 0; turn < turns; turn++) {
      for (let k = 0; k < n; k++) {
        const i = (k + turn + rep) % n;
        const instance = opened[i]!;
        if (instance instanceof Error || errors[i]!.count > 0) continue;
        const slice = await cycle(
          instance,
          { ...shape, ms: SLICE_MS, name: impls[i]!.id },
          guards[i]!,
          errors[i]!,
        );
        ops[i]! += slice.ops;
        elapsed[i]! += slice.elapsed;
        slices[i]![turn] = (slice.ops / slice.elapsed) * 1000;
      }
    }
    return impls.map((_, i) => {
      const instance = opened[i]!;
      const result = outcome(
        errors[i]!.count > 0 ? {} : { opsPerSec: (ops[i]! / elapsed[i]!) * 1000 },
        errors[i]!,
        instance instanceof Error ? [] : [instance],
        guards[i]!,
      );
      return { ...result, slices: slices[i]! };
    });
  } finally {
    for (const instance of opened) if (!(instance instanceof Error)) await instance.close();
  }
}

/**
 * Uncontended acquire latency: one loop of acquire + release on fresh keys
 * (one resource each) for `plan.measureMs` after a `plan.warmMs` warm-up;
 * percentiles of the acquire call alone. With `plan.idleMs`, the loop sleeps
 * that long before each acquire of the measurement, as the processes of a
 * handoff cell with that hold do between handoffs.
 */
export async function acquireLatency(
  impl: Impl,
  ports: readonly number[],
  plan: { readonly warmMs: number; readonly measureMs: number; readonly idleMs?: number },
): Promise<Outcome> {
  const instance = await impl.open(ports, FRESH);
  const guard = new Guard();
  const errors = new Errors();
  const shape = { loops: 1, width: 1 };
  try {
    await cycle(instance, { ...shape, ms: plan.warmMs, name: `${impl.id}:warm` }, guard, errors);
    collect();
    const latencies: number[] = [];
    const { ops } = await cycle(
      instance,
      {
        ...shape,
        ms: plan.measureMs,
        name: `${impl.id}:latency`,
        latencies,
        idleMs: plan.idleMs ?? 0,
      },
      guard,
      errors,
    );
    return outcome(
      {
        acquireP50: percentile(latencies, 50),
        acquireP99: percentile(latencies, 99),
        acquires: ops,
      },
      errors,
      [instance],
      guard,
    );
  } finally {
    await instance.close();
  }
}

/** Raw PTTL of `key` on every server. */
async function pttls(ports: readonly number[], key: string): Promise<number[]> {
  return await Promise.all(ports.map(async (port) => {
    const reply = await command(port, "PTTL", key);
    return Number(reply.slice(1).trim());
  }));
}

/**
 * W5: `using()` with a `lease`-ms lock held for `holdMs`: extensions and
 * their latency. The lock must still be on a majority at the end of the hold.
 */
export async function extension(
  impl: Impl,
  ports: readonly number[],
  options: { lease: number; threshold: number; holdMs: number },
): Promise<Outcome> {
  const instance = await impl.open(ports, { ...FRESH, threshold: options.threshold });
  const guard = new Guard();
  const errors = new Errors();
  const quorum = Math.floor(ports.length / 2) + 1;
  const hold = async (ms: number, name: string) => {
    const key = prefix(name);
    let lost = false;
    const result = await instance.using([key], options.lease, async (poll, signal) => {
      guard.enter([key]);
      const end = now() + ms;
      while (now() < end && !signal.aborted) {
        await sleep(5);
        poll();
      }
      if (signal.aborted) lost = true;
      const held = (await pttls(ports, key)).filter((ttl) => ttl > 0).length;
      if (held < quorum) lost = true;
      guard.exit([key]);
    });
    if (lost) errors.add(new Error(`the lock was lost during using() (${name})`));
    return result;
  };
  try {
    await hold(Math.min(300, options.holdMs), `${impl.id}:warm`);
    collect();
    const { extensions, latencies } = await hold(options.holdMs, `${impl.id}:using`);
    return outcome(
      {
        extensions,
        extensionP50: percentile(latencies, 50),
        extensionMax: latencies.length ? Math.max(...latencies) : NaN,
      },
      errors,
      [instance],
      guard,
    );
  } catch (error) {
    errors.add(error);
    return outcome({}, errors, [instance], guard);
  } finally {
    await instance.close();
  }
}
