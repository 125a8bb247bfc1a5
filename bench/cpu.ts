/**
 * `deno run -A bench/cpu.ts [--width=5] [--servers=3] [--locks=200] [--turns=30]
 * [--impls=x-ioredis,node-redlock,floor-ioredis]`
 *
 * The process's own CPU time per lock (`process.cpuUsage()`, user + system)
 * and wall time per lock, for a few implementations taking turns in slices
 * of `--locks` sequential acquire + release on fresh keys of `--width`
 * resources, on servers it starts itself; the least and the median per lock
 * over the slices. The process's CPU per lock holds still on a loaded machine
 * far better than throughput does (a slice that waited for a descheduled
 * server spends no more CPU), so it tells where a W1 or W4 gap comes from.
 * Under `--cpu-prof`, the profile's samples after those of `profileMark`
 * are the measured slices alone.
 *
 * @module
 */

import process from "node:process";
import { startServers } from "../scripts/redis.ts";
import { intArg, parseArgs } from "./_args.ts";
import { type Impl, IMPLS, type Instance } from "./_impls.ts";
import { median } from "./_stats.ts";

const args = parseArgs(Deno.args, {
  flags: [],
  values: ["width", "servers", "locks", "turns", "impls"],
  usage: "the top of bench/cpu.ts",
});
const width = intArg(args, "width", 5);
const servers = intArg(args, "servers", 3);
const count = intArg(args, "locks", 200);
const turns = intArg(args, "turns", 30);
const ids = (args.get("impls") ?? "x-ioredis,node-redlock,floor-ioredis").split(",");
const impls: Impl[] = ids.map((id) => {
  const impl = IMPLS.find((i) => i.id === id);
  if (!impl) throw new RangeError(`--impls: no implementation ${JSON.stringify(id)}`);
  return impl;
});

let sequence = 0;
async function slice(instance: Instance, name: string): Promise<{ cpu: number; wall: number }> {
  const base = `bench:cpu:${name}:${Date.now().toString(36)}:${++sequence}`;
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  for (let i = 0; i < count; i++) {
    const key = `${base}:${i}`;
    const keys = width === 1 ? [key] : Array.from({ length: width }, (_, j) => `${key}:${j}`);
    const held = await instance.acquire(keys, 10_000);
    await held.release();
  }
  const wall = performance.now() - wall0;
  const cpu = process.cpuUsage(cpu0);
  return { cpu: (cpu.user + cpu.system) / count, wall: (wall * 1000) / count };
}

/**
 * Spins 200 ms (long enough to be sampled on a loaded machine): a CPU profile (`deno run --cpu-prof`) is cut where this
 * function's samples end, leaving start-up and warm-up out.
 */
function profileMark(): void {
  const end = performance.now() + 200;
  while (performance.now() < end) { /* spin */ }
}

await using group = await startServers(servers);
const settings = { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 };
const opened = await Promise.all(impls.map((impl) => impl.open(group.ports, settings)));
try {
  for (const [i, instance] of opened.entries()) await slice(instance, `${ids[i]}:warm`);
  profileMark();
  const seen = impls.map((): { cpu: number; wall: number }[] => []);
  for (let turn = 0; turn < turns; turn++) {
    for (let k = 0; k < impls.length; k++) {
      const i = (k + turn) % impls.length;
      seen[i]!.push(await slice(opened[i]!, ids[i]!));
    }
  }
  console.log(
    `${servers} server(s), ${width} resource(s) per lock, ${turns} slices of ${count} locks; ` +
      "µs per acquire + release:\n",
  );
  console.log("| implementation | CPU least | CPU median | wall least | wall median |");
  console.log("| --- | ---: | ---: | ---: | ---: |");
  for (const [i, impl] of impls.entries()) {
    const cpu = seen[i]!.map((s) => s.cpu);
    const wall = seen[i]!.map((s) => s.wall);
    console.log(
      `| ${impl.label} | ${Math.min(...cpu).toFixed(1)} | ${median(cpu).toFixed(1)} | ${
        Math.min(...wall).toFixed(1)
      } | ${median(wall).toFixed(1)} |`,
    );
  }
} finally {
  await Promise.all(opened.map((o) => o.close()));
}
