/**
 * Semaphores against redis-semaphore's `RedlockSemaphore`, two cells run by
 * `deno task bench` (`--only=S`):
 *
 * - S1: 16 contenders, each with its own connections to 3 servers, ask one
 *   semaphore of 4 permits, hold 1 ms and ask again (10 ms retry interval,
 *   no jitter): grants per second, p99 wait, the commands the servers ran
 *   per grant (`INFO commandstats` at the start and end of the counted
 *   window), and the most holders seen at once, which must never exceed 4
 *   for @x/redlock.
 * - S2, split views: three clients, each cut off from a different one of 3
 *   servers (its connection to that server points at a closed loopback
 *   port), each ask one semaphore of 2 permits once, in rounds with the
 *   order rotated; the most holders at once, which must never exceed 2
 *   for @x/redlock.
 *
 * @module
 */

import { Redis } from "ioredis";
import { RedlockSemaphore, TimeoutError as SemaphoreTimeoutError } from "redis-semaphore";
import { Redlock } from "../mod.ts";
import { closeAll, connectAll, type Connection, type IoredisClient } from "./_connect.ts";
import { median, percentile, sleep } from "./_stats.ts";
import { table, type Target } from "./_report.ts";
import { readServers } from "./_server_cost.ts";

/** A semaphore implementation: one permit held, released by `release()`. */
interface Permits {
  /** One permit; with `once`, a single attempt that resolves to null when refused. */
  take(name: string, permits: number, once: boolean): Promise<{ release(): Promise<void> } | null>;
  close(): Promise<void>;
}

const LEASE = 10_000;
const RETRY_MS = 10;

/** `redlock.semaphore()` over the given ioredis clients. */
function xPermits(clients: readonly IoredisClient[], onClose: () => Promise<void>): Permits {
  const redlock = new Redlock(clients, { retryCount: -1, retryDelay: RETRY_MS, retryJitter: 0 });
  redlock.on("error", () => {});
  // One handle per name, kept as a program keeps it.
  const handles = new Map<string, ReturnType<Redlock["semaphore"]>>();
  return {
    async take(name, permits, once) {
      let semaphore = handles.get(name);
      if (!semaphore) handles.set(name, semaphore = redlock.semaphore(name, { permits }));
      const lock = once
        ? await semaphore.tryAcquire(LEASE)
        : await semaphore.acquire(LEASE, { timeout: 60_000 });
      return lock && { release: async () => void await lock.release() };
    },
    async close() {
      await redlock[Symbol.asyncDispose]();
      await onClose();
    },
  };
}

/** redis-semaphore's `RedlockSemaphore` (one per permit, no refresh timer). */
function rsPermits(clients: readonly IoredisClient[], onClose: () => Promise<void>): Permits {
  return {
    async take(name, permits, once) {
      const semaphore = new RedlockSemaphore([...clients], name, permits, {
        lockTimeout: LEASE,
        acquireTimeout: once ? 10_000 : 60_000,
        acquireAttemptsLimit: once ? 1 : Infinity,
        retryInterval: RETRY_MS,
        refreshInterval: 0,
      });
      try {
        await semaphore.acquire();
      } catch (error) {
        if (once && error instanceof SemaphoreTimeoutError) return null;
        throw error;
      }
      return { release: () => semaphore.release() };
    },
    close: onClose,
  };
}

type Kind = "x" | "rs";
const KINDS: readonly Kind[] = ["x", "rs"];
const LABELS: Record<Kind, string> = {
  x: "@x/redlock semaphore()",
  rs: "redis-semaphore RedlockSemaphore",
};

async function openPermits(kind: Kind, ports: readonly number[]): Promise<Permits> {
  const connections = await connectAll("ioredis", ports);
  const clients = connections.map((c) => c.client);
  const close = () => closeAll(connections);
  return kind === "x" ? xPermits(clients, close) : rsPermits(clients, close);
}

let sequence = 0;
const fresh = (what: string) => `bench:s:${what}:${Date.now().toString(36)}:${++sequence}`;

/** What one S1 run saw. */
interface Contended {
  grantsPerSec: number;
  waitP99: number;
  /** Commands the servers ran (as Redis counts them) per grant counted. */
  commandsPerGrant: number;
  maxHolders: number;
  errors: number;
  firstError?: string;
}

/** S1: `contenders` workers on one semaphore of `permits` for `warmMs` + `ms`. */
async function contended(
  kind: Kind,
  ports: readonly number[],
  shape: { contenders: number; permits: number; warmMs: number; ms: number },
): Promise<Contended> {
  const workers = await Promise.all(
    Array.from({ length: shape.contenders }, () => openPermits(kind, ports)),
  );
  const name = fresh(kind);
  const counted = performance.now() + shape.warmMs;
  const end = counted + shape.ms;
  let holders = 0;
  let maxHolders = 0;
  let grants = 0;
  let errors = 0;
  let firstError: string | undefined;
  const waits: number[] = [];
  // The servers' commands over the counted window (each read at its instant).
  const readAt = (at: number) =>
    sleep(Math.max(0, at - performance.now())).then(() => readServers(ports));
  const readings = Promise.all([readAt(counted), readAt(end)]);
  try {
    await Promise.all(workers.map(async (worker) => {
      while (performance.now() < end) {
        const asked = performance.now();
        let held;
        try {
          held = (await worker.take(name, shape.permits, false))!;
        } catch (error) {
          errors++;
          firstError ??= String(error);
          return;
        }
        holders++;
        maxHolders = Math.max(maxHolders, holders);
        if (asked >= counted && performance.now() <= end) {
          grants++;
          waits.push(performance.now() - asked);
        }
        await sleep(1);
        holders--;
        await held.release().catch((error) => {
          errors++;
          firstError ??= String(error);
        });
      }
    }));
  } finally {
    await Promise.all(workers.map((w) => w.close()));
  }
  const [first, last] = await readings;
  return {
    grantsPerSec: grants / shape.ms * 1000,
    waitP99: percentile(waits, 99),
    commandsPerGrant: (last.calls - first.calls) / grants,
    maxHolders,
    errors,
    ...(firstError ? { firstError } : {}),
  };
}

/** A port on loopback nothing listens on (bound, then closed). */
function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** An ioredis client to a closed port: it never connects and fails every command at once. */
async function deadClient(port: number): Promise<Connection<IoredisClient>> {
  const client = new Redis({
    host: "127.0.0.1",
    port,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on("error", () => {});
  await client.connect().catch(() => {});
  return { client, close: () => Promise.resolve(client.disconnect()) };
}

/** What one S2 run saw: the most holders at once, over every round. */
interface Split {
  maxHolders: number;
  rounds: number;
  /** Holders per round, e.g. [3, 3, 3]. */
  holders: number[];
}

/**
 * S2: three clients, client `i` cut off from server `i`; each round, a fresh
 * semaphore of 2 permits, each client asks it once (one attempt) in an order
 * rotated every round, and nobody releases before all have asked.
 */
async function splitViews(kind: Kind, ports: readonly number[], rounds: number): Promise<Split> {
  const dead = closedPort();
  const clients = await Promise.all(ports.map(async (_, cut) => {
    const connections = await Promise.all(
      ports.map((port, j) =>
        j === cut ? deadClient(dead) : connectAll("ioredis", [port]).then((c) => c[0]!)
      ),
    );
    const close = () => closeAll(connections);
    const redis = connections.map((c) => c.client);
    return kind === "x" ? xPermits(redis, close) : rsPermits(redis, close);
  }));
  const holders: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      const name = fresh(`split:${kind}`);
      const held = [];
      for (let k = 0; k < clients.length; k++) {
        const permit = await clients[(k + round) % clients.length]!.take(name, 2, true);
        if (permit) held.push(permit);
      }
      holders.push(held.length);
      await Promise.all(held.map((h) => h.release().catch(() => {})));
    }
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
  return { maxHolders: Math.max(...holders), rounds, holders };
}

/** What the semaphore cells found. */
export interface SemaphoreBench {
  /** Markdown. */
  readonly section: string;
  readonly targets: readonly Target[];
  /** Every repetition, for the JSON file. */
  readonly samples: unknown;
  /** True when @x/redlock had more holders than permits in any run. */
  readonly unsafe: boolean;
}

const fmt = (n: number, digits = 0) => Number.isFinite(n) ? n.toFixed(digits) : "–";

/** Runs S1 and S2 on the given 3 servers; `reps` repetitions of S1 in a rotated order. */
export async function benchSemaphores(
  ports: readonly number[],
  plan: { reps: number; warmMs: number; measureMs: number },
): Promise<SemaphoreBench> {
  const shape = { contenders: 16, permits: 4, warmMs: plan.warmMs, ms: plan.measureMs };
  const runs: Record<Kind, Contended[]> = { x: [], rs: [] };
  for (let rep = 0; rep < plan.reps; rep++) {
    for (let k = 0; k < KINDS.length; k++) {
      const kind = KINDS[(k + rep) % KINDS.length]!;
      const run = await contended(kind, ports, shape);
      runs[kind].push(run);
      console.error(
        `S1·3 rep ${rep + 1}/${plan.reps}  ${LABELS[kind].padEnd(32)} ${
          fmt(run.grantsPerSec)
        } grants/s, p99 ${fmt(run.waitP99, 1)} ms, ${
          fmt(run.commandsPerGrant)
        } commands per grant, at most ${run.maxHolders} holders` +
          (run.errors ? `, ${run.errors} error(s): ${run.firstError}` : ""),
      );
    }
  }
  const split: Record<Kind, Split> = {
    x: await splitViews("x", ports, 6),
    rs: await splitViews("rs", ports, 6),
  };
  for (const kind of KINDS) {
    console.error(
      `S2·3 split views  ${LABELS[kind].padEnd(32)} holders per round ${
        split[kind].holders.join(" ")
      } (2 permits)`,
    );
  }
  const most = (kind: Kind) => Math.max(...runs[kind].map((r) => r.maxHolders));
  const errors = (kind: Kind) => runs[kind].reduce((n, r) => n + r.errors, 0);
  const unsafe = most("x") > shape.permits || split.x.maxHolders > 2;
  const ratio = median(runs.x.map((r, i) => r.grantsPerSec / runs.rs[i]!.grantsPerSec));
  const rows = KINDS.map((kind) => [
    LABELS[kind],
    fmt(median(runs[kind].map((r) => r.grantsPerSec))),
    fmt(median(runs[kind].map((r) => r.waitP99)), 1),
    fmt(median(runs[kind].map((r) => r.commandsPerGrant))),
    `${most(kind)}${kind === "x" && most(kind) > shape.permits ? " **UNSAFE**" : ""}`,
    String(errors(kind)),
    `${split[kind].maxHolders}${kind === "x" && split.x.maxHolders > 2 ? " **UNSAFE**" : ""}`,
  ]);
  const section = [
    "## S1, S2 · semaphores against redis-semaphore (3 servers, ioredis)",
    "",
    `S1: ${shape.contenders} contenders with their own connections, one semaphore of ` +
    `${shape.permits} permits, hold 1 ms, retry every ${RETRY_MS} ms, ` +
    `medians of ${plan.reps}; S2: three clients each cut off from a different server ` +
    `(a closed loopback port), 2 permits, each asks once, ${split.x.rounds} rounds.`,
    "",
    table(
      [
        "implementation",
        "S1 grants/s",
        "S1 p99 wait ms",
        "S1 commands per grant",
        "S1 most holders at once (of 4)",
        "S1 errors",
        "S2 most holders at once (of 2)",
      ],
      rows,
    ),
    "",
    `S1 grants per second, @x/redlock ÷ redis-semaphore: ${fmt(ratio, 2)}×.`,
  ].join("\n");
  const targets: Target[] = [
    {
      name: "S1 @x/redlock most holders at once",
      goal: `≤ ${shape.permits}`,
      value: String(most("x")),
      met: most("x") <= shape.permits && errors("x") === 0,
    },
    {
      name: "S2 @x/redlock most holders at once, split views",
      goal: "≤ 2",
      value: String(split.x.maxHolders),
      met: split.x.maxHolders <= 2,
    },
  ];
  return { section, targets, samples: { s1: runs, s2: split }, unsafe };
}
