/**
 * Test helpers for ACL users: the lock user's rule from docs/production.md
 * (so the page is what the tests apply), and clients that log in as a user.
 */

import { fileURLToPath } from "node:url";
import type { RedisClient } from "../mod.ts";
import {
  connect,
  type Connection,
  type Kind,
  type RedisServer,
  type RedisServers,
} from "./_redis.ts";

const PRODUCTION_MD = fileURLToPath(new URL("../docs/production.md", import.meta.url));

/** The lock user's password in the tests. */
export const PASSWORD = "s3cret-lock-user";

/**
 * The `ACL SETUSER` line of docs/production.md as arguments, for the user
 * `user` and the name prefix `prefix` instead of the page's `locker` and `app:`.
 */
export async function lockUserRule(user: string, prefix: string): Promise<string[]> {
  const page = await Deno.readTextFile(PRODUCTION_MD);
  const line = page.split("\n").find((l) => l.startsWith("ACL SETUSER locker "));
  if (line === undefined) throw new Error("docs/production.md has no ACL SETUSER line");
  return line.split(/\s+/).slice(1).map((word) =>
    word === "locker"
      ? user
      : word === ">password"
      ? `>${PASSWORD}`
      : word.replaceAll("app:", prefix)
  );
}

/** Runs `ACL SETUSER` with `rule` on every server (as the default user). */
export async function createUser(servers: RedisServers, rule: readonly string[]): Promise<void> {
  for (const server of servers.servers) {
    const reply = await server.command("ACL", ...rule);
    if (!reply.startsWith("+OK")) throw new Error(`ACL ${rule.join(" ")}: ${reply.trim()}`);
  }
}

/** The entries of a server's `ACL LOG` (denials), as their raw reply text; "" when none. */
export async function aclLog(server: RedisServer): Promise<string> {
  const reply = await server.command("ACL", "LOG");
  return reply.startsWith("*0\r\n") ? "" : reply;
}

/** Connects a client of `kind` to `port` as `user`. */
export async function connectAs(
  kind: Exclude<Kind, "deno-redis">,
  port: number,
  user: string,
  password: string = PASSWORD,
): Promise<Connection> {
  return await connect(kind, port, { username: user, password });
}

/** Clients of `kind` logged in as `user`, one per server, closed together. */
export async function connectAllAs(
  kind: Exclude<Kind, "deno-redis">,
  servers: RedisServers,
  user: string,
  password?: string,
): Promise<{ clients: RedisClient[] } & AsyncDisposable> {
  const connections = await Promise.all(
    servers.servers.map((s) => connectAs(kind, s.port, user, password)),
  );
  return {
    clients: connections.map((c) => c.client),
    [Symbol.asyncDispose]: async () => {
      await Promise.all(connections.map((c) => c.close()));
    },
  };
}
