/** A read, write or permit acquire aborted while its SET NX replies are in flight leaves nothing behind. */
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { type LuaScript, Redlock, type ScriptClient } from "../mod.ts";
import { rwKeys } from "../src/protocol/read_write_scripts.ts";
import { integer, sleep, startServers } from "./_redis.ts";

/** Replies arrive `replyMs` late; the servers run every request at once. */
class LateReplies implements ScriptClient {
  constructor(readonly real: Redis, readonly replyMs: number) {}
  async #late<T>(p: Promise<T>): Promise<T> {
    const v = await p;
    await sleep(this.replyMs);
    return v;
  }
  evalScript(script: LuaScript, keys: readonly string[], args: readonly string[]) {
    return this.#late(this.real.eval(script.source, keys.length, ...keys, ...args));
  }
  setIfAbsent(key: string, value: string, ms: number) {
    return this.#late(this.real.set(key, value, "PX", ms, "NX").then((r) => r === "OK"));
  }
  pttl(key: string) {
    return this.#late(this.real.pttl(key));
  }
}

async function withLate(
  f: (redlock: Redlock, servers: Awaited<ReturnType<typeof startServers>>) => Promise<void>,
) {
  const servers = await startServers(3);
  const reals = servers.servers.map((s) => new Redis({ host: "127.0.0.1", port: s.port }));
  try {
    const redlock = new Redlock(reals.map((r) => new LateReplies(r, 80)), { requestTimeout: 500 });
    await f(redlock, servers);
    await redlock[Symbol.asyncDispose]();
  } finally {
    for (const r of reals) r.disconnect();
    await servers.stop();
  }
}

const dbsize = (servers: Awaited<ReturnType<typeof startServers>>) =>
  Promise.all(servers.servers.map((s) => integer(s, "DBSIZE")));

for (const mode of ["read", "write"] as const) {
  Deno.test(`a ${mode} acquire aborted during its SET NX round leaves no key`, async () => {
    await withLate(async (redlock, servers) => {
      const ac = new AbortController();
      const acquiring = redlock.readWriteLock("ab")[mode](60_000, { signal: ac.signal });
      const [writer] = rwKeys("ab");
      // Wait until SET NX ran on every server (replies are 80 ms late).
      for (let i = 0; i < 40 && (await dbsize(servers)).some((n) => n !== 1); i++) await sleep(2);
      assert.deepEqual(await dbsize(servers), [1, 1, 1], `the gate ${writer} is set`);
      ac.abort(new Error("stop"));
      await assert.rejects(acquiring, /stop/);
      await sleep(400);
      assert.deepEqual(await dbsize(servers), [0, 0, 0], "nothing left for the 60 s lease");
    });
  });
}

Deno.test("a permit acquire aborted during its SET NX round leaves no slot", async () => {
  await withLate(async (redlock, servers) => {
    const sem = redlock.semaphore("abs", { permits: 2 });
    const first = await sem.acquire(5_000); // a script grant: the handle may now try SET NX
    await first.release();
    const ac = new AbortController();
    const acquiring = sem.acquire(60_000, { signal: ac.signal });
    await sleep(30);
    const slots = await Promise.all(
      servers.servers.map((s) => integer(s, "EXISTS", "{abs}:sem:0")),
    );
    assert.deepEqual(slots, [1, 1, 1], "the slot was set by SET NX");
    ac.abort(new Error("stop"));
    await assert.rejects(acquiring, /stop/);
    await sleep(400);
    const left = await Promise.all(servers.servers.map((s) => integer(s, "EXISTS", "{abs}:sem:0")));
    assert.deepEqual(left, [0, 0, 0], "nothing left for the 60 s lease");
  });
});
