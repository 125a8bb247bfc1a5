import assert from "node:assert/strict";
import { Redis } from "@upstash/redis";
import { ExecutionError, Redlock, type RedlockErrorEvent } from "../mod.ts";
import { commandCalls, keysLeft, type RedisServers, sleep, startServers } from "./_redis.ts";
import { UpstashRest } from "./_upstash_rest.ts";

/** Upstash clients (over HTTP to loopback translators) for every server of a group. */
async function upstash(servers: RedisServers, options: { enableAutoPipelining?: boolean } = {}) {
  const translators = await Promise.all(servers.ports.map((port) => UpstashRest.start(port)));
  const clients = translators.map((t) =>
    new Redis({ url: t.url, token: t.token, enableTelemetry: false, retry: false, ...options })
  );
  return {
    translators,
    clients,
    [Symbol.asyncDispose]: async () => {
      await Promise.all(translators.map((t) => t[Symbol.asyncDispose]()));
    },
  };
}

const MODES = [
  ["auto-pipelined (default)", {}],
  ["enableAutoPipelining: false", { enableAutoPipelining: false }],
] as const;

for (const [mode, options] of MODES) {
  Deno.test(`[upstash, ${mode}] acquire, extend, fencing, introspection and release on fresh servers`, async () => {
    await using servers = await startServers(3);
    await using env = await upstash(servers, options);
    const errors: string[] = [];
    await using redlock = new Redlock(env.clients, { requestTimeout: 1_000 });
    redlock.addEventListener("error", (e) => errors.push((e as RedlockErrorEvent).error.message));
    // fresh servers: the first EVALSHA meets NOSCRIPT and the adapter runs EVAL
    const lock = await redlock.acquire("u:door", 2_000, { fencing: true });
    assert.equal(typeof lock.fencingToken, "number");
    assert.equal(await redlock.isLocked("u:door"), true);
    assert.equal(await redlock.isValid(lock), true);
    const ttl = await redlock.remainingTtl(lock);
    assert.ok(ttl !== null && ttl > 1_000 && ttl <= 2_000, `remaining TTL ${ttl}`);
    assert.equal(await redlock.tryAcquire("u:door", 1_000), null, "held");
    const extended = await lock.extend(5_000);
    assert.ok(extended.remainingTime > 4_000, `${extended.remainingTime} ms left`);
    await extended.release();
    assert.equal(await redlock.isLocked("u:door"), false);
    const next = await redlock.acquire("u:door", 10_000, { fencing: true });
    assert.ok(next.fencingToken! > lock.fencingToken!, "the token grows");
    await next.release();
    const both = await redlock.acquire(["{u}:a", "{u}:b"], 10_000);
    await both.release();
    for (const server of servers.servers) {
      assert.ok(await commandCalls(server, "eval") >= 1, "EVAL after NOSCRIPT");
    }
    // release() settles on a quorum: the last server's release may still be on its way
    assert.deepEqual(await keysLeft(servers, "u:door", "{u}:a", "{u}:b"), [0, 0, 0]);
    assert.deepEqual(errors, []);
  });

  Deno.test(`[upstash, ${mode}] locks still work after SCRIPT FLUSH (NOSCRIPT again)`, async () => {
    await using servers = await startServers(3);
    await using env = await upstash(servers, options);
    await using redlock = new Redlock(env.clients, { requestTimeout: 1_000 });
    await (await redlock.acquire("u:flush", 2_000, { fencing: true })).release();
    const evals = await Promise.all(servers.servers.map((s) => commandCalls(s, "eval")));
    for (const server of servers.servers) await server.command("SCRIPT", "FLUSH");
    const lock = await redlock.acquire("u:flush", 2_000, { fencing: true });
    await lock.release();
    for (const [i, server] of servers.servers.entries()) {
      assert.ok(await commandCalls(server, "eval") > evals[i]!, `server ${i} ran EVAL again`);
    }
  });

  Deno.test(`[upstash, ${mode}] a waiter wakes on the release through subscribe() (event streams)`, async () => {
    await using servers = await startServers(3);
    await using env = await upstash(servers, options);
    await using holder = new Redlock(env.clients, { requestTimeout: 1_000 });
    await using waiter = new Redlock(env.clients, {
      requestTimeout: 1_000,
      retryDelay: 3_000,
      retryJitter: 0,
    });
    const held = await holder.acquire("u:wake", 10_000);
    const waiting = waiter.acquire("u:wake", 5_000, { timeout: 8_000 });
    await sleep(300);
    for (const server of servers.servers) {
      const channels = await server.command("PUBSUB", "CHANNELS", "redlock:*");
      assert.match(channels, /redlock:wake:/, `subscribed on ${server.port}`);
    }
    const releasedAt = performance.now();
    await held.release();
    const lock = await waiting;
    const woke = performance.now() - releasedAt;
    // polling would take the retryDelay of 3 s
    assert.ok(woke < 1_000, `woke ${woke.toFixed(0)} ms after the release`);
    await lock.release();
    for (const t of env.translators) {
      const streams = [...t.requests].filter(([path]) => path.startsWith("/subscribe/"));
      assert.ok(streams.length > 0, "the waiter subscribed through an event stream");
    }
  });
}

Deno.test("[upstash] a wrong token is an ExecutionError carrying the 401, not a hang", async () => {
  await using servers = await startServers(1);
  await using env = await upstash(servers);
  const client = new Redis({ url: env.translators[0]!.url, token: "wrong", retry: false });
  await using redlock = new Redlock([client], { requestTimeout: 1_000, retryCount: 0 });
  redlock.on("error", () => {});
  await assert.rejects(redlock.acquire("u:denied", 1_000), ExecutionError);
});
