import assert from "node:assert/strict";
import { Cluster } from "ioredis";
import { createCluster } from "redis";
import { type RedisClient, Redlock } from "../mod.ts";
import { get, scriptCalls, startServers } from "./_redis.ts";
import type { RedisServers } from "./_redis.ts";

const KINDS = ["ioredis", "node-redis"] as const;

async function connectCluster(
  kind: typeof KINDS[number],
  servers: RedisServers,
): Promise<{ client: RedisClient; close: () => Promise<void> }> {
  const port = servers.servers[0]!.port;
  if (kind === "ioredis") {
    const client = new Cluster([{ host: "127.0.0.1", port }], {
      clusterRetryStrategy: () => 100,
    });
    client.on("error", () => {});
    await new Promise<void>((resolve, reject) => {
      client.once("ready", () => resolve());
      client.once("error", reject);
    });
    return {
      client,
      close: async () => {
        await client.quit();
      },
    };
  }
  const client = createCluster({ rootNodes: [{ url: `redis://127.0.0.1:${port}` }] });
  client.on("error", () => {});
  await client.connect();
  return {
    client,
    close: async () => {
      client.destroy();
      await new Promise((r) => setTimeout(r, 0));
    },
  };
}

/** Where a key lives in a cluster: the server that owns its slot. */
async function owner(servers: RedisServers, key: string) {
  for (const server of servers.servers) {
    if ((await get(server, key).catch(() => null)) !== null) return server;
  }
  return undefined;
}

for (const kind of KINDS) {
  Deno.test(`[${kind}] a Redlock over one cluster locks hash-tagged resources together`, async () => {
    await using servers = await startServers(3, { cluster: true });
    const { client, close } = await connectCluster(kind, servers);
    try {
      const redlock = new Redlock([client]);
      const lock = await redlock.acquire(["{game42}:board", "{game42}:turn"], 5_000);
      const server = await owner(servers, "{game42}:board");
      assert.ok(server, "the keys were written");
      assert.equal(await get(server, "{game42}:turn"), lock.value);
      assert.equal(await redlock.isLocked("{game42}:turn"), true);
      assert.equal(await redlock.tryAcquire("{game42}:board", 1_000), null);
      const extended = await lock.extend(10_000);
      assert.ok(extended.remainingTime > 9_000);
      await extended.release();
      assert.equal(await get(server, "{game42}:board"), null);
      assert.equal(await redlock.isLocked("{game42}:board"), false);
    } finally {
      await close();
    }
  });

  Deno.test(
    `[${kind}] resources in different cluster slots fail with a TypeError about hash tags`,
    async () => {
      await using servers = await startServers(3, { cluster: true });
      const { client, close } = await connectCluster(kind, servers);
      try {
        const redlock = new Redlock([client]);
        const before = await Promise.all(servers.servers.map(scriptCalls));
        await assert.rejects(redlock.acquire(["board", "turn"], 5_000), (error: Error) => {
          assert.ok(error instanceof TypeError);
          assert.match(error.message, /hash tag/);
          assert.doesNotMatch(error.message, /CROSSSLOT/);
          return true;
        });
        assert.deepEqual(await Promise.all(servers.servers.map(scriptCalls)), before);
      } finally {
        await close();
      }
    },
  );

  Deno.test(`[${kind}] a Redlock over two independent clusters takes a quorum of both`, async () => {
    await using first = await startServers(3, { cluster: true });
    await using second = await startServers(3, { cluster: true });
    const a = await connectCluster(kind, first);
    const b = await connectCluster(kind, second);
    try {
      const redlock = new Redlock([a.client, b.client]);
      assert.equal(redlock.quorum, 2);
      const lock = await redlock.acquire("{user7}:profile", 5_000);
      assert.deepEqual([...lock.attempts[0]!.votesFor].sort(), [0, 1]);
      assert.equal(
        await get((await owner(first, "{user7}:profile"))!, "{user7}:profile"),
        lock.value,
      );
      assert.equal(
        await get((await owner(second, "{user7}:profile"))!, "{user7}:profile"),
        lock.value,
      );
      await lock.release();
      assert.equal(await owner(first, "{user7}:profile"), undefined);
      assert.equal(await owner(second, "{user7}:profile"), undefined);
    } finally {
      await a.close();
      await b.close();
    }
  });
}

for (const kind of KINDS) {
  Deno.test(
    `[${kind}] read-write locks and semaphores work over a cluster, names with or without a hash tag`,
    async () => {
      await using servers = await startServers(3, { cluster: true });
      const { client, close } = await connectCluster(kind, servers);
      try {
        const redlock = new Redlock([client]);
        for (const name of ["doc:42", "{game42}:doc"]) {
          const rw = redlock.readWriteLock(name);
          const r = await rw.read(5_000);
          assert.equal(await rw.tryWrite(5_000), null);
          await r.release();
          const w = await (await rw.write(5_000)).extend(5_000);
          assert.equal(await rw.tryRead(5_000), null);
          await w.release();
          const sem = redlock.semaphore(name, { permits: 2 });
          const a = await sem.acquire(5_000);
          const b = await sem.acquire(5_000);
          assert.equal(await sem.tryAcquire(5_000), null);
          await a.release();
          await b.release();
        }
      } finally {
        await close();
      }
    },
  );
}
