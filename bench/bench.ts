/**
 * `deno task bench [--quick] [--reps=N] [--only=W1,W3,H,C,S] [--w6-all] [--json=path]
 *  [--svg=path] [--cost-svg=path]`
 *
 * Compares @x/redlock (with ioredis and with node-redis) with node-redlock,
 * @sesamecare-oss/redlock, redlock-universal, redis-semaphore's
 * `RedlockMutex` and the bare protocol floor, in
 * one process, on Redis servers it starts itself (1 and 3, loopback, no
 * persistence) and stops at the end. Every repetition runs every
 * implementation once, in an order rotated from one repetition to the next,
 * each after a warm-up; in W1, W2 and W4 they take turns in 50 ms slices
 * within the repetition (see `interleaved()`), so that a machine whose speed
 * drifts slows them alike. Tables show medians and ratios, the JSON file has
 * every repetition (default docs/bench.json), and the SVG chart (default
 * docs/bench.svg) shows the ratios to the floor.
 *
 * Workloads: W1 one loop of acquire + release on fresh keys (1 and 3
 * servers); W2 the same with 64 concurrent loops; W3 16 workers, each with
 * its own connections, contending for one key (10 ms retry delay, no
 * jitter, 1 ms hold, no think time); W4 five resources per lock; W5 `using()`
 * with a 200 ms lease held for 1 s; W6 200 000 cycles (20 000 with --quick)
 * and the heap before and after a forced GC. Every cell checks mutual
 * exclusion and counts errors; a cell with either is reported as failed.
 *
 * Then (bench/_server_cost.ts, `--only=C`) what a lock costs the servers in
 * W1, W3 and W4, for every implementation: commands, command time and CPU
 * per lock, charted in docs/bench-server-cost.svg (`--cost-svg=path`); and
 * (bench/_semaphores.ts, `--only=S`) @x/redlock's semaphore against
 * redis-semaphore's `RedlockSemaphore`: S1 contended, S2 split views. The
 * run exits with status 1 if @x/redlock's semaphore ever had more holders
 * than permits.
 *
 * @module
 */

import { type RedisServers, startServers } from "../scripts/redis.ts";
import { intArg, parseArgs } from "./_args.ts";
import { type Bar, type Group, renderChart, type Series } from "./_chart.ts";
import { type Impl, IMPLS, NOTIFY_IMPLS } from "./_impls.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import {
  ALL_CELLS,
  type Cell,
  contentionTable,
  extensionTable,
  memoryTable,
  ratioTarget,
  Results,
  type Roles,
  type Target,
  targetTable,
  throughputTable,
} from "./_report.ts";
import {
  contention,
  extension,
  failure,
  interleaved,
  memory,
  type Outcome,
  type Plan,
  probeNotify,
  THROUGHPUT_SHAPES,
  type Workload,
} from "./_workloads.ts";
import { benchHandles } from "./handles.ts";
import { benchSemaphores, type SemaphoreBench } from "./_semaphores.ts";
import { benchServerCost, type ServerCost } from "./_server_cost.ts";

// ---------------------------------------------------------------- options

const args = parseArgs(Deno.args, {
  flags: ["quick", "w6-all"],
  values: ["reps", "only", "json", "svg", "cost-svg"],
  usage: "the top of bench/bench.ts",
});
const quick = args.has("quick");
const plan: Plan = quick
  ? {
    reps: 3,
    warmMs: 200,
    measureMs: 600,
    contentionMs: 1_000,
    holdMs: 1,
    thinkMs: 0,
    memoryCycles: 20_000,
  }
  : {
    reps: 5,
    warmMs: 300,
    measureMs: 1_000,
    contentionMs: 1_500,
    holdMs: 1,
    thinkMs: 0,
    memoryCycles: 200_000,
  };
const reps = intArg(args, "reps", plan.reps);
const only = args.get("only")?.split(",");
const PARTS = [...new Set(ALL_CELLS.map((c) => c.workload)), "H", "C", "S"];
for (const part of only ?? []) {
  if (!PARTS.includes(part)) {
    throw new RangeError(`--only: "${part}" is not one of ${PARTS.join(", ")} (S runs S1 and S2)`);
  }
}
// W6 is one long run per implementation; by default only @x/redlock's rows
// make the 200 000 cycles (the quick run and --w6-all run every row).
const memoryAll = quick || args.has("w6-all");
const jsonPath = args.get("json") ?? "docs/bench.json";
const svgPath = args.get("svg") ?? "docs/bench.svg";
const costSvgPath = args.get("cost-svg") ?? "docs/bench-server-cost.svg";

// ---------------------------------------------------------------- cells

const CELLS = ALL_CELLS.filter((c) => !only || only.includes(c.workload));

const byId = (id: string): Impl => [...IMPLS, ...NOTIFY_IMPLS].find((i) => i.id === id)!;
const X = byId("x-ioredis");
const NODE_REDLOCK = byId("node-redlock");
const roles: Roles = {
  x: X,
  floorFor: (impl) => byId(`floor-${impl.client}`),
};

function run(cell: Cell, impl: Impl, ports: readonly number[], notify: boolean): Promise<Outcome> {
  switch (cell.workload) {
    case "W1":
    case "W2":
    case "W4":
      throw new Error(`${cell.workload} runs interleaved`);
    case "W3":
      return contention(impl, ports, plan, {
        workers: 16,
        retryDelay: 10,
        ...(impl.role === "x" ? { wait: notify ? "notify" : "poll" } : {}),
      });
    case "W5":
      return extension(impl, ports, { lease: 200, threshold: 100, holdMs: 1_000 });
    case "W6":
      return memory(impl, ports, plan);
  }
}

function headline(cell: Cell, o: Outcome): string {
  if (o.errors || o.violations) {
    return `FAILED ${o.violations} violation(s) ${o.errors} error(s) ${o.error ?? ""}`;
  }
  const m = o.metrics;
  switch (cell.workload as Workload) {
    case "W3":
      return `${m.grantsPerSec!.toFixed(0)} grants/s, ${
        m.ownerChangesPerSec!.toFixed(0)
      } owner changes/s, p50 ${m.waitP50!.toFixed(1)} ms, p99 ${m.waitP99!.toFixed(1)} ms`;
    case "W5":
      return `${m.extensions} extensions, p50 ${m.extensionP50!.toFixed(2)} ms`;
    case "W6":
      return `${m.cyclesPerSec!.toFixed(0)} cycles/s, heap ${m.heapGrowthKiB!.toFixed(0)} KiB, ` +
        `${m.timersLeft} timers, ${m.connectionsLeft} connections left`;
    default:
      return `${m.opsPerSec!.toFixed(0)} ops/s`;
  }
}

// ---------------------------------------------------------------- run

const machine = await describeMachine();
console.log(`# @x/redlock benchmark${quick ? " (quick)" : ""}\n`);
console.log(`Machine: ${machineLine(machine)}`);
console.log(
  `Plan: ${reps} repetitions, warm-up ${plan.warmMs} ms, cells ${plan.measureMs} ms ` +
    `(W3 ${plan.contentionMs} ms), W6 ${plan.memoryCycles.toLocaleString("en-US")} cycles\n`,
);

const groups: RedisServers[] = [];
let stopping = false;
const stopAll = async () => {
  stopping = true;
  await Promise.all(groups.map((g) => g.stop()));
};
const onSignal = () => {
  console.error("\ninterrupted: stopping the Redis servers");
  stopAll().finally(() => Deno.exit(130));
};
Deno.addSignalListener("SIGINT", onSignal);
Deno.addSignalListener("SIGTERM", onSignal);

const results = new Results();
const started = new Date();
let notify = false;
let semaphores: SemaphoreBench | undefined;
let serverCost: ServerCost | undefined;
try {
  await using one = await startServers(1);
  groups.push(one);
  await using three = await startServers(3);
  groups.push(three);
  const ports = (n: number) => (n === 1 ? one.ports : three.ports);

  if (CELLS.some((c) => c.workload === "W3") || !only || only.includes("C")) {
    notify = await probeNotify(X, three.ports).catch(() => false);
    console.log(
      `wait: "notify" ${notify ? "is available" : "is not available (rows skipped)"}\n`,
    );
  }

  for (const cell of CELLS) {
    const impls = cellImpls(cell);
    const cellReps = cell.workload === "W6" ? 1 : reps;
    const shape = THROUGHPUT_SHAPES[cell.workload];
    for (let rep = 0; rep < cellReps && !stopping; rep++) {
      const order = impls.map((_, i) => impls[(i + rep) % impls.length]!);
      if (shape !== undefined) {
        // All implementations of the cell at once, in interleaved slices.
        const runnable = order.filter((impl) => {
          const why = whyNot(cell, impl);
          if (why) results.skip(cell, impl, why);
          return !why;
        });
        const outcomes = await interleaved(runnable, ports(cell.servers), plan, shape, rep)
          .catch((error) => runnable.map(() => failure(error)));
        for (const [position, impl] of runnable.entries()) {
          record(cell, impl, outcomes[position]!, { rep, position, of: cellReps });
        }
        continue;
      }
      for (const [position, impl] of order.entries()) {
        const why = whyNot(cell, impl);
        if (why) {
          results.skip(cell, impl, why);
          continue;
        }
        (globalThis as { gc?: () => void }).gc?.();
        const outcome = await run(cell, impl, ports(cell.servers), NOTIFY_IMPLS.includes(impl))
          .catch(failure);
        record(cell, impl, outcome, { rep, position, of: cellReps });
      }
    }
  }
  if ((!only || only.includes("C")) && !stopping) {
    serverCost = await benchServerCost(
      ports,
      (workload) =>
        workload === "W3"
          ? [...IMPLS, ...(notify ? NOTIFY_IMPLS : [])]
          : IMPLS.filter((impl) => workload !== "W4" || impl.multiResource),
      {
        quick,
        waitOf: (impl) =>
          impl.role !== "x" ? undefined : NOTIFY_IMPLS.includes(impl) ? "notify" : "poll",
      },
    );
  }
  if ((!only || only.includes("S")) && !stopping) {
    semaphores = await benchSemaphores(three.ports, {
      reps,
      warmMs: plan.warmMs,
      measureMs: plan.contentionMs,
    });
  }
} finally {
  Deno.removeSignalListener("SIGINT", onSignal);
  Deno.removeSignalListener("SIGTERM", onSignal);
}

/** Keeps one outcome and prints its line. */
function record(
  cell: Cell,
  impl: Impl,
  outcome: Outcome,
  at: { rep: number; position: number; of: number },
): void {
  const { rep, position } = at;
  results.add({
    ...outcome,
    workload: cell.workload,
    servers: cell.servers,
    impl: impl.id,
    rep,
    position,
  });
  console.error(
    `${cell.workload}·${cell.servers} rep ${rep + 1}/${at.of}  ${impl.label.padEnd(32)} ${
      headline(cell, outcome)
    }`,
  );
}

function cellImpls(cell: Cell): Impl[] {
  return cell.workload === "W3" ? [...IMPLS, ...NOTIFY_IMPLS] : [...IMPLS];
}

function whyNot(cell: Cell, impl: Impl): string | undefined {
  if (cell.workload === "W4" && !impl.multiResource) return "no multi-resource Redlock";
  if (cell.workload === "W5" && !impl.hasUsing) return "no using()";
  if (cell.workload === "W6" && !memoryAll && impl.role !== "x") return "run with --w6-all";
  if (cell.workload === "W3" && NOTIFY_IMPLS.includes(impl) && !notify) {
    return 'wait: "notify" not available';
  }
  return undefined;
}

// ---------------------------------------------------------------- report

const finished = new Date();
const best = notify ? byId("x-ioredis-notify") : X;
const sections: string[] = [];
for (const cell of CELLS) {
  const impls = cellImpls(cell);
  const body = cell.workload === "W3"
    ? contentionTable(results, cell, impls, roles, best)
    : cell.workload === "W5"
    ? extensionTable(results, cell, impls)
    : cell.workload === "W6"
    ? memoryTable(results, cell, impls)
    : throughputTable(results, cell, impls, roles);
  sections.push(`## ${cell.title}\n\n${body}`);
}

const cellOf = (workload: Workload, servers: number) =>
  CELLS.find((c) => c.workload === workload && c.servers === servers);
const targets: Target[] = [];
for (const [workload, servers] of [["W1", 1], ["W1", 3], ["W4", 3]] as const) {
  const cell = cellOf(workload, servers);
  if (!cell) continue;
  for (const x of [X, byId("x-node-redis")]) {
    targets.push(
      ratioTarget(
        `${workload}·${servers} ${x.label} ÷ floor`,
        results.ratio(cell, x, roles.floorFor(x)!),
        0.97,
      ),
    );
  }
  // Level with node-redlock in every uncontended cell; 1.05× is the goal beyond.
  for (const min of [1, 1.05]) {
    targets.push(
      ratioTarget(
        `${workload}·${servers} ${X.label} ÷ node-redlock`,
        results.ratio(cell, X, NODE_REDLOCK),
        min,
      ),
    );
  }
}
for (const servers of [1, 3]) {
  const cell = cellOf("W2", servers);
  if (!cell) continue;
  targets.push(
    ratioTarget(
      `W2·${servers} ${X.label} ÷ node-redlock`,
      results.ratio(cell, X, NODE_REDLOCK),
      1,
    ),
  );
  for (const x of [X, byId("x-node-redis")]) {
    targets.push(
      ratioTarget(
        `W2·${servers} ${x.label} ÷ floor`,
        results.ratio(cell, x, roles.floorFor(x)!),
        0.95,
      ),
    );
  }
}
const w3 = cellOf("W3", 3);
if (w3) {
  for (const x of [X, byId("x-ioredis-notify")]) {
    targets.push(
      ratioTarget(`W3 ${x.label} grants ÷ floor`, results.ratio(w3, x, roles.floorFor(x)!), 1),
    );
  }
  targets.push(
    ratioTarget(
      `W3 node-redlock p99 wait ÷ ${byId("x-ioredis-notify").label} p99`,
      results.ratio(w3, NODE_REDLOCK, byId("x-ioredis-notify"), "waitP99"),
      5,
    ),
  );
}
const w6 = cellOf("W6", 3);
if (w6) {
  for (const x of [X, byId("x-node-redis")]) {
    const s = results.summary(w6, x);
    const m = s && !s.failed ? s.medians : undefined;
    targets.push({
      name: `W6 ${x.label} heap growth after GC`,
      goal: "< 1024 KiB",
      value: m ? `${m.heapGrowthKiB!.toFixed(0)} KiB` : "–",
      met: m ? m.heapGrowthKiB! < 1024 : null,
    });
    targets.push({
      name: `W6 ${x.label} timers / connections left`,
      goal: "0 / 0",
      value: m ? `${m.timersLeft} / ${m.connectionsLeft}` : "–",
      met: m ? m.timersLeft === 0 && m.connectionsLeft === 0 : null,
    });
  }
}

// Read-write locks and semaphores against the plain lock (bench/handles.ts): --only=H runs them.
if (!only || only.includes("H")) {
  const handles = await benchHandles(quick);
  sections.push(handles.section);
  targets.push(...handles.targets);
}

if (serverCost) sections.push(serverCost.section);
if (semaphores) {
  sections.push(semaphores.section);
  targets.push(...semaphores.targets);
}

console.log(sections.join("\n\n"));
console.log(`\n## Targets\n\n${targetTable(targets)}\n`);
console.log(
  `Ratios are medians of per-repetition ratios; "÷ floor" compares with the floor on the same ` +
    `client. Absolute figures are this machine's: ${machineLine(machine)}.`,
);

// ---------------------------------------------------------------- files

const summaries = CELLS.flatMap((cell) =>
  cellImpls(cell).flatMap((impl) => {
    const why = results.skippedWhy(cell, impl);
    const s = results.summary(cell, impl);
    return [{
      workload: cell.workload,
      servers: cell.servers,
      impl: impl.id,
      label: impl.label,
      ...(why ? { skipped: why } : {}),
      ...(s
        ? {
          reps: s.reps,
          failed: s.failed,
          ...(s.reason ? { reason: s.reason } : {}),
          medians: s.medians,
          ratioToFloor: impl.role === "floor"
            ? 1
            : results.ratio(cell, impl, roles.floorFor(impl)!),
          ...(impl.role === "peer" ? { xOverThis: results.ratio(cell, X, impl) } : {}),
        }
        : {}),
    }];
  })
);
const report = {
  machine,
  plan: { ...plan, reps, quick },
  started: started.toISOString(),
  finished: finished.toISOString(),
  notifyAvailable: notify,
  implementations: [...IMPLS, ...NOTIFY_IMPLS].map((i) => ({
    id: i.id,
    label: i.label,
    client: i.client,
    role: i.role,
  })),
  samples: results.samples,
  summaries,
  targets,
  ...(semaphores ? { semaphores: semaphores.samples } : {}),
  ...(serverCost
    ? {
      serverCost: serverCost.rows.map((r) => ({ cell: r.cell, impl: r.impl.id, ...r.cost })),
    }
    : {}),
};
await Deno.mkdir(jsonPath.replace(/\/[^/]*$/, "") || ".", { recursive: true });
await Deno.writeTextFile(jsonPath, JSON.stringify(report, null, 2) + "\n");

const SERIES: readonly Series[] = [
  { id: "x-ioredis", label: "@x/redlock (ioredis)", color: "#1d4ed8" },
  { id: "x-node-redis", label: "@x/redlock (node-redis)", color: "#60a5fa" },
  { id: "x-ioredis-notify", label: "@x/redlock (ioredis, notify)", color: "#1e3a8a" },
  { id: "node-redlock", label: "node-redlock 5.0.0-beta.2", color: "#f97316" },
  { id: "sesamecare", label: "@sesamecare-oss/redlock", color: "#a855f7" },
  { id: "universal", label: "redlock-universal", color: "#10b981" },
  { id: "redis-semaphore", label: "redis-semaphore 5.8.0", color: "#dc2626" },
];
const chartGroups: Group[] = CELLS.filter((c) => ["W1", "W2", "W3", "W4"].includes(c.workload))
  .map((cell) => ({
    label: `${cell.workload} · ${cell.servers} server${cell.servers > 1 ? "s" : ""}`,
    bars: SERIES.filter((s) => cell.workload === "W3" || !s.id.endsWith("-notify"))
      .filter((s) => s.id !== "x-ioredis-notify" || notify)
      .map((s): Bar => {
        const impl = byId(s.id);
        const why = results.skippedWhy(cell, impl);
        const sum = results.summary(cell, impl);
        if (why) return { series: s.id, value: null, note: "n/a" };
        if (!sum) return { series: s.id, value: null, note: "not run" };
        if (sum.failed) return { series: s.id, value: null, note: "failed" };
        return { series: s.id, value: results.ratio(cell, impl, roles.floorFor(impl)!) };
      }),
  }));
if (chartGroups.length > 0) {
  await Deno.mkdir(svgPath.replace(/\/[^/]*$/, "") || ".", { recursive: true });
  await Deno.writeTextFile(
    svgPath,
    renderChart({
      title: "Throughput ÷ protocol floor (higher is better)",
      subtitle: "W1, W2, W4: acquire+release/s; W3: grants/s; each ÷ the floor on the same client",
      series: SERIES.filter((s) => s.id !== "x-ioredis-notify" || notify),
      groups: chartGroups,
      reference: { value: 1, label: "floor = 1.00" },
      footer: [
        `Medians of ${reps} repetitions${quick ? " (quick run)" : ""}, ${
          finished.toISOString().slice(0, 10)
        }. Ratios only; absolute figures are in docs/bench.json.`,
        "Floor: one SET NX PX per server to acquire, one EVALSHA compare-and-delete to release, " +
        "settled on a majority, no retries.",
        `Machine: ${machineLine(machine)}.`,
      ],
    }),
  );
}
if (serverCost) {
  await Deno.writeTextFile(
    costSvgPath,
    renderChart({
      title: "What a lock costs the servers ÷ the floor's (lower is better)",
      subtitle: "Command time per acquire + release (W3: per grant), summed over the servers, " +
        "÷ the floor on the same client",
      series: SERIES.filter((s) => s.id !== "x-ioredis-notify" || notify),
      groups: costGroups(serverCost),
      reference: { value: 1, label: "floor = 1.00" },
      footer: [
        `Least per lock over interleaved slices (INFO commandstats usec), ${
          finished.toISOString().slice(0, 10)
        }${quick ? ", quick run" : ""}; commands and CPU are in the table.`,
        `Machine: ${machineLine(machine)}.`,
      ],
    }),
  );
}
console.log(
  `\nwrote ${jsonPath}${chartGroups.length ? ` and ${svgPath}` : ""}${
    serverCost ? ` and ${costSvgPath}` : ""
  }`,
);

/** The server-cost chart's groups: each cell's command time ÷ the floor's. */
function costGroups(cost: ServerCost): Group[] {
  const cells = [...new Set(cost.rows.map((r) => r.cell))];
  return cells.map((cell) => ({
    label: cell,
    bars: SERIES.flatMap((s): Bar[] => {
      const row = cost.rows.find((r) => r.cell === cell && r.impl.id === s.id);
      if (!row) {
        return cell.startsWith("W3") || !s.id.endsWith("-notify")
          ? [{ series: s.id, value: null, note: "n/a" }]
          : [];
      }
      const floor = cost.rows.find((r) =>
        r.cell === cell && r.impl.id === `floor-${row.impl.client}`
      );
      if (row.cost.error || !floor || floor.cost.error) {
        return [{ series: s.id, value: null, note: "failed" }];
      }
      return [{ series: s.id, value: row.cost.usec / floor.cost.usec }];
    }),
  }));
}

if (semaphores?.unsafe) {
  console.error(
    "\nFAILED: @x/redlock's semaphore had more holders at once than permits (S1 or S2 above)",
  );
  Deno.exit(1);
}
