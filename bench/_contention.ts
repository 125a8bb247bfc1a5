/**
 * The contended workloads: W3 (workers on one key), the handoff cell, and
 * the probe of notified waiting.
 *
 * @module
 */

import { collect, Errors, now, type Outcome, outcome, type Plan, prefix } from "./_cell.ts";
import { Guard } from "./_guard.ts";
import type { Impl, Instance, Settings } from "./_impls.ts";
import { percentile, sleep } from "./_stats.ts";

/** What workers contending for one key saw in one phase (grants inside the phase only). */
interface Contended {
  grants: number;
  /** Grants to another worker than the one before, the first grant of the phase included. */
  changes: number;
  /** Grants to another worker than the previous holder in this phase. */
  handoffs: number;
  /** ms from calling acquire to its grant, per grant. */
  waits: number[];
  /** ms from the previous holder calling release to the grant, per handoff. */
  handoffLatencies: number[];
  /** Acquires that gave up after the implementation's own retries ({@linkcode Impl.gaveUp}). */
  gaveUps: number;
}

/**
 * Every instance is a worker that, until `ms` have passed, acquires `key`,
 * holds it `holdMs` (0: releases at once, without yielding), releases it and
 * waits `thinkMs`. A worker stops at its first error; one that gave up asks
 * again. Grants after the end (while the others finish) are not counted.
 */
async function contend(
  impl: Impl,
  instances: readonly Instance[],
  key: string,
  shape: { ms: number; holdMs: number; thinkMs: number },
  guard: Guard,
  errors: Errors,
): Promise<Contended> {
  const end = now() + shape.ms;
  const seen: Contended = {
    grants: 0,
    changes: 0,
    handoffs: 0,
    waits: [],
    handoffLatencies: [],
    gaveUps: 0,
  };
  let owner = -1;
  let releaseCalled = NaN;
  await Promise.all(instances.map(async (instance, worker) => {
    while (now() < end) {
      const asked = now();
      let held;
      try {
        held = await instance.acquire([key], 5_000);
      } catch (error) {
        if (impl.gaveUp?.(error)) {
          if (now() <= end) seen.gaveUps++;
          continue;
        }
        errors.add(error);
        return;
      }
      const granted = now();
      guard.enter([key]);
      if (granted <= end) {
        seen.grants++;
        seen.waits.push(granted - asked);
        if (owner !== worker) seen.changes++;
        if (owner !== worker && owner !== -1) {
          seen.handoffs++;
          seen.handoffLatencies.push(granted - releaseCalled);
        }
      }
      owner = worker;
      if (shape.holdMs > 0) await sleep(shape.holdMs);
      guard.exit([key]);
      releaseCalled = now();
      try {
        await held.release();
      } catch (error) {
        errors.add(error);
        return;
      }
      if (shape.thinkMs > 0) await sleep(shape.thinkMs);
    }
  }));
  return seen;
}

/** Opens `workers` instances of `impl` (each with its own connections); closes them all on failure. */
async function openWorkers(
  impl: Impl,
  ports: readonly number[],
  settings: Settings,
  workers: number,
): Promise<Instance[]> {
  const settled = await Promise.allSettled(
    Array.from({ length: workers }, () => impl.open(ports, settings)),
  );
  const opened = settled.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  const failed = settled.find((s) => s.status === "rejected");
  if (failed) {
    await Promise.all(opened.map((i) => i.close()));
    throw (failed as PromiseRejectedResult).reason;
  }
  return opened;
}

/**
 * Opens `workers` instances of `impl`, lets them contend for `key` for
 * `warmMs`, collects garbage, contends again for `measureMs`, and returns the
 * outcome with the metrics `measure` makes of what that phase saw.
 */
async function contendedCell(
  impl: Impl,
  ports: readonly number[],
  settings: Settings,
  cell: {
    workers: number;
    key: string;
    holdMs: number;
    thinkMs: number;
    warmMs: number;
    measureMs: number;
  },
  measure: (seen: Contended, seconds: number) => Record<string, number>,
): Promise<Outcome> {
  const instances = await openWorkers(impl, ports, settings, cell.workers);
  const guard = new Guard();
  const errors = new Errors();
  const shape = { holdMs: cell.holdMs, thinkMs: cell.thinkMs };
  try {
    await contend(impl, instances, cell.key, { ...shape, ms: cell.warmMs }, guard, errors);
    collect();
    const seen = await contend(
      impl,
      instances,
      cell.key,
      { ...shape, ms: cell.measureMs },
      guard,
      errors,
    );
    return outcome(measure(seen, cell.measureMs / 1000), errors, instances, guard);
  } finally {
    await Promise.all(instances.map((i) => i.close()));
  }
}

/** W3: workers with their own connections contend for one key. */
export function contention(
  impl: Impl,
  ports: readonly number[],
  plan: Plan,
  options: { workers: number; retryDelay: number; wait?: "poll" | "notify" },
): Promise<Outcome> {
  const settings: Settings = {
    retryCount: -1,
    retryDelay: options.retryDelay,
    retryJitter: 0,
    threshold: 100,
    ...(options.wait ? { wait: options.wait } : {}),
  };
  return contendedCell(impl, ports, settings, {
    workers: options.workers,
    key: prefix(`${impl.id}:contended`),
    holdMs: plan.holdMs,
    thinkMs: plan.thinkMs,
    warmMs: plan.warmMs,
    measureMs: plan.contentionMs,
  }, (seen, seconds) => ({
    grantsPerSec: seen.grants / seconds,
    ownerChangesPerSec: seen.changes / seconds,
    waitP50: percentile(seen.waits, 50),
    waitP99: percentile(seen.waits, 99),
  }));
}

/** Durations and shape of a handoff cell. */
export interface HandoffPlan {
  readonly workers: number;
  readonly warmMs: number;
  readonly measureMs: number;
  /** ms each grant is held; 0 releases at once. */
  readonly holdMs: number;
}

/**
 * Handoffs: `plan.workers` workers, each with its own instance (and
 * connections), contend for one fresh key with a 5 s lease and no think
 * time. A handoff is a grant to another worker than the previous holder;
 * its latency runs from the previous holder calling release to the grant.
 * Acquires that gave up after the implementation's own retries are counted
 * (`gaveUps`) and asked again; any other error fails the cell.
 */
export function handoff(
  impl: Impl,
  ports: readonly number[],
  settings: Settings,
  plan: HandoffPlan,
): Promise<Outcome> {
  return contendedCell(impl, ports, settings, {
    ...plan,
    key: prefix(`${impl.id}:handoff:${plan.holdMs}`),
    thinkMs: 0,
  }, (seen, seconds) => ({
    handoffsPerSec: seen.handoffs / seconds,
    grantsPerSec: seen.grants / seconds,
    waitP50: percentile(seen.waits, 50),
    waitP99: percentile(seen.waits, 99),
    handoffP50: percentile(seen.handoffLatencies, 50),
    handoffP99: percentile(seen.handoffLatencies, 99),
    handoffs: seen.handoffs,
    grants: seen.grants,
    gaveUps: seen.gaveUps,
  }));
}

/**
 * Whether `wait: "notify"` works: a waiter with a 2 s retry delay must get a
 * lock well within 1 s of its release by another Redlock.
 */
export async function probeNotify(impl: Impl, ports: readonly number[]): Promise<boolean> {
  const settings: Settings = {
    retryCount: -1,
    retryDelay: 2_000,
    retryJitter: 0,
    threshold: 100,
    wait: "notify",
  };
  const [holder, waiter] = await Promise.all([
    impl.open(ports, settings),
    impl.open(ports, settings),
  ]);
  try {
    const key = prefix("probe");
    const held = await holder.acquire([key], 10_000);
    const waiting = waiter.acquire([key], 10_000);
    await sleep(100);
    const released = now();
    await held.release();
    const got = await waiting;
    const waited = now() - released;
    await got.release();
    return waited < 1_000;
  } finally {
    await Promise.all([holder.close(), waiter.close()]);
  }
}
