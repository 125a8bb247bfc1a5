/**
 * The workloads W1–W6. Each runs one implementation on given servers for
 * one repetition (warm-up included) and returns its metrics, its errors and
 * the mutual-exclusion violations it saw.
 *
 * @module
 */

import { command } from "../scripts/redis.ts";
import { Guard } from "./_guard.ts";
import type { Impl, Instance, Settings } from "./_impls.ts";
import { percentile, sleep } from "./_stats.ts";

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

const now = (): number => performance.now();

/** Retries are never needed on fresh keys; a failed attempt is an error. */
const FRESH: Settings = { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 };

/** The lease of a fresh-key lock, ms. */
const LEASE = 10_000;

class Errors {
  count = 0;
  first?: string;
  add(error: unknown): void {
    this.count++;
    this.first ??= error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  }
}

function outcome(
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

function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
}

let sequence = 0;
/** A key prefix no earlier cell used. */
const prefix = (name: string): string => `bench:${name}:${Date.now().toString(36)}:${++sequence}`;

/**
 * Runs `loops` loops of acquire + release on fresh keys (`width` resources
 * per lock) until `ms` have passed or `cycles` were started; stops a loop at
 * its first error.
 */
async function cycle(
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

/**
 * Timers created through the global timer functions (as the library, Deno
 * code, calls them) and still pending.
 */
class TimerWatch {
  readonly #live = new Set<unknown>();
  #restore: (() => void) | undefined;

  start(): void {
    type Fn = (...args: unknown[]) => unknown;
    const g = globalThis as unknown as Record<string, Fn>;
    const saved = {
      setTimeout: g.setTimeout!,
      clearTimeout: g.clearTimeout!,
      setInterval: g.setInterval!,
      clearInterval: g.clearInterval!,
    };
    const live = this.#live;
    g.setTimeout = (fn: unknown, ms?: unknown, ...args: unknown[]) => {
      const id = saved.setTimeout(
        (...a: unknown[]) => {
          live.delete(id);
          (fn as Fn)(...a);
        },
        ms,
        ...args,
      );
      live.add(id);
      return id;
    };
    g.setInterval = (fn: unknown, ms?: unknown, ...args: unknown[]) => {
      const id = saved.setInterval(fn, ms, ...args);
      live.add(id);
      return id;
    };
    g.clearTimeout = (id?: unknown) => {
      live.delete(id);
      return saved.clearTimeout(id);
    };
    g.clearInterval = (id?: unknown) => {
      live.delete(id);
      return saved.clearInterval(id);
    };
    this.#restore = () => Object.assign(g, saved);
  }

  /** Stops watching; returns how many timers are still pending. */
  stop(): number {
    this.#restore?.();
    this.#restore = undefined;
    return this.#live.size;
  }
}

/** `connected_clients` of every server. */
async function connectedClients(ports: readonly number[]): Promise<number> {
  let total = 0;
  for (const port of ports) {
    const info = await command(port, "INFO", "clients");
    total += Number(/connected_clients:(\d+)/.exec(info)?.[1] ?? NaN);
  }
  return total;
}

const MiB = 1024 * 1024;

/**
 * W6: `cycles` acquire/release cycles (16 loops) after a warm-up; heap
 * before and after a forced GC, timers still pending afterwards, and
 * connections still open on the servers after the clients were closed.
 */
export async function memory(
  impl: Impl,
  ports: readonly number[],
  plan: Plan,
): Promise<Outcome> {
  const gc = (globalThis as { gc?: () => void }).gc;
  const errors = new Errors();
  const guard = new Guard();
  if (!gc) {
    errors.add(new Error("W6 needs --v8-flags=--expose-gc"));
    return outcome({}, errors, [], guard);
  }
  const settle = async () => {
    for (let i = 0; i < 3; i++) {
      await sleep(20);
      gc();
    }
    return Deno.memoryUsage().heapUsed;
  };
  const before = await connectedClients(ports);
  const instance = await impl.open(ports, FRESH);
  const shape = { loops: 16, width: 1 };
  const watch = new TimerWatch();
  let metrics: Record<string, number> = {};
  try {
    await cycle(instance, { ...shape, cycles: 5_000, name: `${impl.id}:warm` }, guard, errors);
    const heapBefore = await settle();
    watch.start();
    const { ops, elapsed } = await cycle(
      instance,
      { ...shape, cycles: plan.memoryCycles, name: `${impl.id}:memory` },
      guard,
      errors,
    );
    await sleep(50);
    const timersLeft = watch.stop();
    const heapAfter = await settle();
    metrics = {
      cycles: ops,
      cyclesPerSec: (ops / elapsed) * 1000,
      heapBeforeMiB: heapBefore / MiB,
      heapAfterMiB: heapAfter / MiB,
      heapGrowthKiB: (heapAfter - heapBefore) / 1024,
      timersLeft,
    };
  } finally {
    watch.stop();
    await instance.close();
  }
  let after = await connectedClients(ports);
  for (let i = 0; i < 50 && after !== before; i++) {
    await sleep(20);
    after = await connectedClients(ports);
  }
  metrics.connectionsLeft = after - before;
  return outcome(metrics, errors, [instance], guard);
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
