/** The gate of read-write locks (the writer key, taken by SET NX when free), attacked case by case on 3 real servers. */
import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { type Mode, RW_RELEASE, rwKeys, rwModeCall } from "../src/protocol/read_write_scripts.ts";
import { get, integer, onEveryServer, type RedisServers, setup, sleep } from "./_redis.ts";

const gates = (servers: RedisServers, key: string) =>
  Promise.all(servers.servers.map((s) => get(s, key)));
const pttls = (servers: RedisServers, key: string) =>
  Promise.all(servers.servers.map((s) => integer(s, "PTTL", key)));

Deno.test("a lone reader (short SET NX lease) joined by a long reader: writers stay out until the long one ends", async () => {
  await using env = await setup("ioredis", 3);
  const a = new Redlock(env.clients), b = new Redlock(env.clients), c = new Redlock(env.clients);
  const [writer] = rwKeys("t1");
  const r1 = await a.readWriteLock("t1").read(200);
  await sleep(20);
  assert.deepEqual(await gates(env.servers, writer!), [1, 2, 3].map(() => `r:${r1.value}`));
  const r2 = await b.readWriteLock("t1").read(3_000);
  await sleep(20);
  assert.deepEqual(await gates(env.servers, writer!), ["r", "r", "r"]);
  await sleep(350); // r1's lease is over
  const ttl = await pttls(env.servers, writer!);
  assert.ok(ttl.every((t) => t > 2_000), `the gate follows the long reader: ${ttl}`);
  assert.equal(await c.readWriteLock("t1").tryWrite(1_000), null, "a writer while r2 holds");
  await r2.release();
  const w = await c.readWriteLock("t1").tryWrite(1_000);
  assert.ok(w !== null, "free after the last reader");
  await w.release();
});

Deno.test("a lone long reader, a short joiner that releases: writers stay out while the first holds", async () => {
  await using env = await setup("ioredis", 3);
  const a = new Redlock(env.clients), b = new Redlock(env.clients), c = new Redlock(env.clients);
  const r1 = await a.readWriteLock("t2").read(3_000);
  const r2 = await b.readWriteLock("t2").read(200);
  await r2.release();
  await sleep(300);
  assert.equal(await c.readWriteLock("t2").tryWrite(1_000), null, "r1 still holds");
  const ext = await r1.extend(3_000);
  assert.equal(await c.readWriteLock("t2").tryWrite(1_000), null, "r1 extended");
  await ext.release();
  const [writer, readers] = rwKeys("t2");
  // The release settles on a quorum: its request to the last server may land just after.
  await onEveryServer(env.servers, writer!, null);
  assert.deepEqual(await pttls(env.servers, readers!), [-2, -2, -2], "the set went");
});

Deno.test("a lone reader extended longer, then joined and the joiner gone: the gate keeps the extension", async () => {
  await using env = await setup("ioredis", 3);
  const a = new Redlock(env.clients), b = new Redlock(env.clients), c = new Redlock(env.clients);
  let r1 = await a.readWriteLock("t3").read(200);
  r1 = await r1.extend(3_000);
  const r2 = await b.readWriteLock("t3").read(100);
  await r2.release();
  await sleep(300);
  assert.equal(await c.readWriteLock("t3").tryWrite(1_000), null, "r1 holds for 3 s");
  // r1 shortens to 100 ms: PEXPIRE ... GT leaves the gate longer; safe, checked it frees after.
  r1 = await r1.extend(100);
  await sleep(150);
  const ttl = await pttls(env.servers, rwKeys("t3")[0]!);
  console.log("gate PTTL after r1 shortened its entry to 100 ms and 150 ms passed:", ttl);
  const w = await c.readWriteLock("t3").tryWrite(1_000);
  assert.ok(w !== null, "a writer gets it once r1's entry expired (RW_WRITE drops an expired set)");
  await w.release();
});

Deno.test("a reader's release that runs before its SET NX on one server leaves that gate for one lease only", async () => {
  await using env = await setup("ioredis", 3);
  const redlock = new Redlock(env.clients);
  const keys = rwKeys("t4");
  const s0 = env.servers.servers[0]!;
  const value = "00000000-0000-4000-8000-000000000000:1:500";
  const call = rwModeCall(keys, value, "read");
  // Reordered: the release runs first, then the late SET NX of the same acquire.
  const released = await s0.command("EVAL", RW_RELEASE.source, "4", ...call.keys, ...call.args);
  assert.equal(released.trim(), ":0");
  const set = await s0.command("SET", keys[0]!, `r:${value}`, "PX", "500", "NX");
  assert.ok(set.startsWith("+OK"));
  const w = await redlock.readWriteLock("t4").tryWrite(2_000);
  assert.ok(w !== null, "the other two servers make a writer's quorum");
  await w.release();
  assert.equal(await get(s0, keys[0]!), `r:${value}`, "the stray gate stays");
  await sleep(550);
  assert.equal(await get(s0, keys[0]!), null, "gone after its lease");
});

/**
 * `first` holds name's lock (taken by SET NX), a `second` acquire of another
 * Redlock waits; after `first` is released, `second` must come in long
 * before its 3 s retry delay: the release woke it.
 */
async function wokenAfterRelease(name: string, first: Mode, second: Mode): Promise<void> {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients, { retryDelay: 3_000, retryJitter: 0 });
  await using other = new Redlock(env.clients, { retryDelay: 3_000, retryJitter: 0 });
  const held = await redlock.readWriteLock(name)[first](20_000);
  const gate = first === "read" ? `r:${held.value}` : held.value;
  assert.equal(await get(env.servers.servers[0]!, rwKeys(name)[0]!), gate);
  const waiting = other.readWriteLock(name)[second](5_000, { timeout: 10_000 });
  await sleep(300);
  const start = performance.now();
  await held.release();
  const lock = await waiting;
  const waited = performance.now() - start;
  console.log(`${second} woken ${waited.toFixed(0)} ms after the ${first} lock's release`);
  assert.ok(waited < 1_500, `woken ${waited} ms after the release (retryDelay 3000)`);
  await lock.release();
}

Deno.test("a reader waiting on a SET NX writer is woken by its release (retryDelay 3 s)", () =>
  wokenAfterRelease("t5", "write", "read"));

Deno.test("a writer waiting on a lone SET NX reader is woken by its release (retryDelay 3 s)", () =>
  wokenAfterRelease("t6", "read", "write"));

Deno.test("SET NX on one server of three, writer values on the others: the failed reader leaves nothing", async () => {
  await using env = await setup("ioredis", 3);
  const [writer, , waiting] = rwKeys("t7");
  for (const s of env.servers.servers.slice(1)) {
    const ok = await s.command("SET", writer!, "someone-else:1:400", "PX", "400");
    assert.ok(ok.startsWith("+OK"));
  }
  const redlock = new Redlock(env.clients);
  const r = await redlock.readWriteLock("t7").tryRead(2_000);
  assert.equal(r, null);
  await sleep(50);
  assert.equal(await get(env.servers.servers[0]!, writer!), null, "the minority SET NX was undone");
  const marks = await Promise.all(env.servers.servers.map((s) => get(s, waiting!)));
  assert.deepEqual(marks, [null, null, null], "a reader leaves no mark");
  await sleep(400);
  const r2 = await redlock.readWriteLock("t7").tryRead(2_000);
  assert.ok(r2 !== null);
  await r2.release();
});
