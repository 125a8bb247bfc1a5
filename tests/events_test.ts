import assert from "node:assert/strict";
import {
  type LockAcquiredEvent,
  type LockExtendedEvent,
  LockLostError,
  type LockLostEvent,
  type LockReleasedEvent,
  Redlock,
} from "../mod.ts";
import { setup, sleep } from "./_redis.ts";
import { untilAborted } from "./_abort.ts";

Deno.test("a Redlock dispatches acquired, extended and released with the lock", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const acquired: LockAcquiredEvent[] = [];
  const extended: LockExtendedEvent[] = [];
  const released: LockReleasedEvent[] = [];
  redlock.on("acquired", (e) => acquired.push(e));
  redlock.on("extended", (e) => extended.push(e));
  redlock.on("released", (e) => released.push(e));
  const lock = await redlock.acquire(["{ev}:a", "{ev}:b"], 2_000, { fencing: true });
  assert.equal(acquired.length, 1);
  assert.equal(acquired[0]!.lock, lock);
  assert.equal(acquired[0]!.attempts, 1);
  assert.equal(acquired[0]!.handoff, false);
  assert.ok(acquired[0]!.waited >= 0 && acquired[0]!.waited < 1_000);
  assert.equal(acquired[0]!.lock.fencingToken, 1);
  const longer = await lock.extend(5_000);
  assert.equal(extended.length, 1);
  assert.equal(extended[0]!.lock, longer);
  assert.equal(extended[0]!.previous, lock);
  await longer.release();
  assert.equal(released.length, 1);
  assert.equal(released[0]!.lock, longer);
});

Deno.test("the acquired event tells a handoff from a round, and counts the wait", async () => {
  await using env = await setup("ioredis", 3);
  await using holder = new Redlock(env.clients, { wait: "poll" });
  await using waiter = new Redlock(env.clients, { retryCount: -1 });
  const events: LockAcquiredEvent[] = [];
  waiter.on("acquired", (e) => events.push(e));
  // A loaded machine may retry instead of taking the handoff: one in three turns must be one.
  for (let turn = 0; turn < 3 && !events.some((e) => e.handoff); turn++) {
    const held = await holder.acquire(`baton-${turn}`, 10_000);
    const waiting = waiter.acquire(`baton-${turn}`, 5_000, { timeout: 5_000 });
    await sleep(200);
    await held.release();
    const lock = await waiting;
    const event = events.at(-1)!;
    assert.equal(event.lock, lock);
    assert.ok(event.waited >= 150, `${event.waited} ms`);
    assert.ok(event.attempts >= 2);
    await lock.release();
  }
  assert.ok(events.some((e) => e.handoff), "a handoff");
});

Deno.test("using() dispatches lost when its lock vanishes, and extend() when it finds it gone", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const lost: LockLostEvent[] = [];
  redlock.on("lost", (e) => lost.push(e));
  await redlock.using("vanishing", 400, async (signal, { lock }) => {
    for (const server of env.servers.servers) await server.command("DEL", "vanishing");
    await untilAborted(signal, 10_000);
    assert.equal(lost.length, 1);
    assert.equal(lost[0]!.lock.value, lock.value);
    assert.ok(lost[0]!.error instanceof LockLostError);
  });
  const lock = await redlock.acquire("gone", 5_000);
  for (const server of env.servers.servers) await server.command("DEL", "gone");
  await assert.rejects(lock.extend(5_000), LockLostError);
  assert.equal(lost.length, 2);
  assert.equal(lost[1]!.lock, lock);
});

Deno.test("a Redlock makes no lifecycle event while nobody listens", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const dispatched: string[] = [];
  const dispatch = redlock.dispatchEvent.bind(redlock);
  redlock.dispatchEvent = (event: Event) => (dispatched.push(event.type), dispatch(event));
  const lock = await redlock.acquire("quiet", 5_000);
  await (await lock.extend(5_000)).release();
  assert.deepEqual(dispatched, []);
  const off = redlock.on("released", () => {});
  await (await redlock.acquire("quiet", 5_000)).release();
  assert.deepEqual(dispatched, ["released"]);
  off();
  await (await redlock.acquire("quiet", 5_000)).release();
  assert.deepEqual(dispatched, ["released"]);
});

Deno.test("a listener added with and without capture still hears events after one is removed", async () => {
  await using env = await setup("ioredis", 1);
  await using redlock = new Redlock(env.clients);
  let heard = 0;
  const listener = () => heard++;
  redlock.addEventListener("acquired", listener, true);
  redlock.addEventListener("acquired", listener, { capture: false });
  redlock.removeEventListener("acquired", listener, { capture: true });
  await (await redlock.acquire("capture", 5_000)).release();
  assert.equal(heard, 1, "the listener without capture is still there");
  redlock.removeEventListener("acquired", listener, { capture: true });
  await (await redlock.acquire("capture", 5_000)).release();
  assert.equal(heard, 2, "removing the gone capture listener again changes nothing");
  redlock.removeEventListener("acquired", listener);
  const dispatched: string[] = [];
  const dispatch = redlock.dispatchEvent.bind(redlock);
  redlock.dispatchEvent = (event: Event) => (dispatched.push(event.type), dispatch(event));
  await (await redlock.acquire("capture", 5_000)).release();
  assert.equal(heard, 2);
  assert.deepEqual(dispatched, [], "no event made once both are gone");
});

Deno.test("on() rejects an unknown event type, naming the types", () => {
  const redlock = new Redlock([{ evalScript: () => Promise.resolve(0) }]);
  assert.throws(() => redlock.on("aquired" as never, () => {}), {
    name: "TypeError",
    message: /type must be one of error, acquired, released, extended, lost, got "aquired"/,
  });
});
