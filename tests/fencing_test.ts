import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { get, KINDS, type RedisServer, setup, sleep, startServers } from "./_redis.ts";

/** A store that accepts a write only with a token at least as new as the last one. */
const FENCED_WRITE = `local last = tonumber(redis.call("HGET", KEYS[1], "token") or "0")
if tonumber(ARGV[1]) < last then return 0 end
redis.call("HSET", KEYS[1], "token", ARGV[1], "value", ARGV[2])
return 1`;

async function fencedWrite(store: RedisServer, token: number, value: string): Promise<boolean> {
  const reply = await store.command("EVAL", FENCED_WRITE, "1", "store", String(token), value);
  return reply.startsWith(":1");
}

for (const kind of KINDS) {
  Deno.test(`[${kind}] fencing tokens count up with each acquisition on one server`, async () => {
    await using env = await setup(kind, 1);
    await using redlock = new Redlock(env.clients);
    const tokens: (number | undefined)[] = [];
    for (let i = 0; i < 5; i++) {
      const lock = await redlock.acquire(["{t}:a", "{t}:b"], 1_000, { fencing: true });
      tokens.push(lock.fencingToken);
      await lock.release();
    }
    assert.deepEqual(tokens, [1, 2, 3, 4, 5]);
    const plain = await redlock.acquire("{t}:a", 1_000);
    assert.equal(plain.fencingToken, undefined);
    await plain.release();
    // a lock on one of the resources still sees the counter of the pair
    const single = await redlock.tryAcquire("{t}:b", 1_000, { fencing: true });
    assert.equal(single?.fencingToken, 6);
    await single?.release();
    // each resource has its own counter; only the locked ones move
    assert.equal(await get(env.servers.servers[0]!, "{t}:b:fence"), "6");
    assert.equal(await get(env.servers.servers[0]!, "{t}:a:fence"), "5");
  });

  for (const count of [3, 5]) {
    Deno.test(
      `[${kind}] fencing tokens strictly increase across contended workers on ${count} servers while a minority restarts`,
      async () => {
        await using env = await setup(kind, count);
        await using redlock = new Redlock(env.clients, {
          retryCount: -1,
          retryDelay: 5,
          retryJitter: 5,
          requestTimeout: 1_000,
          wait: "poll",
        });
        const granted: number[] = [];
        let stop = false;
        const worker = async () => {
          while (!stop) {
            const lock = await redlock.acquire("ledger", 2_000, { fencing: true, timeout: 20_000 });
            granted.push(lock.fencingToken!); // in grant order: the lock is exclusive
            await sleep(1);
            await lock.release();
          }
        };
        // Held at once: a worker that fails fails the test, not the file (an unheld rejection).
        let failure: unknown;
        const workers = Promise.all(Array.from({ length: 6 }, worker)).catch((error) => {
          failure ??= error;
          stop = true;
        });
        const minority = env.servers.servers.slice(0, Math.floor((count - 1) / 2));
        await sleep(300);
        for (const server of minority) await server.kill();
        await sleep(300);
        for (const server of minority) await server.start(); // empty: no persistence
        // Grants go on after the restart: at least 10 more, within 10 s however loaded the machine.
        const restarted = granted.length;
        const end = performance.now() + 10_000;
        await sleep(400);
        while (
          granted.length < restarted + 10 && failure === undefined && performance.now() < end
        ) {
          await sleep(50);
        }
        stop = true;
        await workers;
        if (failure !== undefined) throw failure;
        assert.ok(
          granted.length >= restarted + 10,
          `${granted.length} grants, ${restarted} before`,
        );
        for (let i = 1; i < granted.length; i++) {
          assert.ok(
            granted[i]! > granted[i - 1]!,
            `grant ${i}: token ${granted[i]} after ${granted[i - 1]}`,
          );
        }
      },
    );
  }

  Deno.test(`[${kind}] a paused holder's stale write is rejected by the fenced store`, async () => {
    await using env = await setup(kind, 3);
    await using storeServers = await startServers(1);
    const store = storeServers.servers[0]!;
    await using redlock = new Redlock(env.clients, { retryCount: -1, retryDelay: 20 });
    const paused = await redlock.acquire("doc", 300, { fencing: true });
    await sleep(400); // the holder "pauses" past its lease (GC, SIGSTOP, …)
    const next = await redlock.acquire("doc", 5_000, { fencing: true, timeout: 5_000 });
    assert.ok(next.fencingToken! > paused.fencingToken!);
    assert.equal(await fencedWrite(store, next.fencingToken!, "new"), true);
    assert.equal(await fencedWrite(store, paused.fencingToken!, "stale"), false);
    assert.equal((await store.command("HGET", "store", "value")).split("\r\n")[1], "new");
    await next.release();
  });

  Deno.test(`[${kind}] using() and extend() keep the lock's fencing token`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients, { automaticExtensionThreshold: 200 });
    const first = await redlock.acquire("kept", 1_000, { fencing: true });
    const extended = await first.extend(1_000);
    assert.equal(extended.fencingToken, first.fencingToken);
    await extended.release();
    const tokens = await redlock.using("kept", 400, { fencing: true }, async (_signal, context) => {
      const before = context.lock.fencingToken;
      await sleep(500);
      assert.ok(context.extensions >= 1);
      return [before, context.lock.fencingToken];
    });
    assert.equal(tokens[0], first.fencingToken! + 1);
    assert.equal(tokens[1], tokens[0]);
  });
}

Deno.test("fencing counters of hash-tagged resources stay in the resources' cluster slot", async () => {
  await using servers = await startServers(3, { cluster: true });
  const { Cluster } = await import("ioredis");
  const client = new Cluster([{ host: "127.0.0.1", port: servers.servers[0]!.port }]);
  client.on("error", () => {});
  try {
    await new Promise<void>((resolve) => client.once("ready", () => resolve()));
    await using redlock = new Redlock([client]);
    const a = await redlock.acquire(["{game42}:board", "{game42}:turn"], 2_000, { fencing: true });
    await a.release();
    const b = await redlock.acquire("plain-key", 2_000, { fencing: true });
    await b.release();
    const c = await redlock.acquire("plain-key", 2_000, { fencing: true });
    assert.equal(a.fencingToken, 1);
    assert.equal(c.fencingToken, b.fencingToken! + 1);
    await c.release();
  } finally {
    await client.quit();
  }
});
