import { startServers } from "../scripts/redis.ts";
import { IMPLS } from "./_impls.ts";
const n = Number(Deno.args[0] ?? 3);
const ids = Deno.args.slice(1);
await using servers = await startServers(n);
const S = { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 };
const insts = await Promise.all(ids.map((id) => IMPLS.find((i) => i.id === id)!.open(servers.ports, S)));
const res: Record<string, number[]> = {};
for (let r = 0; r < 10; r++) {
  for (let j = 0; j < ids.length; j++) {
    const k = (j + r) % ids.length; const inst = insts[k]!;
    for (let i = 0; i < 300; i++) await (await inst.acquire([`w${r}:${k}:${i}`], 10000)).release();
    const end = performance.now() + 1000; let ops = 0; const t0 = performance.now();
    for (let i = 0; performance.now() < end; i++) { await (await inst.acquire([`m${r}:${k}:${i}`], 10000)).release(); ops++; }
    (res[ids[k]!] ??= []).push(ops / (performance.now() - t0) * 1000);
  }
}
const med = (a: number[]) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]!; };
for (const id of ids) console.log(id.padEnd(16), med(res[id]!).toFixed(0), "ops/s", (med(res[id]!) / med(res[ids[ids.length-1]!]!)).toFixed(2), "÷ last");
for (const i of insts) await i.close();
