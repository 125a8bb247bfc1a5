/**
 * `deno task bench:scale [--quick] [--waiters=16,256,1000] [--curves=waiters,resources,servers]
 * [--json=path]`
 *
 * How the cost grows with the work, on Redis servers started
 * here (loopback, no persistence):
 *
 * - waiters on one resource: N acquire loops in one process share one
 *   Redlock (ioredis, `wait: "notify"`, retrying until granted) on 3
 *   servers, each holding 1 ms and asking again at once. After every loop
 *   had a grant, a measured phase of about three turns reports grants/s,
 *   the share of grants that were handoffs (to another loop than the last
 *   holder), wait p50/p99/max (acquire call → grant), the FIFO ideal
 *   N × (hold + handoff p50), fairness (Jain's index of grants per loop),
 *   the heap the waiters hold (after a forced GC, mid-run less after the
 *   loops ended: compiled code and the harness's records stay; also mid-run
 *   less before they started) and the RSS they add, per waiter, and
 *   the connections the process holds on each server (pub/sub ones apart);
 * - resources per lock (1, 10, 100): one loop of acquire + release on fresh
 *   keys, @x/redlock and the floor interleaved, on 3 servers;
 * - servers (1, 3, 5, 7): the same with one resource.
 *
 * Tables go to stdout, every figure to docs/scale.json, and one chart per
 * curve to docs/scale-waiters.svg, docs/scale-resources.svg and
 * docs/scale-servers.svg.
 *
 * @module
 */

import { Redlock } from "../mod.ts";
import { command, startServers } from "../scripts/redis.ts";
import { renderChart } from "./_chart.ts";
import { stopOnSignal } from "./_signals.ts";
import { closeAll, connectAll } from "./_connect.ts";
import { type Impl, IMPLS } from "./_impls.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import { parseArgs } from "./_args.ts";
import { table, type Target, targetTable } from "./_report.ts";
import { median, percentile, sleep } from "./_stats.ts";
import { interleaved, type Plan } from "./_workloads.ts";

const args = parseArgs(Deno.args, {
  flags: ["quick"],
  values: ["waiters", "curves", "json"],
  usage: "the top of bench/scale.ts",
});
const quick = args.has("quick");
const WAITERS = (args.get("waiters") ?? "16,256,1000").split(",").map(Number);
const curves = (args.get("curves") ?? "waiters,resources,servers").split(",");
const RESOURCES = curves.includes("resources") ? [1, 10, 100] : [];
const SERVERS = curves.includes("servers") ? [1, 3, 5, 7] : [];
if (!curves.includes("waiters")) WAITERS.length = 0;
const HOLD_MS = 1;
const jsonPath = args.get("json") ?? "docs/scale.json";
const plan: Plan = {
  reps: 1,
  warmMs: quick ? 200 : 300,
  measureMs: quick ? 600 : 1_500,
  contentionMs: 0,
  holdMs: 0,
  thinkMs: 0,
  memoryCycles: 0,
};

const gc = () => (globalThis as { gc?: () => void }).gc?.();
const KiB = 1024;

/** Connections on each server: all, and pub/sub ones (the probe's own not counted). */
async function connections(ports: readonly number[]): Promise<{ all: number; pubsub: number }[]> {
  return await Promise.all(ports.map(async (port) => {
    const all = (await command(port, "CLIENT", "LIST")).split("\n")
      .filter((l) => l.includes("id=")).length - 1;
    const pubsub = (await command(port, "CLIENT", "LIST", "TYPE", "pubsub")).split("\n")
      .filter((l) => l.includes("id=")).length;
    return { all, pubsub };
  }));
}

/** Script calls (EVALSHA, EVAL: one request each) the servers answered so far. */
async function scriptCalls(ports: readonly number[]): Promise<number> {
  let total = 0;
  for (const port of ports) {
    const info = await command(port, "INFO", "commandstats");
    for (const name of ["evalsha", "eval"]) {
      total += Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
    }
  }
  return total;
}

/**
 * The heap after a forced GC: the median of three samples 50 ms apart, as
 * requests and replies in flight come and go.
 */
async function settledHeap(): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 3; i++) {
    if (i > 0) await sleep(50);
    gc();
    samples.push(Deno.memoryUsage().heapUsed);
  }
  return median(samples);
}

/**
 * Heap per pending async loop of the harness alone (a frame awaiting a
 * promise, with the loop's locals), to tell the library's share of the
 * heap per waiter from the harness's.
 */
async function harnessBytes(n: number): Promise<number> {
  gc();
  const before = Deno.memoryUsage().heapUsed;
  const gates: (() => void)[] = [];
  const loops = Array.from({ length: n }, async (_, w) => {
    const asked = performance.now();
    await new Promise<void>((resolve) => gates.push(resolve));
    return asked + w;
  });
  gc();
  const after = Deno.memoryUsage().heapUsed;
  for (const open of gates) open();
  await Promise.all(loops);
  return (after - before) / n;
}

interface WaitersResult {
  readonly waiters: number;
  readonly seconds: number;
  readonly grants: number;
  readonly grantsPerSec: number;
  readonly handoffShare: number;
  readonly waitP50: number;
  readonly waitP99: number;
  readonly waitMax: number;
  readonly holdP50: number;
  readonly handoffP50: number;
  readonly fifoIdeal: number;
  readonly maxOverIdeal: number;
  readonly jain: number;
  readonly minGrants: number;
  readonly maxGrants: number;
  /** The heap held while waiting, per waiter: mid-run less after the loops ended. */
  readonly heapPerWaiterBytes: number;
  /** Mid-run less before the loops started, per waiter (code compiled meanwhile included). */
  readonly heapOverBaselinePerWaiterBytes: number;
  /** The harness's own share of heapPerWaiterBytes (see harnessBytes). */
  readonly harnessPerWaiterBytes: number;
  readonly rssPerWaiterBytes: number;
  /** Script calls (requests) the servers answered per grant, all servers together. */
  readonly requestsPerGrant: number;
  readonly connections: { all: number; pubsub: number }[];
  readonly errors: number;
  readonly violations: number;
  readonly firstError?: string;
}

/** N loops in one process, one Redlock, one resource. */
async function waiters(n: number, ports: readonly number[]): Promise<WaitersResult> {
  const links = await connectAll("ioredis", ports);
  const redlock = new Redlock(links.map((c) => c.client), {
    retryCount: -1,
    retryDelay: 200,
    retryJitter: 100,
  });
  let errors = 0;
  let firstError: string | undefined;
  const fail = (error: unknown) => {
    errors++;
    firstError ??= error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  };
  redlock.on("error", fail);
  const key = `scale:waiters:${n}:${Date.now().toString(36)}`;
  // warm the process (scripts loaded, subscriber connected) before the baseline
  await (await redlock.acquire(key, 1_000, { wait: "notify" })).release();
  gc();
  await sleep(50);
  gc();
  const heapBefore = Deno.memoryUsage().heapUsed;
  const rssBefore = Deno.memoryUsage().rss;

  let phase: "warm" | "measure" | "stop" = "warm";
  let inside = 0;
  let violations = 0;
  let owner = -1;
  let releaseCalled = NaN;
  const grantsOf = new Array<number>(n).fill(0);
  const warmGranted = new Set<number>();
  const waits: number[] = [];
  const holds: number[] = [];
  const handoffLatencies: number[] = [];
  let grants = 0;
  let handoffs = 0;
  let everyoneHad: () => void = () => {};
  const everyone = new Promise<void>((resolve) => everyoneHad = resolve);

  const loop = async (w: number) => {
    while (phase !== "stop") {
      const asked = performance.now();
      let lock;
      try {
        lock = await redlock.acquire(key, 30_000, { wait: "notify" });
      } catch (error) {
        fail(error);
        return;
      }
      const granted = performance.now();
      if (++inside > 1) violations++;
      if (phase === "measure") {
        grants++;
        grantsOf[w]!++;
        waits.push(granted - asked);
        if (owner !== w && owner !== -1) {
          handoffs++;
          handoffLatencies.push(granted - releaseCalled);
        }
      } else if (phase === "warm") {
        warmGranted.add(w);
        if (warmGranted.size === n) everyoneHad();
      }
      owner = w;
      await sleep(HOLD_MS);
      inside--;
      releaseCalled = performance.now();
      if (phase === "measure") holds.push(releaseCalled - granted);
      try {
        await lock.release();
      } catch (error) {
        fail(error);
        return;
      }
    }
  };
  const loops = Array.from({ length: n }, (_, w) => loop(w));
  const warmLimit = sleep(Math.max(5_000, n * 20));
  await Promise.race([everyone, warmLimit]);
  phase = "measure";
  const commandsBefore = await scriptCalls(ports);
  const start = performance.now();
  // about three turns of every waiter, at least 2 s
  const measureMs = Math.max(quick ? 1_000 : 2_000, 3 * n * 2.5);
  await sleep(measureMs / 2);
  const mid = {
    heap: await settledHeap(),
    rss: Deno.memoryUsage().rss,
    conns: await connections(ports),
  };
  await sleep(measureMs / 2);
  const seconds = (performance.now() - start) / 1000;
  const commandsDuring = await scriptCalls(ports) - commandsBefore;
  const grantsDuring = grants;
  phase = "stop";
  await Promise.all(loops);
  // What the waiters held is what is freed once they are gone; compiled code
  // and the harness's records stay.
  const heapEnd = await settledHeap();
  const dispose = (redlock as { [Symbol.asyncDispose]?: () => Promise<void> })[
    Symbol.asyncDispose
  ];
  await dispose?.call(redlock);
  await closeAll(links);

  const sum = grantsOf.reduce((a, b) => a + b, 0);
  const squares = grantsOf.reduce((a, b) => a + b * b, 0);
  const holdP50 = median(holds);
  const handoffP50 = median(handoffLatencies);
  const fifoIdeal = n * (holdP50 + handoffP50);
  const waitMax = Math.max(...waits);
  return {
    waiters: n,
    seconds,
    grants,
    grantsPerSec: grants / seconds,
    handoffShare: grants === 0 ? 0 : handoffs / grants,
    waitP50: median(waits),
    waitP99: percentile(waits, 99),
    waitMax,
    holdP50,
    handoffP50,
    fifoIdeal,
    maxOverIdeal: waitMax / fifoIdeal,
    jain: squares === 0 ? 0 : (sum * sum) / (n * squares),
    minGrants: Math.min(...grantsOf),
    maxGrants: Math.max(...grantsOf),
    heapPerWaiterBytes: (mid.heap - heapEnd) / n,
    heapOverBaselinePerWaiterBytes: (mid.heap - heapBefore) / n,
    harnessPerWaiterBytes: await harnessBytes(n),
    rssPerWaiterBytes: (mid.rss - rssBefore) / n,
    requestsPerGrant: commandsDuring / grantsDuring,
    connections: mid.conns,
    errors,
    violations,
    ...(firstError ? { firstError } : {}),
  };
}

const byId = (id: string): Impl => IMPLS.find((i) => i.id === id)!;
const X = byId("x-ioredis");
const FLOOR = byId("floor-ioredis");

interface Point {
  readonly x: number;
  readonly impl: string;
  readonly opsPerSec: number | null;
  readonly msPerOp: number | null;
  readonly error?: string;
}

async function throughput(
  ports: readonly number[],
  width: number,
  x: number,
): Promise<Point[]> {
  const impls = [X, FLOOR];
  const outcomes = await interleaved(impls, ports, plan, { loops: 1, width }, x);
  return impls.map((impl, i) => {
    const o = outcomes[i]!;
    const ops = o.errors || o.violations ? null : o.metrics.opsPerSec ?? null;
    return {
      x,
      impl: impl.id,
      opsPerSec: ops,
      msPerOp: ops ? 1000 / ops : null,
      ...(o.error ? { error: o.error } : {}),
    };
  });
}

// ---------------------------------------------------------------- run

const machine = await describeMachine();
console.log(`# @x/redlock at scale${quick ? " (quick)" : ""}\n`);
console.log(`Machine: ${machineLine(machine)}\n`);
const started = new Date();
const waiterResults: WaitersResult[] = [];
const resourcePoints: Point[] = [];
const serverPoints: Point[] = [];
{
  await using seven = await startServers(7);
  stopOnSignal(() => seven.stop());
  const three = seven.ports.slice(0, 3);
  for (const n of WAITERS) {
    const r = await waiters(n, three);
    waiterResults.push(r);
    console.error(
      `waiters ${n}: ${r.grantsPerSec.toFixed(0)} grants/s, handoffs ${
        (100 * r.handoffShare).toFixed(1)
      } %, wait max ${r.waitMax.toFixed(0)} ms (FIFO ideal ${r.fifoIdeal.toFixed(0)} ms), heap ${
        r.heapPerWaiterBytes.toFixed(0)
      } B/waiter, connections ${JSON.stringify(r.connections)}, errors ${r.errors}`,
    );
  }
  for (const width of RESOURCES) {
    const points = await throughput(three, width, width);
    resourcePoints.push(...points);
    console.error(`resources ${width}: ${points.map((p) => `${p.impl} ${p.msPerOp}`).join(", ")}`);
  }
  for (const n of SERVERS) {
    const points = await throughput(seven.ports.slice(0, n), 1, n);
    serverPoints.push(...points);
    console.error(`servers ${n}: ${points.map((p) => `${p.impl} ${p.msPerOp}`).join(", ")}`);
  }
}
const finished = new Date();

// ---------------------------------------------------------------- report

const f = (n: number | null | undefined, digits = 2) =>
  n === null || n === undefined || Number.isNaN(n) ? "–" : n.toFixed(digits);
const sections: string[] = [];
sections.push(
  "## Waiters on one resource · 3 servers · one Redlock, wait: notify, hold 1 ms\n\n" +
    table(
      [
        "waiters",
        "grants/s",
        "handoffs",
        "wait p50 ms",
        "p99 ms",
        "max ms",
        "FIFO ideal ms",
        "max ÷ ideal",
        "Jain",
        "grants min–max",
        "heap B/waiter (harness)",
        "over baseline B/waiter",
        "RSS B/waiter",
        "requests/grant",
        "conns/server (pub/sub)",
        "errors",
      ],
      waiterResults.map((r) => [
        String(r.waiters),
        f(r.grantsPerSec, 0),
        `${f(100 * r.handoffShare, 1)} %`,
        f(r.waitP50, 0),
        f(r.waitP99, 0),
        f(r.waitMax, 0),
        f(r.fifoIdeal, 0),
        f(r.maxOverIdeal),
        f(r.jain, 3),
        `${r.minGrants}–${r.maxGrants}`,
        `${f(r.heapPerWaiterBytes, 0)} (${f(r.harnessPerWaiterBytes, 0)})`,
        f(r.heapOverBaselinePerWaiterBytes, 0),
        f(r.rssPerWaiterBytes, 0),
        f(r.requestsPerGrant, 1),
        r.connections.map((c) => `${c.all} (${c.pubsub})`).join(", "),
        `${r.errors + r.violations}`,
      ]),
    ),
);
function curve(points: Point[], xs: number[], name: string): string {
  const base = (impl: string) => points.find((p) => p.impl === impl && p.x === xs[0])?.msPerOp;
  return table(
    [name, "@x/redlock ms/op", "÷ at " + xs[0], "floor ms/op", "÷ at " + xs[0], "@x ÷ floor"],
    xs.map((x) => {
      const mine = points.find((p) => p.impl === X.id && p.x === x);
      const floor = points.find((p) => p.impl === FLOOR.id && p.x === x);
      const ratio = (p: Point | undefined) =>
        p?.msPerOp && base(p.impl) ? p.msPerOp / base(p.impl)! : null;
      return [
        String(x),
        mine?.error ? "FAILED" : f(mine?.msPerOp, 3),
        f(ratio(mine)),
        floor?.error ? "FAILED" : f(floor?.msPerOp, 3),
        f(ratio(floor)),
        mine?.msPerOp && floor?.msPerOp ? f(mine.msPerOp / floor.msPerOp) : "–",
      ];
    }),
  );
}
sections.push(
  "## Resources per lock · 3 servers · one loop, fresh keys\n\n" +
    curve(resourcePoints, RESOURCES, "resources"),
);
sections.push(
  "## Servers · one resource · one loop, fresh keys\n\n" +
    curve(serverPoints, SERVERS, "servers"),
);

const largest = waiterResults.at(-1);
const per100 = (() => {
  const one = resourcePoints.find((p) => p.impl === X.id && p.x === 1)?.msPerOp;
  const hundred = resourcePoints.find((p) => p.impl === X.id && p.x === 100)?.msPerOp;
  return one && hundred ? hundred / one : null;
})();
const targets: Target[] = largest
  ? [
    {
      name: `${largest.waiters} waiters: share of grants that are handoffs`,
      goal: "every grant (≥ 99 %)",
      value: `${f(100 * largest.handoffShare, 1)} %`,
      met: largest.handoffShare >= 0.99,
    },
    {
      name: `${largest.waiters} waiters: max wait ÷ FIFO ideal`,
      goal: "≤ 1.5",
      value: f(largest.maxOverIdeal),
      met: largest.maxOverIdeal <= 1.5,
    },
    {
      name: `${largest.waiters} waiters: heap they hold, per waiter (harness included)`,
      goal: "≤ 2048 B",
      value: `${f(largest.heapPerWaiterBytes, 0)} B (harness ${
        f(largest.harnessPerWaiterBytes, 0)
      } B; over the baseline ${f(largest.heapOverBaselinePerWaiterBytes, 0)} B)`,
      met: largest.heapPerWaiterBytes <= 2048,
    },
    {
      name: `${largest.waiters} waiters: pub/sub connections per server`,
      goal: "1",
      value: largest.connections.map((c) => c.pubsub).join(", "),
      met: largest.connections.every((c) => c.pubsub === 1),
    },
    {
      name: "100 resources ÷ 1 resource, time per lock",
      goal: "≤ 25",
      value: f(per100),
      met: per100 === null ? null : per100 <= 25,
    },
  ]
  : [];
sections.push(`## Targets\n\n${targetTable(targets)}`);
console.log(sections.join("\n\n"));
console.log(`\nOne run; absolute figures are this machine's: ${machineLine(machine)}.`);

await Deno.writeTextFile(
  jsonPath,
  JSON.stringify(
    {
      machine,
      quick,
      started: started.toISOString(),
      finished: finished.toISOString(),
      waiters: waiterResults,
      resources: resourcePoints,
      servers: serverPoints,
      targets,
    },
    null,
    1,
  ) + "\n",
);

const footer = [
  `One run${quick ? " (quick)" : ""}, ${finished.toISOString().slice(0, 10)}; figures in ` +
  `docs/scale.json.`,
  `Machine: ${machineLine(machine)}.`,
];
const SERIES_XF = [
  { id: X.id, label: "@x/redlock (ioredis)", color: "#1d4ed8" },
  { id: FLOOR.id, label: "floor (ioredis)", color: "#6b7280" },
];
const curveGroups = (points: Point[], xs: number[], unit: string) =>
  xs.map((x) => ({
    label: `${x} ${unit}${x === 1 ? "" : "s"}`,
    bars: SERIES_XF.map((s) => {
      const p = points.find((q) => q.impl === s.id && q.x === x);
      const base = points.find((q) => q.impl === s.id && q.x === xs[0])?.msPerOp;
      return p?.msPerOp && base
        ? { series: s.id, value: p.msPerOp / base }
        : { series: s.id, value: null, note: "failed" };
    }),
  }));
const charts: [string, string][] = [
  [
    "docs/scale-waiters.svg",
    renderChart({
      title: "Waiters on one resource, each figure ÷ its target (lower is better)",
      subtitle:
        "one process, one Redlock, wait: notify, 3 servers, hold 1 ms; ≤ 1 meets the target",
      series: [
        { id: "max", label: "max wait ÷ (1.5 × FIFO ideal)", color: "#1d4ed8" },
        { id: "p99", label: "p99 wait ÷ (1.5 × FIFO ideal)", color: "#60a5fa" },
        { id: "heap", label: "heap per waiter ÷ 2 KiB", color: "#f97316" },
      ],
      groups: waiterResults.map((r) => ({
        label: `${r.waiters} waiters`,
        bars: [
          { series: "max", value: r.waitMax / (1.5 * r.fifoIdeal) },
          { series: "p99", value: r.waitP99 / (1.5 * r.fifoIdeal) },
          { series: "heap", value: Math.max(0, r.heapPerWaiterBytes) / (2 * KiB) },
        ],
      })),
      reference: { value: 1, label: "target = 1.00" },
      footer,
    }),
  ],
  [
    "docs/scale-resources.svg",
    renderChart({
      title: "Time per lock ÷ time with 1 resource (lower is better)",
      subtitle:
        "one loop of acquire + release on fresh keys, 3 servers; target: 100 resources ≤ 25",
      series: SERIES_XF,
      groups: curveGroups(resourcePoints, RESOURCES, "resource"),
      reference: { value: 1, label: "1 resource = 1.00" },
      footer,
    }),
  ],
  [
    "docs/scale-servers.svg",
    renderChart({
      title: "Time per lock ÷ time with 1 server (lower is better)",
      subtitle: "one loop of acquire + release on fresh keys, one resource",
      series: SERIES_XF,
      groups: curveGroups(serverPoints, SERVERS, "server"),
      reference: { value: 1, label: "1 server = 1.00" },
      footer,
    }),
  ],
];
for (const [path, svg] of charts) await Deno.writeTextFile(path, svg);
console.log(`\nwrote ${jsonPath} and ${charts.map(([p]) => p).join(", ")}`);
