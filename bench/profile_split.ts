/**
 * `deno run -A bench/profile_split.ts --profile=<file.cpuprofile> --locks=N [--top=20]`
 *
 * Where the process's time per lock goes, per implementation, from one CPU
 * profile of `bench/cpu.ts` running several implementations in turns
 * (`deno run -A --cpu-prof --cpu-prof-interval=100 bench/cpu.ts --impls=a,b`).
 * A sample counts for the implementation whose code was last seen on a
 * sampled stack: its slices of 200 locks take turns, so everything in
 * between (the client, the runtime, the sockets, idle) goes to the slice
 * that caused it, and both were measured in the same minutes on the same
 * machine. Samples before `profileMark`'s last are left out (start-up,
 * warm-up). `--locks` is the number of locks each implementation measured
 * (slices × locks per slice). Prints µs per lock by part, and the functions
 * whose time differs most between the first two implementations.
 *
 * @module
 */

import { intArg, parseArgs } from "./_args.ts";

const args = parseArgs(Deno.args, {
  flags: [],
  values: ["profile", "locks", "top"],
  usage: "the top of bench/profile_split.ts",
});
const file = args.get("profile");
if (file === undefined) {
  console.error("--profile=<file.cpuprofile> is required");
  Deno.exit(2);
}
const locks = intArg(args, "locks", 1);
const top = intArg(args, "top", 20);

interface Frame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}
interface Node {
  readonly id: number;
  readonly callFrame: Frame;
  readonly children?: readonly number[];
}
interface Profile {
  readonly nodes: readonly Node[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

const SOURCE = new URL("../src/", import.meta.url).href;
const FLOOR = new URL("./_floor.ts", import.meta.url).href;

/** Whose code a frame's URL is, by where the implementation's code lives. */
const OWNERS: readonly [string, (url: string) => boolean][] = [
  ["@x/redlock", (url) => url.startsWith(SOURCE)],
  ["node-redlock", (url) => url.includes("/registry.npmjs.org/redlock/")],
  ["@sesamecare-oss/redlock", (url) => url.includes("/@sesamecare-oss/redlock/")],
  ["redlock-universal", (url) => url.includes("/redlock-universal/")],
  ["redis-semaphore", (url) => url.includes("/redis-semaphore/")],
  ["floor", (url) => url === FLOOR],
];

const CLIENT_PACKAGES = [
  "/ioredis/",
  "/@ioredis/",
  "/@redis/",
  "/redis/",
  "/redis-parser/",
  "/redis-errors/",
  "/denque/",
  "/cluster-key-slot/",
  "/standard-as-callback/",
  "/debug/",
  "/ms/",
];

/** The part of the process's time a sampled frame belongs to. */
function part(frame: Frame, owned: boolean): string {
  const { functionName: name, url } = frame;
  if (name === "(idle)") return "idle: waiting for the servers";
  if (name === "(garbage collector)") return "garbage collection";
  if (url === "" && name === "writeUtf8String") return "socket writes (`writeUtf8String`)";
  if (owned) return "the library's own JavaScript";
  if (CLIENT_PACKAGES.some((p) => url.includes(p))) return "the client and its parser";
  if (url.startsWith("ext:") || url.startsWith("node:") || name.startsWith("op_")) {
    return "Deno's runtime and Node compatibility";
  }
  if (url.includes("/bench/")) return "the benchmark's loop";
  return "other native (V8, microtasks, clocks), loop";
}

const profile: Profile = JSON.parse(await Deno.readTextFile(file));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

const ownerOf = new Map<number, string | undefined>();
function owner(id: number): string | undefined {
  if (ownerOf.has(id)) return ownerOf.get(id);
  const url = byId.get(id)!.callFrame.url;
  const own = OWNERS.find(([, test]) => test(url))?.[0];
  const up = parent.get(id);
  const found = own ?? (up === undefined ? undefined : owner(up));
  ownerOf.set(id, found);
  return found;
}
const ownCode = (id: number): boolean => {
  const url = byId.get(id)!.callFrame.url;
  return OWNERS.some(([, test]) => test(url));
};

const { samples, timeDeltas } = profile;
let from = 0;
for (let i = 0; i < samples.length; i++) {
  if (byId.get(samples[i]!)!.callFrame.functionName === "profileMark") from = i + 1;
}
const parts = new Map<string, Map<string, number>>();
const functions = new Map<string, Map<string, number>>();
const add = (table: Map<string, Map<string, number>>, who: string, key: string, us: number) => {
  const row = table.get(who) ?? new Map<string, number>();
  row.set(key, (row.get(key) ?? 0) + us);
  table.set(who, row);
};
let current: string | undefined;
for (let i = from; i < samples.length; i++) {
  const id = samples[i]!;
  current = owner(id) ?? current;
  if (current === undefined) continue;
  // A sample lasts until the next one.
  const us = timeDeltas[i + 1] ?? 0;
  const frame = byId.get(id)!.callFrame;
  add(parts, current, part(frame, ownCode(id)), us);
  const where = frame.url.split("/").slice(-2).join("/");
  add(
    functions,
    current,
    `${frame.functionName || "(anonymous)"} ${where}:${frame.lineNumber + 1}`,
    us,
  );
}

const who = [...parts.keys()];
const perLock = (us: number | undefined) => ((us ?? 0) / locks).toFixed(1);
const rows = new Set(who.flatMap((w) => [...parts.get(w)!.keys()]));
const sum = (row: Map<string, number>, skip?: string) =>
  [...row].reduce((s, [k, v]) => (k === skip ? s : s + v), 0);
const idle = "idle: waiting for the servers";
console.log(`µs per lock (${locks} locks each), samples after profileMark:\n`);
console.log(`| where the process's time goes | ${who.join(" | ")} |`);
console.log(`| --- | ${who.map(() => "---:").join(" | ")} |`);
for (const row of [...rows].filter((r) => r !== idle)) {
  console.log(`| ${row} | ${who.map((w) => perLock(parts.get(w)!.get(row))).join(" | ")} |`);
}
console.log(`| busy in all | ${who.map((w) => perLock(sum(parts.get(w)!, idle))).join(" | ")} |`);
console.log(`| ${idle} | ${who.map((w) => perLock(parts.get(w)!.get(idle))).join(" | ")} |`);

if (who.length >= 2) {
  const [a, b] = [functions.get(who[0]!)!, functions.get(who[1]!)!];
  const names = new Set([...a.keys(), ...b.keys()]);
  const diff = [...names].map((n) => [n, (a.get(n) ?? 0) - (b.get(n) ?? 0)] as const)
    .filter(([n]) => !n.startsWith("(idle)"))
    .sort((x, y) => Math.abs(y[1]) - Math.abs(x[1]))
    .slice(0, top);
  console.log(`\nfunctions by ${who[0]} − ${who[1]} (µs per lock):\n`);
  for (const [name, d] of diff) {
    console.log(`${(d / locks).toFixed(2).padStart(7)}  ${name}`);
  }
}
