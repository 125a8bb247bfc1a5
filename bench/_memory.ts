/**
 * W6: heap, timers and connections left after many cycles.
 *
 * @module
 */

import { command } from "../scripts/redis.ts";
import { cycle, Errors, FRESH, type Outcome, outcome, type Plan } from "./_cell.ts";
import { Guard } from "./_guard.ts";
import type { Impl } from "./_impls.ts";
import { sleep } from "./_stats.ts";

/**
 * Timers created through the global timer functions (as the library, Deno
 * code, calls them) and still pending; and `AbortSignal.timeout()` signals
 * made, which Deno keeps alive until they fire, replied or not (node-redis 6
 * makes one per command unless told not to).
 */
class TimerWatch {
  readonly #live = new Set<unknown>();
  #restore: (() => void) | undefined;
  #signals = 0;

  /** `AbortSignal.timeout()` calls since {@linkcode TimerWatch.start}. */
  get timeoutSignals(): number {
    return this.#signals;
  }

  start(): void {
    type Fn = (...args: unknown[]) => unknown;
    const g = globalThis as unknown as Record<string, Fn>;
    const saved = {
      setTimeout: g.setTimeout!,
      clearTimeout: g.clearTimeout!,
      setInterval: g.setInterval!,
      clearInterval: g.clearInterval!,
    };
    const savedSignal = AbortSignal.timeout;
    AbortSignal.timeout = (ms: number) => {
      this.#signals++;
      return savedSignal.call(AbortSignal, ms);
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
    this.#restore = () => {
      Object.assign(g, saved);
      AbortSignal.timeout = savedSignal;
    };
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
 * before and after a forced GC, timers still pending afterwards,
 * `AbortSignal.timeout()` signals made per cycle (a client's share of the
 * heap: each lives its full timeout), and connections still open on the
 * servers after the clients were closed.
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
      timeoutSignalsPerCycle: watch.timeoutSignals / ops,
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
