// temporary profiling driver (deleted after use)
import { startServers } from "../scripts/redis.ts";
import { IMPLS } from "./_impls.ts";
const id = Deno.args[0]!;
const n = Number(Deno.args[1] ?? 3);
const ms = Number(Deno.args[2] ?? 4000);
const impl = IMPLS.find((i) => i.id === id)!;
await using servers = await startServers(n);
const inst = await impl.open(servers.ports, { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 });
const loop = async (ms: number, tag: string) => {
  const end = performance.now() + ms;
  let ops = 0;
  const t0 = performance.now();
  for (let i = 0; performance.now() < end; i++) {
    const h = await inst.acquire([`p:${tag}:${i}`], 10000);
    await h.release();
    ops++;
  }
  return ops / (performance.now() - t0) * 1000;
};
await loop(500, "w");
console.log(id, n, (await loop(ms, "m")).toFixed(0), "ops/s");
await inst.close();
