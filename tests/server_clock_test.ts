/**
 * Servers under libfaketime (scripts/redis.ts): a jump of a server's wall
 * clock makes Redis expire keys early, as the chaos run's clock-jump relies on.
 */

import assert from "node:assert/strict";
import { startClockedServers } from "../scripts/redis.ts";

Deno.test("a clocked server forgets a key with 10 s left when its clock jumps 30 s forward", async () => {
  const { servers, clocks } = await startClockedServers(2);
  await using _ = servers;
  const [jumped, steady] = servers.servers;
  for (const server of [jumped!, steady!]) {
    assert.equal(await server.command("SET", "lease", "v", "PX", "10000"), "+OK\r\n");
  }
  const before = Number((await jumped!.command("TIME")).split("\r\n")[2]);
  await clocks[0]!.jump(30);
  const after = Number((await jumped!.command("TIME")).split("\r\n")[2]);
  assert.ok(after - before >= 30, `TIME went from ${before} to ${after}`);
  assert.equal(clocks[0]!.offset, 30);
  assert.equal(await jumped!.command("PTTL", "lease"), ":-2\r\n", "the jumped server kept it");
  const left = Number((await steady!.command("PTTL", "lease")).slice(1));
  assert.ok(left > 5_000, `the other server has ${left} ms left`);
});
