/**
 * `deno run -A bench/own_cost.ts --base <checkout> [--servers=1] [--width=1]
 * [--client=ioredis|node-redis] [--turns=16] [--locks=15000]`
 *
 * The library's own CPU time per acquire + release, this checkout's
 * `mod.ts` against `<base>/mod.ts` in one process: the clients are stand-ins
 * of the ioredis or node-redis shape (so the adapter runs as with the real
 * ones) that answer every request at once, so that nothing but the
 * library's code and its garbage is measured, without sockets or servers.
 * The builds take turns in slices of `--locks` sequential locks on fresh
 * keys of `--width` resources; per slice the process's CPU time
 * (`process.cpuUsage()`, which a descheduled process does not accrue).
 * Prints each build's median and least µs per lock and the median and
 * range of new ÷ base over the turns.
 *
 * @module
 */

import process from "node:process";
import { intArg, parseArgs } from "./_args.ts";
import { median } from "./_stats.ts";

const args = parseArgs(Deno.args, {
  flags: [],
  values: ["base", "servers", "width", "client", "turns", "locks"],
  usage: "the top of bench/own_cost.ts",
});
const baseDir = args.get("base");
if (baseDir === undefined) {
  console.error("--base <checkout> is required: the directory of the other build's mod.ts");
  Deno.exit(2);
}
const servers = intArg(args, "servers", 1);
const width = intArg(args, "width", 1);
const turns = intArg(args, "turns", 16);
const locks = intArg(args, "locks", 15_000);
const client = args.get("client") ?? "ioredis";
if (client !== "ioredis" && client !== "node-redis") {
  throw new RangeError(`--client must be ioredis or node-redis, got ${JSON.stringify(client)}`);
}

interface Handle {
  acquire(keys: string[], ms: number): Promise<{ release(): Promise<unknown> }>;
}
type Build = { Redlock: new (clients: unknown[]) => Handle };

/** A client of ioredis's shape whose every request answers at once. */
function ioredisShape(): object {
  return {
    defineCommand() {},
    evalsha: () => Promise.resolve(1),
    eval: () => Promise.resolve(1),
    set: () => Promise.resolve("OK"),
    pttl: () => Promise.resolve(-2),
  };
}

/** A client of node-redis's shape whose every request answers at once. */
function nodeRedisShape(): object {
  return {
    eval: () => Promise.resolve(1),
    evalSha: () => Promise.resolve(1),
    sendCommand: (argv: string[]) => Promise.resolve(argv[0] === "SET" ? "OK" : 1),
  };
}

const shape = client === "ioredis" ? ioredisShape : nodeRedisShape;
const open = async (dir: string): Promise<Handle> => {
  const build = await import(
    new URL(`${dir.replace(/\/$/, "")}/mod.ts`, `file://${Deno.cwd()}/`).href
  ) as Build;
  return new build.Redlock(Array.from({ length: servers }, shape));
};
const base = await open(baseDir);
const next = await open(".");

let sequence = 0;
/** CPU µs per lock over `n` sequential locks. */
async function slice(redlock: Handle, n: number): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const id = sequence++;
    const keys = Array.from({ length: width }, (_, j) => `own:${id}:${j}`);
    const lock = await redlock.acquire(keys, 10_000);
    await lock.release();
  }
  const used = process.cpuUsage(before);
  return (used.user + used.system) / n;
}

for (let i = 0; i < 5; i++) {
  await slice(base, 2_000);
  await slice(next, 2_000);
}
const baseUs: number[] = [];
const newUs: number[] = [];
const ratios: number[] = [];
for (let turn = 0; turn < turns; turn++) {
  // The build that goes first alternates.
  const [a, b] = turn % 2 === 0
    ? [await slice(base, locks), await slice(next, locks)]
    : [0, await slice(next, locks)];
  const baseTurn = turn % 2 === 0 ? a : await slice(base, locks);
  baseUs.push(baseTurn);
  newUs.push(b);
  ratios.push(b / baseTurn);
}
const f = (n: number) => n.toFixed(2);
console.log(
  `${client}, ${servers} server(s), ${width} resource(s): CPU µs per lock, base median ` +
    `${f(median(baseUs))} (least ${f(Math.min(...baseUs))}), new median ${f(median(newUs))} ` +
    `(least ${f(Math.min(...newUs))}); new ÷ base ${median(ratios).toFixed(3)} ` +
    `(${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)})`,
);
Deno.exit(0);
