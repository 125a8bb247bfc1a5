// The integration subset run on Node and Bun against the library as bundled
// JavaScript (what a JSR consumer gets): `node integration.mjs <bundle>
// <client> <port> <port> <port>`, client one of ioredis, node-redis, glide, bun.
// Prints one "ok <step>" line per step that passed; exits non-zero on the
// first failure.
import assert from "node:assert/strict";
import { connect as tcp } from "node:net";

const [bundle, kind, ...ports] = process.argv.slice(2);
const { Redlock } = await import(bundle);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const runtime = typeof Bun === "object" ? `bun ${Bun.version}` : `node ${process.version}`;

/** Stops the server on `port` (SHUTDOWN NOSAVE on a connection of its own). */
function shutdown(port) {
  return new Promise((resolve) => {
    const socket = tcp({ host: "127.0.0.1", port: Number(port) }, () => {
      socket.end("SHUTDOWN NOSAVE\r\n");
    });
    socket.on("error", resolve);
    socket.on("close", resolve);
  });
}

/** A client of `kind` and how to close it. */
async function connect(port) {
  if (kind === "ioredis") {
    const { Redis } = await import("ioredis");
    // as the README recommends: no offline queue, fail fast on a dead server
    const client = new Redis({
      host: "127.0.0.1",
      port: Number(port),
      enableOfflineQueue: false,
      retryStrategy: () => 100,
    });
    client.on("error", () => {});
    await new Promise((resolve) => client.once("ready", resolve));
    return { client, close: () => client.disconnect() };
  }
  if (kind === "node-redis") {
    const { createClient } = await import("redis");
    const client = createClient({
      socket: { host: "127.0.0.1", port: Number(port), reconnectStrategy: () => 100 },
    });
    client.on("error", () => {});
    await client.connect();
    return { client, close: () => client.destroy() };
  }
  if (kind === "bun") {
    const client = new Bun.RedisClient(`redis://127.0.0.1:${port}`, { autoReconnect: true });
    await client.connect();
    return { client, close: () => client.close() };
  }
  if (kind === "glide") {
    const { GlideClient, Logger } = await import("@valkey/valkey-glide");
    Logger.setLoggerConfig("off"); // it logs every NOSCRIPT the fallback handles
    const client = await GlideClient.createClient({
      addresses: [{ host: "127.0.0.1", port: Number(port) }],
      requestTimeout: 500,
    });
    return { client, close: () => client.close() };
  }
  throw new Error(`unknown client ${kind}`);
}

const connections = await Promise.all(ports.map(connect));
const clients = connections.map((c) => c.client);
const redlock = new Redlock(clients, { requestTimeout: 500 });
const errors = [];
redlock.on("error", (error) => errors.push(error.message));
const step = (name) => console.log(`ok ${name}`);

try {
  const lock = await redlock.acquire("rt:a", 2_000);
  assert.ok(lock.remainingTime > 1_000, `${lock.remainingTime} ms left`);
  assert.equal(await redlock.isLocked("rt:a"), true);
  await lock.release();
  assert.equal(await redlock.isLocked("rt:a"), false);
  step("acquire");

  // a second Redlock waits for the first's lock and is woken by its release
  // (GLIDE clients cannot be duplicated for a subscriber: that one polls)
  const retryDelay = kind === "glide" ? 100 : 3_000;
  const waiter = new Redlock(clients, { requestTimeout: 500, retryDelay, retryJitter: 0 });
  waiter.on("error", (error) => errors.push(error.message));
  for (let round = 0; round < 3; round++) {
    const held = await redlock.acquire("rt:wait", 10_000);
    const waiting = waiter.acquire("rt:wait", 2_000, { timeout: 8_000 });
    await sleep(100);
    const releasedAt = performance.now();
    await held.release();
    const next = await waiting;
    const woke = performance.now() - releasedAt;
    assert.ok(
      woke < 1_000,
      `woke ${woke.toFixed(0)} ms after the release (retryDelay ${retryDelay})`,
    );
    await next.release();
  }
  await waiter[Symbol.asyncDispose]();
  step("notified-wait");

  const result = await redlock.using("rt:using", 600, async (signal) => {
    await sleep(900); // longer than the lease: extended automatically
    assert.equal(signal.aborted, false);
    assert.equal(await redlock.isLocked("rt:using"), true);
    return 42;
  });
  assert.equal(result, 42);
  assert.equal(await redlock.isLocked("rt:using"), false);
  step("using");

  // what `await using lock = …` calls at the end of its block
  const disposable = await redlock.acquire("rt:dispose", 2_000);
  await disposable[Symbol.asyncDispose]();
  assert.equal(await redlock.isLocked("rt:dispose"), false);
  if (typeof Bun === "object") {
    // Bun has the syntax; Node 20 has only the symbol
    const { awaitUsing } = await import("./await_using.mjs");
    assert.equal(await awaitUsing(redlock, "rt:dispose"), false);
  }
  step("dispose");

  const first = await redlock.acquire("rt:fence", 1_000, { fencing: true });
  await first.release();
  const second = await redlock.acquire("rt:fence", 1_000, { fencing: true });
  await second.release();
  assert.ok(
    second.fencingToken > first.fencingToken,
    `${second.fencingToken} > ${first.fencingToken}`,
  );
  step("fencing");

  const both = await redlock.acquire(["{rt}:a", "{rt}:b"], 2_000);
  assert.equal(await redlock.tryAcquire("{rt}:b", 1_000), null, "one of them is held");
  await both.release();
  const again = await redlock.tryAcquire(["{rt}:b", "{rt}:a"], 1_000);
  assert.ok(again !== null, "free again after the release");
  await again.release();
  step("multi-resource");

  assert.deepEqual(errors, [], "no per-server errors before a server stops");
  await shutdown(ports.at(-1));
  await sleep(100);
  // the two left are a quorum: locks are taken, and exclusive
  const minority = await redlock.acquire("rt:minority", 2_000, { timeout: 3_000 });
  const other = new Redlock(clients, { requestTimeout: 500 });
  other.on("error", () => {});
  assert.equal(await other.tryAcquire("rt:minority", 1_000), null, "held on the quorum");
  await minority.release();
  const after = await other.acquire("rt:minority", 1_000, { timeout: 3_000 });
  await after.release();
  await other[Symbol.asyncDispose]();
  step("stopped-minority");
  console.log(`PASS ${runtime} ${kind}`);
} finally {
  await redlock[Symbol.asyncDispose]().catch(() => {});
  for (const connection of connections) connection.close();
}
