/**
 * A queued acquire asleep (no suspended call, see `Acquisition`): its wake
 * message and its signal's abort in the same tick (either order), its
 * Redlock disposed, a wake that came between two sleeps, a watcher aborted
 * asleep. Every acquire settles, and leaves nothing on the servers.
 */
import assert from "node:assert/strict";
import { type Lock, Redlock } from "../mod.ts";
import { queueKey } from "../src/protocol/scripts.ts";
import { connectAll, get, integer, sleep } from "./_redis.ts";
import { Gate } from "./_scripted_client.ts";

function settle(p: Promise<Lock>, ms: number): Promise<string | Lock> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p.then((lock) => lock, (e) => `rejected ${e?.name}: ${e?.message}`),
    new Promise<string>((r) => (timer = setTimeout(() => r("HUNG"), ms))),
  ]).finally(() => clearTimeout(timer));
}

/** Servers behind a gate, a holder over plain clients, a waiter over the gated ones. */
async function withGate<T>(
  requestTimeout: number,
  run: (gate: Gate, holder: Redlock, waiter: Redlock) => Promise<T>,
): Promise<T> {
  await using gate = await Gate.start(3);
  await using plain = await connectAll("ioredis", gate.servers);
  await using holder = new Redlock(plain.clients, { wait: "poll" });
  await using waiter = new Redlock(gate.clients, {
    subscriber: gate.subscriber,
    requestTimeout,
    retryCount: -1,
  });
  return await run(gate, holder, waiter);
}

async function race(order: "wake-then-abort" | "abort-then-wake"): Promise<string> {
  // a request timeout of 2 s: no recheck during the test
  return await withGate(2_000, async (gate, holder, waiter) => {
    const key = `race-${order}`;
    const held = await holder.acquire(key, 10_000);
    const controller = new AbortController();
    const waiting = waiter.acquire(key, 5_000, { signal: controller.signal });
    waiting.catch(() => {});
    await gate.sent({ script: "acquire", nth: 2 }, 3); // the queued attempt
    await sleep(200); // asleep in the queue
    gate.holdMessages(0, 1, 2);
    await held.release(); // hands the key to the waiter on every server
    for (let i = 0; i < 3; i++) await gate.heard(i);
    let delivering: Promise<void>;
    if (order === "wake-then-abort") {
      delivering = gate.deliverMessages(0, 1, 2); // the wake handlers run synchronously here
      controller.abort(new Error("aborted in the same tick"));
    } else {
      controller.abort(new Error("aborted in the same tick"));
      delivering = gate.deliverMessages(0, 1, 2);
    }
    await delivering;
    const result = await settle(waiting, 5_000);
    const outcome = typeof result === "string" ? result : `lock, handed over`;
    if (typeof result !== "string") await result.release();
    await sleep(300);
    const left = await Promise.all(gate.servers.servers.map((s) => get(s, key)));
    const queues = await Promise.all(
      gate.servers.servers.map((s) => integer(s, "ZCARD", queueKey(key))),
    );
    const line = `${order}: ${outcome}; keys after ${JSON.stringify(left)}; queues ${queues}`;
    console.log(line);
    assert.notEqual(result, "HUNG");
    assert.deepEqual(left, [null, null, null], "a key handed to the aborted acquire stayed");
    return line;
  });
}

Deno.test("a queued acquire woken and aborted in the same tick settles and leaves no key", () =>
  race("wake-then-abort").then(() => {}));

Deno.test("a queued acquire aborted and woken in the same tick settles and leaves no key", () =>
  race("abort-then-wake").then(() => {}));

Deno.test("acquires asleep in the queue when their Redlock is disposed still settle", () =>
  withGate(200, async (_gate, holder, waiter) => {
    const held = await holder.acquire("disposed", 10_000);
    const t0 = performance.now();
    const waiting = Array.from(
      { length: 5 },
      (_, i) => waiter.acquire("disposed", 5_000, { timeout: i === 0 ? 1_500 : 4_000 }),
    );
    for (const w of waiting) w.catch(() => {});
    await sleep(400);
    await waiter[Symbol.asyncDispose]();
    await sleep(100);
    await held.release();
    const results = await Promise.all(waiting.map((w) => settle(w, 8_000)));
    const summary = results.map((r) =>
      typeof r === "string" ? r.slice(0, 40) : `lock after ${Math.round(performance.now() - t0)}`
    );
    console.log(JSON.stringify(summary));
    for (const r of results) {
      assert.notEqual(r, "HUNG");
      if (typeof r !== "string") await r.release();
    }
  }));

Deno.test("a wake message that came while the queued acquire's attempt was in flight hands it the lock", () =>
  withGate(1_000, async (gate, holder, waiter) => {
    const held = await holder.acquire("between", 10_000);
    // the recheck attempt (the third) runs on the servers, its replies held
    for (let i = 0; i < 3; i++) gate.hold({ script: "acquire", server: i, nth: 3 });
    const waiting = waiter.acquire("between", 5_000, { timeout: 8_000 });
    waiting.catch(() => {});
    const third = await gate.sent({ script: "acquire", nth: 3 }, 3);
    await Promise.all(third.map((c) => c.ran));
    await held.release(); // hands the key over; the wake messages come now, between sleeps
    for (let i = 0; i < 3; i++) await gate.heard(i);
    await gate.deliver(...third); // three conflicts: it sleeps again, with the wake already heard
    const result = await settle(waiting, 6_000);
    assert.notEqual(result, "HUNG");
    assert.ok(typeof result !== "string", String(result));
    const attempts = gate.find({ script: "acquire" }).length;
    console.log(
      `lock after ${attempts} acquire calls, last votesFor ${result.attempts.at(-1)!.votesFor}`,
    );
    assert.equal(attempts, 9, "no attempt after the wake: a handoff");
    await result.release();
  }));

Deno.test("a watching acquire (two resources) aborted asleep rejects with the reason at once", () =>
  withGate(2_000, async (gate, holder, waiter) => {
    const keys = ["{w}:a", "{w}:b"];
    const held = await holder.acquire(keys, 10_000);
    const controller = new AbortController();
    const waiting = waiter.acquire(keys, 5_000, { signal: controller.signal });
    waiting.catch(() => {});
    await gate.sent({ script: "acquire", nth: 2 }, 3); // the watching attempt
    await sleep(200); // asleep until a release (or the 2 s fallback)
    const t = performance.now();
    controller.abort(new Error("aborted asleep"));
    const result = await settle(waiting, 3_000);
    const ms = performance.now() - t;
    console.log(`watcher aborted: ${typeof result === "string" ? result : "lock"} after ${ms} ms`);
    assert.equal(result, "rejected Error: aborted asleep");
    assert.ok(ms < 1_000, `${ms} ms`);
    await held.release();
  }));
