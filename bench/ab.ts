/**
 * `deno task bench:ab --base <checkout> [--reps N] [--measure-ms N] [--only W1,W4] [--json=path]`
 *
 * Same-process A/B of two builds of @x/redlock: this checkout's `mod.ts`
 * ("new") and `<base>/mod.ts` ("base", e.g. a `git worktree` of an older
 * commit), both imported into one process and used with the same npm
 * clients. On Redis servers it starts itself (1 and 3, loopback, no
 * persistence), each repetition runs W1, W2 and W4 (see bench/bench.ts)
 * with ioredis and with node-redis; in each, the two builds are opened and
 * warmed up, then take turns in 50 ms slices until each has measured
 * `--measure-ms` (see `interleaved()`), so that a machine whose speed drifts
 * slows both alike. The first build to run alternates between repetitions.
 * The defaults (5 repetitions of 6 s, about 11 minutes) tell 2 % apart on a
 * noisy 2-core machine: with 1.5 s a repetition's ratio strays by ~5 %.
 *
 * Per cell and client it prints both builds' acquire + release/s (medians),
 * new ÷ base and whether new is within 2 % of base (new ÷ base ≥ 0.98).
 * new ÷ base is the median over repetitions of each one's median over turns
 * of the ratio of the turn's two slices (a burst of the machine's other
 * work then weighs on a few turns, not on a whole repetition); their range
 * and the ratio of whole repetitions' totals are printed beside it. Every
 * repetition, with its slices, goes to the JSON file (default docs/ab.json).
 *
 * @module
 */

import { startServers } from "../scripts/redis.ts";
import { intArg, parseArgs } from "./_args.ts";
import type { ClientKind } from "./_connect.ts";
import { type Impl, type Library, xImpl } from "./_impls.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import { ALL_CELLS, type Cell, int, Results, table, times } from "./_report.ts";
import { median } from "./_stats.ts";
import { describeSource, type Source, sourceLine } from "./_source.ts";
import { failure, interleaved, type Outcome, type Plan, THROUGHPUT_SHAPES } from "./_workloads.ts";

// ---------------------------------------------------------------- options

const args = parseArgs(Deno.args, {
  flags: [],
  values: ["base", "reps", "measure-ms", "only", "json"],
  usage: "the top of bench/ab.ts",
});
const baseDir = args.get("base");
if (baseDir === undefined) {
  console.error("--base <checkout> is required: the directory of the other build's mod.ts");
  Deno.exit(2);
}
const only = args.get("only")?.split(",");
const plan: Plan = {
  reps: intArg(args, "reps", 5),
  warmMs: 300,
  measureMs: intArg(args, "measure-ms", 6_000, 100),
  contentionMs: 0,
  holdMs: 0,
  thinkMs: 0,
  memoryCycles: 0,
};
const jsonPath = args.get("json") ?? "docs/ab.json";

/** New ÷ base must be at least this (the median of the repetitions). */
const WITHIN = 0.98;
const CLIENTS: readonly ClientKind[] = ["ioredis", "node-redis"];
const CELLS = ALL_CELLS.filter((c) =>
  THROUGHPUT_SHAPES[c.workload] !== undefined && (!only || only.includes(c.workload))
);

// ---------------------------------------------------------------- builds

/** The directory URL of `path`, resolved (symbolic links too). */
function directory(path: string): URL {
  const url = new URL("file:///");
  url.pathname = `${Deno.realPathSync(path)}/`;
  return url;
}

/** Imports the `mod.ts` of the checkout at `root`. */
async function load(root: URL, id: string): Promise<{ source: Source; library: Library }> {
  const source = await describeSource(root);
  const module = await import(new URL("mod.ts", root).href);
  if (typeof module.Redlock !== "function") {
    throw new TypeError(`${root.pathname}mod.ts exports no Redlock class`);
  }
  const dirty = source.changed.length ? "+" : "";
  return {
    source,
    library: {
      id,
      label: `${source.version} @${source.commit.slice(0, 7)}${dirty}`,
      Redlock: module.Redlock,
    },
  };
}

const newRoot = directory(new URL("../", import.meta.url).pathname);
const baseRoot = directory(baseDir);
if (newRoot.href === baseRoot.href) {
  console.error(`--base is this checkout (${baseRoot.pathname}): give another one`);
  Deno.exit(2);
}
const built = { new: await load(newRoot, "new"), base: await load(baseRoot, "base") };

/** The new and base rows of each client. */
const pairs = CLIENTS.map((kind) => ({
  kind,
  new: xImpl(kind, { library: built.new.library }),
  base: xImpl(kind, { library: built.base.library }),
}));

// ---------------------------------------------------------------- run

const machine = await describeMachine();
const groups = CELLS.length * CLIENTS.length;
const estimate = (plan.reps * groups * 2 * (plan.warmMs + plan.measureMs)) / 60_000;
console.log(`# @x/redlock A/B: this checkout against --base\n`);
console.log(`Machine: ${machineLine(machine)}`);
console.log(
  `New:  ${built.new.library.label}, ${newRoot.pathname}, ${sourceLine(built.new.source)}`,
);
console.log(
  `Base: ${built.base.library.label}, ${baseRoot.pathname}, ${sourceLine(built.base.source)}`,
);
console.log(
  `Plan: ${plan.reps} repetitions of ${
    CELLS.map((c) => `${c.workload}·${c.servers}`).join(", ")
  } ` +
    `× ${CLIENTS.join(", ")}; each build warmed ${plan.warmMs} ms, then ${plan.measureMs} ms ` +
    `in 50 ms slices taking turns with the other (about ${estimate.toFixed(1)} min)\n`,
);

let stopping = false;
const onSignal = () => {
  if (stopping) Deno.exit(130);
  stopping = true;
  console.error("\ninterrupted: stopping after this cell (again to quit at once)");
};
Deno.addSignalListener("SIGINT", onSignal);
Deno.addSignalListener("SIGTERM", onSignal);

const results = new Results();
const started = new Date();
try {
  await using one = await startServers(1);
  await using three = await startServers(3);
  const ports = (cell: Cell) => (cell.servers === 1 ? one.ports : three.ports);
  for (let rep = 0; rep < plan.reps && !stopping; rep++) {
    for (const cell of CELLS) {
      for (const pair of pairs) {
        if (stopping) break;
        const order = rep % 2 === 0 ? [pair.new, pair.base] : [pair.base, pair.new];
        const shape = THROUGHPUT_SHAPES[cell.workload]!;
        const outcomes = await interleaved(order, ports(cell), plan, shape, rep)
          .catch((error) => order.map(() => failure(error)));
        for (const [position, impl] of order.entries()) {
          record(cell, impl, outcomes[position]!, { rep, position });
        }
      }
    }
  }
} finally {
  Deno.removeSignalListener("SIGINT", onSignal);
  Deno.removeSignalListener("SIGTERM", onSignal);
}
const finished = new Date();

/** Keeps one outcome and prints its line. */
function record(cell: Cell, impl: Impl, o: Outcome, at: { rep: number; position: number }): void {
  results.add({ ...o, workload: cell.workload, servers: cell.servers, impl: impl.id, ...at });
  const what = o.errors || o.violations
    ? `FAILED ${o.violations} violation(s) ${o.errors} error(s) ${o.error ?? ""}`
    : `${int(o.metrics.opsPerSec)} ops/s`;
  console.error(
    `${cell.workload}·${cell.servers} rep ${at.rep + 1}/${plan.reps}  ${
      impl.label.padEnd(40)
    } ${what}`,
  );
}

// ---------------------------------------------------------------- report

/** The verdict of one cell and client. */
interface Row {
  readonly workload: string;
  readonly servers: number;
  readonly client: ClientKind;
  readonly newOpsPerSec: number | null;
  readonly baseOpsPerSec: number | null;
  /** new ÷ base of each repetition's totals, in run order. */
  readonly totalRatios: number[];
  /** Each repetition's median over its turns of new ÷ base slice by slice, in run order. */
  readonly sliceRatios: number[];
  /** The median of `sliceRatios`: what the verdict is on. */
  readonly ratio: number | null;
  readonly within: boolean | null;
  readonly failed?: string;
}

/**
 * Per repetition, the median over turns of new ÷ base of the two slices of
 * a turn (run next to each other, so a burst of the machine's other work
 * that hits a turn is left out, where it would weigh on a whole
 * repetition's totals).
 */
function sliceRatios(cell: Cell, pair: typeof pairs[number]): number[] {
  const bases = new Map(results.of(cell, pair.base).map((s) => [s.rep, s.slices ?? []]));
  return results.of(cell, pair.new).flatMap((s) => {
    const base = bases.get(s.rep) ?? [];
    const ratios = (s.slices ?? []).map((ops, turn) => ops / base[turn]!).filter(Number.isFinite);
    return ratios.length ? [median(ratios)] : [];
  });
}

function row(cell: Cell, pair: typeof pairs[number]): Row {
  const [n, b] = [results.summary(cell, pair.new), results.summary(cell, pair.base)];
  const failed = [n, b].find((s) => s?.failed);
  const bySlice = failed ? [] : sliceRatios(cell, pair);
  const ratio = bySlice.length ? median(bySlice) : null;
  return {
    workload: cell.workload,
    servers: cell.servers,
    client: pair.kind,
    newOpsPerSec: n?.medians.opsPerSec ?? null,
    baseOpsPerSec: b?.medians.opsPerSec ?? null,
    totalRatios: results.ratios(cell, pair.new, pair.base),
    sliceRatios: bySlice,
    ratio,
    within: ratio === null ? null : ratio >= WITHIN,
    ...(failed ? { failed: `${failed.impl.label}: ${failed.reason}` } : {}),
  };
}

const rows = CELLS.flatMap((cell) => pairs.map((pair) => row(cell, pair)));
const verdict = (r: Row): string =>
  r.failed
    ? `FAILED (${r.failed})`
    : r.within === null
    ? "not run"
    : r.within
    ? "yes"
    : `NO (${((1 - r.ratio!) * 100).toFixed(1)} % slower)`;
const ratio = (x: number | null): string => x === null ? "–" : x.toFixed(3);
const range = (ratios: readonly number[]): string =>
  ratios.length ? `${ratio(Math.min(...ratios))}–${ratio(Math.max(...ratios))}` : "–";

console.log(
  table(
    [
      "cell",
      "client",
      `base ${built.base.library.label} ops/s`,
      `new ${built.new.library.label} ops/s`,
      "new ÷ base",
      "per-repetition range",
      `reps < ${WITHIN}`,
      "within 2 %",
      "totals: new ÷ base (range)",
    ],
    rows.map((r) => [
      `${r.workload} · ${r.servers} server${r.servers > 1 ? "s" : ""}`,
      r.client,
      int(r.baseOpsPerSec ?? undefined),
      int(r.newOpsPerSec ?? undefined),
      ratio(r.ratio),
      range(r.sliceRatios),
      r.sliceRatios.length
        ? `${r.sliceRatios.filter((x) => x < WITHIN).length}/${r.sliceRatios.length}`
        : "–",
      verdict(r),
      r.totalRatios.length ? `${ratio(median(r.totalRatios))} (${range(r.totalRatios)})` : "–",
    ]),
  ),
);
console.log("\nPer-repetition new ÷ base (slice pairs), in run order:");
for (const r of rows) {
  console.log(
    `  ${r.workload}·${r.servers} ${r.client.padEnd(10)} ${
      r.sliceRatios.map((x) => x.toFixed(3)).join(" ")
    }`,
  );
}
console.log(
  `\nops/s: medians over ${plan.reps} repetitions of each build's acquire + release per ` +
    `second. new ÷ base: the median over repetitions of each one's median over turns of the ` +
    `ratio of the turn's two slices; within 2 % when it is ${times(WITHIN)} or more. Totals: ` +
    `the median of the ratios of whole repetitions. ${machineLine(machine)}.`,
);

const report = {
  machine,
  plan: { ...plan, within: WITHIN, clients: CLIENTS },
  new: built.new.source,
  base: built.base.source,
  started: started.toISOString(),
  finished: finished.toISOString(),
  implementations: pairs.flatMap((p) => [p.new, p.base]).map((i) => ({
    id: i.id,
    label: i.label,
    client: i.client,
  })),
  samples: results.samples,
  rows,
};
await Deno.mkdir(jsonPath.replace(/\/[^/]*$/, "") || ".", { recursive: true });
await Deno.writeTextFile(jsonPath, JSON.stringify(report, null, 2) + "\n");
console.log(`\nwrote ${jsonPath}`);
