import assert from "node:assert/strict";
import { inspect as nodeInspect } from "node:util";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { Redis as Upstash } from "@upstash/redis";
import { ExecutionError, type RedisClient, Redlock, type RedlockErrorEvent } from "../mod.ts";
import { KINDS, type RedisServers, setup, startServers } from "./_redis.ts";
import { UpstashRest } from "./_upstash_rest.ts";

const PASSWORD = "s3cret-Pa55word";

/** Every way a logger may print `value`. */
function printed(value: unknown): string[] {
  return [
    JSON.stringify(value) ?? "",
    String(value),
    Deno.inspect(value, { depth: 10, getters: false }),
    nodeInspect(value, { depth: 10 }),
  ];
}

Deno.test("a Lock, a Redlock and their events print no client password and no lock value", async () => {
  await using servers = await startServers(3);
  for (const server of servers.servers) {
    await server.command("CONFIG", "SET", "requirepass", PASSWORD);
  }
  const io = new Redis({ host: "127.0.0.1", port: servers.servers[0]!.port, password: PASSWORD });
  const nodeRedis = await createClient({
    url: `redis://default:${PASSWORD}@127.0.0.1:${servers.servers[1]!.port}`,
  }).connect();
  const io2 = new Redis({ host: "127.0.0.1", port: servers.servers[2]!.port, password: PASSWORD });
  try {
    await using redlock = new Redlock([io, nodeRedis, io2]);
    const events: RedlockErrorEvent[] = [];
    redlock.addEventListener("error", (e) => events.push(e as RedlockErrorEvent));
    const lock = await redlock.acquire("logged", 5_000, { fencing: true });
    // a per-server error event (it carries that server's client)
    await servers.servers[2]!.pause();
    await redlock.remainingTtl(lock, { requestTimeout: 50 });
    await servers.servers[2]!.resume();
    redlock.reportError(new Error("for the event"));
    assert.ok(events.length >= 2, `${events.length} events`);
    assert.ok(events.some((e) => e.client === io2), "an event of server 2");
    for (const object of [lock, redlock, ...events]) {
      for (const text of printed(object)) {
        assert.ok(!text.includes(PASSWORD), `a password in ${text.slice(0, 200)}`);
        assert.ok(!text.includes(lock.value), `the lock's value in ${text.slice(0, 200)}`);
      }
    }
    // what a lock does show
    const summary = JSON.parse(JSON.stringify(lock));
    assert.deepEqual(summary.resources, ["logged"]);
    assert.equal(Date.parse(summary.expiration), Math.trunc(lock.expiration));
    assert.equal(summary.fencingToken, lock.fencingToken);
    assert.ok(summary.remainingTime > 4_000 && summary.remainingTime <= 5_000);
    assert.match(String(lock), /^Lock\(\["logged"\] until \d{4}-.*Z, token 1\)$/);
    assert.match(Deno.inspect(lock), /resources.*logged/s);
    assert.deepEqual(JSON.parse(JSON.stringify(redlock)).servers, 3);
    assert.equal(String(redlock), "Redlock(3 servers, quorum 2)");
    await lock.release();
  } finally {
    io.disconnect();
    io2.disconnect();
    nodeRedis.destroy();
  }
});

/** A lock's value as the Redlock makes it: its id (a UUID) first. */
const VALUE = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

/**
 * Error replies on some servers (a hash where a lock key should be) while
 * a lock is extended and released, and an acquire that fails on them: the
 * events, the release's stats and the ExecutionError print no lock value.
 */
async function errorRepliesHideValues(servers: RedisServers, clients: RedisClient[]) {
  await using redlock = new Redlock(clients, { retryCount: 0 });
  const events: RedlockErrorEvent[] = [];
  redlock.addEventListener("error", (e) => events.push(e as RedlockErrorEvent));
  const [s0, s1] = servers.servers;
  const lock = await redlock.acquire("leak", 5_000);
  await s1!.command("DEL", "leak");
  await s1!.command("HSET", "leak", "f", "v");
  const extended = await lock.extend(5_000);
  const released = await redlock.release(extended);
  // two resources: the acquire script runs, and its GET meets the hash
  for (const server of [s0!, s1!]) await server.command("HSET", "{leak}:a", "f", "v");
  const failed = await redlock.acquire(["{leak}:a", "{leak}:b"], 5_000).catch((error) => error);
  assert.ok(failed instanceof ExecutionError, `${failed}`);
  assert.ok(events.length >= 4, `${events.length} error events`);
  assert.ok(events.every((e) => /WRONGTYPE/.test(e.error.message)), events[0]?.error.message);
  for (const object of [...events, ...events.map((e) => e.error), released, failed]) {
    for (const text of printed(object)) {
      assert.ok(!text.includes(lock.value), `the lock's value in ${text.slice(0, 300)}`);
      assert.doesNotMatch(text, VALUE, "a lock value");
    }
  }
}

for (const kind of KINDS) {
  Deno.test(`[${kind}] a server's error reply in an event, a release or an error shows no lock value`, async () => {
    await using env = await setup(kind, 3);
    await errorRepliesHideValues(env.servers, env.clients);
  });
}

Deno.test("[upstash] a server's error reply in an event, a release or an error shows no lock value", async () => {
  await using servers = await startServers(3);
  const translators = await Promise.all(servers.ports.map((port) => UpstashRest.start(port)));
  try {
    const clients = translators.map((t) =>
      // Without auto-pipelining a failed command's message ends "command was: [...]".
      new Upstash({
        url: t.url,
        token: t.token,
        enableTelemetry: false,
        retry: false,
        enableAutoPipelining: false,
      })
    );
    await errorRepliesHideValues(servers, clients);
  } finally {
    await Promise.all(translators.map((t) => t[Symbol.asyncDispose]()));
  }
});
