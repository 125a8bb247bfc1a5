/**
 * From repetitions to medians, ratios, tables and target checks.
 *
 * A ratio is the median of the per-repetition ratios (both implementations
 * ran in the same repetition, close in time), so slow drift of a noisy
 * machine cancels out. A cell with an error or a violation in any
 * repetition is failed and gets no number.
 *
 * @module
 */

import type { Impl } from "./_impls.ts";
import { median } from "./_stats.ts";
import type { Outcome, Workload } from "./_workloads.ts";

/** One repetition of one implementation in one cell. */
export interface Sample extends Outcome {
  readonly workload: Workload;
  readonly servers: number;
  readonly impl: string;
  readonly rep: number;
  /** Its place in this repetition's order (0 = first). */
  readonly position: number;
}

/** A workload on a number of servers. */
export interface Cell {
  readonly workload: Workload;
  readonly servers: number;
  readonly title: string;
  /** The metric ratios are taken of (higher is better). */
  readonly metric: string;
}

/** Every cell of `deno task bench`, in report order. */
export const ALL_CELLS: readonly Cell[] = [
  { workload: "W1", servers: 1, title: "W1 · one loop, fresh key · 1 server", metric: "opsPerSec" },
  {
    workload: "W1",
    servers: 3,
    title: "W1 · one loop, fresh key · 3 servers",
    metric: "opsPerSec",
  },
  {
    workload: "W2",
    servers: 1,
    title: "W2 · 64 loops, distinct keys · 1 server",
    metric: "opsPerSec",
  },
  {
    workload: "W2",
    servers: 3,
    title: "W2 · 64 loops, distinct keys · 3 servers",
    metric: "opsPerSec",
  },
  {
    workload: "W3",
    servers: 3,
    title: "W3 · 16 workers, one key · 3 servers",
    metric: "grantsPerSec",
  },
  {
    workload: "W4",
    servers: 3,
    title: "W4 · 5 resources per lock · 3 servers",
    metric: "opsPerSec",
  },
  {
    workload: "W5",
    servers: 3,
    title: "W5 · using(), 200 ms lease held 1 s · 3 servers",
    metric: "extensions",
  },
  {
    workload: "W6",
    servers: 3,
    title: "W6 · memory: acquire/release cycles · 3 servers",
    metric: "heapGrowthKiB",
  },
];

/** An implementation's result in a cell. */
export interface Summary {
  readonly impl: Impl;
  readonly reps: number;
  readonly failed: boolean;
  readonly reason?: string;
  readonly medians: Record<string, number>;
}

/** Index of samples by cell and implementation. */
export class Results {
  readonly samples: Sample[] = [];
  readonly skipped = new Map<string, string>();

  add(sample: Sample): void {
    this.samples.push(sample);
  }

  /** Marks an implementation as not applicable in a cell. */
  skip(cell: Cell, impl: Impl, why: string): void {
    this.skipped.set(`${cell.workload}/${cell.servers}/${impl.id}`, why);
  }

  skippedWhy(cell: Cell, impl: Impl): string | undefined {
    return this.skipped.get(`${cell.workload}/${cell.servers}/${impl.id}`);
  }

  of(cell: Cell, impl: Impl): Sample[] {
    return this.samples.filter((s) =>
      s.workload === cell.workload && s.servers === cell.servers && s.impl === impl.id
    );
  }

  summary(cell: Cell, impl: Impl): Summary | undefined {
    const samples = this.of(cell, impl);
    if (samples.length === 0) return undefined;
    const bad = samples.find((s) => s.errors > 0 || s.violations > 0);
    const errors = samples.reduce((n, s) => n + s.errors, 0);
    const violations = samples.reduce((n, s) => n + s.violations, 0);
    const medians: Record<string, number> = {};
    for (const name of Object.keys(samples[0]!.metrics)) {
      medians[name] = median(samples.map((s) => s.metrics[name]!).filter(Number.isFinite));
    }
    return {
      impl,
      reps: samples.length,
      failed: bad !== undefined,
      ...(bad
        ? {
          reason: `${violations} violation(s), ${errors} error(s) in ${samples.length} rep(s)` +
            (bad.error ? `: ${bad.error}` : ""),
        }
        : {}),
      medians,
    };
  }

  /** Median over repetitions of `a[metric] / b[metric]`; null when either failed or is missing. */
  ratio(cell: Cell, a: Impl, b: Impl, metric = cell.metric): number | null {
    const ratios = this.ratios(cell, a, b, metric);
    return ratios.length ? median(ratios) : null;
  }

  /** `a[metric] / b[metric]` of every repetition both ran; none when either failed. */
  ratios(cell: Cell, a: Impl, b: Impl, metric = cell.metric): number[] {
    const sa = this.summary(cell, a);
    const sb = this.summary(cell, b);
    if (!sa || !sb || sa.failed || sb.failed) return [];
    const bs = new Map(this.of(cell, b).map((s) => [s.rep, s.metrics[metric]!]));
    return this.of(cell, a).flatMap((s) => {
      const other = bs.get(s.rep);
      return other === undefined ? [] : [s.metrics[metric]! / other];
    }).filter(Number.isFinite);
  }
}

/** A count as `12,345` (`–` for none). */
export const int = (n: number | undefined): string =>
  n === undefined || !Number.isFinite(n) ? "–" : Math.round(n).toLocaleString("en-US");
/** A duration in ms: 2 decimals under 10, 1 above (`–` for none). */
export const ms = (n: number | undefined): string =>
  n === undefined || !Number.isFinite(n) ? "–" : n < 10 ? n.toFixed(2) : n.toFixed(1);
/** A ratio as `0.98×`. */
export const times = (n: number | null | undefined): string =>
  n === null || n === undefined || !Number.isFinite(n) ? "–" : `${n.toFixed(2)}×`;

/** A Markdown table. */
export function table(head: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...rows.map(line)].join("\n");
}

/** Who each implementation is measured against. */
export interface Roles {
  /** The floor with the same client as `impl`. */
  floorFor(impl: Impl): Impl | undefined;
  /** The @x/redlock row peers are compared with. */
  readonly x: Impl;
}

function status(s: Summary | undefined, why: string | undefined): string | undefined {
  if (why) return `n/a (${why})`;
  if (!s) return "not run";
  if (s.failed) return `FAILED: ${s.reason}`;
  return undefined;
}

/** A throughput table (W1, W2, W4). */
export function throughputTable(
  results: Results,
  cell: Cell,
  impls: readonly Impl[],
  roles: Roles,
): string {
  const rows = impls.map((impl) => {
    const s = results.summary(cell, impl);
    const bad = status(s, results.skippedWhy(cell, impl));
    if (bad) return [impl.label, bad, "", ""];
    const floor = roles.floorFor(impl);
    return [
      impl.label,
      int(s!.medians.opsPerSec),
      impl.role === "floor" || !floor ? "" : times(results.ratio(cell, impl, floor)),
      impl.role === "peer" ? times(results.ratio(cell, roles.x, impl)) : "",
    ];
  });
  return table(
    ["implementation", "acquire+release/s (this machine)", "÷ floor", `${roles.x.label} ÷ this`],
    rows,
  );
}

/** The contention table (W3). */
export function contentionTable(
  results: Results,
  cell: Cell,
  impls: readonly Impl[],
  roles: Roles,
  best: Impl,
): string {
  const rows = impls.map((impl) => {
    const s = results.summary(cell, impl);
    const bad = status(s, results.skippedWhy(cell, impl));
    if (bad) return [impl.label, bad, "", "", "", "", "", ""];
    const floor = roles.floorFor(impl);
    const m = s!.medians;
    const bestP99 = results.summary(cell, best)?.medians.waitP99;
    return [
      impl.label,
      int(m.grantsPerSec),
      int(m.ownerChangesPerSec),
      ms(m.waitP50),
      ms(m.waitP99),
      impl.role === "floor" || !floor ? "" : times(results.ratio(cell, impl, floor)),
      bestP99 && impl !== best ? times(results.ratio(cell, impl, best, "waitP99")) : "",
    ];
  });
  return table(
    [
      "implementation",
      "grants/s",
      "owner changes/s",
      "p50 wait ms",
      "p99 wait ms",
      "grants ÷ floor",
      `p99 ÷ ${best.label} p99`,
    ],
    rows,
  );
}

/** The `using()` table (W5). */
export function extensionTable(results: Results, cell: Cell, impls: readonly Impl[]): string {
  const rows = impls.map((impl) => {
    const s = results.summary(cell, impl);
    const bad = status(s, results.skippedWhy(cell, impl));
    if (bad) return [impl.label, bad, "", ""];
    const m = s!.medians;
    return [impl.label, int(m.extensions), ms(m.extensionP50), ms(m.extensionMax)];
  });
  return table(
    ["implementation", "extensions in the hold", "extension p50 ms", "extension max ms"],
    rows,
  );
}

/** The memory table (W6). */
export function memoryTable(results: Results, cell: Cell, impls: readonly Impl[]): string {
  const rows = impls.map((impl) => {
    const s = results.summary(cell, impl);
    const bad = status(s, results.skippedWhy(cell, impl));
    if (bad) return [impl.label, bad, "", "", "", "", "", ""];
    const m = s!.medians;
    return [
      impl.label,
      int(m.cycles),
      int(m.cyclesPerSec),
      `${m.heapBeforeMiB!.toFixed(2)} → ${m.heapAfterMiB!.toFixed(2)}`,
      int(m.heapGrowthKiB),
      int(m.timersLeft),
      m.timeoutSignalsPerCycle === undefined ? "–" : m.timeoutSignalsPerCycle.toFixed(2),
      int(m.connectionsLeft),
    ];
  });
  return table(
    [
      "implementation",
      "cycles",
      "cycles/s",
      "heap MiB after GC (before → after)",
      "growth KiB",
      "timers left",
      "timeout signals / cycle",
      "connections left",
    ],
    rows,
  );
}

/** One target and whether this run met it. */
export interface Target {
  readonly name: string;
  readonly goal: string;
  readonly value: string;
  /** null: not measurable in this run (a failed or skipped cell). */
  readonly met: boolean | null;
}

/** A target on a ratio: met when `ratio ≥ min`. */
export function ratioTarget(name: string, ratio: number | null, min: number): Target {
  return {
    name,
    goal: `≥ ${min.toFixed(2)}×`,
    value: times(ratio),
    met: ratio === null ? null : ratio >= min,
  };
}

/** The target table. */
export function targetTable(targets: readonly Target[]): string {
  return table(
    ["target", "goal", "measured", "met"],
    targets.map((t) => [t.name, t.goal, t.value, t.met === null ? "n/a" : t.met ? "yes" : "NO"]),
  );
}
