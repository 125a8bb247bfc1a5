/**
 * `deno task bench:lead`: how fast leadership moves with `lead()`.
 *
 * - Handover: two campaigners in this process (each its own Redlock and
 *   connections); the leader resigns (its signal aborts) and the time until
 *   the other's routine starts is one sample. Compared with an uncontended
 *   acquire on the same servers, measured in the same run: the fenced acquire
 *   `lead()` makes, and a plain one. Target: p50 ≤ 3× the uncontended acquire.
 * - Failover: campaigner processes (tests/fixtures/campaigner.ts); the
 *   leader's process gets `kill -9`, and the time until another process's
 *   routine starts is one sample. Target: ≤ lease + one retry wait
 *   (retryDelay + retryJitter) in every trial.
 *
 * ```sh
 * deno task bench:lead                     # 3 servers, 200 handovers, 20 failovers
 * deno task bench:lead --failovers 5 --lease 1000
 * ```
 *
 * Prints the figures and exits 1 when a target is missed.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { Redlock } from "../mod.ts";
import { untilAborted } from "../tests/_abort.ts";
import { type RedisServers, startServers } from "../scripts/redis.ts";
import { percentile, sleep } from "./_stats.ts";

const CAMPAIGNER = fileURLToPath(new URL("../tests/fixtures/campaigner.ts", import.meta.url));
/** The campaigner fixture's retryDelay + retryJitter: its longest retry wait. */
const RETRY_WAIT = 100 + 50;

const { values } = parseArgs({
  args: Deno.args,
  options: {
    servers: { type: "string", default: "3" },
    handovers: { type: "string", default: "200" },
    acquires: { type: "string", default: "400" },
    failovers: { type: "string", default: "20" },
    lease: { type: "string", default: "1000" },
  },
});
const SERVERS = Number(values.servers);
const HANDOVERS = Number(values.handovers);
const ACQUIRES = Number(values.acquires);
const FAILOVERS = Number(values.failovers);
const LEASE = Number(values.lease);

function connect(servers: RedisServers): Redis[] {
  return servers.ports.map((port) => {
    const client = new Redis({ host: "127.0.0.1", port });
    client.on("error", () => {});
    return client;
  });
}

const fmt = (ms: number) => `${ms.toFixed(2)} ms`;

/** The idle time before each handover, and before each acquire it is compared with. */
const IDLE_MS = 20;

/**
 * p50 of uncontended acquires (each released before the next), fenced and
 * plain, interleaved; `idle` ms of sleep before each (after a few ms idle the
 * servers' vCPUs sleep and the first round trip pays for waking them).
 */
async function uncontended(
  redlock: Redlock,
  count: number,
  idle: number,
): Promise<{ fenced: number; plain: number }> {
  const fenced: number[] = [];
  const plain: number[] = [];
  for (let i = 0; i < count; i++) {
    for (const [fencing, samples] of [[true, fenced], [false, plain]] as const) {
      if (idle > 0) await sleep(idle);
      const start = performance.now();
      const lock = await redlock.acquire("bench:uncontended", LEASE, { fencing });
      samples.push(performance.now() - start);
      await lock.release();
    }
  }
  return { fenced: percentile(fenced, 50), plain: percentile(plain, 50) };
}

/** A campaigner in this process that can resign and campaign again. */
class Campaigner {
  readonly redlock: Redlock;
  #stop = new AbortController();
  #running: Promise<void> = Promise.resolve();
  /** Called with the performance.now() at which a term's routine starts. */
  onStart: (at: number) => void = () => {};

  constructor(clients: Redis[]) {
    this.redlock = new Redlock(clients, { retryDelay: 100, retryJitter: 50 });
  }

  campaign(): void {
    this.#stop = new AbortController();
    this.#running = this.redlock.lead("bench:leader", LEASE, async (signal) => {
      this.onStart(performance.now());
      await untilAborted(signal);
    }, { signal: this.#stop.signal });
  }

  /** Resigns; returns when lead() has resolved. */
  resign(): Promise<void> {
    this.#stop.abort();
    return this.#running;
  }
}

/** Handover samples: from a resignation to the next leader's start, ms. */
async function handovers(a: Campaigner, b: Campaigner): Promise<number[]> {
  const samples: number[] = [];
  let leader: Campaigner | undefined;
  let started: (value: { who: Campaigner; at: number }) => void = () => {};
  a.onStart = (at) => started({ who: a, at });
  b.onStart = (at) => started({ who: b, at });
  let next = new Promise<{ who: Campaigner; at: number }>((r) => (started = r));
  a.campaign();
  b.campaign();
  leader = (await next).who;
  for (let i = 0; i < HANDOVERS; i++) {
    await sleep(IDLE_MS); // the follower is queued by now
    next = new Promise((r) => (started = r));
    const resignedAt = performance.now();
    const resigned = leader!.resign();
    const { who, at } = await next;
    samples.push(at - resignedAt);
    await resigned;
    leader!.campaign();
    leader = who;
  }
  await Promise.all([a.resign(), b.resign()]);
  return samples;
}

interface Line {
  event: string;
  pid: number;
  at: number;
}

async function readLog(path: string): Promise<Line[]> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.split("\n").filter(Boolean).map((l) => {
    const [event, pid, , at] = l.split(" ");
    return { event: event!, pid: Number(pid), at: Number(at) };
  });
}

/** Waits until `pick` finds a line in the log, and returns it. */
async function waitLine(
  path: string,
  pick: (lines: Line[]) => Line | undefined,
  ms: number,
): Promise<Line> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    const found = pick(await readLog(path));
    if (found) return found;
    await sleep(2);
  }
  throw new Error(`no matching line in ${path} within ${ms} ms`);
}

/** The `n`-th `start` line (1-based). */
const nthStart = (n: number) => (lines: Line[]) => lines.filter((l) => l.event === "start")[n - 1];

/** Failover samples: from `kill -9` of the leader's process to another's start, ms. */
async function failovers(servers: RedisServers, dir: string): Promise<number[]> {
  const log = `${dir}/failover.log`;
  const children = new Map<number, Deno.ChildProcess>();
  const spawn = async () => {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        CAMPAIGNER,
        log,
        "bench:failover",
        String(LEASE),
        ...servers.ports.map(String),
      ],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    children.set(child.pid, child);
    await waitLine(log, (ls) => ls.find((l) => l.event === "ready" && l.pid === child.pid), 20_000);
  };
  const samples: number[] = [];
  try {
    for (let i = 0; i < 3; i++) await spawn();
    for (let i = 0; i < FAILOVERS; i++) {
      const leaderLine = await waitLine(log, nthStart(i + 1), LEASE * 3 + 5_000);
      // let the leader extend at least once, and the others queue
      await sleep(LEASE / 2 + Math.random() * LEASE / 2);
      const killedAt = Date.now();
      children.get(leaderLine.pid)!.kill("SIGKILL");
      await children.get(leaderLine.pid)!.status;
      children.delete(leaderLine.pid);
      const next = await waitLine(log, nthStart(i + 2), LEASE * 3 + 5_000);
      samples.push(next.at - killedAt);
      console.log(`  failover ${i + 1}: ${next.at - killedAt} ms`);
      await spawn(); // keep three campaigners
    }
  } finally {
    for (const child of children.values()) child.kill("SIGTERM");
    await Promise.all([...children.values()].map((c) => c.status));
  }
  return samples;
}

await using servers = await startServers(SERVERS);
const dir = await Deno.makeTempDir({ prefix: "redlock-bench-lead-" });
const clients = [connect(servers), connect(servers)];
let failed = false;
try {
  const a = new Campaigner(clients[0]!);
  const b = new Campaigner(clients[1]!);
  console.log(
    `${SERVERS} servers, lease ${LEASE} ms, ${HANDOVERS} handovers, ${FAILOVERS} failovers`,
  );
  const busy = await uncontended(a.redlock, ACQUIRES, 0);
  const base = await uncontended(a.redlock, Math.ceil(ACQUIRES / 4), IDLE_MS);
  const hand = await handovers(a, b);
  const p50 = percentile(hand, 50);
  console.log(
    `uncontended acquire p50 after ${IDLE_MS} ms idle: fenced ${fmt(base.fenced)}, ` +
      `plain ${fmt(base.plain)}; back to back: fenced ${fmt(busy.fenced)}, plain ${
        fmt(busy.plain)
      }`,
  );
  console.log(
    `handover after resignation (${IDLE_MS} ms idle before each): p50 ${fmt(p50)}, ` +
      `p90 ${fmt(percentile(hand, 90))}, p99 ${fmt(percentile(hand, 99))}, ` +
      `max ${fmt(Math.max(...hand))}`,
  );
  const ratioFenced = p50 / base.fenced;
  console.log(
    `handover p50 / idle uncontended acquire p50: ${ratioFenced.toFixed(2)}× fenced ` +
      `(lead() acquires fenced), ${(p50 / base.plain).toFixed(2)}× plain; ` +
      `vs back to back: ${(p50 / busy.fenced).toFixed(2)}× fenced (target ≤ 3× the fenced idle)`,
  );
  if (ratioFenced > 3) failed = true;

  const fail = await failovers(servers, dir);
  const bound = LEASE + RETRY_WAIT;
  const over = fail.filter((ms) => ms > bound);
  console.log(
    `failover after kill -9: min ${Math.min(...fail)} ms, p50 ${percentile(fail, 50)} ms, ` +
      `max ${Math.max(...fail)} ms; bound lease + retry wait = ${bound} ms; ` +
      `${fail.length - over.length}/${fail.length} within`,
  );
  if (over.length > 0) failed = true;
} finally {
  for (const list of clients) for (const client of list) client.disconnect();
  await Deno.remove(dir, { recursive: true });
}
console.log(failed ? "a target was missed" : "both targets met");
Deno.exit(failed ? 1 : 0);
