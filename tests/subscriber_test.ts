import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { Redlock, type RedlockErrorEvent } from "../mod.ts";
import { sleep, startServers } from "./_redis.ts";

/** ioredis clients as the README and the demo make them: no offline queue. */
async function offlineQueueOff(ports: number[]): Promise<Redis[]> {
  const clients = ports.map((port) =>
    new Redis({ host: "127.0.0.1", port, enableOfflineQueue: false, retryStrategy: () => 50 })
  );
  for (const client of clients) client.on("error", () => {});
  await Promise.all(clients.map((c) => new Promise((resolve) => c.once("ready", resolve))));
  return clients;
}

/**
 * `holder` takes `resource`, `waiter` asks for it, and `holder` releases it
 * `ms` later; resolves to how long after that release the waiter got it.
 */
async function handOver(holder: Redlock, waiter: Redlock, resource: string, ms: number) {
  const held = await holder.acquire(resource, 10_000);
  const waiting = waiter.acquire(resource, 5_000, { timeout: 8_000 });
  await sleep(ms);
  const releasedAt = performance.now();
  await held.release();
  const lock = await waiting;
  const woke = performance.now() - releasedAt;
  await lock.release();
  return woke;
}

Deno.test("[ioredis] enableOfflineQueue: false still wakes waiters by notification, without errors", async () => {
  await using servers = await startServers(3);
  const clients = await offlineQueueOff(servers.ports);
  const errors: string[] = [];
  try {
    await using holder = new Redlock(clients);
    await using waiter = new Redlock(clients, { retryDelay: 2_000, retryJitter: 0 });
    waiter.addEventListener("error", (e) => errors.push((e as RedlockErrorEvent).error.message));
    for (let round = 0; round < 3; round++) {
      const woke = await handOver(holder, waiter, "door", 150);
      // polling would take the retryDelay of 2 s
      assert.ok(woke < 500, `round ${round}: woke ${woke.toFixed(0)} ms after the release`);
    }
    assert.deepEqual(errors, []);
  } finally {
    for (const client of clients) client.disconnect();
  }
});

Deno.test("a subscriber that cannot subscribe makes one error event per server, not one per wait", async () => {
  await using servers = await startServers(3);
  const clients = await offlineQueueOff(servers.ports);
  const errors: RedlockErrorEvent[] = [];
  try {
    await using holder = new Redlock(clients);
    await using waiter = new Redlock(clients, {
      retryDelay: 30,
      retryJitter: 0,
      subscriber: () => ({
        subscribe: () => Promise.reject(new Error("NOPERM no permissions to SUBSCRIBE")),
        unsubscribe: () => Promise.resolve(),
        close: () => Promise.resolve(),
      }),
    });
    waiter.addEventListener("error", (e) => errors.push(e as RedlockErrorEvent));
    for (let round = 0; round < 4; round++) {
      await handOver(holder, waiter, `door:${round}`, 80);
    }
    assert.deepEqual(errors.map((e) => e.server).sort(), [0, 1, 2]);
    for (const { error } of errors) {
      assert.match(error.message, /release notifications from server \d are off, waits poll it/);
      assert.match(error.message, /NOPERM/);
    }
  } finally {
    for (const client of clients) client.disconnect();
  }
});

Deno.test("a subscriber factory that throws is reported once per server and the waits poll", async () => {
  await using servers = await startServers(3);
  const clients = await offlineQueueOff(servers.ports);
  const errors: RedlockErrorEvent[] = [];
  let made = 0;
  try {
    await using holder = new Redlock(clients);
    await using waiter = new Redlock(clients, {
      retryDelay: 30,
      retryJitter: 0,
      subscriber: () => {
        made++;
        throw new Error("cannot connect");
      },
    });
    waiter.addEventListener("error", (e) => errors.push(e as RedlockErrorEvent));
    for (let round = 0; round < 3; round++) {
      await handOver(holder, waiter, "gate", 80);
      await sleep(150); // past the linger: the next wait opens connections again
    }
    assert.ok(made >= 6, `the factory was asked ${made} times`);
    assert.equal(errors.length, 3, errors.map((e) => e.error.message).join("\n"));
  } finally {
    for (const client of clients) client.disconnect();
  }
});
