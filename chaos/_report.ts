/**
 * The summary a chaos run prints: one column per case, and what the run
 * shows for each property the suite must find (pure).
 *
 * @module
 */

import type { CaseResult } from "./_case.ts";
import type { AcquireStats } from "./_history.ts";
import { FAULT_KINDS } from "./_plan.ts";

const ms = (n: number): string =>
  Number.isNaN(n) ? "-" : n < 10 ? n.toFixed(1) : String(Math.round(n));
const rate = (s: AcquireStats): string =>
  s.calls === 0 ? "-" : `${(100 * s.ok / s.calls).toFixed(1)}% of ${s.calls}`;
const sum = (results: readonly CaseResult[], f: (r: CaseResult) => number): number =>
  results.reduce((total, r) => total + f(r), 0);

function lost(r: CaseResult): string {
  const lostUpdates = sum([r], (x) => x.store.reduce((t, s) => t + s.lostUpdates, 0));
  const unexplained = r.store.flatMap((s) => s.interferences).filter((i) => !i.explained).length;
  return `${lostUpdates} (${unexplained} unexpl.)`;
}

function fencedStale(r: CaseResult): string {
  if (!r.fencing) return "n/a";
  const stale = r.stale.filter((s) => s.fenced !== "n/a");
  return `${stale.filter((s) => s.fenced === "rejected").length}/${stale.length}`;
}

function verdict(r: CaseResult): string {
  if (r.violations.length > 0) return "VIOLATED";
  return r.spec.promised ? "safe" : "not promised";
}

/** The summary table. */
export function table(results: readonly CaseResult[]): string {
  const rows: [string, ...string[]][] = [];
  const row = (label: string, f: (r: CaseResult) => string, total = "") =>
    rows.push([label, ...results.map(f), total]);
  const faults = (r: CaseResult) => r.faults.filter((f) => f.skipped === undefined);
  row(
    "servers",
    (r) =>
      `${r.spec.servers}${r.spec.aof ? " AOF" : ""}${r.spec.proxied ? " proxied" : ""}${
        r.spec.clocked ? " faketime" : ""
      }`,
  );
  row("restart of a killed server", (r) => r.spec.restart);
  row(
    "seconds of faults",
    (r) => String(r.duration / 1000),
    String(sum(results, (r) => r.duration) / 1000),
  );
  row(
    "acquire calls",
    (r) => String(r.acquire.all.calls),
    String(sum(results, (r) => r.acquire.all.calls)),
  );
  row("acquisitions", (r) => String(r.holds), String(sum(results, (r) => r.holds)));
  row(
    "guarded writes (store log)",
    (r) => String(r.store.reduce((t, s) => t + s.writes, 0)),
    String(sum(results, (r) => r.store.reduce((t, s) => t + s.writes, 0))),
  );
  row(
    "using() holds (aborted)",
    (r) => `${r.using.holds} (${r.using.aborts})`,
    `${sum(results, (r) => r.using.holds)} (${sum(results, (r) => r.using.aborts)})`,
  );
  const failed = (r: CaseResult) => Object.values(r.extensionFailures).reduce((t, n) => t + n, 0);
  row(
    "extensions (failed)",
    (r) => `${r.extensions} (${failed(r)})`,
    `${sum(results, (r) => r.extensions)} (${sum(results, failed)})`,
  );
  for (const kind of FAULT_KINDS) {
    row(
      `faults: ${kind}`,
      (r) => String(faults(r).filter((f) => f.kind === kind).length),
      String(sum(results, (r) => faults(r).filter((f) => f.kind === kind).length)),
    );
  }
  row(
    "faults skipped (no room, see --verbose)",
    (r) => String(r.faults.length - faults(r).length),
    String(sum(results, (r) => r.faults.length - faults(r).length)),
  );
  row("acquire success, healthy", (r) => rate(r.acquire.healthy));
  row("acquire success, faults active", (r) => rate(r.acquire.faulty));
  row(
    "p50/p99 acquire ms, healthy",
    (r) => `${ms(r.acquire.healthy.p50)}/${ms(r.acquire.healthy.p99)}`,
  );
  row(
    "p50/p99 acquire ms, faults",
    (r) => `${ms(r.acquire.faulty.p50)}/${ms(r.acquire.faulty.p99)}`,
  );
  row(
    "longest acquire ms (bound)",
    (r) => `${ms(r.acquire.all.longest)} (${r.bound})`,
    ms(Math.max(...results.map((r) => r.acquire.all.longest))),
  );
  row(
    "overlaps of valid leases",
    (r) => String(r.overlaps.length),
    String(sum(results, (r) => r.overlaps.length)),
  );
  row(
    "writes past own lease (paused)",
    (r) => `${r.stale.length} (${r.stale.filter((s) => s.paused).length})`,
    String(sum(results, (r) => r.stale.length)),
  );
  row(
    "  of them while another held it",
    (r) => String(r.stale.filter((s) => s.overlapping.length > 0).length),
    String(sum(results, (r) => r.stale.filter((s) => s.overlapping.length > 0).length)),
  );
  row("  rejected by the fenced store", fencedStale);
  row("lost updates, plain counter", lost);
  row(
    "lost updates, fenced counter",
    (r) => r.fencing ? String(r.store.reduce((t, s) => t + s.fencedLost, 0)) : "n/a",
  );
  row("fencing tokens out of order", (r) => r.fencing ? String(r.tokens.length) : "n/a");
  row("verdict", verdict);

  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const header = ["case", ...results.map((r) => r.spec.name), "total"];
  for (let c = 0; c < header.length; c++) widths[c] = Math.max(widths[c]!, header[c]!.length);
  const line = (cells: readonly string[]) =>
    cells.map((cell, c) => c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))
      .join("  ").trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

/** One property the suite must find, and whether this run shows it. */
export interface Finding {
  /** "ok", "FAIL", or "n/a" when this run could not show it. */
  readonly status: "ok" | "FAIL" | "n/a";
  readonly text: string;
}

/** What the run shows for each property the suite must find. */
export function findings(results: readonly CaseResult[]): Finding[] {
  const out: Finding[] = [];
  const promised = results.filter((r) => r.spec.promised);
  if (promised.length > 0) {
    const overlaps = sum(promised, (r) => r.overlaps.length);
    const unexplained = sum(
      promised,
      (r) => r.store.flatMap((s) => s.interferences).filter((i) => !i.explained).length,
    );
    const fencedLost = sum(promised, (r) => r.store.reduce((t, s) => t + s.fencedLost, 0));
    out.push({
      status: overlaps + unexplained + fencedLost === 0 ? "ok" : "FAIL",
      text: `healthy majority (${promised.map((r) => r.spec.name).join(", ")}): ` +
        `${overlaps} overlaps of valid leases, ${unexplained} lost updates not caused by a ` +
        `holder past its lease, ${fencedLost} lost fenced updates`,
    });
  }

  // the paused-holder case, where nothing else can cut into a read-modify-write
  const base = promised.length > 0 ? promised : results;
  const stale = base.flatMap((r) => r.stale);
  const paused = stale.filter((s) => s.paused);
  const harmful = stale.filter((s) => s.overlapping.length > 0);
  const fencing = base.some((r) => r.fencing);
  const explainedLost = sum(
    base,
    (r) => r.store.reduce((t, s) => t + s.lostUpdates, 0),
  );
  if (stale.length === 0) {
    out.push({ status: "n/a", text: "paused holder: no write past its lease happened this run" });
  } else if (!fencing) {
    out.push({
      status: "n/a",
      text: `paused holder: ${stale.length} writes past their lease (${paused.length} of ` +
        `SIGSTOPped workers), ${harmful.length} while another held the lock: detected and ` +
        `reported; plain counter lost ${explainedLost} updates to them; fencing unavailable ` +
        `(lock.fencingToken is undefined), so nothing rejected them`,
    });
  } else {
    const rejected = harmful.filter((s) => s.fenced === "rejected").length;
    const fencedLost = sum(base, (r) => r.store.reduce((t, s) => t + s.fencedLost, 0));
    out.push({
      status: fencedLost === 0 ? "ok" : "FAIL",
      text: `paused holder: ${stale.length} writes past their lease (${paused.length} of ` +
        `SIGSTOPped workers), ${harmful.length} while another held the lock: detected; the ` +
        `fenced store rejected ${rejected} of those ${harmful.length} and lost ${fencedLost} ` +
        `updates (the plain counter lost ${explainedLost})`,
    });
  }

  const forgetful = results.find((r) => r.spec.name === "forgetful");
  const aof = results.find((r) => r.spec.name === "aof");
  if (aof) {
    const aofOverlaps = aof.overlaps.length;
    const shown = forgetful
      ? `; same schedule without persistence: ${forgetful.overlaps.length} overlaps`
      : "";
    out.push({
      status: aofOverlaps === 0 ? "ok" : "FAIL",
      text: `immediate restarts with AOF (appendfsync always): ${aofOverlaps} overlaps${shown}`,
    });
  }

  const majority = results.find((r) => r.spec.name === "clock-majority");
  if (majority) {
    const jumps = majority.faults.filter((f) =>
      f.kind === "clock-jump-majority" && f.skipped === undefined
    ).length;
    const fencedLost = majority.store.reduce((t, s) => t + s.fencedLost, 0);
    const lostPlain = majority.store.reduce((t, s) => t + s.lostUpdates, 0);
    out.push({
      status: jumps === 0
        ? "n/a"
        : fencedLost === 0 && majority.tokens.length === 0
        ? "ok"
        : "FAIL",
      text: `a majority's clocks jumped past the longest lease (${jumps} jumps): ` +
        `${majority.overlaps.length} overlaps found and reported (the known limit: Redis ` +
        `expires keys on its wall clock), the plain counter lost ${lostPlain} updates, the ` +
        `fenced store lost ${fencedLost}`,
    });
  }

  const longest = Math.max(0, ...results.map((r) => r.acquire.all.longest));
  const bound = Math.max(0, ...results.map((r) => r.bound));
  const hung = sum(results, (r) => r.hung.length);
  const over = results.some((r) => r.violations.some((v) => v.includes("longest acquire")));
  out.push({
    status: hung === 0 && !over ? "ok" : "FAIL",
    text: `no acquire hangs: longest acquire ${ms(longest)} ms, bound ${bound} ms ` +
      `((retryCount + 2) × requestTimeout + one subscribe + retryCount × the longest wait, ` +
      `which release-notified waiting allows to last a whole lease)` +
      (hung > 0 ? `; ${hung} did not return` : ""),
  });
  return out;
}
