import assert from "node:assert/strict";
import { inspect as nodeInspect } from "node:util";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { Redlock, type RedlockErrorEvent } from "../mod.ts";
import { startServers } from "./_redis.ts";

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
