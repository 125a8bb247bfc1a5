/**
 * What a lock costs the Redis servers, per implementation: the commands
 * sent (exact, from `INFO commandstats`), the servers' command time (the
 * `usec` of commandstats) and their CPU (`used_cpu_sys` + `used_cpu_user`
 * of `INFO cpu`), all summed over the servers, per lock (per grant in W3).
 *
 * Uncontended cells (W1, W4) run in interleaved slices of a fixed number of
 * locks, each slice between two readings of every server; a cell shows the
 * commands of a slice (the same in every slice, else the spread) and the
 * least time per lock over the slices: a server descheduled in mid-command
 * on a shared machine only ever makes a slice read slower. The contended
 * cell (W3) is 16 workers on one key for a fixed time, between two readings,
 * the least per grant over the repetitions. `INFO` itself is not counted,
 * and every reading waits until the servers have run what was sent to them.
 *
 * @module
 */

import { command } from "../scripts/redis.ts";
import type { Impl, Instance, Settings } from "./_impls.ts";
import { sleep } from "./_stats.ts";

/** Commands, command time and CPU of a set of servers at one instant. */
interface Reading {
  calls: number;
  usec: number;
  cpuUsec: number;
}

/** Reads every server once (`INFO commandstats cpu`), summed; `INFO` is left out. */
export async function readServers(ports: readonly number[]): Promise<Reading> {
  const infos = await Promise.all(
    ports.map((port) => command(port, "INFO", "commandstats", "cpu")),
  );
  const total: Reading = { calls: 0, usec: 0, cpuUsec: 0 };
  for (const info of infos) {
    for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
      if (m[1] === "info") continue;
      total.calls += Number(m[2]);
      total.usec += Number(m[3]);
    }
    const sys = Number(/^used_cpu_sys:([\d.]+)/m.exec(info)?.[1] ?? NaN);
    const user = Number(/^used_cpu_user:([\d.]+)/m.exec(info)?.[1] ?? NaN);
    total.cpuUsec += (sys + user) * 1e6;
  }
  return total;
}

/**
 * Reads the servers until two readings 10 ms apart agree on the commands
 * (at most 1 s): a server that fell behind (its requests settled without
 * it, on a quorum) has then run every command sent to it.
 */
export async function settledReading(ports: readonly number[]): Promise<Reading> {
  let last = await readServers(ports);
  for (let i = 0; i < 100; i++) {
    await sleep(10);
    const next = await readServers(ports);
    if (next.calls === last.calls) return next;
    last = next;
  }
  return last;
}

/** Per lock (or grant) between two readings. */
export interface Cost {
  commands: number;
  usec: number;
  cpuUsec: number;
}

const per = (a: Reading, b: Reading, n: number): Cost => ({
  commands: (b.calls - a.calls) / n,
  usec: (b.usec - a.usec) / n,
  cpuUsec: (b.cpuUsec - a.cpuUsec) / n,
});

/** What a cell found for one implementation. */
export interface CostSummary {
  /** Commands per lock: the least and the most over slices (equal when exact). */
  commandsMin: number;
  commandsMax: number;
  /** Least command time per lock, µs. */
  usec: number;
  /** Least CPU per lock, µs. */
  cpuUsec: number;
  /** Every slice. */
  slices: Cost[];
  /** The first error, when the implementation failed. */
  error?: string;
}

function summarize(slices: Cost[], error?: string): CostSummary {
  const least = (f: (c: Cost) => number) => slices.length ? Math.min(...slices.map(f)) : NaN;
  const most = (f: (c: Cost) => number) => slices.length ? Math.max(...slices.map(f)) : NaN;
  return {
    commandsMin: least((c) => c.commands),
    commandsMax: most((c) => c.commands),
    usec: least((c) => c.usec),
    cpuUsec: least((c) => c.cpuUsec),
    slices,
    ...(error ? { error } : {}),
  };
}

const FRESH: Settings = { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 };
const LEASE = 10_000;

let sequence = 0;
const prefix = (name: string) => `bench:cost:${name}:${Date.now().toString(36)}:${++sequence}`;

/** `count` acquire + release in one loop on fresh keys of `width` resources. */
async function locks(instance: Instance, count: number, width: number, name: string) {
  const base = prefix(name);
  for (let i = 0; i < count; i++) {
    const key = `${base}:${i}`;
    const keys = width === 1 ? [key] : Array.from({ length: width }, (_, j) => `${key}:${j}`);
    const held = await instance.acquire(keys, LEASE);
    await held.release();
  }
}

/**
 * W1 or W4: every implementation opened and warmed up, then `turns` turns in
 * which each (order rotated) runs `count` locks between two readings.
 * Returns a summary per implementation, in the order of `impls`.
 */
export async function uncontendedCost(
  impls: readonly Impl[],
  ports: readonly number[],
  shape: { width: number; count: number; turns: number },
): Promise<CostSummary[]> {
  const opened: Instance[] = [];
  const slices = impls.map((): Cost[] => []);
  const errors = impls.map((): string | undefined => undefined);
  try {
    for (const impl of impls) opened.push(await impl.open(ports, FRESH));
    for (const [i, instance] of opened.entries()) {
      await locks(instance, shape.count, shape.width, `${impls[i]!.id}:warm`);
    }
    for (let turn = 0; turn < shape.turns; turn++) {
      for (let k = 0; k < impls.length; k++) {
        const i = (k + turn) % impls.length;
        if (errors[i]) continue;
        const before = await settledReading(ports);
        try {
          await locks(opened[i]!, shape.count, shape.width, impls[i]!.id);
        } catch (error) {
          errors[i] = String(error);
          continue;
        }
        slices[i]!.push(per(before, await settledReading(ports), shape.count));
      }
    }
  } finally {
    await Promise.all(opened.map((o) => o.close()));
  }
  return impls.map((_, i) => summarize(slices[i]!, errors[i]));
}

/**
 * W3: 16 workers (each its own instance) contend for one key (hold 1 ms,
 * retry every 10 ms, no jitter) for `ms` after a warm-up; commands, command
 * time and CPU per grant between readings taken when every worker stopped.
 */
export async function contendedCost(
  impl: Impl,
  ports: readonly number[],
  shape: { ms: number; warmMs: number; wait?: "poll" | "notify" },
): Promise<Cost & { grants: number }> {
  const settings: Settings = {
    retryCount: -1,
    retryDelay: 10,
    retryJitter: 0,
    threshold: 100,
    ...(shape.wait ? { wait: shape.wait } : {}),
  };
  const workers = await Promise.all(Array.from({ length: 16 }, () => impl.open(ports, settings)));
  const key = prefix(`${impl.id}:contended`);
  const run = async (ms: number) => {
    const end = performance.now() + ms;
    let grants = 0;
    await Promise.all(workers.map(async (worker) => {
      while (performance.now() < end) {
        const held = await worker.acquire([key], 5_000);
        grants++;
        await sleep(1);
        await held.release();
      }
    }));
    return grants;
  };
  try {
    await run(shape.warmMs);
    const before = await settledReading(ports);
    const grants = await run(shape.ms);
    return { ...per(before, await settledReading(ports), grants), grants };
  } finally {
    await Promise.all(workers.map((w) => w.close()));
  }
}

/** Least of each figure over repetitions of {@linkcode contendedCost}. */
export function leastOf(runs: readonly (Cost & { grants: number })[]): CostSummary {
  return summarize(runs.map(({ commands, usec, cpuUsec }) => ({ commands, usec, cpuUsec })));
}

/** The cells of the server-cost section. */
const COST_CELLS = [
  { label: "W1 · 1 server", servers: 1, width: 1, count: 200 },
  { label: "W1 · 3 servers", servers: 3, width: 1, count: 200 },
  { label: "W4 · 3 servers", servers: 3, width: 5, count: 100 },
  { label: "W3 · 3 servers", servers: 3, width: 1, count: 0 },
] as const;

/** One row of the server-cost table. */
export interface CostRow {
  readonly cell: string;
  readonly impl: Impl;
  readonly cost: CostSummary;
}

/** What the server-cost section found. */
export interface ServerCost {
  readonly rows: readonly CostRow[];
  /** Markdown. */
  readonly section: string;
}

const fmt = (n: number, digits = 1) => Number.isFinite(n) ? n.toFixed(digits) : "–";

function commandsCell(c: CostSummary): string {
  if (!Number.isFinite(c.commandsMin)) return "–";
  if (c.commandsMin === c.commandsMax) {
    return Number.isInteger(c.commandsMin) ? String(c.commandsMin) : fmt(c.commandsMin);
  }
  return `${fmt(c.commandsMin)}–${fmt(c.commandsMax)}`;
}

/**
 * Measures every cell for the implementations `implsFor` gives (W3 gets
 * each implementation's wait mode from `waitOf`), on `ports(servers)`.
 */
export async function benchServerCost(
  ports: (servers: number) => readonly number[],
  implsFor: (cell: "W1" | "W3" | "W4") => readonly Impl[],
  plan: { quick: boolean; waitOf: (impl: Impl) => "poll" | "notify" | undefined },
): Promise<ServerCost> {
  const rows: CostRow[] = [];
  const turns = plan.quick ? 4 : 10;
  for (const cell of COST_CELLS) {
    const workload = cell.count === 0 ? "W3" : cell.width > 1 ? "W4" : "W1";
    const impls = implsFor(workload);
    let costs: CostSummary[];
    if (workload === "W3") {
      costs = [];
      for (const impl of impls) {
        const runs: (Cost & { grants: number })[] = [];
        let error: string | undefined;
        for (let rep = 0; rep < (plan.quick ? 1 : 3) && !error; rep++) {
          const wait = plan.waitOf(impl);
          const shape = { ms: plan.quick ? 600 : 1_000, warmMs: 300, ...(wait ? { wait } : {}) };
          await contendedCost(impl, ports(cell.servers), shape).then(
            (run) => runs.push(run),
            (e) => error = String(e),
          );
        }
        costs.push(error ? summarize([], error) : leastOf(runs));
      }
    } else {
      costs = await uncontendedCost(impls, ports(cell.servers), { ...cell, turns });
    }
    impls.forEach((impl, i) => {
      const cost = costs[i]!;
      rows.push({ cell: cell.label, impl, cost });
      console.error(
        `cost ${cell.label.padEnd(15)} ${impl.label.padEnd(32)} ${
          cost.error
            ? `FAILED ${cost.error}`
            : `${commandsCell(cost)} commands, ${fmt(cost.usec)} µs command time, ${
              fmt(cost.cpuUsec)
            } µs CPU`
        }`,
      );
    });
  }
  const head = [
    "cell",
    "implementation",
    "commands",
    "command time µs",
    "server CPU µs",
    "command time ÷ floor",
  ];
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  const floorOf = (r: CostRow) =>
    rows.find((f) => f.cell === r.cell && f.impl.id === `floor-${r.impl.client}`)?.cost;
  const table = [
    line(head),
    line(head.map(() => "---")),
    ...rows.map((r) => {
      const floor = floorOf(r);
      return line([
        r.cell,
        r.impl.label,
        r.cost.error ? `FAILED: ${r.cost.error}` : commandsCell(r.cost),
        fmt(r.cost.usec),
        fmt(r.cost.cpuUsec),
        floor && r.impl.role !== "floor" ? `${fmt(r.cost.usec / floor.usec, 2)}×` : "",
      ]);
    }),
  ];
  const section = [
    "## What a lock costs the servers",
    "",
    "Per acquire + release (W3: per grant), summed over the servers: commands sent (exact; a " +
    "range when slices differed), the least command time (`INFO commandstats` usec) and server " +
    `CPU (\`INFO cpu\`) over ${turns} interleaved slices (W1: 200 locks, W4: 100; W3: least of ` +
    `${plan.quick ? 1 : 3} runs of 16 workers).`,
    "",
    ...table,
  ].join("\n");
  return { rows, section };
}
