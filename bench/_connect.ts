/**
 * Client connections for the benchmark: every implementation gets fresh
 * connections of the same kind, made with the same options, to the same
 * loopback servers.
 *
 * @module
 */

import { Redis } from "ioredis";
import { createClient } from "redis";

/** The npm client kinds the benchmark uses. */
export type ClientKind = "ioredis" | "node-redis";

/** An ioredis client connected to one server. */
export type IoredisClient = Redis;
/** A node-redis client connected to one server (its default protocol: RESP3 from v6). */
export type NodeRedisClient = ReturnType<typeof newNodeRedis>;

function newNodeRedis(port: number) {
  return createClient({ socket: { host: "127.0.0.1", port } });
}

/** A connected client and how to close it. */
export interface Connection<C> {
  readonly client: C;
  close(): Promise<void>;
}

/** Connects an ioredis client (defaults, no auto-pipelining) and waits until it is ready. */
export async function ioredis(port: number): Promise<Connection<IoredisClient>> {
  const client = new Redis({ host: "127.0.0.1", port, lazyConnect: true });
  client.on("error", () => {});
  await client.connect();
  return {
    client,
    close: async () => {
      client.disconnect();
      if (client.status !== "end") {
        await new Promise<void>((resolve) => client.once("end", () => resolve()));
      }
    },
  };
}

/** Connects a node-redis client (defaults) and waits until it is ready. */
export async function nodeRedis(port: number): Promise<Connection<NodeRedisClient>> {
  const client = newNodeRedis(port);
  client.on("error", () => {});
  await client.connect();
  return {
    client,
    close: async () => {
      try {
        await client.close();
      } catch {
        client.destroy();
      }
    },
  };
}

/** Connects one client of `kind` to every port. */
export async function connectAll<K extends ClientKind>(
  kind: K,
  ports: readonly number[],
): Promise<Connection<K extends "ioredis" ? IoredisClient : NodeRedisClient>[]> {
  const open = kind === "ioredis" ? ioredis : nodeRedis;
  const settled = await Promise.allSettled(ports.map((port) => open(port)));
  const ok = settled.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  const failed = settled.find((s) => s.status === "rejected");
  if (failed) {
    await Promise.all(ok.map((c) => c.close()));
    throw (failed as PromiseRejectedResult).reason;
  }
  return ok as Connection<K extends "ioredis" ? IoredisClient : NodeRedisClient>[];
}

/** Closes every connection. */
export async function closeAll(connections: readonly Connection<unknown>[]): Promise<void> {
  await Promise.all(connections.map((c) => c.close()));
}
