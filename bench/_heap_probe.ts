// temporary: heap per waiting acquire (not committed)
import { Redlock } from "../mod.ts";
import { startServers } from "../scripts/redis.ts";
import { closeAll, connectAll } from "./_connect.ts";
import { sleep } from "./_stats.ts";
const gc = () => (globalThis as { gc?: () => void }).gc!();
const N = Number(Deno.args[0] ?? 500);
const WAIT = Number(Deno.args[1] ?? 1000);
await using servers = await startServers(3);
const links = await connectAll("ioredis", servers.ports);
const redlock = new Redlock(links.map((c) => c.client), { retryCount: -1, retryDelay: 200, retryJitter: 100 });
await (await redlock.acquire("warm", 1_000, { wait: "notify" })).release();
const held = await redlock.acquire("k", 60_000);
// a first waiter, so the subscriber connections are open
const ctl = new AbortController();
const first = redlock.acquire("k", 30_000, { signal: ctl.signal }).catch(() => {});
await sleep(300);
gc(); await sleep(20); gc();
const before = Deno.memoryUsage().heapUsed;
const waits = Array.from({ length: N }, () => redlock.acquire("k", 30_000, { signal: ctl.signal }).catch(() => {}));
await sleep(WAIT);
gc(); await sleep(20); gc();
const after = Deno.memoryUsage().heapUsed;
console.log(`N=${N} after ${WAIT} ms: ${((after - before) / N).toFixed(0)} B per waiter`);
if (Deno.args[2]) {
  const v8 = await import("node:v8");
  console.log(v8.writeHeapSnapshot(Deno.args[2]));
}
ctl.abort();
await Promise.all([first, ...waits]);
await held.release();
await redlock[Symbol.asyncDispose]();
await closeAll(links);
