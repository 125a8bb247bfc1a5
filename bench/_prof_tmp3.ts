// temporary: pure JS overhead with in-memory clients (deleted after use)
import { Redlock } from "../mod.ts";
import NodeRedlock from "redlock";
const n = Number(Deno.args[0] ?? 3);
const N = 100_000;
const fakeX = () => ({
  evalScript: (s: { name: string }) => Promise.resolve(s.name === "release" ? 1 : [1, 0]),
});
const fakeIo = () => ({
  evalsha: (_h: string, nk: number) => Promise.resolve(nk), eval: () => Promise.resolve(1),
});
const x = new Redlock(Array.from({ length: n }, fakeX));
const nr = new NodeRedlock(Array.from({ length: n }, fakeIo) as never, { retryCount: 0 });
nr.on("error", () => {});
async function bench(name: string, f: (i: number) => Promise<void>) {
  for (let i = 0; i < 20000; i++) await f(i);
  const t0 = performance.now();
  for (let i = 0; i < N; i++) await f(i);
  console.log(name, n, ((performance.now() - t0) / N * 1000).toFixed(2), "µs per acquire+release");
}
for (let k = 0; k < (Deno.env.get("ONLYX") ? 3 : 2); k++) {
  await bench("x", async (i) => { const l = await x.acquire([`k${i}`], 10000); await l.release(); });
  if (!Deno.env.get("ONLYX")) await bench("node-redlock", async (i) => { const l = await nr.acquire([`k${i}`], 10000); await l.release(); });
}
