import assert from "node:assert/strict";
import {
  type LockAcquiredEvent,
  type LockExtendedEvent,
  type LockReleasedEvent,
  Redlock,
} from "../mod.ts";
import { setup } from "./_redis.ts";

/** Records the lifecycle events of `redlock`. */
function record(redlock: Redlock) {
  const acquired: LockAcquiredEvent[] = [];
  const extended: LockExtendedEvent[] = [];
  const released: LockReleasedEvent[] = [];
  redlock.on("acquired", (e) => acquired.push(e));
  redlock.on("extended", (e) => extended.push(e));
  redlock.on("released", (e) => released.push(e));
  return { acquired, extended, released };
}

Deno.test("a read-write lock's acquire, extension and release dispatch on its Redlock", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const events = record(redlock);
  const rw = redlock.readWriteLock("ev-doc");
  const read = await rw.read(2_000);
  assert.equal(events.acquired.length, 1);
  assert.equal(events.acquired[0]!.lock, read);
  assert.deepEqual(events.acquired[0]!.lock.resources, ["ev-doc"]);
  assert.equal(events.acquired[0]!.handoff, false);
  const longer = await read.extend(5_000);
  assert.equal(events.extended.length, 1);
  assert.equal(events.extended[0]!.lock, longer);
  assert.equal(events.extended[0]!.previous, read);
  await longer.release();
  assert.equal(events.released.length, 1);
  assert.equal(events.released[0]!.lock, longer);
  const write = await rw.tryWrite(1_000);
  assert.ok(write !== null, "nobody holds it any more");
  assert.equal(events.acquired.length, 2, "tryWrite() dispatched too");
  assert.equal(events.acquired[1]!.lock, write);
  await write.release();
  assert.equal(events.released.length, 2);
});

Deno.test("a semaphore's acquire dispatches on its Redlock, as its permit's release does", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const events = record(redlock);
  const permit = await redlock.semaphore("ev-pdf", { permits: 2 }).acquire(2_000);
  assert.equal(events.acquired.length, 1);
  assert.equal(events.acquired[0]!.lock, permit);
  await permit.release();
  assert.equal(events.released.length, 1);
  assert.equal(events.released[0]!.lock, permit);
});

Deno.test("a handle's using() dispatches acquired and released once each", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const events = record(redlock);
  const seen = await redlock.readWriteLock("ev-using").using("write", 2_000, (_, { lock }) => lock);
  assert.equal(events.acquired.length, 1);
  assert.equal(events.acquired[0]!.lock, seen);
  assert.equal(events.released.length, 1);
  assert.equal(events.released[0]!.lock, seen);
});
