import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { createClient } from "redis";
import {
  ExecutionError,
  type LuaScript,
  PermitsMismatchError,
  type RedisClient,
  Redlock,
  ResourceLockedError,
  toScriptClient,
} from "../mod.ts";
import { Direction, FaultProxy } from "../scripts/fault_proxy.ts";
import {
  connect,
  connectAll,
  get,
  hold,
  integer,
  type Kind,
  type RedisServers,
  scriptCalls,
  setup,
  sleep,
  startServers,
} from "./_redis.ts";

const SEM_KINDS: readonly Kind[] = ["ioredis", "node-redis"];

/** How many keys all servers hold together. */
async function keysOn(servers: RedisServers): Promise<number> {
  let total = 0;
  for (const s of servers.servers) total += await integer(s, "DBSIZE");
  return total;
}

/** A loopback port where nothing listens (bound, then let go). */
function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/**
 * A client of `kind` for an address where nothing listens: every request
 * fails at once, and nothing it sends ever reaches a server (unlike a
 * stopped server, which applies queued requests when it resumes).
 */
function cutOff(kind: Kind, port: number): { client: RedisClient; close(): void } {
  if (kind === "ioredis") {
    const client = new Redis({
      host: "127.0.0.1",
      port,
      lazyConnect: true,
      enableOfflineQueue: false,
      retryStrategy: () => null,
    });
    client.on("error", () => {});
    return { client, close: () => client.disconnect() };
  }
  // Never connected: node-redis rejects every command with ClientClosedError.
  const client = createClient({ socket: { host: "127.0.0.1", port } });
  return { client, close: () => {} };
}

for (const kind of SEM_KINDS) {
  for (const count of [1, 3, 5]) {
    Deno.test(
      `[${kind}] semaphore on ${count} server(s): never more than 3 of 8 contenders hold, and 3 do`,
      async () => {
        await using env = await setup(kind, count);
        const redlock = new Redlock(env.clients, { retryDelay: 10, retryJitter: 20 });
        const sem = redlock.semaphore("pool", { permits: 3 });
        let holders = 0;
        let most = 0;
        let grants = 0;
        const slots = new Set<string>();
        const worker = async () => {
          for (let i = 0; i < 5; i++) {
            const permit = await sem.acquire(5_000, { retryCount: -1, timeout: 60_000 });
            holders++;
            grants++;
            most = Math.max(most, holders);
            slots.add(permit.resources[0]!);
            await sleep(20);
            holders--;
            await permit.release();
          }
        };
        await Promise.all(Array.from({ length: 8 }, worker));
        assert.equal(grants, 40);
        assert.ok(most <= 3, `${most} holders at once`);
        assert.equal(most, 3, "the permits were all used: it is not a mutex");
        assert.deepEqual([...slots].sort(), ["{pool}:sem:0", "{pool}:sem:1", "{pool}:sem:2"]);
        // What is left is the permits key, which expires with the last lease.
        for (const s of env.servers.servers) {
          assert.equal(
            await integer(s, "EXISTS", "{pool}:sem:0", "{pool}:sem:1", "{pool}:sem:2"),
            0,
          );
        }
      },
    );
  }

  Deno.test(`[${kind}] tryAcquire() returns null while every permit is held`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const sem = redlock.semaphore("two", { permits: 2 });
    const a = await sem.tryAcquire(10_000);
    const b = await sem.tryAcquire(10_000);
    assert.ok(a !== null && b !== null);
    assert.notDeepEqual(a.resources, b.resources, "two slots");
    assert.equal(await sem.tryAcquire(10_000), null);
    await assert.rejects(
      sem.acquire(10_000, { retryCount: 1, retryDelay: 10 }),
      ResourceLockedError,
    );
    await a.release();
    const c = await sem.tryAcquire(10_000);
    assert.ok(c !== null, "a released permit is free again");
    assert.deepEqual(c.resources, a.resources);
    await b.release();
    await c.release();
  });

  Deno.test(`[${kind}] a permit expires, extends, and releases with await using and using()`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const sem = redlock.semaphore("one", { permits: 1 });
    await sem.acquire(300); // a holder that crashed
    assert.equal(await sem.tryAcquire(5_000), null);
    await sleep(400);
    let permit = (await sem.tryAcquire(300))!;
    assert.ok(permit !== null, "the crashed holder's permit expired");
    permit = await permit.extend(5_000);
    await sleep(400);
    assert.equal(await permit.isValid(), true);
    assert.equal(await sem.tryAcquire(5_000), null, "extended past its first lease");
    await permit.release();
    {
      await using _p = await sem.acquire(5_000);
      assert.equal(await sem.tryAcquire(5_000), null);
    }
    const result = await sem.using(400, async (signal, context) => {
      await sleep(700);
      assert.equal(signal.aborted, false);
      assert.ok(context.lock.remainingTime > 0);
      assert.equal(await sem.tryAcquire(5_000), null);
      return 3;
    });
    assert.equal(result, 3);
    const last = await sem.tryAcquire(5_000);
    assert.ok(last !== null, "using() released its permit");
    await last.release();
  });

  Deno.test(`[${kind}] a semaphore holds with a minority stopped and fails with a majority`, async () => {
    await using env = await setup(kind, 5);
    const redlock = new Redlock(env.clients, {
      requestTimeout: 200,
      retryCount: 1,
      retryDelay: 20,
    });
    const sem = redlock.semaphore("q", { permits: 2 });
    await env.servers.servers[0]!.kill();
    await env.servers.servers[2]!.kill();
    const a = await sem.acquire(5_000);
    const b = await sem.acquire(5_000);
    assert.equal(await sem.tryAcquire(5_000), null);
    await a.release();
    await b.release();
    await env.servers.servers[4]!.kill();
    const error = await sem.acquire(5_000).then(() => assert.fail("should fail"), (e) => e);
    assert.ok(error instanceof ExecutionError && !(error instanceof ResourceLockedError));
    for (const s of [env.servers.servers[1]!, env.servers.servers[3]!]) {
      const held = await integer(s, "EXISTS", "{q}:sem:0", "{q}:sem:1");
      assert.equal(held, 0, "the failed acquire left no slot behind");
    }
  });

  Deno.test(`[${kind}] a semaphore tells holders that use another number of permits`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryCount: 0 });
    const held = await redlock.semaphore("pm", { permits: 2 }).acquire(5_000);
    const error = await redlock.semaphore("pm", { permits: 3 }).acquire(5_000).then(
      () => assert.fail("should fail"),
      (e) => e,
    );
    assert.ok(error instanceof PermitsMismatchError, String(error));
    assert.ok(error instanceof RangeError);
    assert.equal(error.name, "PermitsMismatchError");
    assert.equal(error.permits, 3);
    assert.equal(error.found, 2);
    assert.match(error.message, /permits 3.*permits 2/);
    await held.release();
    const again = await redlock.semaphore("pm", { permits: 2 }).tryAcquire(5_000);
    assert.ok(again !== null, "the mismatched acquire left nothing behind");
    await again.release();
  });

  Deno.test(`[${kind}] a handle's next permit is a SET NX of its last slot while the permits key it checked lives`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const sem = redlock.semaphore("again", { permits: 2 });
    await (await sem.acquire(10_000)).release();
    for (const s of env.servers.servers) {
      const ttl = await integer(s, "PTTL", "{again}:sem:permits");
      assert.ok(ttl > 20_000, `the permits key outlives the grant by two leases (PTTL ${ttl})`);
    }
    const calls = () => Promise.all(env.servers.servers.map((s) => scriptCalls(s)));
    const before = await calls();
    const fast = await sem.acquire(10_000);
    assert.deepEqual(await calls(), before, "no script");
    assert.equal(fast.resources[0], "{again}:sem:0");
    // Its slot held: the SET NX round misses, the script round finds the other slot.
    const next = await sem.acquire(10_000);
    assert.equal(next.resources[0], "{again}:sem:1");
    assert.equal(await sem.tryAcquire(10_000), null, "two permits, not a mutex per slot");
    // A holder that counts otherwise is still told: the permits key is there.
    await assert.rejects(
      redlock.semaphore("again", { permits: 3 }).acquire(10_000),
      PermitsMismatchError,
    );
    await fast.release();
    await next.release();
    // A lease that would outlive the checked key goes through the script again.
    const long = await sem.acquire(60_000);
    assert.ok((await calls()).some((n, i) => n > before[i]! + 2), "the long lease ran the script");
    await long.release();
  });

  Deno.test(`[${kind}] a permit's release wakes a waiting acquire without polling`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryDelay: 3_000, retryJitter: 0 });
    const sem = redlock.semaphore("wake", { permits: 2 });
    const a = await sem.acquire(20_000);
    const b = await sem.acquire(20_000);
    const waiting = sem.acquire(5_000, { timeout: 10_000 });
    await sleep(300);
    const start = performance.now();
    await b.release();
    const c = await waiting;
    const waited = performance.now() - start;
    assert.ok(waited < 1_500, `woken ${waited} ms after the release (retryDelay 3000)`);
    assert.deepEqual(c.resources, b.resources);
    await a.release();
    await c.release();
  });

  /**
   * The split view: 3 servers, 2 permits; A cannot reach s3, B cannot reach
   * s1, C cannot reach s2. Each holder reaches a different majority, and
   * every server sees at most 2 of them.
   */
  Deno.test(`[${kind}] split view: a third holder cut off from another server gets no permit`, async () => {
    await using servers = await startServers(3);
    const outcome = await splitView(kind, servers, async (clients) => {
      const redlock = new Redlock(clients, { requestTimeout: 300, retryCount: 0 });
      const permit = await redlock.semaphore("split", { permits: 2 }).tryAcquire(30_000);
      return permit !== null;
    });
    assert.deepEqual(outcome, { a: true, b: true, c: false });
  });

  Deno.test(`[${kind}] split view: a per-server counting semaphore lets a third holder in`, async () => {
    await using servers = await startServers(3);
    const outcome = await splitView(
      kind,
      servers,
      (clients) => countingAcquire(clients, "split", 2),
    );
    // The strawman over-subscribes: the test above would fail against it.
    assert.deepEqual(outcome, { a: true, b: true, c: true });
  });
}

/** Who got a permit when A, B and C each miss one server (C while A and B hold). */
async function splitView(
  kind: Kind,
  servers: RedisServers,
  acquire: (clients: RedisClient[]) => Promise<boolean>,
): Promise<{ a: boolean; b: boolean; c: boolean }> {
  const real = await connectAll(kind, servers);
  const nowhere = [0, 1, 2].map(() => cutOff(kind, closedPort()));
  try {
    const view = (missing: number) =>
      real.clients.map((client, i) => i === missing ? nowhere[missing]!.client : client);
    const a = await acquire(view(2));
    const b = await acquire(view(0));
    const c = await acquire(view(1));
    return { a, b, c };
  } finally {
    for (const n of nowhere) n.close();
    await real[Symbol.asyncDispose]();
  }
}

/**
 * The strawman: a semaphore that counts holders per server (a sorted set
 * of holders scored by expiry) and holds on a quorum of "yes".
 */
const COUNTING_SOURCE = `local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call("ZADD", KEYS[1], now + 30000, ARGV[1])
return 1`;
const COUNTING: LuaScript = {
  name: "counting-semaphore",
  source: COUNTING_SOURCE,
  sha1: Array.from(
    new Uint8Array(await crypto.subtle.digest("SHA-1", new TextEncoder().encode(COUNTING_SOURCE))),
    (b) => b.toString(16).padStart(2, "0"),
  ).join(""),
};

async function countingAcquire(
  clients: RedisClient[],
  name: string,
  permits: number,
): Promise<boolean> {
  const value = crypto.randomUUID();
  const votes = await Promise.all(clients.map((client) =>
    toScriptClient(client)
      .evalScript(COUNTING, [`${name}:count`], [value, String(permits)])
      .then((reply) => reply === 1, () => false)
  ));
  return votes.filter(Boolean).length >= Math.floor(clients.length / 2) + 1;
}

Deno.test("semaphores reject bad input before any request, leaving nothing written", async () => {
  await using env = await setup("ioredis", 3);
  const redlock = new Redlock(env.clients);
  const calls = () => Promise.all(env.servers.servers.map((s) => scriptCalls(s)));
  const before = await calls();
  for (const permits of [0, -1, 1.5, NaN, Infinity, 1_001]) {
    assert.throws(() => redlock.semaphore("s", { permits }), (e: Error) => {
      assert.ok(e instanceof RangeError, String(e));
      assert.match(e.message, new RegExp(`options\\.permits.*${permits}`));
      return true;
    });
  }
  assert.throws(() => redlock.semaphore("s", { permits: "2" as never }), TypeError);
  assert.throws(() => redlock.semaphore("s", {} as never), /options\.permits/);
  assert.throws(() => redlock.semaphore("s", undefined as never), TypeError);
  assert.throws(() => redlock.semaphore("s", { permits: 2, max: 3 } as never), /options\.max/);
  assert.throws(() => redlock.semaphore("", { permits: 2 }), RangeError);
  assert.throws(() => redlock.semaphore(7 as never, { permits: 2 }), TypeError);
  const sem = redlock.semaphore("s", { permits: 2 });
  for (const duration of [0, -1, 1.5, NaN]) {
    await assert.rejects(sem.acquire(duration), RangeError);
    await assert.rejects(sem.tryAcquire(duration), RangeError);
    await assert.rejects(sem.using(duration, () => {}), RangeError);
  }
  await assert.rejects(sem.acquire(1_000, { fencing: true } as never), /options\.fencing/);
  await assert.rejects(sem.acquire(1_000, { timout: 3 } as never), /options\.timout/);
  await assert.rejects(sem.using(1_000, {}, null as never), /routine/);
  assert.deepEqual(await calls(), before, "no script ran");
  assert.equal(await keysOn(env.servers), 0);
});

Deno.test("a permit's server that answers after the quorum is released only if it took another slot", async () => {
  await using servers = await startServers(3);
  // Server 2's replies come 80 ms late: the first round settles on servers 0 and 1.
  await using proxy = await FaultProxy.start(servers.ports[2]!);
  proxy.delay(80, { direction: Direction.ToClient });
  await using direct = await connect("ioredis", servers.ports[0]!);
  await using second = await connect("ioredis", servers.ports[1]!);
  await using late = await connect("ioredis", proxy.port);
  const redlock = new Redlock([direct.client, second.client, late.client]);
  const slow = servers.servers[2]!;
  const sem = redlock.semaphore("late", { permits: 2 });
  // The servers learn the scripts first (a NOSCRIPT reply and EVAL count as calls).
  await (await redlock.semaphore("warm", { permits: 2 }).acquire(5_000)).release();
  await sleep(300);
  let before = await scriptCalls(slow);
  const same = await sem.acquire(5_000);
  await sleep(300);
  assert.equal(await get(slow, "{late}:sem:0"), same.value, "it took the permit's slot");
  assert.equal(await scriptCalls(slow) - before, 1, "no release sent to it");
  await same.release();
  // Slot 0 held on the late server only: it offers slot 1, which it must give back.
  await hold(slow, "{late}:sem:0", "another", 5_000);
  before = await scriptCalls(slow);
  // A new handle: its first acquire runs the script (sem's would try SET NX of slot 0 first).
  const other = await redlock.semaphore("late", { permits: 2 }).acquire(5_000);
  assert.equal(other.resources[0], "{late}:sem:0");
  await sleep(300);
  assert.equal(await get(slow, "{late}:sem:1"), null, "the other slot released");
  assert.equal(await scriptCalls(slow) - before, 2, "one acquire, one release");
  await other.release();
  await redlock[Symbol.asyncDispose]();
});

Deno.test("a server whose refusal comes after the grant is taken out of its wait queue", async () => {
  await using servers = await startServers(3);
  // Server 2 answers 300 ms late, past the request timeout.
  await using proxy = await FaultProxy.start(servers.ports[2]!);
  await using direct = await connect("ioredis", servers.ports[0]!);
  await using second = await connect("ioredis", servers.ports[1]!);
  await using late = await connect("ioredis", proxy.port);
  await using redlock = new Redlock([direct.client, second.client, late.client], {
    requestTimeout: 100,
    retryDelay: 2_000,
  });
  const slow = servers.servers[2]!;
  // The servers learn the scripts first (a NOSCRIPT round trip would come late too).
  await (await redlock.semaphore("warm", { permits: 2 }).acquire(5_000)).release();
  // Servers 0 and 1 offer different slots; server 2, full, refuses too late to be seen, and queues.
  await hold(servers.servers[0]!, "{late}:sem:0", "another", 10_000);
  await hold(slow, "{late}:sem:0", "another", 10_000);
  await hold(slow, "{late}:sem:1", "another", 10_000);
  proxy.delay(300, { direction: Direction.ToClient });
  const permit = await redlock.semaphore("late", { permits: 2 }).acquire(5_000);
  assert.deepEqual(permit.resources, ["{late}:sem:1"], "granted by servers 0 and 1");
  // The value leaves server 2's queue once its refusals come back, long before it would expire.
  const end = performance.now() + 1_500;
  while (await integer(slow, "ZCARD", "{late}:sem:queue") > 0 && performance.now() < end) {
    await sleep(25);
  }
  assert.equal(await integer(slow, "ZCARD", "{late}:sem:queue"), 0, "out of the queue");
  assert.equal(await integer(slow, "EXISTS", "{late}:sem:wants"), 0, "its count with it");
  await permit.release();
});
