/**
 * Benchmark cells of read-write locks and semaphores, run by `deno task
 * bench` (or alone: `deno run -A bench/handles.ts [--quick]`), each against
 * the plain lock measured in the same run on the same 3 servers:
 *
 * - H1: acquire + release of a read lock, a write lock and a permit (4
 *   permits), interleaved in 50 ms slices with the plain lock; each loop
 *   has its own name of each kind (and handle), used again by each of its
 *   cycles, so no kind waits and none pays for a name's first use;
 *   1 loop and 16 loops; ratio to the plain lock.
 * - H2: readers-heavy contention on one name: 15 readers that hold 5 ms and
 *   ask again at once, 1 writer that holds 5 ms and then thinks 20 ms;
 *   against the same 16 workers on one plain mutex (release-notified).
 *   Readers' grants per second as a ratio, and the writer's p99 wait in
 *   hold times, counted after a warm-up on the run's fresh name (its
 *   first waits subscribe first); the first write wait is shown apart.
 *
 * @module
 */

import { Redis } from "ioredis";
import { startServers } from "../scripts/redis.ts";
import { type Lock, type ReadWriteLock, Redlock, type Semaphore } from "../mod.ts";
import { median, percentile, sleep } from "./_stats.ts";
import { ratioTarget, type Target } from "./_report.ts";

const LEASE = 10_000;
const SLICE_MS = 50;
const HOLD_MS = 5;
const WRITER_THINK_MS = 20;
/** ms each contended run goes before it counts: its name's first waits subscribe first. */
const WARM_UP_MS = 500;

type Kind = "plain" | "read" | "write" | "permit";
const KINDS: readonly Kind[] = ["plain", "read", "write", "permit"];

let sequence = 0;
const fresh = (kind: string) => `bench:h:${kind}:${Date.now().toString(36)}:${++sequence}`;

/** What one loop takes and releases: a name (and its handles) for each kind. */
class Loop {
  readonly #redlock: Redlock;
  readonly #name: string;
  readonly #rw: ReadWriteLock;
  readonly #semaphore: Semaphore;

  constructor(redlock: Redlock) {
    this.#redlock = redlock;
    this.#name = fresh("plain");
    this.#rw = redlock.readWriteLock(fresh("rw"));
    this.#semaphore = redlock.semaphore(fresh("permit"), { permits: 4 });
  }

  /** One acquire + release of `kind`. */
  cycle(kind: Kind): Promise<unknown> {
    const held: Promise<Lock> = kind === "plain"
      ? this.#redlock.acquire(this.#name, LEASE)
      : kind === "read"
      ? this.#rw.read(LEASE)
      : kind === "write"
      ? this.#rw.write(LEASE)
      : this.#semaphore.acquire(LEASE);
    return held.then((lock) => lock.release());
  }
}

/** acquire + release per second of each kind, interleaved in slices, for `ms` each. */
async function throughput(redlock: Redlock, loops: number, ms: number): Promise<number[]> {
  const workers = Array.from({ length: loops }, () => new Loop(redlock));
  const ops = KINDS.map(() => 0);
  const spent = KINDS.map(() => 0);
  const turns = Math.max(1, Math.round(ms / SLICE_MS));
  for (let turn = 0; turn < turns; turn++) {
    for (let k = 0; k < KINDS.length; k++) {
      const i = (k + turn) % KINDS.length;
      const start = performance.now();
      const end = start + SLICE_MS;
      await Promise.all(workers.map(async (worker) => {
        while (performance.now() < end) {
          // A stall of the shared machine may time a request out: count it, go on.
          if (await worker.cycle(KINDS[i]!).then(() => true, () => false)) ops[i]!++;
          else errors.count++;
        }
      }));
      spent[i]! += performance.now() - start;
    }
  }
  return ops.map((n, i) => n / spent[i]! * 1000);
}

/** What one contended run measured. */
interface Contended {
  readerGrantsPerSec: number;
  writerWaits: number[];
  /** The writer's first wait, in the warm-up. */
  firstWait: number;
}

/**
 * 15 readers and 1 writer on a read-write lock (`rw`) or a plain mutex:
 * {@linkcode WARM_UP_MS}, then `ms` counted.
 */
async function contended(redlock: Redlock, rw: boolean, ms: number): Promise<Contended> {
  const name = fresh(rw ? "rw" : "mutex");
  const handle = redlock.readWriteLock(name);
  const counted = performance.now() + WARM_UP_MS;
  const end = counted + ms;
  let readerGrants = 0;
  const writerWaits: number[] = [];
  let firstWait = NaN;
  const options = { retryCount: -1, timeout: ms + 30_000 } as const;
  const take = (write: boolean) =>
    !rw
      ? redlock.acquire(name, LEASE, options)
      : write
      ? handle.write(LEASE, options)
      : handle.read(LEASE, options);
  await Promise.all([
    ...Array.from({ length: 15 }, async () => {
      while (performance.now() < end) {
        const asked = performance.now();
        const lock = await take(false);
        if (asked >= counted) readerGrants++;
        await sleep(HOLD_MS);
        await lock.release();
      }
    }),
    (async () => {
      while (performance.now() < end) {
        const asked = performance.now();
        const lock = await take(true);
        const waited = performance.now() - asked;
        if (Number.isNaN(firstWait)) firstWait = waited;
        if (asked >= counted) writerWaits.push(waited);
        await sleep(HOLD_MS);
        await lock.release();
        await sleep(WRITER_THINK_MS);
      }
    })(),
  ]);
  return {
    readerGrantsPerSec: readerGrants / (performance.now() - counted) * 1000,
    writerWaits,
    firstWait,
  };
}

/** What the cells found: a markdown section and the targets. */
export interface HandleBench {
  readonly section: string;
  readonly targets: readonly Target[];
}

/** Failed cycles of the throughput cells (timeouts on a stalled machine). */
const errors = { count: 0 };

const fmt = (n: number, digits = 0) => Number.isFinite(n) ? n.toFixed(digits) : "–";

/** Runs H1 and H2 on 3 fresh servers (ioredis); `quick` for a short run. */
export async function benchHandles(quick: boolean): Promise<HandleBench> {
  const reps = quick ? 2 : 5;
  const measureMs = quick ? 400 : 1_500;
  const contendMs = quick ? 1_500 : 4_000;
  await using servers = await startServers(3);
  const clients = servers.servers.map((s) => new Redis({ host: "127.0.0.1", port: s.port }));
  try {
    const redlock = new Redlock(clients);
    const lines: string[] = ["## Read-write locks and semaphores (3 servers, ioredis)", ""];
    const targets: Target[] = [];
    lines.push(
      "H1: acquire + release per second, each loop on its own names (median of " + reps +
        " repetitions), " +
        "ratio to the plain lock in the same slices:",
      "",
      "| loops | plain /s | read /s | write /s | permit /s | read ÷ plain | write ÷ plain | permit ÷ plain |",
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    );
    for (const loops of [1, 16]) {
      await throughput(redlock, loops, quick ? 100 : 300); // warm-up
      const runs: number[][] = [];
      for (let rep = 0; rep < reps; rep++) runs.push(await throughput(redlock, loops, measureMs));
      const rates = KINDS.map((_, i) => median(runs.map((r) => r[i]!)));
      const ratios = [1, 2, 3].map((i) => median(runs.map((r) => r[i]! / r[0]!)));
      lines.push(
        `| ${loops} | ${rates.map((r) => fmt(r)).join(" | ")} | ${
          ratios.map((r) => `${fmt(r, 2)}×`).join(" | ")
        } |`,
      );
      ratios.forEach((ratio, j) => {
        targets.push(
          ratioTarget(`H1 ${KINDS[j + 1]} lock ÷ plain lock, ${loops} loop(s)`, ratio, 0.8),
        );
      });
    }
    if (errors.count > 0) lines.push("", `(${errors.count} cycles failed and were not counted.)`);
    const rwRuns: Contended[] = [];
    const mutexRuns: Contended[] = [];
    for (let rep = 0; rep < reps; rep++) {
      rwRuns.push(await contended(redlock, true, contendMs));
      mutexRuns.push(await contended(redlock, false, contendMs));
    }
    const grantRatio = median(
      rwRuns.map((r, i) => r.readerGrantsPerSec / mutexRuns[i]!.readerGrantsPerSec),
    );
    const p99 = (runs: Contended[]) => median(runs.map((r) => percentile(r.writerWaits, 99)));
    const p50 = (runs: Contended[]) => median(runs.map((r) => percentile(r.writerWaits, 50)));
    lines.push(
      "",
      `H2: 15 readers (hold ${HOLD_MS} ms, ask again at once) and 1 writer (hold ${HOLD_MS} ms, ` +
        `think ${WRITER_THINK_MS} ms) on one fresh name per run, counted for ${
          contendMs / 1000
        } s after ${WARM_UP_MS} ms, median of ${reps}:`,
      "",
      "| lock | readers' grants /s | writer grants | writer wait p50 | writer wait p99 | first write wait |",
      "| --- | ---: | ---: | ---: | ---: | ---: |",
      ...([["read-write lock", rwRuns], ["plain mutex", mutexRuns]] as const).map(([label, runs]) =>
        `| ${label} | ${fmt(median(runs.map((r) => r.readerGrantsPerSec)))} | ${
          fmt(median(runs.map((r) => r.writerWaits.length)))
        } | ${fmt(p50(runs), 1)} ms | ${fmt(p99(runs), 1)} ms | ${
          fmt(median(runs.map((r) => r.firstWait)), 1)
        } ms |`
      ),
      "",
      `Readers' grants per second, read-write lock ÷ mutex: ${fmt(grantRatio, 2)}×.`,
    );
    targets.push(ratioTarget("H2 readers' grants/s, read-write lock ÷ plain mutex", grantRatio, 5));
    const holds = p99(rwRuns) / HOLD_MS;
    targets.push({
      name: "H2 writer's p99 wait, in hold times",
      goal: "< 10",
      value: fmt(holds, 1),
      met: Number.isFinite(holds) ? holds < 10 : null,
    });
    await redlock[Symbol.asyncDispose]();
    return { section: lines.join("\n"), targets };
  } finally {
    for (const c of clients) c.disconnect();
  }
}

if (import.meta.main) {
  const { section, targets } = await benchHandles(Deno.args.includes("--quick"));
  console.log(section);
  console.log("");
  for (const t of targets) {
    console.log(
      `${t.met === null ? "n/a" : t.met ? "yes" : "NO "}  ${t.name}: ${t.value} (${t.goal})`,
    );
  }
}
