import assert from "node:assert/strict";
import { PermitsMismatchError, Redlock } from "../mod.ts";
import { get, integer, setup, sleep } from "./_redis.ts";

for (const kind of ["ioredis", "node-redis"] as const) {
  Deno.test(`[${kind}] a permit extended past the permits key's first life still tells a holder counting differently`, async () => {
    await using env = await setup(kind, 3);
    await using redlock = new Redlock(env.clients, { retryCount: 0 });
    const lease = 300;
    let permit = await redlock.semaphore("pool", { permits: 2 }).acquire(lease);
    // The acquire wrote {pool}:sem:permits for three leases (900 ms); extend for twice that.
    const started = performance.now();
    while (performance.now() - started < 6 * lease) {
      await sleep(lease / 3);
      permit = await permit.extend(lease);
    }
    for (const server of env.servers.servers) {
      assert.equal(await get(server, "{pool}:sem:permits"), "2");
      assert.ok(await integer(server, "PTTL", "{pool}:sem:permits") > lease, "renewed");
    }
    const other = redlock.semaphore("pool", { permits: 3 });
    const error = await other.acquire(lease).then(
      (p) => p.release().then(() => assert.fail("a holder with 3 permits got in beside 2")),
      (e: unknown) => e,
    );
    assert.ok(error instanceof PermitsMismatchError, `${error}`);
    assert.equal(error.found, 2);
    await permit.release();
  });
}

Deno.test("a permit's extension leaves a permits key of another count alone", async () => {
  await using env = await setup("ioredis", 1);
  await using redlock = new Redlock(env.clients, { retryCount: 0 });
  const permit = await redlock.semaphore("pool", { permits: 2 }).acquire(5_000);
  const [server] = env.servers.servers;
  await server!.command("SET", "{pool}:sem:permits", "4", "PX", "5000");
  const extended = await permit.extend(5_000);
  assert.equal(await get(server!, "{pool}:sem:permits"), "4");
  assert.ok(await integer(server!, "PTTL", "{pool}:sem:0") > 4_000, "the slot was extended");
  await extended.release();
});
