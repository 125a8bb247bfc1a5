/**
 * node-redis from v6 gives every command a 5 s `AbortSignal.timeout()` by
 * default, and the runtime keeps each such signal and its timer until it
 * fires, replied or not: at the lock's rates that fills the heap and brings
 * GC pauses long enough to time requests out (docs/benchmarks.md, W6). The
 * lock bounds its requests itself, so its commands must not create them.
 */

import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { setup } from "./_redis.ts";

type Timeout = typeof AbortSignal.timeout;

/**
 * Runs `body` with `AbortSignal.timeout` counting its calls; the signals it
 * hands out never fire, so no timer is left behind. Returns the count.
 */
async function countTimeoutSignals(body: () => Promise<void>): Promise<number> {
  const saved: Timeout = AbortSignal.timeout;
  let calls = 0;
  AbortSignal.timeout = (() => {
    calls++;
    return new AbortController().signal;
  }) as Timeout;
  try {
    await body();
  } finally {
    AbortSignal.timeout = saved;
  }
  return calls;
}

const CYCLES = 50;

for (const kind of ["node-redis", "node-redis5"] as const) {
  Deno.test(`[${kind}] acquire() and release() create no per-command timeout signal`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients);
    const calls = await countTimeoutSignals(async () => {
      for (let i = 0; i < CYCLES; i++) {
        const lock = await redlock.acquire(`timeout-signal:${i}`, 5_000);
        await lock.release();
      }
    });
    assert.equal(calls, 0, `${calls} AbortSignal.timeout() calls over ${CYCLES} cycles`);
  });
}

Deno.test("[node-redis] a plain command still gets the client's own timeout signal", async () => {
  // The case the adapter avoids, so that the count above is known to see it.
  await using env = await setup("node-redis", 1);
  const client = env.clients[0] as unknown as { ping(): Promise<string> };
  const calls = await countTimeoutSignals(async () => {
    for (let i = 0; i < CYCLES; i++) assert.equal(await client.ping(), "PONG");
  });
  assert.equal(calls, CYCLES);
});
