import assert from "node:assert/strict";
import { ExecutionError, LockLostError, Redlock } from "../mod.ts";
import { hold, integer, KINDS, onEveryServer, setup, sleep } from "./_redis.ts";

for (const kind of KINDS) {
  Deno.test(`[${kind}] isLocked() answers for free, held, foreign, minority and expired`, async () => {
    await using env = await setup(kind, 3);
    const [a, b] = env.servers.servers;
    const redlock = new Redlock(env.clients);
    assert.equal(await redlock.isLocked("r"), false);
    const lock = await redlock.acquire("r", 200);
    assert.equal(await redlock.isLocked("r"), true);
    await sleep(300);
    assert.equal(await redlock.isLocked("r"), false, "expired");
    for (const server of env.servers.servers) await hold(server, "f", "other", 5_000);
    assert.equal(await redlock.isLocked("f"), true, "held by another value");
    await hold(a!, "m", "other", 5_000);
    assert.equal(await redlock.isLocked("m"), false, "held on a minority only");
    await hold(b!, "m", "other", 5_000);
    assert.equal(await redlock.isLocked("m"), true, "held on a quorum");
    await lock.release();
  });

  Deno.test(`[${kind}] isValid() is true while ours, false after expiry, takeover or release`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("v", 5_000);
    assert.equal(await redlock.isValid(lock), true);
    assert.equal(await lock.isValid(), true);
    await lock.release();
    assert.equal(await lock.isValid(), false, "released");

    const short = await redlock.acquire("v", 150);
    await sleep(250);
    assert.equal(await short.isValid(), false, "expired");

    const taken = await redlock.acquire("w", 5_000);
    for (const server of env.servers.servers) await hold(server, "w", "other", 5_000);
    assert.equal(await taken.isValid(), false, "another value holds it");
  });

  Deno.test(`[${kind}] remainingTtl() subtracts elapsed time and drift and never overstates`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("ttl", 5_000);
    await sleep(200);
    const ttl = await redlock.remainingTtl(lock);
    assert.ok(ttl !== null);
    const serverTtl = await integer(env.servers.servers[0]!, "PTTL", "ttl");
    assert.ok(ttl <= serverTtl, `${ttl} ≤ ${serverTtl}`);
    assert.ok(ttl <= 5_000 - 200 - 50 + 10, `${ttl}`); // drift of a 4.8 s TTL is ~50 ms
    assert.ok(ttl > 4_000, `${ttl}`);
    await lock.release();
    assert.equal(await redlock.remainingTtl(lock), null, "released");
    for (const server of env.servers.servers) await hold(server, "ttl", "other", 5_000);
    assert.equal(await redlock.remainingTtl(lock), null, "another value holds it");
  });

  Deno.test(`[${kind}] remainingTtlForResource() reports any holder's remaining ms`, async () => {
    await using env = await setup(kind, 3);
    const [a, b, c] = env.servers.servers;
    const redlock = new Redlock(env.clients);
    assert.equal(await redlock.remainingTtlForResource("q"), null);
    await hold(a!, "q", "x", 1_000);
    await hold(b!, "q", "x", 3_000);
    await hold(c!, "q", "x", 5_000);
    const ttl = await redlock.remainingTtlForResource("q");
    assert.ok(ttl !== null);
    // the quorum-th largest TTL (3 000) less time and drift: held on 2 of 3 at least that long
    assert.ok(ttl > 2_800 && ttl <= 3_000 - 32, `${ttl}`);
    for (const server of env.servers.servers) await server.command("SET", "forever", "x");
    assert.equal(await redlock.remainingTtlForResource("forever"), Infinity);
  });

  Deno.test(`[${kind}] extend() with onlyIfLocked: false takes an expired lock again`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("again", 100);
    await sleep(200);
    await assert.rejects(redlock.extend(lock, 5_000), LockLostError);
    const again = await redlock.extend(lock, 5_000, { onlyIfLocked: false });
    assert.equal(again.value, lock.value);
    assert.ok(again.remainingTime > 4_000);
    await onEveryServer(env.servers, "again", lock.value);
    for (const server of env.servers.servers) await hold(server, "again", "other", 5_000);
    await assert.rejects(
      redlock.extend(lock, 5_000, { onlyIfLocked: false }),
      LockLostError,
      "never takes it from another value",
    );
  });

  Deno.test(`[${kind}] introspection throws ExecutionError when a majority is down`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { requestTimeout: 150 });
    const lock = await redlock.acquire("down", 5_000);
    await env.servers.servers[0]!.kill();
    await env.servers.servers[1]!.kill();
    await assert.rejects(redlock.isLocked("down"), ExecutionError);
    await assert.rejects(redlock.isValid(lock), ExecutionError);
    await assert.rejects(redlock.remainingTtl(lock), ExecutionError);
    await assert.rejects(redlock.remainingTtlForResource("down"), ExecutionError);
  });
}
