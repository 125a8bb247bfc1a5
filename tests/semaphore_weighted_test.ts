import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { type RedisClient, Redlock } from "../mod.ts";
import {
  connectAll,
  eventually,
  hold,
  integer,
  keysLeft,
  KINDS,
  type RedisServer,
  type RedisServers,
  scriptCalls,
  setup,
  sleep,
  startServers,
} from "./_redis.ts";

/** The slot keys of semaphore `name` with `permits` permits. */
const slots = (name: string, permits: number): string[] =>
  Array.from({ length: permits }, (_, i) => `{${name}}:sem:${i}`);

/** The values the slots of `name` hold on `server`. */
async function slotValues(server: RedisServer, name: string, permits: number) {
  const reply = await server.command("MGET", ...slots(name, permits));
  return reply.split("\r\n").filter((l) => l !== "" && !l.startsWith("*") && !l.startsWith("$"));
}

/**
 * How many values wait in the queue of semaphore `name`, with their
 * counts, on every server together.
 */
async function queued(servers: RedisServers, name: string): Promise<number> {
  let total = 0;
  for (const s of servers.servers) {
    total += await integer(s, "ZCARD", `{${name}}:sem:queue`);
    total += await integer(s, "ZCARD", `{${name}}:sem:wants`);
  }
  return total;
}

for (const kind of KINDS) {
  Deno.test(`[${kind}] acquire({ permits: 3 }) takes three slots on a quorum, all or none`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients);
    const sem = redlock.semaphore("render", { permits: 4 });
    const big = await sem.acquire(5_000, { permits: 3 });
    assert.equal(new Set(big.resources).size, 3);
    for (const key of big.resources) assert.ok(slots("render", 4).includes(key), key);
    for (const server of env.servers.servers) {
      const held = await slotValues(server, "render", 4);
      assert.equal(held.filter((v) => v === big.value).length, 3, `${held}`);
    }
    assert.equal(await sem.tryAcquire(5_000, { permits: 2 }), null, "only one is left");
    const small = await sem.tryAcquire(5_000);
    assert.ok(small !== null, "the last permit");
    assert.equal(await sem.tryAcquire(5_000), null);
    const extended = await big.extend(5_000);
    assert.deepEqual(extended.resources, big.resources);
    await extended.release();
    await small.release();
    assert.deepEqual(await keysLeft(env.servers, ...slots("render", 4)), [0, 0, 0]);
    const all = await sem.using(5_000, { permits: 4 }, (_signal, { lock }) => lock.resources);
    assert.equal(all.length, 4);
  });
}

for (const kind of ["ioredis", "node-redis"] as const) {
  Deno.test(`[${kind}] weighted contenders never hold more than the permits in total`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients, { retryDelay: 10, retryJitter: 20 });
    const sem = redlock.semaphore("pool", { permits: 5 });
    let inUse = 0;
    let most = 0;
    let grants = 0;
    const worker = async (weight: number) => {
      for (let i = 0; i < 4; i++) {
        const permit = await sem.acquire(5_000, {
          permits: weight,
          retryCount: -1,
          timeout: 60_000,
        });
        inUse += weight;
        grants++;
        most = Math.max(most, inUse);
        await sleep(15);
        inUse -= weight;
        await permit.release();
      }
    };
    await Promise.all([1, 2, 3, 1, 2, 3].map(worker));
    assert.equal(grants, 24);
    assert.ok(most <= 5, `${most} permits held at once`);
    assert.ok(most >= 4, `${most}: the permits were shared`);
    assert.deepEqual(await keysLeft(env.servers, ...slots("pool", 5)), [0, 0, 0]);
    assert.equal(await eventually(() => queued(env.servers, "pool"), 0), 0, "nobody queued");
  });
}

Deno.test("a weighted acquire rejects a bad permits option before any request", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const calls = () => Promise.all(env.servers.servers.map((s) => scriptCalls(s)));
  const before = await calls();
  const sem = redlock.semaphore("s", { permits: 4 });
  for (const permits of [0, -1, 1.5, NaN, Infinity, 5]) {
    for (
      const call of [
        () => sem.acquire(1_000, { permits }),
        () => sem.tryAcquire(1_000, { permits }),
        () => sem.using(1_000, { permits }, () => {}),
      ]
    ) {
      await assert.rejects(call(), (e: Error) => {
        assert.ok(e instanceof RangeError, String(e));
        assert.match(e.message, new RegExp(`options\\.permits .*from 1 to 4.*got ${permits}`));
        return true;
      });
    }
  }
  await assert.rejects(sem.acquire(1_000, { permits: "2" as never }), TypeError);
  assert.deepEqual(await calls(), before, "no script ran");
});

/**
 * Three servers, each slot held by another on one server only: every
 * server offers a different pair, and no pair is free on a quorum.
 */
async function scattered(servers: RedisServers, name: string): Promise<void> {
  for (const [i, server] of servers.servers.entries()) {
    await hold(server, `{${name}}:sem:${i}`, "another", 30_000);
  }
}

Deno.test("a weighted acquire that fails, times out or is aborted leaves nothing on any server", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients, { retryDelay: 50, retryJitter: 0 });
  const sem = redlock.semaphore("scatter", { permits: 3 });
  await scattered(env.servers, "scatter");
  const leftover = async () => {
    for (const server of env.servers.servers) {
      const values = await slotValues(server, "scatter", 3);
      assert.deepEqual(values, ["another"], `only the other holder's slot: ${values}`);
    }
    assert.equal(await eventually(() => queued(env.servers, "scatter"), 0), 0, "nobody queued");
  };
  assert.equal(await sem.tryAcquire(10_000, { permits: 2 }), null);
  await leftover();
  await assert.rejects(sem.acquire(10_000, { permits: 2, retryCount: 3 }));
  await leftover();
  await assert.rejects(
    sem.acquire(10_000, { permits: 2, retryCount: -1, timeout: 400 }),
    (e: Error) => e.name === "TimeoutError",
  );
  await leftover();
  const controller = new AbortController();
  const aborted = sem.acquire(10_000, { permits: 2, retryCount: -1, signal: controller.signal });
  await sleep(250);
  assert.ok(await queued(env.servers, "scatter") > 0, "queued while it waits");
  controller.abort(new Error("stop"));
  await assert.rejects(aborted, /stop/);
  await leftover();
  // one permit is free on a quorum (slot 2 on servers 0 and 1)
  const one = await sem.acquire(10_000);
  assert.equal(one.resources.length, 1);
  await one.release();
});

Deno.test("a waiter for many permits is served before later waiters for few", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients, { retryDelay: 30, retryJitter: 10 });
  const sem = redlock.semaphore("fair", { permits: 4 });
  const holder = await sem.acquire(10_000, { permits: 3 });
  const order: string[] = [];
  let lightsIn = 0;
  let mostLightsBeforeHeavy = 0;
  const heavy = sem.acquire(10_000, { permits: 3, retryCount: -1, timeout: 10_000 })
    .then((lock) => (order.push("heavy"), lock));
  assert.equal(await eventually(() => queued(env.servers, "fair"), 6), 6, "the heavy one queued");
  // one permit is free, but the heavy waiter came first: later acquires of one wait
  assert.equal(await sem.tryAcquire(10_000), null, "a try behind the queue");
  const lights = [0, 1, 2].map(() =>
    sem.acquire(200, { retryCount: -1, timeout: 10_000 })
      .then(async (lock) => {
        order.push("light");
        lightsIn++;
        if (!order.includes("heavy")) {
          mostLightsBeforeHeavy = Math.max(mostLightsBeforeHeavy, lightsIn);
        }
        await sleep(50);
        lightsIn--;
        await lock.release();
      })
  );
  await sleep(600);
  assert.deepEqual(order, [], "no light waiter overtook the heavy one");
  await holder.release();
  const granted = await heavy;
  await Promise.all(lights);
  // Of the 4 slots freed, the heavy waiter's 3 are kept for it: until it holds them, lights
  // may pass it only through the one slot left, so never two light permits at once.
  assert.ok(mostLightsBeforeHeavy <= 1, `${mostLightsBeforeHeavy} light permits before the heavy`);
  assert.equal(order.length, 4);
  await granted.release();
});

Deno.test("split view: weighted holders on different majorities never exceed the permits", async () => {
  await using servers = await startServers(3);
  const real = await connectAll("ioredis", servers);
  const nowhere = [0, 1, 2].map(() => cutOff());
  try {
    // A misses server 2, B server 0, C server 1: each reaches another majority.
    const view = (missing: number): RedisClient[] =>
      real.clients.map((client, i) => i === missing ? nowhere[missing]!.client : client);
    const take = async (missing: number, permits: number) => {
      await using redlock = new Redlock(view(missing), { requestTimeout: 300, retryCount: 0 });
      const sem = redlock.semaphore("split", { permits: 4 });
      return await sem.tryAcquire(30_000, { permits });
    };
    const a = await take(2, 2);
    const b = await take(0, 2);
    assert.ok(a !== null && b !== null, "4 permits for two holders of 2");
    assert.equal(new Set([...a.resources, ...b.resources]).size, 4, "four distinct slots");
    // every server sees at most... server 1 sees all four; servers 0 and 2 see two each
    assert.equal(await take(1, 1), null, "a fifth permit for C");
    assert.equal(await take(1, 2), null);
    // in total: each slot is held on a quorum by one holder only
    for (const key of slots("split", 4)) {
      const holders = new Map<string, number>();
      for (const s of servers.servers) {
        const value = (await s.command("GET", key)).split("\r\n")[1];
        if (value !== undefined && value !== "") holders.set(value, (holders.get(value) ?? 0) + 1);
      }
      const onQuorum = [...holders.values()].filter((n) => n >= 2);
      assert.ok(onQuorum.length <= 1, `${key}: ${[...holders]}`);
    }
  } finally {
    for (const n of nowhere) n.close();
    await real[Symbol.asyncDispose]();
  }
});

/** An ioredis client for an address where nothing listens: every request fails at once. */
function cutOff(): { client: RedisClient; close(): void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
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

Deno.test("acquire() of every permit with one server refusing sends no empty RELEASE and no error event", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients, { retryCount: 0 });
  const errors: unknown[] = [];
  redlock.on("error", (event) => errors.push(event));
  const sem = redlock.semaphore("all", { permits: 2 });
  await hold(env.servers.servers[2]!, "{all}:sem:0", "someone-else", 5_000);
  const permit = await sem.acquire(5_000, { permits: 2 });
  assert.equal(new Set(permit.resources).size, 2);
  await sleep(200);
  assert.deepEqual(errors, [], "no server was sent a RELEASE without keys");
  await permit.release();
  assert.deepEqual(errors, []);
});
