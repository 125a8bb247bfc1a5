/**
 * `deno task bench:handoff [--quick] [--reps N] [--json=path]`
 *
 * How fast a contended lock changes hands: 16 workers, each with
 * its own Redlock and connections, contend for one resource on 3 Redis
 * servers (started here, loopback, no persistence, stopped at the end), with
 * a 5 s lease, no think time and a hold of 0 ms (released at once) and 5 ms.
 * Compared: @x/redlock (ioredis) with `wait: "notify"` and with
 * `wait: "poll"` (library defaults, 200 ms retry delay + up to 100 ms jitter,
 * but retrying forever), and node-redlock 5.0.0-beta.2 with its own
 * defaults (10 retries 200 ± 100 ms apart; an acquire that gives up is
 * counted and asked again).
 *
 * Each repetition first measures the uncontended acquire latency of
 * @x/redlock (ioredis) on the same servers (one loop on fresh keys), back to
 * back and with each hold's time slept before every acquire, then every
 * cell, in an order rotated from one repetition to the next. The latency
 * target of a hold divides by the uncontended latency after as much idle
 * time (see `targets()`). A cell
 * reports handoffs/s (grants to another worker than the previous holder),
 * grants/s, p50/p99 wait (acquire call to grant), and p50/p99 handoff
 * latency (previous holder calling release to the next grant). A
 * mutual-exclusion violation or an unexpected error fails the cell. Tables
 * show medians of the repetitions; targets are medians of per-repetition
 * ratios. Every repetition is written to docs/handoff.json.
 *
 * @module
 */

import { startServers } from "../scripts/redis.ts";
import { intArg, parseArgs } from "./_args.ts";
import { type Impl, NODE_REDLOCK_DEFAULTS, type Settings, xImpl } from "./_impls.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import { int, ms, table, times } from "./_report.ts";
import { describeSource, sourceLine } from "./_source.ts";
import { median } from "./_stats.ts";
import { acquireLatency, failure, handoff, type HandoffPlan, type Outcome } from "./_workloads.ts";

// ---------------------------------------------------------------- options

const args = parseArgs(Deno.args, {
  flags: ["quick"],
  values: ["reps", "json"],
  usage: "the top of bench/handoff.ts",
});
const quick = args.has("quick");
const reps = intArg(args, "reps", 3);
const jsonPath = args.get("json") ?? "docs/handoff.json";

const WORKERS = 16;
const HOLDS = [0, 5] as const;
// A full cell measures 3 s: longer than node-redlock's default retry window
// (10 delays of 200 ± 100 ms, about 2 s), so its give-ups show.
const plan = quick
  ? { warmMs: 200, measureMs: 800, latencyWarmMs: 200, latencyMs: 500 }
  : { warmMs: 300, measureMs: 3_000, latencyWarmMs: 300, latencyMs: 1_500 };

/** The handoff latency p50 may be at most this many uncontended acquire p50s. */
const LATENCY_TARGET = 3;
/** notify must make at least this many times node-redlock's handoffs per second. */
const RATE_TARGET = 5;

// ---------------------------------------------------------------- contenders

/** @x/redlock's defaults (200 ms retry delay, up to 100 ms jitter), retrying forever. */
const X_SETTINGS: Settings = { retryCount: -1, retryDelay: 200, retryJitter: 100, threshold: 500 };

const UNCONTENDED = xImpl("ioredis");
const NOTIFY = xImpl("ioredis", { wait: "notify" });
const POLL = xImpl("ioredis", { wait: "poll" });
/** node-redlock ignores the settings it is opened with: it uses its own defaults. */
const CONTENDERS: readonly Impl[] = [NOTIFY, POLL, NODE_REDLOCK_DEFAULTS];

// ---------------------------------------------------------------- samples

/** One measurement of one repetition. */
interface Sample extends Outcome {
  readonly rep: number;
  readonly impl: string;
  /** ms held per grant; null for the uncontended acquire latency. */
  readonly holdMs: number | null;
  /** Uncontended latency only: ms the loop slept before each acquire. */
  readonly idleMs?: number;
  /** Its place in this repetition's order for its hold (0 = first). */
  readonly position: number;
}

const samples: Sample[] = [];
/** Set by SIGINT/SIGTERM: no further cell starts. */
let stopping = false;

const failed = (o: Outcome): boolean => o.errors > 0 || o.violations > 0;

function headline(o: Outcome): string {
  const m = o.metrics;
  const bad = failed(o)
    ? `  FAILED ${o.violations} violation(s) ${o.errors} error(s) ${o.error ?? ""}`
    : "";
  if (m.acquireP50 !== undefined) {
    return `acquire p50 ${ms(m.acquireP50)} ms, p99 ${ms(m.acquireP99)} ms${bad}`;
  }
  return `${int(m.handoffsPerSec)} handoffs/s, ${int(m.grantsPerSec)} grants/s, ` +
    `wait p50 ${ms(m.waitP50)} p99 ${ms(m.waitP99)} ms, handoff p50 ${ms(m.handoffP50)} ` +
    `p99 ${ms(m.handoffP99)} ms, ${int(m.gaveUps)} gave up${bad}`;
}

function record(sample: Sample, label: string): void {
  samples.push(sample);
  const what = sample.holdMs !== null
    ? `hold ${sample.holdMs} ms`
    : sample.idleMs
    ? `idle ${sample.idleMs} ms`
    : "uncontended";
  console.error(
    `rep ${sample.rep + 1}/${reps}  ${what.padEnd(12)} ${label.padEnd(30)} ${headline(sample)}`,
  );
}

/** The cell plan of one hold. */
const cellPlan = (holdMs: number): HandoffPlan => ({
  workers: WORKERS,
  warmMs: plan.warmMs,
  measureMs: plan.measureMs,
  holdMs,
});

/**
 * One repetition: the uncontended latency (back to back, and after each
 * hold's idle time), then every contender at every hold.
 */
async function repetition(rep: number, ports: readonly number[]): Promise<void> {
  for (const idleMs of HOLDS) {
    const latency = await acquireLatency(UNCONTENDED, ports, {
      warmMs: plan.latencyWarmMs,
      measureMs: plan.latencyMs,
      idleMs,
    }).catch(failure);
    record(
      { ...latency, rep, impl: UNCONTENDED.id, holdMs: null, idleMs, position: 0 },
      "@x/redlock (ioredis)",
    );
  }
  for (const holdMs of HOLDS) {
    const order = CONTENDERS.map((_, i) => CONTENDERS[(i + rep) % CONTENDERS.length]!);
    for (const [position, impl] of order.entries()) {
      if (stopping) return;
      (globalThis as { gc?: () => void }).gc?.();
      const outcome = await handoff(impl, ports, X_SETTINGS, cellPlan(holdMs)).catch(failure);
      record({ ...outcome, rep, impl: impl.id, holdMs, position }, impl.label);
    }
  }
}

// ---------------------------------------------------------------- summaries

/**
 * The samples of `impl` at `holdMs` (null: uncontended, then with `idleMs`
 * before each acquire), by repetition.
 */
const of = (impl: Impl, holdMs: number | null, idleMs = 0): Sample[] =>
  samples.filter((s) =>
    s.impl === impl.id && s.holdMs === holdMs && (holdMs !== null || (s.idleMs ?? 0) === idleMs)
  );

/** Medians over repetitions; failed when any repetition failed. */
interface Summary {
  readonly reps: number;
  readonly failed: boolean;
  readonly errors: number;
  readonly violations: number;
  readonly firstError?: string;
  readonly medians: Record<string, number>;
}

function summarize(impl: Impl, holdMs: number | null, idleMs = 0): Summary | undefined {
  const mine = of(impl, holdMs, idleMs);
  if (mine.length === 0) return undefined;
  const names = new Set(mine.flatMap((s) => Object.keys(s.metrics)));
  const medians: Record<string, number> = {};
  for (const name of names) {
    medians[name] = median(mine.map((s) => s.metrics[name] ?? NaN).filter(Number.isFinite));
  }
  const firstError = mine.find((s) => s.error !== undefined)?.error;
  return {
    reps: mine.length,
    failed: mine.some(failed),
    errors: mine.reduce((n, s) => n + s.errors, 0),
    violations: mine.reduce((n, s) => n + s.violations, 0),
    ...(firstError === undefined ? {} : { firstError }),
    medians,
  };
}

/**
 * Median over repetitions of `a.metrics[ma] / b.metrics[mb]`, pairing the
 * samples of one repetition; null when either side failed or is missing.
 */
function pairedRatio(a: Sample[], ma: string, b: Sample[], mb: string): number | null {
  if (a.length === 0 || b.length === 0 || [...a, ...b].some(failed)) return null;
  const ratios = a.flatMap((s) => {
    const other = b.find((t) => t.rep === s.rep)?.metrics[mb];
    const mine = s.metrics[ma];
    return other === undefined || mine === undefined ? [] : [mine / other];
  }).filter((r) => !Number.isNaN(r));
  return ratios.length ? median(ratios) : null;
}

/** One target of this benchmark and whether this run met it. */
interface Target {
  readonly name: string;
  readonly holdMs: number;
  readonly goal: string;
  /** The medians the ratio is about, for the report (the ratio is per repetition). */
  readonly detail: string;
  readonly ratio: number | null;
  readonly met: boolean | null;
}

const medianOf = (
  impl: Impl,
  holdMs: number | null,
  metric: string,
  idleMs = 0,
): number | undefined => summarize(impl, holdMs, idleMs)?.medians[metric];

/**
 * The targets. Latency (a) divides by the uncontended acquire measured after
 * as much idle time as the cell's hold: between handoffs every process of the
 * cell sleeps that long, and on this VM the first round trip after a few ms
 * of idle costs 2–3 times one in a busy loop, for any client (the servers'
 * vCPUs have to wake). The ratio to the back-to-back acquire is in the detail.
 */
function targets(): Target[] {
  return HOLDS.flatMap((holdMs): Target[] => {
    const latencyVs = (idleMs: number) =>
      pairedRatio(of(NOTIFY, holdMs), "handoffP50", of(UNCONTENDED, null, idleMs), "acquireP50");
    const latency = latencyVs(holdMs);
    const acquireP50 = (idleMs: number) => ms(medianOf(UNCONTENDED, null, "acquireP50", idleMs));
    const rate = pairedRatio(
      of(NOTIFY, holdMs),
      "handoffsPerSec",
      of(NODE_REDLOCK_DEFAULTS, holdMs),
      "handoffsPerSec",
    );
    return [
      {
        name: `(a) notify handoff latency p50 ÷ uncontended acquire p50${
          holdMs > 0 ? ` after ${holdMs} ms idle` : ""
        }`,
        holdMs,
        goal: `≤ ${LATENCY_TARGET}×`,
        detail: `${ms(medianOf(NOTIFY, holdMs, "handoffP50"))} ms vs ${acquireP50(holdMs)} ms${
          holdMs > 0
            ? `; ÷ the back-to-back acquire (${acquireP50(0)} ms): ${times(latencyVs(0))}`
            : ""
        }`,
        ratio: latency,
        met: latency === null ? null : latency <= LATENCY_TARGET,
      },
      {
        name: "(b) notify handoffs/s ÷ node-redlock (defaults) handoffs/s",
        holdMs,
        goal: `≥ ${RATE_TARGET}×`,
        detail: `${int(medianOf(NOTIFY, holdMs, "handoffsPerSec"))} vs ${
          int(medianOf(NODE_REDLOCK_DEFAULTS, holdMs, "handoffsPerSec"))
        } handoffs/s`,
        ratio: rate,
        met: rate === null ? null : rate >= RATE_TARGET,
      },
    ];
  });
}

// ---------------------------------------------------------------- report

function cellTable(): string {
  const rows = HOLDS.flatMap((holdMs) =>
    CONTENDERS.map((impl) => {
      const s = summarize(impl, holdMs);
      const head = [impl.label, String(holdMs)];
      if (!s) return [...head, "not run", "", "", "", "", "", "", "", ""];
      const m = s.medians;
      return [
        ...head,
        int(m.handoffsPerSec),
        int(m.grantsPerSec),
        ms(m.waitP50),
        ms(m.waitP99),
        ms(m.handoffP50),
        ms(m.handoffP99),
        impl.gaveUp ? int(m.gaveUps) : "",
        s.failed
          ? `FAILED: ${s.violations} violation(s), ${s.errors} error(s)${
            s.firstError ? ` (${s.firstError})` : ""
          }`
          : "0 / 0",
      ];
    })
  );
  return table(
    [
      "implementation",
      "hold ms",
      "handoffs/s",
      "grants/s",
      "p50 wait ms",
      "p99 wait ms",
      "handoff p50 ms",
      "handoff p99 ms",
      "gave up / rep",
      "errors / violations",
    ],
    rows,
  );
}

function targetLine(t: Target): string {
  const verdict = t.met === null ? "n/a (a cell failed or is missing)" : t.met ? "met" : "missed";
  return `${t.name}, hold ${t.holdMs} ms: ${times(t.ratio)} (${t.detail}; target ${t.goal}): ` +
    verdict;
}

// ---------------------------------------------------------------- run

const machine = await describeMachine();
console.log(`# @x/redlock handoff benchmark${quick ? " (quick)" : ""}\n`);
console.log(`Machine: ${machineLine(machine)}`);
console.log(
  `Plan: ${reps} repetitions; ${WORKERS} workers, one key, 3 servers, lease 5000 ms, ` +
    `warm-up ${plan.warmMs} ms, measured ${plan.measureMs} ms per cell; uncontended ` +
    `acquire ${plan.latencyMs} ms after ${plan.latencyWarmMs} ms, for each idle time (${
      HOLDS.join(" and ")
    } ms) before every acquire`,
);

let stopServers: (() => Promise<void>) | undefined;
const onSignal = () => {
  stopping = true;
  console.error("\ninterrupted: stopping the Redis servers");
  (stopServers?.() ?? Promise.resolve()).finally(() => Deno.exit(130));
};
Deno.addSignalListener("SIGINT", onSignal);
Deno.addSignalListener("SIGTERM", onSignal);

const source = await describeSource(new URL("../", import.meta.url));
console.log(`Library: ${sourceLine(source)}\n`);
const started = new Date();
try {
  await using three = await startServers(3);
  stopServers = () => three.stop();
  for (let rep = 0; rep < reps && !stopping; rep++) await repetition(rep, three.ports);
} finally {
  Deno.removeSignalListener("SIGINT", onSignal);
  Deno.removeSignalListener("SIGTERM", onSignal);
}
const finished = new Date();

const uncontended = HOLDS.map((idleMs) => ({ idleMs, ...summarize(UNCONTENDED, null, idleMs) }));
const checks = targets();
console.log(`## ${WORKERS} workers, one key, 3 servers (medians of ${reps} repetitions)\n`);
console.log(cellTable());
for (const u of uncontended) {
  console.log(
    `${u.idleMs ? "" : "\n"}Uncontended acquire (${UNCONTENDED.label}, 3 servers, one loop, ` +
      `fresh keys, ${u.idleMs ? `${u.idleMs} ms idle before each` : "back to back"}): ` +
      `p50 ${ms(u.medians?.acquireP50)} ms, p99 ${ms(u.medians?.acquireP99)} ms` +
      (u.failed ? ` FAILED: ${u.firstError ?? ""}` : ""),
  );
}
console.log(`\n## Targets\n`);
for (const t of checks) console.log(targetLine(t));
console.log(
  `\nRatios are medians of per-repetition ratios. A handoff is a grant to another worker than ` +
    `the previous holder; its latency runs from that holder calling release() to the grant. ` +
    `Absolute figures are this machine's: ${machineLine(machine)}.`,
);

// ---------------------------------------------------------------- file

const summaries = [
  ...uncontended.map((u) => ({
    impl: UNCONTENDED.id,
    label: UNCONTENDED.label,
    holdMs: null,
    ...u,
  })),
  ...HOLDS.flatMap((holdMs) =>
    CONTENDERS.map((impl) => ({
      impl: impl.id,
      label: impl.label,
      holdMs,
      ...summarize(impl, holdMs),
    }))
  ),
];
const report = {
  machine,
  plan: { ...plan, reps, quick, workers: WORKERS, holds: HOLDS, servers: 3, leaseMs: 5_000 },
  settings: { x: X_SETTINGS, nodeRedlock: "its defaults (none passed)" },
  source,
  started: started.toISOString(),
  finished: finished.toISOString(),
  implementations: [UNCONTENDED, ...CONTENDERS].map((i) => ({ id: i.id, label: i.label })),
  samples,
  summaries,
  targets: checks,
};
await Deno.mkdir(jsonPath.replace(/\/[^/]*$/, "") || ".", { recursive: true });
await Deno.writeTextFile(jsonPath, JSON.stringify(report, null, 2) + "\n");
console.log(`\nwrote ${jsonPath}`);
