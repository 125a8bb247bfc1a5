/**
 * The fault proxy on its own, in front of a real redis-server: added
 * latency, partitions (both ways and one way) that hold bytes and heal,
 * connection resets, order under jitter, and the proxy process.
 */

import assert from "node:assert/strict";
import { Direction, FaultProxy, ProxyProcess } from "../scripts/fault_proxy.ts";
import { startServers } from "./_redis.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function resp(...args: string[]): Uint8Array {
  return encoder.encode(
    `*${args.length}\r\n` + args.map((a) => `$${encoder.encode(a).length}\r\n${a}\r\n`).join(""),
  );
}

/** A raw RESP connection that reads simple one-line replies (+OK, :1, $-1…). */
class Raw {
  readonly conn: Deno.TcpConn;
  #text = "";
  readonly #buffer = new Uint8Array(65536);
  #reading: Promise<number | null> | undefined;

  private constructor(conn: Deno.TcpConn) {
    this.conn = conn;
  }

  static async open(port: number): Promise<Raw> {
    return new Raw(await Deno.connect({ hostname: "127.0.0.1", port }));
  }

  async send(...args: string[]): Promise<void> {
    await this.conn.write(resp(...args));
  }

  /** The next line of reply, or null when the connection closed, or undefined after `ms`. */
  async line(ms = 5_000): Promise<string | null | undefined> {
    const deadline = performance.now() + ms;
    for (;;) {
      const eol = this.#text.indexOf("\r\n");
      if (eol !== -1) {
        const line = this.#text.slice(0, eol);
        this.#text = this.#text.slice(eol + 2);
        return line;
      }
      const left = deadline - performance.now();
      if (left <= 0) return undefined;
      this.#reading ??= this.conn.read(this.#buffer).catch(() => null);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), left));
      const n = await Promise.race([this.#reading, timeout]);
      clearTimeout(timer);
      if (n === "timeout") return undefined;
      this.#reading = undefined;
      if (n === null) return null;
      this.#text += decoder.decode(this.#buffer.subarray(0, n));
    }
  }

  /** Sends a command and returns its one-line reply. */
  async ask(...args: string[]): Promise<string | null | undefined> {
    await this.send(...args);
    return await this.line();
  }

  async close(): Promise<void> {
    try {
      this.conn.close();
    } catch {
      // already closed
    }
    await this.#reading;
  }
}

/** Median ms of `n` PING round trips. */
async function pingMs(raw: Raw, n: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    assert.equal(await raw.ask("PING"), "+PONG");
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(n / 2)]!;
}

Deno.test("FaultProxy adds its one-way delay to each direction of a round trip", async () => {
  await using servers = await startServers(1);
  await using proxy = await FaultProxy.start(servers.ports[0]!);
  const raw = await Raw.open(proxy.port);
  try {
    const base = await pingMs(raw, 20);
    proxy.delay(5);
    const delayed = await pingMs(raw, 10);
    assert.ok(delayed >= 10, `a round trip with 5 ms each way took ${delayed} ms`);
    assert.ok(delayed < base + 10 + 40, `${delayed} ms is far beyond 10 ms + ${base} ms`);
    proxy.delay(3, { direction: Direction.ToClient });
    proxy.delay(0, { direction: Direction.ToServer });
    const oneWay = await pingMs(raw, 10);
    assert.ok(oneWay >= 3 && oneWay < 10, `3 ms one way gave a round trip of ${oneWay} ms`);
    proxy.delay(0.5);
    const fine = await pingMs(raw, 50);
    assert.ok(fine >= 1, `0.5 ms each way gave a round trip of ${fine} ms`);
  } finally {
    await raw.close();
  }
});

Deno.test("FaultProxy keeps the order of bytes under jitter", async () => {
  await using servers = await startServers(1);
  await using proxy = await FaultProxy.start(servers.ports[0]!, { delay: 1, jitter: 3 });
  const raw = await Raw.open(proxy.port);
  try {
    for (let i = 0; i < 100; i++) await raw.send("INCR", "order");
    for (let i = 1; i <= 100; i++) assert.equal(await raw.line(), `:${i}`);
  } finally {
    await raw.close();
  }
});

Deno.test("FaultProxy partition holds both directions open and silent until healed", async () => {
  await using servers = await startServers(1);
  const server = servers.servers[0]!;
  await using proxy = await FaultProxy.start(server.port);
  const raw = await Raw.open(proxy.port);
  try {
    assert.equal(await raw.ask("PING"), "+PONG");
    proxy.partition();
    assert.ok(proxy.partitioned());
    await raw.send("SET", "cut", "1");
    assert.equal(await raw.line(300), undefined, "a reply passed the partition");
    assert.equal(await server.command("GET", "cut"), "$-1\r\n", "the request passed");
    assert.equal(proxy.connections, 1, "the connection stays open");
    proxy.heal();
    assert.equal(await raw.line(), "+OK", "the held request goes on after the heal");
    assert.equal(await server.command("GET", "cut"), "$1\r\n1\r\n");
  } finally {
    await raw.close();
  }
});

Deno.test("FaultProxy partitions one direction only", async () => {
  await using servers = await startServers(1);
  const server = servers.servers[0]!;
  await using proxy = await FaultProxy.start(server.port);
  const raw = await Raw.open(proxy.port);
  try {
    proxy.partition(Direction.ToClient);
    assert.ok(proxy.partitioned(Direction.ToClient));
    assert.ok(!proxy.partitioned(Direction.ToServer));
    await raw.send("SET", "half", "1");
    assert.equal(await raw.line(300), undefined, "a reply passed the partition");
    assert.equal(await server.command("GET", "half"), "$1\r\n1\r\n", "the request was held");
    proxy.heal();
    assert.equal(await raw.line(), "+OK");

    proxy.partition(Direction.ToServer);
    await raw.send("SET", "other", "1");
    assert.equal(await raw.line(300), undefined);
    assert.equal(await server.command("GET", "other"), "$-1\r\n", "the request passed");
    proxy.heal();
    assert.equal(await raw.line(), "+OK");
  } finally {
    await raw.close();
  }
});

Deno.test("FaultProxy reset closes the clients' sockets and accepts new ones", async () => {
  await using servers = await startServers(1);
  await using proxy = await FaultProxy.start(servers.ports[0]!);
  const first = await Raw.open(proxy.port);
  const second = await Raw.open(proxy.port);
  try {
    assert.equal(await first.ask("PING"), "+PONG");
    assert.equal(await second.ask("PING"), "+PONG");
    assert.equal(proxy.connections, 2);
    proxy.reset();
    assert.equal(proxy.connections, 0);
    assert.equal(await first.line(), null, "the first client's socket was not closed");
    assert.equal(await second.line(), null, "the second client's socket was not closed");
  } finally {
    await first.close();
    await second.close();
  }
  const third = await Raw.open(proxy.port);
  try {
    assert.equal(await third.ask("PING"), "+PONG");
  } finally {
    await third.close();
  }
});

Deno.test("FaultProxy reset ends a connection held by a partition", async () => {
  await using servers = await startServers(1);
  await using proxy = await FaultProxy.start(servers.ports[0]!);
  const raw = await Raw.open(proxy.port);
  try {
    assert.equal(await raw.ask("PING"), "+PONG");
    proxy.partition();
    await raw.send("PING");
    proxy.reset();
    assert.equal(await raw.line(), null);
    assert.equal(proxy.connections, 0);
  } finally {
    await raw.close();
  }
});

Deno.test("FaultProxy closes a client whose server is down", async () => {
  await using servers = await startServers(1);
  await using proxy = await FaultProxy.start(servers.ports[0]!);
  await servers.servers[0]!.kill();
  const raw = await Raw.open(proxy.port);
  try {
    await raw.send("PING").catch(() => {});
    assert.equal(await raw.line(), null);
  } finally {
    await raw.close();
  }
});

Deno.test("ProxyProcess serves proxies in a child process and applies commands", async () => {
  await using servers = await startServers(2);
  await using proxies = await ProxyProcess.start(servers.ports);
  assert.equal(proxies.ports.length, 2);
  const raws = await Promise.all(proxies.ports.map((p) => Raw.open(p)));
  try {
    for (const raw of raws) assert.equal(await raw.ask("PING"), "+PONG");
    await proxies.send({ op: "delay", ms: 5 });
    for (const raw of raws) {
      const ms = await pingMs(raw, 5);
      assert.ok(ms >= 10, `5 ms each way gave a round trip of ${ms} ms`);
    }
    await proxies.send({ op: "partition", direction: Direction.Both });
    await raws[0]!.send("PING");
    assert.equal(await raws[0]!.line(300), undefined);
    await proxies.send({ op: "heal" });
    assert.equal(await raws[0]!.line(), "+PONG");
    await proxies.send({ op: "reset" });
    assert.equal(await raws[1]!.line(), null);
  } finally {
    for (const raw of raws) await raw.close();
  }
});
