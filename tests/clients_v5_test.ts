/**
 * The previous majors of the npm clients (ioredis 5, node-redis 5): a smoke
 * subset (acquire, a notified wait, extend, fencing) keeps them working
 * while every client-parameterised test runs on the current majors.
 */

import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { PREVIOUS_KINDS, setup, sleep } from "./_redis.ts";

for (const kind of PREVIOUS_KINDS) {
  Deno.test(`[${kind}] acquire() takes a lock on a quorum and release() frees it`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("v5:plain", 2_000);
    assert.equal(await redlock.isLocked("v5:plain"), true);
    assert.ok(lock.remainingTime > 0 && lock.remainingTime <= 2_000, `${lock.remainingTime}`);
    await lock.release();
    assert.equal(await redlock.isLocked("v5:plain"), false);
  });

  Deno.test(`[${kind}] a waiting acquire wakes on the holder's release, not its TTL`, async () => {
    await using env = await setup(kind, 3);
    await using holder = new Redlock(env.clients);
    await using waiter = new Redlock(env.clients, { retryDelay: 5_000, retryJitter: 0 });
    const held = await holder.acquire("v5:door", 10_000);
    const waiting = waiter.acquire("v5:door", 5_000, { timeout: 8_000 });
    await sleep(300);
    const releasedAt = performance.now();
    await held.release();
    const lock = await waiting;
    const woke = performance.now() - releasedAt;
    assert.ok(woke < 1_000, `took ${woke} ms after the release (retry delay 5 s, TTL ~9.7 s)`);
    await lock.release();
  });

  Deno.test(`[${kind}] extend() renews the lock and keeps its value`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("v5:long", 500);
    const extended = await lock.extend(3_000);
    assert.equal(extended.value, lock.value);
    await sleep(700);
    assert.equal(await redlock.isValid(extended), true, "valid past the first lease");
    const ttl = await redlock.remainingTtl(extended);
    assert.ok(ttl !== null && ttl > 1_000 && ttl <= 3_000, `${ttl}`);
    await extended.release();
  });

  Deno.test(`[${kind}] fencing tokens strictly increase from one holder to the next`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients);
    const tokens: (number | undefined)[] = [];
    for (let i = 0; i < 3; i++) {
      const lock = await redlock.acquire("v5:fenced", 1_000, { fencing: true });
      tokens.push(lock.fencingToken);
      await lock.release();
    }
    assert.deepEqual(tokens, [1, 2, 3]);
  });
}
