/**
 * `deno task bench:otel [--reps N] [--measure-ms N]`
 *
 * What `instrument()` (otel.ts) costs: W1 · 3 servers (one loop of acquire +
 * release on fresh keys, ioredis) with an instrumented Redlock against a
 * plain one, same process, taking turns in 50 ms slices (`interleaved()`),
 * so that a machine whose speed drifts slows both alike. Two worker
 * processes run that A/B on the same servers:
 *
 * - without OpenTelemetry (`OTEL_DENO=false`): the API is a no-op, so this
 *   is the cost of the hooks and no-op calls; target instrumented ÷ plain ≥ 0.97;
 * - with `OTEL_DENO=true` exporting OTLP (Deno's default, http/protobuf) to
 *   a collector on 127.0.0.1 run by this process, which only counts what it
 *   gets (metrics every second, spans as Deno batches them); target ≥ 0.85.
 *
 * Each repetition's ratio is the median over turns of instrumented ÷ plain
 * ops/s of the turn's two slices; the median over repetitions is compared
 * with the target.
 *
 * @module
 */

import { startServers } from "../scripts/redis.ts";
import { Redlock, type RedlockInit } from "../mod.ts";
import { instrument } from "../otel.ts";
import { Collector } from "../tests/_otlp.ts";
import { intArg, parseArgs } from "./_args.ts";
import { type Library, xImpl } from "./_impls.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import { median } from "./_stats.ts";
import { interleaved, type Plan } from "./_workloads.ts";

/** What a worker prints: ops/s of each arm per repetition. */
interface WorkerResult {
  readonly otel: boolean;
  readonly plain: number[];
  readonly instrumented: number[];
  /** Per repetition, the median over turns of instrumented ÷ plain slice by slice. */
  readonly ratios: number[];
  readonly errors: string[];
}

const TARGETS = { off: 0.97, on: 0.85 } as const;

/** A Redlock that instruments itself, as a build of the library for `xImpl()`. */
class InstrumentedRedlock extends Redlock {
  readonly #uninstrument: () => void;

  constructor(clients: ConstructorParameters<typeof Redlock>[0], options?: RedlockInit) {
    super(clients, options);
    this.#uninstrument = instrument(this);
  }

  override [Symbol.asyncDispose](): Promise<void> {
    this.#uninstrument();
    return super[Symbol.asyncDispose]();
  }
}

const INSTRUMENTED: Library = {
  id: "instrumented",
  label: "instrumented",
  Redlock: InstrumentedRedlock,
};

/** Runs the A/B on `ports` in this process and prints its result as JSON. */
async function worker(ports: number[], reps: number, measureMs: number): Promise<void> {
  const plan: Plan = {
    reps,
    warmMs: 300,
    measureMs,
    contentionMs: 0,
    holdMs: 0,
    thinkMs: 0,
    memoryCycles: 0,
  };
  const impls = [xImpl("ioredis"), xImpl("ioredis", { library: INSTRUMENTED })];
  const result: WorkerResult = {
    otel: Deno.env.get("OTEL_DENO") === "true",
    plain: [],
    instrumented: [],
    ratios: [],
    errors: [],
  };
  for (let rep = 0; rep < reps; rep++) {
    const [plain, instrumented] = await interleaved(
      impls,
      ports,
      plan,
      { loops: 1, width: 1 },
      rep,
    );
    for (const o of [plain!, instrumented!]) if (o.error) result.errors.push(o.error);
    result.plain.push(plain!.metrics.opsPerSec ?? NaN);
    result.instrumented.push(instrumented!.metrics.opsPerSec ?? NaN);
    // The turn's two slices ran next to each other: a burst of other work weighs on few turns.
    const turns = (instrumented!.slices ?? []).map((ops, turn) => ops / plain!.slices![turn]!);
    result.ratios.push(median(turns.filter(Number.isFinite)));
  }
  console.log(JSON.stringify(result));
}

async function run(
  ports: number[],
  env: Record<string, string>,
  reps: number,
  measureMs: number,
): Promise<WorkerResult> {
  const { code, stdout } = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--v8-flags=--expose-gc",
      new URL(import.meta.url).pathname,
      "--worker",
      `--ports=${ports.join(",")}`,
      `--reps=${reps}`,
      `--measure-ms=${measureMs}`,
    ],
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).output();
  const out = new TextDecoder().decode(stdout).trim().split("\n").at(-1) ?? "";
  if (code !== 0) throw new Error(`the worker failed (${code}): ${out}`);
  return JSON.parse(out);
}

function report(name: string, result: WorkerResult, target: number): boolean {
  const { ratios } = result;
  const ratio = median(ratios);
  const ok = ratio >= target && result.errors.length === 0;
  const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
  console.log(
    `${name}: plain ${fmt(median(result.plain))}/s, instrumented ${
      fmt(median(result.instrumented))
    }/s; instrumented ÷ plain ${ratio.toFixed(3)} (reps ${
      ratios.map((r) => r.toFixed(3)).join(" ")
    }) ≥ ${target}: ${ok ? "yes" : "NO"}${
      result.errors.length ? `; errors: ${result.errors[0]}` : ""
    }`,
  );
  return ok;
}

if (import.meta.main) {
  const args = parseArgs(Deno.args, {
    flags: ["worker"],
    values: ["reps", "measure-ms", "ports"],
    usage: "the top of bench/otel.ts",
  });
  const reps = intArg(args, "reps", 7);
  const measureMs = intArg(args, "measure-ms", 1_500, 100);
  const ports = args.get("ports");
  if (args.has("worker") && ports !== undefined) {
    await worker(ports.split(",").map(Number), reps, measureMs);
  } else {
    console.log(machineLine(await describeMachine()));
    console.log(`W1 · 3 servers · ioredis; ${reps} reps of ${measureMs} ms per arm, 50 ms slices`);
    await using servers = await startServers(3);
    await using collector = new Collector(false);
    const off = await run(servers.ports, { OTEL_DENO: "false" }, reps, measureMs);
    const on = await run(servers.ports, collector.env(1_000, "http/protobuf"), reps, measureMs);
    const okOff = report("without OTEL_DENO", off, TARGETS.off);
    const okOn = report("with OTEL_DENO=true", on, TARGETS.on);
    console.log(
      `collector: ${collector.requests["/v1/traces"] ?? 0} trace and ${
        collector.requests["/v1/metrics"] ?? 0
      } metric exports, ${(collector.bytes / 1e6).toFixed(1)} MB`,
    );
    if (!okOff || !okOn) Deno.exitCode = 1;
  }
}
