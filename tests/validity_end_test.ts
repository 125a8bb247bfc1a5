/**
 * The lease is the law: a routine run under `using()` (and `lead()`, the
 * read-write lock's and the semaphore's `using()`) has its signal aborted
 * when its lock's validity ends without a successful extension, before any
 * other client can hold the lock. The holder reaches the servers through
 * fault proxies (in a process of their own) that stop forwarding once it
 * holds the lock; another client reaches the servers directly and waits
 * for the lock. Both instants are taken on this process's monotonic clock.
 */

import assert from "node:assert/strict";
import { type Lock, LockLostError, type LockLostEvent, Redlock } from "../mod.ts";
import { Direction, ProxyProcess } from "../scripts/fault_proxy.ts";
import { connect, type Connection, startServers } from "./_redis.ts";

/** Resolves to `promise`'s value, or rejects naming `what` after `ms`; clears its timer. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** The monotonic instant `signal` aborts at (now, when it has already). */
function abortInstant(signal: AbortSignal): Promise<number> {
  if (signal.aborted) return Promise.resolve(performance.now());
  return new Promise((resolve) => {
    signal.addEventListener("abort", () => resolve(performance.now()), { once: true });
  });
}

/** What one race between a cut-off holder and a direct client saw. */
interface Race {
  /** When the holder's routine saw its signal abort. */
  readonly abortAt: number;
  /** When the other client's acquire resolved. */
  readonly grantAt: number;
  /** The routine's signal's reason. */
  readonly reason: unknown;
  /** The `"lost"` events of the holder's Redlock. */
  readonly lost: readonly LockLostEvent[];
}

/** How the holder holds: runs `routine` under a lock of `lease` ms. */
type Hold = (
  redlock: Redlock,
  lease: number,
  routine: (signal: AbortSignal) => Promise<void>,
) => Promise<void>;

/** How the other client takes the same lock, waiting at most `timeout` ms. */
type Take = (redlock: Redlock, lease: number, timeout: number) => Promise<Lock>;

/**
 * Lets the holder take the lock through proxies, cuts the proxies, and has
 * the other client wait for the lock on the servers directly.
 */
async function race(lease: number, hold: Hold, take: Take): Promise<Race> {
  await using servers = await startServers(3);
  await using proxies = await ProxyProcess.start(servers.ports);
  const connections: Connection[] = [];
  try {
    for (const port of proxies.ports) connections.push(await connect("ioredis", port));
    const direct = [];
    for (const port of servers.ports) direct.push(await connect("ioredis", port));
    connections.push(...direct);
    await using holder = new Redlock(connections.slice(0, 3).map((c) => c.client));
    await using other = new Redlock(direct.map((c) => c.client), {
      retryCount: -1,
      retryDelay: 10,
      retryJitter: 5,
    });
    const lost: LockLostEvent[] = [];
    holder.on("lost", (event) => lost.push(event));
    let abortAt = NaN;
    let grantAt = NaN;
    let reason: unknown;
    await hold(holder, lease, async (signal) => {
      const aborted = abortInstant(signal);
      await proxies.send({ op: "partition", direction: Direction.Both });
      const granted = take(other, lease, 4 * lease).then((lock) => {
        grantAt = performance.now();
        return lock;
      });
      try {
        abortAt = await within(aborted, 4 * lease, "the routine's abort");
        reason = signal.reason;
        await within(granted, 4 * lease, "the other client's grant").then((l) => l.release());
      } finally {
        // The held requests pass now: the release at the end goes through.
        await proxies.send({ op: "heal" });
      }
    });
    return { abortAt, grantAt, reason, lost };
  } finally {
    for (const connection of connections) await connection.close();
  }
}

const holdUsing: Hold = (redlock, lease, routine) => redlock.using("job", lease, routine);
const takeLock: Take = (redlock, lease, timeout) => redlock.acquire("job", lease, { timeout });

/** Asserts the abort came first and says by how much. */
function assertAbortFirst(what: string, lease: number, seen: Race): void {
  const gap = seen.grantAt - seen.abortAt;
  assert.ok(gap > 0, `${what}: the abort came ${-gap} ms after the other client's grant`);
  assert.ok(seen.reason instanceof LockLostError, `reason ${seen.reason}`);
  assert.match(seen.reason.message, /expired before an extension succeeded/);
  console.log(`${what}, lease ${lease} ms: abort ${gap.toFixed(1)} ms before the grant`);
}

for (const lease of [1_000, 2_000, 3_000]) {
  Deno.test(`using() aborts its routine when the validity ends, before another client holds the lock (lease ${lease} ms)`, async () => {
    const seen = await race(lease, holdUsing, takeLock);
    assertAbortFirst("using()", lease, seen);
    assert.equal(seen.lost.length, 1, "one lost event");
    assert.equal(seen.lost[0]!.error, seen.reason, "the lost event carries the routine's reason");
  });
}

Deno.test("lead() aborts its term when the validity ends, before another client holds the lock", async () => {
  const lease = 1_000;
  const hold: Hold = async (redlock, lease, routine) => {
    const stop = new AbortController();
    await redlock.lead("leader", lease, async (signal) => {
      try {
        await routine(signal);
      } finally {
        stop.abort();
      }
    }, { signal: stop.signal });
  };
  const take: Take = (redlock, lease, timeout) =>
    redlock.acquire("leader", lease, { timeout, fencing: true });
  assertAbortFirst("lead()", lease, await race(lease, hold, take));
});

Deno.test("a read-write lock's using() aborts when the validity ends, before another writer holds it", async () => {
  const lease = 1_000;
  const hold: Hold = (redlock, lease, routine) =>
    redlock.readWriteLock("doc").using("read", lease, routine);
  const take: Take = (redlock, lease, timeout) =>
    redlock.readWriteLock("doc").write(lease, { timeout });
  assertAbortFirst("readWriteLock().using()", lease, await race(lease, hold, take));
});

Deno.test("a semaphore's using() aborts when the validity ends, before another client holds the permit", async () => {
  const lease = 1_000;
  const hold: Hold = (redlock, lease, routine) =>
    redlock.semaphore("pool", { permits: 1 }).using(lease, routine);
  const take: Take = (redlock, lease, timeout) =>
    redlock.semaphore("pool", { permits: 1 }).acquire(lease, { timeout });
  assertAbortFirst("semaphore().using()", lease, await race(lease, hold, take));
});
