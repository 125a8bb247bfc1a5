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
 * - with `OTEL_DENO=true` exporting OTLP/JSON to a collector on 127.0.0.1
 *   run by this process (metrics every second, spans as Deno batches them);
 *   target ≥ 0.85.
 *
 * Each repetition's ratio is instrumented ÷ plain ops/s; the median over
 * repetitions is compared with the target.
 *
 * @module
 */

import { startServers } from "../scripts/redis.ts";
import { Redlock } from "../mod.ts";
import { instrument } from "../otel.ts";
import { Collector } from "../tests/_otlp.ts";
import { closeAll, connectAll } from "./_connect.ts";
import type { Impl } from "./_impls.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import { median } from "./_stats.ts";
import { interleaved, type Plan } from "./_workloads.ts";

/** What a worker prints: ops/s of each arm per repetition. */
interface WorkerResult {
  readonly otel: boolean;
  readonly plain: number[];
  readonly instrumented: number[];
  readonly errors: string[];
}

const TARGETS = { off: 0.97, on: 0.85 } as const;

function intFlag(name: string, fallback: number): number {
  const arg = Deno.args.find((a) => a.startsWith(`--${name}=`));
  const value = arg === undefined ? fallback : Number(arg.slice(name.length + 3));
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`--${name} must be a positive integer`);
  }
  return value;
}

/** @x/redlock on ioredis for W1, instrumented or not. */
function redlockImpl(instrumented: boolean): Impl {
  const id = instrumented ? "instrumented" : "plain";
  return {
    id,
    label: `@x/redlock (${id})`,
    client: "ioredis",
    role: "x",
    multiResource: true,
    hasUsing: false,
    async open(ports, settings) {
      const connections = await connectAll("ioredis", ports);
      const redlock = new Redlock(connections.map((c) => c.client), {
        retryCount: settings.retryCount,
        retryDelay: settings.retryDelay,
        retryJitter: settings.retryJitter,
      });
      const errors: { count: number; first?: string } = { count: 0 };
      redlock.on("error", (error) => {
        errors.count++;
        errors.first ??= error.message;
      });
      const uninstall = instrumented ? instrument(redlock) : () => {};
      return {
        errors,
        async acquire(keys, ttl) {
          const lock = await redlock.acquire(keys, ttl);
          return { release: async () => void await lock.release() };
        },
        using: () => Promise.reject(new Error("not measured here")),
        async close() {
          uninstall();
          await redlock[Symbol.asyncDispose]();
          await closeAll(connections);
        },
      };
    },
  };
}

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
  const impls = [redlockImpl(false), redlockImpl(true)];
  const result: WorkerResult = {
    otel: Deno.env.get("OTEL_DENO") === "true",
    plain: [],
    instrumented: [],
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
  const ratios = result.plain.map((p, i) => result.instrumented[i]! / p);
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
  const reps = intFlag("reps", 7);
  const measureMs = intFlag("measure-ms", 1_500);
  const portsArg = Deno.args.find((a) => a.startsWith("--ports="));
  if (Deno.args.includes("--worker") && portsArg !== undefined) {
    await worker(portsArg.slice(8).split(",").map(Number), reps, measureMs);
  } else {
    console.log(machineLine(await describeMachine()));
    console.log(`W1 · 3 servers · ioredis; ${reps} reps of ${measureMs} ms per arm, 50 ms slices`);
    await using servers = await startServers(3);
    await using collector = new Collector(false);
    const off = await run(servers.ports, { OTEL_DENO: "false" }, reps, measureMs);
    const on = await run(servers.ports, collector.env(1_000), reps, measureMs);
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
