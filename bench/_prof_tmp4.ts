// temporary: floor with and without a timer per request (deleted after use)
import { startServers } from "../scripts/redis.ts";
import { connectAll } from "./_connect.ts";
import { Floor, type FloorServer, ioredisFloor } from "./_floor.ts";
const n = Number(Deno.args[0] ?? 3);
await using servers = await startServers(n);
const conns = await connectAll("ioredis", servers.ports);
const timed = (s: FloorServer): FloorServer => ({
  load: s.load,
  set: (k, v, t) => { const tm = setTimeout(() => {}, 500); return s.set(k, v, t).finally(() => clearTimeout(tm)); },
  evalsha: (h, k, a) => { const tm = setTimeout(() => {}, 500); return s.evalsha(h, k, a).finally(() => clearTimeout(tm)); },
});
const plain = new Floor(conns.map((c) => ioredisFloor(c.client)));
const withTimers = new Floor(conns.map((c) => timed(ioredisFloor(c.client))));
await plain.load(); await withTimers.load();
async function run(f: Floor, ms: number, tag: string) {
  const end = performance.now() + ms; let ops = 0; const t0 = performance.now();
  for (let i = 0; performance.now() < end; i++) {
    const k = [`${tag}:${i}`]; const v = await f.tryAcquire(k, 10000); await f.release(k, v!); ops++;
  }
  return ops / (performance.now() - t0) * 1000;
}
const P: number[] = [], T: number[] = [];
for (let r = 0; r < 12; r++) {
  const p = await run(plain, 1000, `p${r}`); const t = await run(withTimers, 1000, `t${r}`); P.push(p); T.push(t);
  console.log("plain", p.toFixed(0), "timers", t.toFixed(0), "ratio", (t / p).toFixed(2));
}
for (const c of conns) await c.close();
