/**
 * Test helpers: start servers (through scripts/redis.ts, the one place that
 * does), connect clients of each supported kind, and inspect the servers.
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { Redis as Redis5 } from "ioredis5";
import { createClient as createClient5 } from "redis5";
import { type RedisServer, type RedisServers, startServers } from "../scripts/redis.ts";
import { DenoRedisFixture } from "./_deno_redis.ts";
import type { RedisClient } from "../mod.ts";

export { startServers };
export type { RedisServer, RedisServers };

/** The client kinds every shared test runs with. */
export const KINDS = ["ioredis", "node-redis", "deno-redis"] as const;
export type Kind = typeof KINDS[number];

/** The previous majors of the npm clients, kept working by a smoke subset. */
export const PREVIOUS_KINDS = ["ioredis5", "node-redis5"] as const;
export type PreviousKind = typeof PREVIOUS_KINDS[number];

/** A connected client and how to close it. */
export interface Connection extends AsyncDisposable {
  readonly client: RedisClient;
  close(): Promise<void>;
}

/** How a test client logs in: an ACL user, or TLS trusting one CA. */
export interface ConnectOptions {
  readonly username?: string;
  readonly password?: string;
  /** PEM of the only CA to trust; connects over TLS when set. */
  readonly tlsCa?: string;
}

/** Connects one client of `kind` to a server on `port`, reconnecting quickly when it dies. */
export async function connect(
  kind: Kind | PreviousKind,
  port: number,
  options: ConnectOptions = {},
): Promise<Connection> {
  const { username, password, tlsCa } = options;
  const login = username === undefined
    ? {}
    : { username, ...(password === undefined ? {} : { password }) };
  if (kind === "ioredis" || kind === "ioredis5") {
    // Both majors take the same options; the 5.x client is typed as the current one.
    const Client = (kind === "ioredis" ? Redis : Redis5) as typeof Redis;
    const client = new Client({
      host: "127.0.0.1",
      port,
      ...login,
      // Its ready check sends INFO, which a lock user may not (docs/production.md).
      ...(username === undefined ? {} : { enableReadyCheck: false }),
      ...(tlsCa === undefined ? {} : { tls: { ca: [tlsCa] } }),
      lazyConnect: true,
      maxRetriesPerRequest: null,
      retryStrategy: () => 50,
    });
    client.on("error", () => {});
    await client.connect();
    const close = async () => {
      const reconnecting = client.status === "reconnecting";
      client.disconnect();
      // Between reconnect attempts ioredis has no socket to close and never emits "end".
      if (client.status !== "end" && !reconnecting) {
        await new Promise<void>((resolve) => client.once("end", () => resolve()));
      }
    };
    return { client, close, [Symbol.asyncDispose]: close };
  }
  if (kind === "node-redis" || kind === "node-redis5") {
    const create = (kind === "node-redis" ? createClient : createClient5) as typeof createClient;
    const socket = { host: "127.0.0.1", port, reconnectStrategy: () => 50, connectTimeout: 1_000 };
    const client = create({
      ...login,
      socket: tlsCa === undefined ? socket : { ...socket, tls: true as const, ca: tlsCa },
    });
    client.on("error", () => {});
    await client.connect();
    const close = async () => {
      client.destroy();
      await new Promise((r) => setTimeout(r, 0));
    };
    return { client, close, [Symbol.asyncDispose]: close };
  }
  const client = await DenoRedisFixture.connect(port);
  const close = () => client[Symbol.asyncDispose]();
  return { client, close, [Symbol.asyncDispose]: close };
}

/** Clients of one kind for every server of a group, closed together. */
export interface Clients extends AsyncDisposable {
  readonly clients: RedisClient[];
  readonly connections: Connection[];
}

export async function connectAll(
  kind: Kind | PreviousKind,
  servers: RedisServers,
): Promise<Clients> {
  const connections = await Promise.all(servers.servers.map((s) => connect(kind, s.port)));
  return {
    clients: connections.map((c) => c.client),
    connections,
    [Symbol.asyncDispose]: async () => {
      await Promise.all(connections.map((c) => c.close()));
    },
  };
}

/** Servers plus clients of one kind, disposed together (clients first). */
export interface Setup extends AsyncDisposable {
  readonly servers: RedisServers;
  readonly clients: RedisClient[];
}

export async function setup(kind: Kind | PreviousKind, count: number): Promise<Setup> {
  const servers = await startServers(count);
  try {
    const { clients, [Symbol.asyncDispose]: close } = await connectAll(kind, servers);
    return {
      servers,
      clients,
      [Symbol.asyncDispose]: async () => {
        await close();
        await servers.stop();
      },
    };
  } catch (error) {
    await servers.stop();
    throw error;
  }
}

/** The value of `key` on `server` (raw GET), or null. */
export async function get(server: RedisServer, key: string): Promise<string | null> {
  const reply = await server.command("GET", key);
  if (reply.startsWith("-")) throw new Error(reply.trim());
  if (reply.startsWith("$-1")) return null;
  return reply.split("\r\n")[1] ?? null;
}

/**
 * Reads until `done` holds of what it read, for up to 2 s; returns the last
 * read. A round settles on a quorum, and the requests it did not wait for
 * land within milliseconds after (longer on a loaded machine).
 */
async function settled<T>(read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  let value = await read();
  for (let i = 0; i < 100 && !done(value); i++) {
    await sleep(20);
    value = await read();
  }
  return value;
}

/**
 * Reads until the read equals `want`, for up to 2 s (see `settled`); returns
 * the last read.
 */
export function eventually<T>(read: () => Promise<T>, want: T): Promise<T> {
  return settled(read, (value) => value === want);
}

/**
 * How many of `keys` exist on each server, once none exists on any server
 * or as they are after 2 s: a release settles on a quorum, and its request
 * to the last server may land just after. The locks' leases must be longer
 * than 2 s, so that only a release can free the keys in that time.
 */
export function keysLeft(servers: RedisServers, ...keys: string[]): Promise<number[]> {
  const read = () => Promise.all(servers.servers.map((s) => integer(s, "EXISTS", ...keys)));
  return settled(read, (left) => left.every((n) => n === 0));
}

/** The value of `key` on each server. */
function valuesOf(servers: RedisServers, key: string): Promise<(string | null)[]> {
  return Promise.all(servers.servers.map((s) => get(s, key)));
}

/** Asserts that `key` holds `expected` on `server`, waiting up to 2 s for it. */
export async function onServer(
  server: RedisServer,
  key: string,
  expected: string | null,
): Promise<void> {
  const value = await settled(() => get(server, key), (v) => v === expected);
  assert.equal(value, expected, `${key} on the server`);
}

/** Asserts that `key` holds `expected` on every server, waiting up to 2 s for it. */
export async function onEveryServer(
  servers: RedisServers,
  key: string,
  expected: string | null,
): Promise<void> {
  const found = await settled(() => valuesOf(servers, key), (v) => v.every((x) => x === expected));
  assert.deepEqual(found, servers.servers.map(() => expected), `${key} on every server`);
}

/**
 * Asserts that `key` holds `expected` on a quorum of the servers and no
 * other value on the rest, waiting up to 2 s for it: a lock taken right
 * after another's release may miss a server the release had not reached.
 */
export async function onQuorum(
  servers: RedisServers,
  key: string,
  expected: string,
): Promise<void> {
  const quorum = Math.floor(servers.servers.length / 2) + 1;
  const count = (values: (string | null)[]) => values.filter((v) => v === expected).length;
  const found = await settled(() => valuesOf(servers, key), (v) => count(v) >= quorum);
  assert.ok(count(found) >= quorum, `${key} is ${expected} on a quorum: ${found}`);
  assert.ok(found.every((v) => v === expected || v === null), `no other value: ${found}`);
}

/** An integer reply of a raw command. */
export async function integer(server: RedisServer, ...args: string[]): Promise<number> {
  const reply = await server.command(...args);
  if (!reply.startsWith(":")) throw new Error(`not an integer reply: ${reply}`);
  return Number(reply.slice(1).trim());
}

/**
 * How many calls of the named commands (lowercase) a server has run since
 * its start, counting those made by scripts.
 */
export async function commandCalls(server: RedisServer, ...names: string[]): Promise<number> {
  const info = await server.command("INFO", "commandstats");
  let calls = 0;
  for (const match of info.matchAll(/cmdstat_([a-z|]+):calls=(\d+)/g)) {
    if (names.includes(match[1]!)) calls += Number(match[2]);
  }
  return calls;
}

/** How many script calls (EVAL + EVALSHA) a server has run since its start. */
export const scriptCalls = (server: RedisServer): Promise<number> =>
  commandCalls(server, "eval", "evalsha");

/** Sets `key` to `value` with a PX expiry on a server directly (another holder). */
export async function hold(server: RedisServer, key: string, value: string, ms: number) {
  const reply = await server.command("SET", key, value, "PX", String(ms));
  if (!reply.startsWith("+OK")) throw new Error(`SET failed: ${reply}`);
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
