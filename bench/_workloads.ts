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
  options: { loops: number; width: number; ms?: number; cycles?: number; name: string },
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
          const held = await instance.acquire(keys, LEASE);
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

/** W1 (1 loop, 1 resource), W2 (64 loops), W4 (1 loop, 5 resources): acquire/release per second. */
export async function throughput(
  impl: Impl,
  ports: readonly number[],
  plan: Plan,
  shape: { loops: number; width: number },
): Promise<Outcome> {
  const instance = await impl.open(ports, FRESH);
  const guard = new Guard();
  const errors = new Errors();
  try {
    await cycle(instance, { ...shape, ms: plan.warmMs, name: `${impl.id}:warm` }, guard, errors);
    collect();
    const { ops, elapsed } = await cycle(
      instance,
      { ...shape, ms: plan.measureMs, name: impl.id },
      guard,
      errors,
    );
    return outcome({ opsPerSec: (ops / elapsed) * 1000 }, errors, [instance], guard);
  } finally {
    await instance.close();
  }
}

/** W3: workers with their own connections contend for one key. */
export async function contention(
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
  const instances = await Promise.all(
    Array.from({ length: options.workers }, () => impl.open(ports, settings)),
  );
  const guard = new Guard();
  const errors = new Errors();
  const key = prefix(`${impl.id}:contended`);
  const phase = async (ms: number) => {
    const end = now() + ms;
    const waits: number[] = [];
    let grants = 0;
    let changes = 0;
    let owner = -1;
    await Promise.all(instances.map(async (instance, worker) => {
      while (now() < end) {
        const asked = now();
        let held;
        try {
          held = await instance.acquire([key], 5_000);
        } catch (error) {
          errors.add(error);
          return;
        }
        const granted = now();
        guard.enter([key]);
        if (granted <= end) {
          grants++;
          waits.push(granted - asked);
          if (owner !== worker) changes++;
        }
        owner = worker;
        await sleep(plan.holdMs);
        guard.exit([key]);
        try {
          await held.release();
        } catch (error) {
          errors.add(error);
          return;
        }
        if (plan.thinkMs > 0) await sleep(plan.thinkMs);
      }
    }));
    return { grants, changes, waits };
  };
  try {
    await phase(plan.warmMs);
    collect();
    const { grants, changes, waits } = await phase(plan.contentionMs);
    const seconds = plan.contentionMs / 1000;
    return outcome(
      {
        grantsPerSec: grants / seconds,
        ownerChangesPerSec: changes / seconds,
        waitP50: percentile(waits, 50),
        waitP99: percentile(waits, 99),
      },
      errors,
      instances,
      guard,
    );
  } finally {
    await Promise.all(instances.map((i) => i.close()));
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
