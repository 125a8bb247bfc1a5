/**
 * @x/redlock and node-redlock on the same keys, as in a gradual migration:
 * mutual exclusion holds, and each releases and extends its own locks.
 */

import assert from "node:assert/strict";
import NodeRedlock from "redlock";
import { Redlock } from "../mod.ts";
import { get, integer, onEveryServer, onQuorum, setup, sleep } from "./_redis.ts";

/** node-redlock's lock, as far as these tests use it. */
interface NodeLock {
  readonly value: string;
  extend(duration: number): Promise<NodeLock>;
  release(): Promise<unknown>;
}

interface NodeApi {
  acquire(resources: string[], duration: number): Promise<NodeLock>;
}

function nodeRedlock(clients: unknown[], retryCount: number): NodeApi {
  return new NodeRedlock(clients as never, {
    retryCount,
    retryDelay: 20,
    retryJitter: 10,
  }) as never;
}

Deno.test("node-redlock holds: our waiter queues without touching its key, and gets it after node-redlock extends and releases", async () => {
  await using env = await setup("ioredis", 3);
  await using ours = new Redlock(env.clients, { retryCount: -1, retryDelay: 50 });
  const theirs = nodeRedlock(env.clients, 0);
  const held = await theirs.acquire(["shared"], 2_000);
  const waiting = ours.acquire("shared", 5_000, { timeout: 8_000 });
  let got = false;
  waiting.then(() => (got = true), () => {});
  await sleep(300);
  assert.equal(got, false, "ours waits while node-redlock holds");
  await onEveryServer(env.servers, "shared", held.value);
  const extended = await held.extend(3_000);
  for (const server of env.servers.servers) {
    assert.equal(await get(server, "shared"), held.value, "still exactly node-redlock's value");
    assert.ok(await integer(server, "PTTL", "shared") > 2_500, "extended by node-redlock");
  }
  await sleep(200);
  assert.equal(got, false);
  await extended.release();
  const lock = await waiting;
  await onQuorum(env.servers, "shared", lock.value); // (woken by a release that may not be everywhere yet)
  await lock.release();
  await onEveryServer(env.servers, "shared", null);
});

Deno.test("we hold: node-redlock cannot take the key, and takes it once we extend and release", async () => {
  await using env = await setup("ioredis", 3);
  await using ours = new Redlock(env.clients);
  const theirs = nodeRedlock(env.clients, 2);
  const held = await ours.acquire("shared", 2_000);
  await assert.rejects(theirs.acquire(["shared"], 2_000), (e: Error) => e.name !== "TypeError");
  const extended = await held.extend(3_000);
  await onEveryServer(env.servers, "shared", held.value);
  await assert.rejects(theirs.acquire(["shared"], 2_000), (e: Error) => e.name !== "TypeError");
  await extended.release();
  await onEveryServer(env.servers, "shared", null); // (the release settled on a quorum)
  const lock = await theirs.acquire(["shared"], 2_000);
  await onEveryServer(env.servers, "shared", lock.value);
  await lock.release();
  await onEveryServer(env.servers, "shared", null);
});

Deno.test("workers of both libraries on the same keys never hold at once, and each releases its own", async () => {
  await using env = await setup("ioredis", 3);
  await using ours = new Redlock(env.clients, { retryCount: -1, retryDelay: 20, retryJitter: 10 });
  const theirs = nodeRedlock(env.clients, -1);
  let holders = 0;
  let most = 0;
  const turns = { ours: 0, theirs: 0 };
  const hold = async (extend: () => Promise<unknown>) => {
    most = Math.max(most, ++holders);
    await sleep(3);
    await extend();
    await sleep(3);
    holders--;
  };
  const ourWorker = async () => {
    for (let i = 0; i < 6; i++) {
      const lock = await ours.acquire(["{m}:a", "{m}:b"], 2_000, { timeout: 20_000 });
      let current = lock;
      await hold(async () => (current = await lock.extend(2_000)));
      await current.release();
      turns.ours++;
    }
  };
  const theirWorker = async () => {
    for (let i = 0; i < 6; i++) {
      const lock = await theirs.acquire(["{m}:a", "{m}:b"], 2_000);
      let current = lock;
      await hold(async () => (current = await lock.extend(2_000)));
      await current.release();
      turns.theirs++;
    }
  };
  await Promise.all([ourWorker(), ourWorker(), theirWorker(), theirWorker()]);
  assert.equal(most, 1, "never two holders at once");
  assert.deepEqual(turns, { ours: 12, theirs: 12 });
  for (const key of ["{m}:a", "{m}:b"]) await onEveryServer(env.servers, key, null);
});
