import { startServers } from "../scripts/redis.ts";
import { IMPLS } from "./_impls.ts";
const n = Number(Deno.args[0] ?? 3);
const ids = Deno.args.slice(1);
await using servers = await startServers(n);
const S = { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 };
const insts = await Promise.all(ids.map((id) => IMPLS.find((i) => i.id === id)!.open(servers.ports, S)));
const A: Record<string, number[]> = {}, R: Record<string, number[]> = {}, G: Record<string, number[]> = {};
for (let r = 0; r < 10; r++) {
  for (let j = 0; j < ids.length; j++) {
    const k = (j + r) % ids.length; const inst = insts[k]!; const id = ids[k]!;
    for (let i = 0; i < 2000; i++) {
      const t0 = performance.now();
      const h = await inst.acquire([`m${r}:${k}:${i}`], 10000);
      const t1 = performance.now();
      await h.release();
      const t2 = performance.now();
      await Promise.resolve();
      const t3 = performance.now();
      if (i >= 200) { (A[id] ??= []).push(t1 - t0); (R[id] ??= []).push(t2 - t1); (G[id] ??= []).push(t3 - t2); }
    }
  }
}
const q = (a: number[], p: number) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length * p)]!; };
for (const id of ids) console.log(id.padEnd(16), "acquire p50", (q(A[id]!, .5) * 1000).toFixed(0), "µs p90", (q(A[id]!, .9) * 1000).toFixed(0), " release p50", (q(R[id]!, .5) * 1000).toFixed(0), "µs p90", (q(R[id]!, .9) * 1000).toFixed(0));
for (const i of insts) await i.close();
