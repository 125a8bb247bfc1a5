import assert from "node:assert/strict";
import { LockConflictError, LockLostError, Redlock } from "../mod.ts";
import { get, integer, KINDS, onEveryServer, setup, sleep } from "./_redis.ts";

for (const kind of KINDS) {
  Deno.test(`[${kind}] release() of an already-expired lock resolves`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("expired", 100);
    await sleep(200);
    assert.equal(await get(env.servers.servers[0]!, "expired"), null);
    const result = await lock.release();
    assert.equal(result.attempts[0]!.votesFor.length >= 2, true);
  });

  Deno.test(`[${kind}] remainingTime is 0 once the lock is released`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("done", 10_000);
    assert.ok(lock.remainingTime > 9_000);
    await lock.release();
    assert.equal(lock.remainingTime, 0);
    assert.equal(await lock.isValid(), false);
    await onEveryServer(env.servers, "done", null);
  });

  Deno.test(`[${kind}] extend() after expiry rejects with LockLostError`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("late", 100);
    await sleep(200);
    assert.equal(lock.remainingTime, 0);
    await assert.rejects(lock.extend(1_000), LockLostError);
    assert.equal(await get(env.servers.servers[1]!, "late"), null);
  });

  Deno.test(
    `[${kind}] release() and extend() never touch another holder's value`,
    async () => {
      await using env = await setup(kind, 3);
      const redlock = new Redlock(env.clients);
      const mine = await redlock.acquire("shared", 150);
      await sleep(250);
      const theirs = await redlock.acquire("shared", 10_000);
      await mine.release();
      await onEveryServer(env.servers, "shared", theirs.value);
      const error = await redlock.extend(mine, 60_000, { onlyIfLocked: true }).then(
        () => assert.fail("extend should fail"),
        (e) => e,
      );
      assert.ok(error instanceof LockLostError);
      for (const server of env.servers.servers) {
        assert.equal(await get(server, "shared"), theirs.value);
        assert.ok(await integer(server, "PTTL", "shared") <= 10_000);
      }
      // even a lock that has not expired locally is not extended once the keys are another's
      const fresh = await redlock.acquire("other", 5_000);
      for (const server of env.servers.servers) {
        await server.command("SET", "other", "intruder", "PX", "5000");
      }
      const lost = await fresh.extend(5_000).then(() => assert.fail("must fail"), (e) => e);
      assert.ok(lost instanceof LockLostError);
      assert.ok(
        [...lost.attempts[0]!.votesAgainst.values()].every((e) => e instanceof LockConflictError),
      );
      await fresh.release();
      assert.equal(await get(env.servers.servers[0]!, "other"), "intruder");
      await theirs.release();
    },
  );

  Deno.test(`[${kind}] extend() renews the keys and measures validity from its own start`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("renew", 500);
    await sleep(300);
    const start = performance.now();
    const extended = await lock.extend(2_000);
    const expected = performance.timeOrigin + start + 2_000 - (20 + 2);
    assert.ok(extended.expiration >= expected - 1, `${extended.expiration - expected}`);
    assert.ok(extended.expiration <= performance.timeOrigin + performance.now() + 2_000 - 22);
    assert.equal(extended.value, lock.value);
    assert.notEqual(extended, lock);
    const ttls = await Promise.all(env.servers.servers.map((s) => integer(s, "PTTL", "renew")));
    // set after `start` on a quorum: at least what is left of 2 s by now (may be little under load)
    const left = 2_000 - (performance.now() - start);
    const renewed = ttls.filter((ttl) => ttl > left - 5 && ttl <= 2_000);
    assert.ok(renewed.length >= 2, `PTTLs ${ttls}, ${left.toFixed(0)} ms left of 2 s`);
    await sleep(400); // past the first lease: a server the extend missed would have lost the key
    await onEveryServer(env.servers, "renew", lock.value);
    await extended.release();
    await onEveryServer(env.servers, "renew", null);
  });

  Deno.test(`[${kind}] await using releases the lock at the end of the block`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    {
      await using lock = await redlock.acquire("scoped", 10_000);
      // (a quorum holds it; the third server's SET may still be on its way)
      const values = await Promise.all(env.servers.servers.map((s) => get(s, "scoped")));
      assert.ok(values.filter((v) => v === lock.value).length >= 2, JSON.stringify(values));
    }
    await onEveryServer(env.servers, "scoped", null);
  });

  Deno.test(`[${kind}] await using releases the lock when the block throws`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    let value = "";
    await assert.rejects(async () => {
      await using lock = await redlock.acquire("thrown", 10_000);
      value = lock.value;
      throw new Error("boom");
    }, /boom/);
    assert.notEqual(value, "");
    await onEveryServer(env.servers, "thrown", null);
  });
}
