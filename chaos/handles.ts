/**
 * The chaos cases of read-write locks and semaphores: workers (each with
 * its own Redlock and connections, in this process) take read and write
 * locks, or permits, on 5 servers while servers are killed (and restarted
 * after the longest lease), frozen (`SIGSTOP`) and have their scripts
 * flushed, never more than a minority at once. The checker reports a
 * writer whose valid lease overlaps anyone's, and more valid permits at
 * once than there are permits.
 *
 * ```sh
 * deno run -A chaos/handles.ts --seconds 20 --seed 1
 * ```
 *
 * @module
 */

import { Redis } from "ioredis";
import { type RedisServers, startServers } from "../scripts/redis.ts";
import { type Lock, Redlock } from "../mod.ts";
import { Rng } from "./_rng.ts";
import { sleep } from "./_faults.ts";
import { Uncaught } from "./_uncaught.ts";

/** The longest lease a worker takes, ms: a killed server restarts after it. */
const LEASE_MAX = 1_000;
const SERVERS = 5;
const WORKERS = 8;
const PERMITS = 2;

/** A lease as it was valid: from its grant to its release or the end of its validity. */
export interface Hold {
  readonly worker: number;
  readonly kind: "read" | "write" | "permit";
  readonly start: number;
  readonly end: number;
}

/** What one case found. */
export interface HandleCaseResult {
  readonly name: "rw" | "sem";
  readonly holds: number;
  readonly byKind: Readonly<Record<string, number>>;
  readonly faults: Readonly<Record<string, number>>;
  readonly failures: Readonly<Record<string, number>>;
  /** Writers whose valid lease overlapped another's (rw). */
  readonly writerOverlaps: number;
  /** The most valid leases at one instant (readers for rw, permits for sem). */
  readonly mostAtOnce: number;
  /** Instants with more valid permits than permits (sem). */
  readonly overSubscribed: number;
  /** Rejections nobody handled and errors nobody caught while it ran. */
  readonly uncaught: readonly string[];
  readonly violations: readonly string[];
}

/** The most holds valid at one instant among `holds`, and how often that exceeded `limit`. */
export function concurrency(holds: readonly Hold[], limit: number): [number, number] {
  const events = holds.flatMap((h) => [[h.start, 1], [h.end, -1]] as const)
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let most = 0;
  let over = 0;
  for (const [, step] of events) {
    now += step;
    if (now > most) most = now;
    if (step > 0 && now > limit) over++;
  }
  return [most, over];
}

/** Writers whose lease overlaps another hold's. */
export function writerOverlaps(holds: readonly Hold[]): number {
  const writers = holds.filter((h) => h.kind === "write");
  let count = 0;
  for (const w of writers) {
    if (holds.some((h) => h !== w && h.start < w.end && w.start < h.end)) count++;
  }
  return count;
}

/** Connections of one worker to every server, quick to reconnect. */
function connect(servers: RedisServers): Redis[] {
  return servers.servers.map((s) => {
    const client = new Redis({
      host: "127.0.0.1",
      port: s.port,
      maxRetriesPerRequest: null,
      retryStrategy: () => 50,
    });
    client.on("error", () => {});
    return client;
  });
}

/** One worker's loop: take a lock (or permit), hold it briefly (maybe extend), release. */
async function work(
  id: number,
  name: "rw" | "sem",
  redlock: Redlock,
  rng: Rng,
  holds: Hold[],
  failures: Record<string, number>,
  stop: AbortSignal,
): Promise<void> {
  // Odd workers poll, and take each read-write lock through a new handle:
  // their first attempts are SET NX rounds whenever the lock looks free.
  const fast = id % 2 === 1;
  const options = fast ? { wait: "poll" } as const : {};
  let rw = redlock.readWriteLock("chaos-doc");
  const sem = redlock.semaphore("chaos-pool", { permits: PERMITS });
  while (!stop.aborted) {
    const kind = name === "sem" ? "permit" : rng.next() < 0.25 ? "write" : "read";
    const lease = 200 + Math.floor(rng.next() * (LEASE_MAX - 200));
    if (fast) rw = redlock.readWriteLock("chaos-doc");
    let lock: Lock;
    try {
      lock = kind === "permit"
        ? await sem.acquire(lease, options)
        : kind === "write"
        ? await rw.write(lease, options)
        : await rw.read(lease, options);
    } catch (error) {
      const key = (error as Error).name;
      failures[key] = (failures[key] ?? 0) + 1;
      await sleep(10, stop);
      continue;
    }
    const start = performance.now();
    let validUntil = start + lock.remainingTime;
    await sleep(2 + rng.next() * 40, stop);
    if (rng.next() < 0.2 && lock.remainingTime > 50) {
      try {
        lock = await lock.extend(lease);
        validUntil = performance.now() + lock.remainingTime;
        await sleep(2 + rng.next() * 40, stop);
      } catch (error) {
        const key = `extend: ${(error as Error).name}`;
        failures[key] = (failures[key] ?? 0) + 1;
      }
    }
    const end = Math.min(performance.now(), validUntil);
    holds.push({ worker: id, kind, start, end });
    await lock.release().catch(() => {});
    // A pause now and then, so that the lock is sometimes free for a SET NX round.
    if (rng.next() < 0.5) await sleep(rng.next() * 60, stop);
  }
}

/**
 * Faults until `stop`: every 200–700 ms a server (of the healthy majority
 * less one) is killed and restarted after the longest lease, frozen for up
 * to 1.5 s, or has its scripts flushed.
 */
async function inject(
  servers: RedisServers,
  rng: Rng,
  faults: Record<string, number>,
  stop: AbortSignal,
): Promise<void> {
  const down = new Set<number>();
  const maxDown = SERVERS - (Math.floor(SERVERS / 2) + 1);
  const running: Promise<void>[] = [];
  while (!stop.aborted) {
    await sleep(200 + rng.next() * 500, stop);
    if (stop.aborted) break;
    const healthy = servers.servers.map((_, i) => i).filter((i) => !down.has(i));
    const index = healthy[Math.floor(rng.next() * healthy.length)]!;
    const server = servers.servers[index]!;
    const roll = rng.next();
    if (roll < 0.3) {
      await server.command("SCRIPT", "FLUSH").catch(() => {});
      faults.flush = (faults.flush ?? 0) + 1;
      continue;
    }
    if (down.size >= maxDown) continue;
    down.add(index);
    if (roll < 0.65) {
      faults.kill = (faults.kill ?? 0) + 1;
      running.push((async () => {
        await server.kill();
        await sleep(LEASE_MAX + 200); // a restarted server must not forget a valid lease
        await server.start();
        down.delete(index);
      })());
    } else {
      faults.freeze = (faults.freeze ?? 0) + 1;
      running.push((async () => {
        await server.pause();
        await sleep(100 + rng.next() * 1_400);
        await server.resume();
        down.delete(index);
      })());
    }
  }
  await Promise.all(running);
}

/** Runs one case for `ms` of faults. */
export async function runHandleCase(
  name: "rw" | "sem",
  ms: number,
  seed: number,
): Promise<HandleCaseResult> {
  // The workers run in this process: what they leave unhandled lands here.
  using uncaught = new Uncaught();
  await using servers = await startServers(SERVERS);
  const rng = new Rng(seed);
  const holds: Hold[] = [];
  const failures: Record<string, number> = {};
  const faults: Record<string, number> = {};
  const stop = new AbortController();
  const connections = Array.from({ length: WORKERS }, () => connect(servers));
  try {
    const redlocks = connections.map((clients) =>
      new Redlock(clients, { retryCount: 6, retryDelay: 50, retryJitter: 50, requestTimeout: 200 })
    );
    const workers = redlocks.map((redlock, i) =>
      work(i, name, redlock, new Rng(seed + i + 1), holds, failures, stop.signal)
    );
    const faulting = inject(servers, rng, faults, stop.signal);
    await sleep(ms);
    stop.abort();
    await Promise.all([...workers, faulting]);
    await Promise.all(redlocks.map((r) => r[Symbol.asyncDispose]()));
  } finally {
    for (const clients of connections) for (const c of clients) c.disconnect();
  }
  const byKind: Record<string, number> = {};
  for (const h of holds) byKind[h.kind] = (byKind[h.kind] ?? 0) + 1;
  const overlaps = name === "rw" ? writerOverlaps(holds) : 0;
  const [mostAtOnce, overSubscribed] = name === "rw"
    ? concurrency(holds.filter((h) => h.kind === "read"), Infinity)
    : concurrency(holds, PERMITS);
  const violations: string[] = [];
  if (overlaps > 0) violations.push(`${overlaps} writer(s) overlapped another valid lease`);
  if (overSubscribed > 0) violations.push(`${overSubscribed} time(s) more than ${PERMITS} permits`);
  if (uncaught.seen.length > 0) {
    violations.push(
      `${uncaught.seen.length} unhandled rejection(s) or uncaught error(s): ` +
        uncaught.seen.slice(0, 3).join("; "),
    );
  }
  return {
    name,
    holds: holds.length,
    byKind,
    faults,
    failures,
    writerOverlaps: overlaps,
    mostAtOnce,
    overSubscribed,
    uncaught: [...uncaught.seen],
    violations,
  };
}

/** One line per case for the chaos summary. */
export function describe(result: HandleCaseResult): string {
  const kinds = Object.entries(result.byKind).map(([k, n]) => `${n} ${k}`).join(", ");
  const faults = Object.entries(result.faults).map(([k, n]) => `${n} ${k}`).join(", ");
  const failures = Object.entries(result.failures).map(([k, n]) => `${n} ${k}`).join(", ");
  const what = result.name === "rw"
    ? `writer overlaps ${result.writerOverlaps}, most readers at once ${result.mostAtOnce}`
    : `over-subscriptions ${result.overSubscribed}, most permits at once ${result.mostAtOnce} of ${PERMITS}`;
  return `case ${result.name}: ${result.holds} holds (${kinds}); faults: ${faults || "none"}; ` +
    `${what}; failed acquires: ${failures || "none"}; uncaught: ${result.uncaught.length}`;
}

/** Runs both cases for `seconds` in all; false when a promise was broken. */
export async function runHandleCases(
  seconds: number,
  seed: number,
  log: (line: string) => void,
): Promise<boolean> {
  let safe = true;
  for (const name of ["rw", "sem"] as const) {
    const result = await runHandleCase(name, Math.max(3, seconds / 2) * 1_000, seed);
    log(describe(result));
    for (const v of result.violations) log(`  VIOLATION in ${name}: ${v}`);
    safe &&= result.violations.length === 0;
  }
  return safe;
}

if (import.meta.main) {
  const arg = (flag: string, fallback: number) => {
    const i = Deno.args.indexOf(flag);
    return i === -1 ? fallback : Number(Deno.args[i + 1]);
  };
  const seed = arg("--seed", Math.floor(Math.random() * 2 ** 31));
  const seconds = arg("--seconds", 20);
  console.log(`chaos (read-write locks and semaphores): seed ${seed}, ${seconds} s`);
  const safe = await runHandleCases(seconds, seed, (line) => console.log(line));
  console.log(safe ? "SAFE" : "UNSAFE");
  Deno.exit(safe ? 0 : 1);
}
