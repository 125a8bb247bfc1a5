/**
 * `deno task chaos`: the fault-injection safety suite. Starts Redis servers
 * and worker processes that contend for a few resources with short leases
 * and guard a read-modify-write of a store that is not Redis-locked itself;
 * kills, stops, pauses and flushes servers, cuts, slows and resets their
 * connections at fault proxies, jumps their wall clocks (libfaketime), and
 * stops and kills workers on a schedule drawn from the seed; then checks the
 * history of every hold and
 * of the store, prints a summary, and exits 1 when a safety promise of the
 * algorithm was broken (0 when safe, 2 on a usage or setup error).
 *
 * ```sh
 * deno task chaos                          # about 60 s, random seed
 * deno task chaos --seconds 20 --seed 1    # the short form CI runs
 * deno task chaos --cases aof,forgetful --verbose
 * ```
 *
 * @module
 */

import { reapServers } from "../scripts/redis.ts";
import { type CaseResult, runCase, type RunSettings } from "./_case.ts";
import { type CaseName, CASES } from "./_cases.ts";
import { acquireBound } from "./_history.ts";
import { findings, table } from "./_report.ts";
import { runHandleCases } from "./handles.ts";
import { Rng } from "./_rng.ts";

/** Options of {@linkcode runChaos}. */
export interface ChaosOptions {
  /** Seconds of faults over all cases (each case also takes a few seconds to set up). */
  readonly seconds: number;
  readonly seed: number;
  /** Worker processes per case. */
  readonly workers?: number;
  /** Resources they contend for. */
  readonly resources?: number;
  /** Which cases, in order; all by default. */
  readonly cases?: readonly CaseName[];
  /** Print every fault as it happens. */
  readonly verbose?: boolean;
  /** Write the full result (every case's findings) as JSON here. */
  readonly out?: string;
  readonly signal?: AbortSignal;
  /** Where progress and the summary go; console.log by default. */
  readonly log?: (line: string) => void;
}

/** What a run found. */
export interface ChaosResult {
  /** False when a safety promise was broken. */
  readonly safe: boolean;
  readonly cases: readonly CaseResult[];
}

/** The workload and lock settings of every run. */
export const DEFAULT_RUN: Omit<RunSettings, "workers" | "resources"> = {
  leaseMin: 200,
  leaseMax: 2_000,
  thinkMin: 2,
  thinkMax: 20,
  longShare: 0.15,
  longThinkMin: 100,
  longThinkMax: 400,
  idleMax: 30,
  lingerMs: 1_000,
  settings: {
    retryCount: 6,
    retryDelay: 100,
    retryJitter: 100,
    requestTimeout: 200,
    driftFactor: 0.01,
  },
};

/** Runs the suite and returns what it found; prints progress and the summary. */
export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const log = options.log ?? ((line: string) => console.log(line));
  const signal = options.signal ?? new AbortController().signal;
  const names = options.cases ?? CASES.map((c) => c.name);
  const specs = CASES.filter((c) => names.includes(c.name));
  const share = specs.reduce((total, c) => total + c.share, 0);
  const run: RunSettings = {
    ...DEFAULT_RUN,
    workers: options.workers ?? 5,
    resources: options.resources ?? 3,
  };
  const s = run.settings;
  log(
    `chaos: seed ${options.seed}, ${options.seconds} s of faults, ${run.workers} worker ` +
      `processes, ${run.resources} resources, leases ${run.leaseMin}-${run.leaseMax} ms; ` +
      `requestTimeout ${s.requestTimeout} ms, retryCount ${s.retryCount}, retryDelay ` +
      `${s.retryDelay} + 0..${s.retryJitter} ms (acquire bound ${
        acquireBound(s, { maxLease: run.leaseMax })
      } ms)`,
  );
  const root = new Rng(options.seed);
  const ownRunDir = Deno.env.get("REDLOCK_RUN_DIR") === undefined;
  const runDir = ownRunDir
    ? await Deno.makeTempDir({ prefix: "redlock-chaos-" })
    : Deno.env.get("REDLOCK_RUN_DIR")!;
  if (ownRunDir) Deno.env.set("REDLOCK_RUN_DIR", runDir);
  const results: CaseResult[] = [];
  let handlesSafe = true;
  try {
    for (const spec of specs) {
      signal.throwIfAborted();
      const duration = Math.max(3, Math.round(options.seconds * spec.share / share)) * 1000;
      log(`case ${spec.name}: ${spec.title}, ${duration / 1000} s`);
      const started = performance.now();
      const result = await runCase(spec, duration, root, run, {
        signal,
        log,
        verbose: options.verbose ?? false,
      });
      results.push(result);
      const clock = result.clock;
      log(
        `  ${result.holds} holds, ${result.faults.length} faults, ` +
          `${((performance.now() - started) / 1000).toFixed(1)} s; worker clocks within ` +
          `${clock.offset.toFixed(2)} ms (±${clock.uncertainty.toFixed(2)}) of the parent's` +
          (result.violations.length ? `; VIOLATED: ${result.violations.join("; ")}` : ""),
      );
    }
    // Read-write locks and semaphores (chaos/handles.ts), in a third of the time again.
    if (options.cases === undefined) {
      handlesSafe = await runHandleCases(options.seconds / 3, options.seed, log);
    }
  } finally {
    if (ownRunDir) {
      const left = await reapServers(runDir).catch(() => 0);
      if (left > 0) log(`stopped ${left} Redis server(s) left behind`);
      await Deno.remove(runDir, { recursive: true }).catch(() => {});
      Deno.env.delete("REDLOCK_RUN_DIR");
    }
  }

  const safe = handlesSafe && results.every((r) => r.violations.length === 0);
  log("");
  log(table(results));
  log("");
  log("must find:");
  for (const f of findings(results)) log(`  [${f.status}] ${f.text}`);
  const notes = results.flatMap((r) => [
    ...r.violations.map((v) => `  VIOLATION in ${r.spec.name}: ${v}`),
    ...r.expected.map((e) => `  expected in ${r.spec.name}: ${e}`),
  ]);
  if (notes.length > 0) log(["", ...notes].join("\n"));
  const fencing = results.some((r) => r.fencing);
  if (!fencing) {
    log("  note: lock.fencingToken was undefined: fencing is not available in this build");
  }
  const replay = [
    `deno task chaos --seconds ${options.seconds} --seed ${options.seed}`,
    options.cases ? ` --cases ${names.join(",")}` : "",
    options.workers ? ` --workers ${run.workers}` : "",
    options.resources ? ` --resources ${run.resources}` : "",
  ].join("");
  log("");
  log(
    safe ? `SAFE (replay: ${replay})` : `UNSAFE: safety was violated (replay: ${replay})`,
  );
  if (options.out) {
    await Deno.writeTextFile(options.out, JSON.stringify({ seed: options.seed, results }, null, 1));
  }
  return { safe, cases: results };
}

const USAGE = `usage: deno task chaos [--seconds N] [--seed N] [--workers N] [--resources N]
                       [--cases five,three,aof,forgetful,network,clock,clock-majority] [--verbose] [--out file.json]`;

function parseArgs(args: readonly string[]): ChaosOptions | string {
  const options: Record<string, unknown> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const [flag, inline] = arg.includes("=") ? arg.split("=", 2) as [string, string] : [arg];
    const value = () => inline ?? args[++i];
    const int = (name: string, min: number) => {
      const text = value();
      const n = Number(text);
      if (!Number.isInteger(n) || n < min) {
        throw new RangeError(`${name} must be an integer ≥ ${min}, got ${text}`);
      }
      return n;
    };
    switch (flag) {
      case "--seconds":
        options.seconds = int("--seconds", 1);
        break;
      case "--seed":
        options.seed = int("--seed", 0) >>> 0;
        break;
      case "--workers":
        options.workers = int("--workers", 1);
        break;
      case "--resources":
        options.resources = int("--resources", 1);
        break;
      case "--cases": {
        const names = String(value() ?? "").split(",").filter((n) => n !== "");
        const unknown = names.filter((n) => !CASES.some((c) => c.name === n));
        if (unknown.length > 0 || names.length === 0) {
          throw new RangeError(`--cases takes ${CASES.map((c) => c.name).join(",")}, got ${names}`);
        }
        options.cases = names;
        break;
      }
      case "--verbose":
        options.verbose = true;
        break;
      case "--out":
        options.out = value();
        break;
      case "--help":
      case "-h":
        return USAGE;
      default:
        throw new RangeError(`unknown argument ${arg}`);
    }
  }
  return {
    seconds: 60,
    seed: Math.floor(Math.random() * 2 ** 31),
    ...options,
  } as ChaosOptions;
}

if (import.meta.main) {
  let options: ChaosOptions | string;
  try {
    options = parseArgs(Deno.args);
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    Deno.exit(2);
  }
  if (typeof options === "string") {
    console.log(options);
    Deno.exit(0);
  }
  const controller = new AbortController();
  const stop = () => controller.abort(new Error("interrupted"));
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  let code = 2;
  try {
    const { safe } = await runChaos({ ...options, signal: controller.signal });
    code = safe ? 0 : 1;
  } catch (error) {
    console.error(`chaos: ${error instanceof Error ? error.stack : error}`);
  } finally {
    Deno.removeSignalListener("SIGINT", stop);
    Deno.removeSignalListener("SIGTERM", stop);
  }
  Deno.exit(code);
}
