import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { LINGER_MS } from "../src/wait/waiters.ts";
import {
  eventually,
  get,
  integer,
  onEveryServer,
  type RedisServer,
  setup,
  sleep,
} from "./_redis.ts";

const KINDS = ["ioredis", "node-redis"] as const;

/** How many lock channels (release or wake) a server has subscribers for. */
async function channels(server: RedisServer): Promise<number> {
  const reply = await server.command("PUBSUB", "CHANNELS", "redlock:*");
  return reply.split("\r\n").filter((line) => line.startsWith("redlock:")).length;
}

async function connections(server: RedisServer): Promise<number> {
  return (await clientIds(server)).length;
}

/** The ids of the server's client connections, but for the one that asks. */
async function clientIds(server: RedisServer): Promise<string[]> {
  const list = await server.command("CLIENT", "LIST");
  return list.split("\n").flatMap((line) =>
    line.includes(" cmd=client|list ") ? [] : line.match(/^id=(\d+) /)?.[1] ?? []
  );
}

for (const kind of KINDS) {
  Deno.test(`[${kind}] a waiting acquire wakes on the holder's release, not its TTL`, async () => {
    await using env = await setup(kind, 3);
    await using holder = new Redlock(env.clients);
    await using waiter = new Redlock(env.clients, { retryDelay: 5_000, retryJitter: 0 });
    const held = await holder.acquire("door", 10_000);
    let releasedAt = 0;
    const waiting = waiter.acquire("door", 5_000, { timeout: 8_000 });
    await sleep(300);
    releasedAt = performance.now();
    await held.release();
    const lock = await waiting;
    const woke = performance.now() - releasedAt;
    assert.ok(woke < 500, `took ${woke} ms after the release (TTL was ~9.7 s)`);
    // the first, the retry after subscribing, and the one the release woke (plus at most one
    // woken before every server had released)
    assert.ok(lock.attempts.length <= 4, `${lock.attempts.length} attempts`);
    await lock.release();
  });

  Deno.test(
    `[${kind}] a waiting acquire of several resources wakes on the release of the one held`,
    async () => {
      await using env = await setup(kind, 3);
      await using holder = new Redlock(env.clients);
      await using waiter = new Redlock(env.clients, { retryDelay: 5_000, retryJitter: 0 });
      const held = await holder.acquire("{room}:b", 10_000);
      const waiting = waiter.acquire(["{room}:a", "{room}:b"], 5_000, { timeout: 8_000 });
      await sleep(300);
      // the waiter left its marker in the held key's queue, and none in the free one's
      for (const server of env.servers.servers) {
        const marker = await server.command("ZRANGE", "{room}:b:waiters", "0", "-1");
        assert.match(marker, /\r\n\*\r\n/, "marker in the queue of the held key");
        assert.equal(await integer(server, "EXISTS", "{room}:a:waiters"), 0);
      }
      const releasedAt = performance.now();
      await held.release();
      const lock = await waiting;
      const woke = performance.now() - releasedAt;
      assert.ok(woke < 500, `took ${woke} ms after the release (TTL was ~9.7 s)`);
      // the release took the marker; the next one finds no queue and only deletes
      for (const server of env.servers.servers) {
        assert.equal(await eventually(() => integer(server, "EXISTS", "{room}:b:waiters"), 0), 0);
      }
      // (a quorum: where the release's script was not loaded yet, its EVAL
      // fallback may come after the woken attempt)
      const holding = await Promise.all(env.servers.servers.map((s) => get(s, "{room}:b")));
      assert.ok(holding.filter((v) => v === lock.value).length >= 2, `${holding}`);
      await lock.release();
      await onEveryServer(env.servers, "{room}:a", null);
      await onEveryServer(env.servers, "{room}:b", null);
    },
  );

  Deno.test(
    `[${kind}] waiting acquires share one subscriber connection per server and close it after`,
    async () => {
      await using env = await setup(kind, 3);
      const before = await Promise.all(env.servers.servers.map(connections));
      await using holder = new Redlock(env.clients, { wait: "poll" });
      await using redlock = new Redlock(env.clients, { retryCount: -1 });
      const held = await holder.acquire("queue", 10_000);
      const waiting = Array.from(
        { length: 10 },
        () => redlock.acquire("queue", 5_000, { timeout: 20_000 }).then((lock) => lock.release()),
      );
      await sleep(300);
      for (const server of env.servers.servers) {
        assert.equal(await channels(server), 1, "the Redlock's one wake channel");
        assert.equal(await connections(server), before[0]! + 1, "one subscriber connection");
      }
      await held.release();
      await Promise.all(waiting);
      // kept a little for the next wait, then closed
      for (const [i, server] of env.servers.servers.entries()) {
        assert.equal(await eventually(() => channels(server), 0), 0);
        assert.equal(await eventually(() => connections(server), before[i]!), before[i]!);
      }
    },
  );

  Deno.test(`[${kind}] a lost release message only costs the fallback wait`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients);
    const held = await redlock.acquire("quiet", 700);
    const start = performance.now();
    const waiting = redlock.acquire("quiet", 5_000, { timeout: 5_000 });
    await sleep(100);
    // the holder's keys vanish without a release message
    for (const server of env.servers.servers) await server.command("DEL", "quiet");
    const lock = await waiting;
    const elapsed = performance.now() - start;
    // no message came: it tried again after its fallback sleep, which its two failed attempts
    // (the first, and the one that queued) earned: at least 2 × retryDelay
    assert.ok(elapsed >= 380 && elapsed < 2_000, `${elapsed} ms: woken by its fallback`);
    assert.notEqual(lock.value, held.value);
    await lock.release();
  });

  Deno.test(`[${kind}] a waiter never takes a lock the holder still has`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients, { retryCount: -1 });
    let holders = 0;
    let max = 0;
    let count = 0;
    const worker = async () => {
      for (let i = 0; i < 8; i++) {
        const lock = await redlock.acquire("turns", 2_000, { timeout: 20_000 });
        max = Math.max(max, ++holders);
        const value = count;
        await sleep(1);
        count = value + 1;
        holders--;
        await lock.release();
      }
    };
    await Promise.all(Array.from({ length: 6 }, worker));
    assert.equal(max, 1);
    assert.equal(count, 48);
    assert.equal(await get(env.servers.servers[0]!, "turns"), null);
  });

  Deno.test(`[${kind}] Symbol.asyncDispose closes the subscriber connections`, async () => {
    await using env = await setup(kind, 1);
    const server = env.servers.servers[0]!;
    const before = await connections(server);
    const redlock = new Redlock(env.clients, { retryCount: -1 });
    const held = await redlock.acquire("disposed", 10_000);
    const controller = new AbortController();
    const waiting = redlock.acquire("disposed", 1_000, { signal: controller.signal });
    await sleep(200);
    assert.equal(await channels(server), 1);
    controller.abort(new Error("enough"));
    await assert.rejects(waiting, /enough/);
    const disposing = performance.now();
    await redlock[Symbol.asyncDispose]();
    assert.ok(performance.now() - disposing < LINGER_MS, "closed at once, not after lingering");
    for (let i = 0; i < 50 && (await connections(server)) > before; i++) await sleep(10);
    assert.equal(await connections(server), before);
    assert.equal(await channels(server), 0);
    assert.equal(await integer(server, "PUBSUB", "NUMPAT"), 0);
    await held.release();
  });

  Deno.test(
    `[${kind}] the subscriber connection outlives a wait by LINGER_MS, serves the next, then closes`,
    async () => {
      await using env = await setup(kind, 1);
      const server = env.servers.servers[0]!;
      const before = await clientIds(server);
      await using holder = new Redlock(env.clients);
      await using waiter = new Redlock(env.clients, { retryCount: -1 });
      const wait = async (resource: string, ms: number) => {
        const held = await holder.acquire(resource, 10_000);
        const waiting = waiter.acquire(resource, 1_000);
        await sleep(ms);
        await held.release();
        await (await waiting).release();
      };
      await wait("linger:a", 50);
      const opened = (await clientIds(server)).filter((id) => !before.includes(id));
      assert.equal(opened.length, 1, `connections opened by the wait: ${opened}`);
      // the next wait starts within LINGER_MS and lasts longer than that: the same connection
      // serves it, and is not closed under it
      await wait("linger:b", LINGER_MS + 100);
      const kept = (await clientIds(server)).filter((id) => !before.includes(id));
      assert.deepEqual(kept, opened);
      const closed = await eventually(async () => (await clientIds(server)).length, before.length);
      assert.equal(closed, before.length, "the subscriber connection was not closed");
    },
  );

  Deno.test(`[${kind}] a subscriber factory that returns null makes acquire poll`, async () => {
    await using env = await setup(kind, 1);
    const server = env.servers.servers[0]!;
    let asked = 0;
    await using redlock = new Redlock(env.clients, {
      retryCount: -1,
      retryDelay: 20,
      subscriber: () => (asked++, null),
    });
    await server.command("SET", "polled", "other", "PX", "300");
    const lock = await redlock.acquire("polled", 1_000, { timeout: 3_000 });
    assert.equal(asked, 1);
    assert.ok(lock.attempts.length > 3, `${lock.attempts.length} attempts: it polled`);
    await lock.release();
  });
}
