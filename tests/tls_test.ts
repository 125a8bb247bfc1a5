import assert from "node:assert/strict";
import { createClient } from "redis";
import { Redlock } from "../mod.ts";
import { type Connection, get } from "./_redis.ts";
import { connectTls, startTlsServers } from "./_redis_tls.ts";

for (const kind of ["ioredis", "node-redis"] as const) {
  Deno.test(`[${kind}] locks over TLS: acquire, notified wait, fencing, extend, release`, async () => {
    await using tls = await startTlsServers(3);
    const { ca } = tls.certificates;
    const open = (ports: readonly number[]) =>
      Promise.all(ports.map((p) => connectTls(kind, p, ca)));
    const closeAll = (cs: Connection[]) => Promise.all(cs.map((c) => c.close()));
    const a = await open(tls.tlsPorts);
    const b = await open(tls.tlsPorts);
    try {
      await using holder = new Redlock(a.map((c) => c.client));
      // Polling would ask again only after 3 s: a wake-up before then is the release's message.
      await using waiter = new Redlock(b.map((c) => c.client), {
        retryDelay: 3_000,
        retryJitter: 0,
      });
      const errors: Error[] = [];
      for (const r of [holder, waiter]) r.on("error", (e) => errors.push(e));

      const first = await holder.acquire("tls:door", 10_000, { fencing: true });
      for (const server of tls.servers.servers) {
        assert.equal(await get(server, "tls:door"), first.value);
      }
      const waiting = waiter.acquire("tls:door", 10_000, { fencing: true, timeout: 8_000 });
      await new Promise((r) => setTimeout(r, 100));
      const extended = await first.extend(10_000);
      await extended.release();
      const released = performance.now();
      const second = await waiting;
      assert.ok(performance.now() - released < 2_000, "the waiter woke on the release's message");
      assert.ok(second.fencingToken! > first.fencingToken!);
      await second.release();
      assert.deepEqual(errors.map((e) => e.message), []);
    } finally {
      await closeAll(a);
      await closeAll(b);
    }
  });
}

Deno.test("a TLS client that does not trust the test CA is refused", async () => {
  await using tls = await startTlsServers(1);
  const client = createClient({
    socket: { host: "127.0.0.1", port: tls.tlsPorts[0]!, tls: true, reconnectStrategy: false },
  });
  client.on("error", () => {});
  await assert.rejects(client.connect(), /certificate/i);
  assert.equal(client.isOpen, false, "the refused client closed itself");
});
