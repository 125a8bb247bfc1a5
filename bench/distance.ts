/**
 * `deno task bench:distance [--quick] [--reps=N] [--delays=0,0.25,1] [--json=path]`
 *
 * The benchmark's workloads at a distance: 3 Redis servers
 * (loopback, no persistence) each behind a fault proxy that adds a one-way
 * delay (0, 0.25 and 1 ms by default) to every byte both ways; the proxies
 * run in a child process (scripts/fault_proxy.ts), so that their work does
 * not share a thread with what is measured. At each delay:
 *
 * - RTT: the median of 300 PINGs through a proxy with ioredis: one round
 *   trip as a client sees it, the unit of every "÷ RTT" column;
 * - W1 (one loop of acquire + release, fresh keys) and W4 (five resources
 *   per lock) for @x/redlock (ioredis), node-redlock and the floor, in
 *   interleaved slices, each measured for at least {@linkcode THROUGHPUT_RTTS}
 *   round trips (a lock takes two: at 1 ms one way that is 4 s, not 1 s, as
 *   its ratio to the floor is read to 1 %); shown as ops/s, ms per op ÷ RTT,
 *   and ÷ the floor;
 * - W1 on the wire (bench/_wire.ts): @x/redlock and the floor taking turns
 *   lock by lock with every request and reply time-stamped: requests per
 *   lock, and per step the process's time before the first request and after
 *   the quorum's reply, and the network's in between;
 * - the contended cell (W3: 16 workers, one key, 1 ms hold, 10 ms retry
 *   delay) for @x/redlock notify and poll, node-redlock, the floor;
 * - the handoff cell (16 workers, one key, hold 0, 5 s lease): @x/redlock
 *   notify and poll with its default 200 + 0..100 ms retry delay,
 *   node-redlock with its defaults, and the floor polling 200 + 0..100 ms;
 *   handoff p50/p99 (release called → next grant) ÷ RTT.
 *
 * Targets at the largest delay: @x/redlock (notify) handoff p50 ≤ 1.5 RTT,
 * W1 @x/redlock ÷ floor ≥ 0.98. Medians of the repetitions; every
 * repetition goes to docs/distance.json.
 *
 * @module
 */

import { Redis } from "ioredis";
import { ProxyProcess } from "../scripts/fault_proxy.ts";
import { startServers } from "../scripts/redis.ts";
import { stopOnSignal } from "./_signals.ts";
import { type Impl, IMPLS, NODE_REDLOCK_DEFAULTS, type Settings, xImpl } from "./_impls.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import { intArg, parseArgs } from "./_args.ts";
import { table, type Target, targetTable } from "./_report.ts";
import { median } from "./_stats.ts";
import { contention, handoff, interleaved, type Outcome, type Plan } from "./_workloads.ts";
import { wireTrace } from "./_wire.ts";

const args = parseArgs(Deno.args, {
  flags: ["quick"],
  values: ["reps", "delays", "json"],
  usage: "the top of bench/distance.ts",
});
const quick = args.has("quick");
const reps = intArg(args, "reps", quick ? 1 : 2);
const delays = (args.get("delays") ?? "0,0.25,1").split(",").map(Number);
if (delays.some((d) => !(d >= 0))) throw new RangeError(`--delays must be ≥ 0 ms, got ${delays}`);
const jsonPath = args.get("json") ?? "docs/distance.json";

const plan: Plan = {
  reps,
  warmMs: quick ? 200 : 300,
  measureMs: quick ? 500 : 1_000,
  contentionMs: quick ? 800 : 1_500,
  holdMs: 1,
  thinkMs: 0,
  memoryCycles: 0,
};
const handoffMs = quick ? 1_000 : 2_000;
/** Round trips W1 and W4 measure each implementation for, at least (`plan.measureMs` at least). */
const THROUGHPUT_RTTS = quick ? 0 : 1_500;
/** Locks per implementation in the wire cell. */
const WIRE_LOCKS = quick ? 60 : 200;

const byId = (id: string): Impl => IMPLS.find((i) => i.id === id)!;
const X = byId("x-ioredis");
const NODE_REDLOCK = byId("node-redlock");
const FLOOR = byId("floor-ioredis");
const NOTIFY = xImpl("ioredis", { wait: "notify" });
const POLL = xImpl("ioredis", { wait: "poll" });
/** @x/redlock's and node-redlock's default retry delay, retrying forever. */
const DEFAULT_DELAYS: Settings = {
  retryCount: -1,
  retryDelay: 200,
  retryJitter: 100,
  threshold: 500,
};

/** One measurement. */
interface Sample extends Outcome {
  readonly delay: number;
  readonly rep: number;
  readonly cell: CellName;
  readonly impl: string;
}
type CellName = "rtt" | "W1" | "W4" | "W3" | "handoff" | "wire";

const samples: Sample[] = [];

function failed(error: unknown): Outcome {
  return {
    metrics: {},
    errors: 1,
    violations: 0,
    error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
  };
}

function keep(delay: number, rep: number, cell: CellName, impl: string, o: Outcome): void {
  samples.push({ ...o, delay, rep, cell, impl });
  const m = o.metrics;
  const shown = o.errors || o.violations
    ? `FAILED ${o.violations} violation(s) ${o.errors} error(s) ${o.error ?? ""}`
    : Object.entries(m).map(([k, v]) => `${k} ${v < 10 ? v.toFixed(3) : v.toFixed(0)}`)
      .join(", ");
  console.error(`${delay} ms rep ${rep + 1}/${reps}  ${cell} ${impl.padEnd(24)} ${shown}`);
}

/** Median ms of PING round trips through `port`, as ioredis sees them. */
async function roundTrip(port: number, count = 300): Promise<number> {
  const client = new Redis({ host: "127.0.0.1", port, lazyConnect: true });
  client.on("error", () => {});
  await client.connect();
  try {
    for (let i = 0; i < 20; i++) await client.ping();
    const times: number[] = [];
    for (let i = 0; i < count; i++) {
      const start = performance.now();
      await client.ping();
      times.push(performance.now() - start);
    }
    return median(times);
  } finally {
    client.disconnect();
  }
}

async function repetition(delay: number, rep: number, ports: readonly number[]): Promise<void> {
  const rttMs = await roundTrip(ports[0]!);
  keep(delay, rep, "rtt", "ioredis PING", { metrics: { rttMs }, errors: 0, violations: 0 });
  const throughput = [X, NODE_REDLOCK, FLOOR];
  const measureMs = Math.max(plan.measureMs, Math.round(THROUGHPUT_RTTS * rttMs));
  for (const [cell, width] of [["W1", 1], ["W4", 5]] as const) {
    const order = throughput.map((_, i) => throughput[(i + rep) % throughput.length]!);
    const outcomes = await interleaved(
      order,
      ports,
      { ...plan, measureMs },
      { loops: 1, width },
      rep,
    )
      .catch((error) => order.map(() => failed(error)));
    order.forEach((impl, i) => keep(delay, rep, cell, impl.id, outcomes[i]!));
  }
  const traced = rep % 2 === 0 ? [X, FLOOR] : [FLOOR, X];
  const wire = await wireTrace(traced, ports, WIRE_LOCKS)
    .catch((error) => traced.map(() => failed(error)));
  traced.forEach((impl, i) => keep(delay, rep, "wire", impl.id, wire[i]!));
  const contended: [Impl, "poll" | "notify" | undefined][] = [
    [NOTIFY, "notify"],
    [POLL, "poll"],
    [NODE_REDLOCK, undefined],
    [FLOOR, undefined],
  ];
  for (let i = 0; i < contended.length; i++) {
    const [impl, wait] = contended[(i + rep) % contended.length]!;
    const outcome = await contention(impl, ports, plan, {
      workers: 16,
      retryDelay: 10,
      ...(wait ? { wait } : {}),
    }).catch(failed);
    keep(delay, rep, "W3", impl.id, outcome);
  }
  const handoffs = [NOTIFY, POLL, NODE_REDLOCK_DEFAULTS, FLOOR];
  for (let i = 0; i < handoffs.length; i++) {
    const impl = handoffs[(i + rep) % handoffs.length]!;
    const outcome = await handoff(impl, ports, DEFAULT_DELAYS, {
      workers: 16,
      warmMs: plan.warmMs,
      measureMs: handoffMs,
      holdMs: 0,
    }).catch(failed);
    keep(delay, rep, "handoff", impl.id, outcome);
  }
}

// ---------------------------------------------------------------- run

const machine = await describeMachine();
console.log(`# @x/redlock at a distance${quick ? " (quick)" : ""}\n`);
console.log(`Machine: ${machineLine(machine)}`);
console.log(
  `Plan: 3 servers, each behind a proxy (child process) adding ${delays.join(", ")} ms ` +
    `one way; ${reps} repetition(s); W1/W4 ${plan.measureMs} ms or ${THROUGHPUT_RTTS} RTT, ` +
    `whichever is longer, in 50 ms slices, W3 ${plan.contentionMs} ms, handoff ${handoffMs} ` +
    `ms per implementation; W1 on the wire ${WIRE_LOCKS} locks each\n`,
);
const started = new Date();
{
  await using servers = await startServers(3);
  await using proxies = await ProxyProcess.start(servers.ports);
  stopOnSignal(async () => {
    await proxies.close();
    await servers.stop();
  });
  for (const delay of delays) {
    await proxies.send({ op: "delay", ms: delay });
    for (let rep = 0; rep < reps; rep++) await repetition(delay, rep, proxies.ports);
  }
}
const finished = new Date();

// ---------------------------------------------------------------- report

const of = (delay: number, cell: CellName, impl: string) =>
  samples.filter((s) => s.delay === delay && s.cell === cell && s.impl === impl);
const med = (delay: number, cell: CellName, impl: string, metric: string): number | null => {
  const ok = of(delay, cell, impl).filter((s) => !s.errors && !s.violations);
  const values = ok.map((s) => s.metrics[metric]).filter((v): v is number => v !== undefined);
  return values.length === 0 ? null : median(values);
};
const rtt = (delay: number): number => med(delay, "rtt", "ioredis PING", "rttMs") ?? NaN;
const f = (n: number | null, digits = 2): string =>
  n === null || Number.isNaN(n) ? "–" : n.toFixed(digits);
const label = (id: string): string =>
  [X, NODE_REDLOCK, FLOOR, NOTIFY, POLL, NODE_REDLOCK_DEFAULTS].find((i) => i.id === id)!.label;
const failure = (delay: number, cell: CellName, id: string): string | undefined =>
  of(delay, cell, id).find((s) => s.errors || s.violations)?.error;

const sections: string[] = [];
sections.push(
  "## One round trip\n\n" +
    table(
      ["one-way delay", "RTT (ms, ioredis PING)"],
      delays.map((d) => [`${d} ms`, f(rtt(d), 3)]),
    ),
);
for (
  const [cell, title] of [["W1", "W1 · one loop, fresh key"], ["W4", "W4 · 5 resources"]] as const
) {
  const rows: string[][] = [];
  for (const d of delays) {
    const floor = med(d, cell, FLOOR.id, "opsPerSec");
    for (const id of [X.id, NODE_REDLOCK.id, FLOOR.id]) {
      const ops = med(d, cell, id, "opsPerSec");
      rows.push([
        `${d} ms`,
        label(id),
        failure(d, cell, id) ? "FAILED" : f(ops, 0),
        ops ? f(1000 / ops / rtt(d)) : "–",
        ops && floor ? f(ops / floor, 3) : "–",
      ]);
    }
  }
  sections.push(
    `## ${title} · 3 servers\n\n` +
      table(["delay", "implementation", "ops/s", "ms per op ÷ RTT", "÷ floor"], rows),
  );
}
{
  const rows: string[][] = [];
  const us = (n: number | null) => f(n, 0);
  for (const d of delays) {
    const floorMean = med(d, "wire", FLOOR.id, "lockMsMean");
    for (const id of [X.id, FLOOR.id]) {
      const m = (metric: string) => med(d, "wire", id, metric);
      const requests = of(d, "wire", id).find((s) => !s.errors)?.metrics ?? {};
      const wireRtt = (step: string) => {
        const ms = m(`${step}WireMs`);
        return ms === null ? "–" : f(ms / rtt(d));
      };
      const mean = m("lockMsMean");
      rows.push([
        `${d} ms`,
        label(id),
        failure(d, "wire", id) ? "FAILED" : Object.entries(requests)
          .filter(([k]) => k.startsWith("requests."))
          .map(([k, v]) => `${f(v, 1)} ${k.slice("requests.".length).toUpperCase()}`).join(" + "),
        us(m("acquireToFirstUs")),
        wireRtt("acquire"),
        us(m("acquireToResultUs")),
        us(m("releaseToFirstUs")),
        wireRtt("release"),
        us(m("releaseToResultUs")),
        `${f(m("lockMsP50"))} / ${f(mean)}`,
        mean && floorMean ? f(floorMean / mean, 3) : "–",
      ]);
    }
  }
  sections.push(
    "## W1 on the wire · taking turns lock by lock · 3 servers\n\n" +
      "Per step: µs from the call to the first request, the first request to the reply that " +
      "made the quorum (÷ RTT), and that reply to the caller holding the result; medians.\n\n" +
      table(
        [
          "delay",
          "implementation",
          "requests per lock",
          "acquire: before µs",
          "to quorum ÷ RTT",
          "after µs",
          "release: before µs",
          "to quorum ÷ RTT",
          "after µs",
          "ms per lock p50 / mean",
          "floor ÷ it (mean)",
        ],
        rows,
      ),
  );
}
{
  const rows: string[][] = [];
  for (const d of delays) {
    for (const id of [NOTIFY.id, POLL.id, NODE_REDLOCK.id, FLOOR.id]) {
      const p50 = med(d, "W3", id, "waitP50");
      const p99 = med(d, "W3", id, "waitP99");
      rows.push([
        `${d} ms`,
        label(id),
        failure(d, "W3", id) ? "FAILED" : f(med(d, "W3", id, "grantsPerSec"), 0),
        f(p50, 1),
        p50 === null ? "–" : f(p50 / rtt(d), 1),
        f(p99, 1),
        p99 === null ? "–" : f(p99 / rtt(d), 1),
      ]);
    }
  }
  sections.push(
    "## W3 · 16 workers, one key, 1 ms hold, 10 ms retry delay · 3 servers\n\n" +
      table(
        ["delay", "implementation", "grants/s", "wait p50 ms", "÷ RTT", "wait p99 ms", "÷ RTT"],
        rows,
      ),
  );
}
{
  const rows: string[][] = [];
  for (const d of delays) {
    for (const id of [NOTIFY.id, POLL.id, NODE_REDLOCK_DEFAULTS.id, FLOOR.id]) {
      const p50 = med(d, "handoff", id, "handoffP50");
      const p99 = med(d, "handoff", id, "handoffP99");
      rows.push([
        `${d} ms`,
        label(id),
        failure(d, "handoff", id) ? "FAILED" : f(med(d, "handoff", id, "handoffsPerSec"), 0),
        f(p50, 2),
        p50 === null ? "–" : f(p50 / rtt(d), 2),
        f(p99, 1),
        p99 === null ? "–" : f(p99 / rtt(d), 1),
        f(med(d, "handoff", id, "waitP50"), 1),
        f(med(d, "handoff", id, "gaveUps"), 0),
      ]);
    }
  }
  sections.push(
    "## Handoff · 16 workers, one key, hold 0, 200 + 0..100 ms retry delay · 3 servers\n\n" +
      table(
        [
          "delay",
          "implementation",
          "handoffs/s",
          "handoff p50 ms",
          "÷ RTT",
          "p99 ms",
          "÷ RTT",
          "wait p50 ms",
          "gave up",
        ],
        rows,
      ),
  );
}

const far = Math.max(...delays);
const handoffRtts = (() => {
  const p50 = med(far, "handoff", NOTIFY.id, "handoffP50");
  return p50 === null ? null : p50 / rtt(far);
})();
const w1Ratio = (() => {
  const ratios: number[] = [];
  for (let rep = 0; rep < reps; rep++) {
    const x = of(far, "W1", X.id).find((s) => s.rep === rep)?.metrics.opsPerSec;
    const floor = of(far, "W1", FLOOR.id).find((s) => s.rep === rep)?.metrics.opsPerSec;
    if (x && floor) ratios.push(x / floor);
  }
  return ratios.length ? median(ratios) : null;
})();
const targets: Target[] = [
  {
    name: `handoff p50 of ${NOTIFY.label} at ${far} ms one way`,
    goal: "≤ 1.5 RTT",
    value: `${f(handoffRtts)} RTT`,
    met: handoffRtts === null ? null : handoffRtts <= 1.5,
  },
  {
    name: `W1 ${X.label} ÷ floor at ${far} ms one way`,
    goal: "≥ 0.98",
    value: f(w1Ratio, 3),
    met: w1Ratio === null ? null : w1Ratio >= 0.98,
  },
];
sections.push(`## Targets\n\n${targetTable(targets)}`);
console.log(sections.join("\n\n"));
console.log(
  `\nMedians of ${reps} repetition(s); "÷ floor" of W1 in the targets is the median of ` +
    `per-repetition ratios. Absolute figures are this machine's: ${machineLine(machine)}.`,
);
await Deno.writeTextFile(
  jsonPath,
  JSON.stringify(
    {
      machine,
      plan: { ...plan, handoffMs, delays, quick },
      started: started.toISOString(),
      finished: finished.toISOString(),
      rtt: Object.fromEntries(delays.map((d) => [d, rtt(d)])),
      targets,
      samples,
    },
    null,
    1,
  ) + "\n",
);
console.log(`\nwrote ${jsonPath}`);
