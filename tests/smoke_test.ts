import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { KINDS, setup } from "./_redis.ts";

for (const kind of KINDS) {
  Deno.test(`[${kind}] smoke acquire/release`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const lock = await redlock.acquire("a", 1000);
    assert.equal(lock.resources[0], "a");
    assert.equal(await redlock.isLocked("a"), true);
    await lock.release();
    assert.equal(await redlock.isLocked("a"), false);
  });
}
