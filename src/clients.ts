/**
 * Adapters from the supported Redis clients to the one call the lock needs:
 * run a Lua script with keys and arguments.
 *
 * @module
 */

import type { LuaScript } from "./scripts.ts";
import { describeValue } from "./_validate.ts";

/**
 * The one thing the lock asks of a Redis connection. Implement it to use a
 * client that is not auto-detected.
 */
export interface ScriptClient {
  /**
   * Runs `script` with `keys` and `args` and resolves to its reply (integers
   * as numbers, arrays as arrays). Use `EVALSHA` with `script.sha1` and fall
   * back to `EVAL` with `script.source` when the server answers `NOSCRIPT`.
   */
  evalScript(
    script: LuaScript,
    keys: readonly string[],
    args: readonly string[],
  ): Promise<unknown>;
  /**
   * True when the connection is a Redis Cluster: every key of one lock must
   * then hash to one slot, which the lock checks before sending anything.
   */
  readonly cluster?: boolean;
}

/** The shape of an `npm:ioredis` `Redis` or `Cluster` client. */
export interface IoredisLike {
  /** `eval(script, numKeys, ...keys, ...args)` */
  eval(...args: never[]): unknown;
  /** `evalsha(sha1, numKeys, ...keys, ...args)` */
  evalsha(...args: never[]): unknown;
  /** Present on ioredis clients only; used to tell them apart. */
  defineCommand(...args: never[]): unknown;
}

/** The shape of an `npm:redis` (node-redis v4 or v5) client or cluster. */
export interface NodeRedisLike {
  /** `eval(script, { keys, arguments })` */
  eval(...args: never[]): unknown;
  /** `evalSha(sha1, { keys, arguments })` */
  evalSha(...args: never[]): unknown;
}

/** The shape of a deno.land/x/redis (`@db/redis`) or `@upstash/redis` client. */
export interface DenoRedisLike {
  /** `eval(script, keys, args)` */
  eval(...args: never[]): unknown;
  /** `evalsha(sha1, keys, args)` */
  evalsha(...args: never[]): unknown;
}

/** Any client `new Redlock()` accepts. */
export type RedisClient = ScriptClient | IoredisLike | NodeRedisLike | DenoRedisLike;

type Run = (...args: unknown[]) => Promise<unknown>;

const isNoScript = (error: unknown): boolean =>
  error instanceof Error && /^-?NOSCRIPT/.test(error.message);

function withFallback(
  client: object,
  cluster: boolean,
  sha: (script: LuaScript, keys: readonly string[], args: readonly string[]) => Promise<unknown>,
  full: (script: LuaScript, keys: readonly string[], args: readonly string[]) => Promise<unknown>,
): ScriptClient {
  return {
    cluster,
    async evalScript(script, keys, args) {
      try {
        return await sha(script, keys, args);
      } catch (error) {
        if (!isNoScript(error)) throw error;
        return await full(script, keys, args);
      }
    },
    toString: () => `ScriptClient(${client.constructor?.name ?? "object"})`,
  } as ScriptClient;
}

/**
 * Wraps an `npm:ioredis` `Redis` or `Cluster` client.
 *
 * @param client The ioredis client.
 * @returns A script client for `new Redlock()`.
 * @throws {TypeError} When `client` lacks ioredis's `eval`/`evalsha`.
 *
 * @example Wrapping ioredis explicitly
 * ```ts no-eval
 * import { Redis } from "npm:ioredis";
 * import { Redlock, ioredisClient } from "@x/redlock";
 * const redlock = new Redlock([ioredisClient(new Redis())]);
 * ```
 */
export function ioredisClient(client: IoredisLike): ScriptClient {
  const c = client as unknown as { eval: Run; evalsha: Run; isCluster?: boolean };
  if (typeof c?.eval !== "function" || typeof c.evalsha !== "function") {
    throw new TypeError(`client must be an ioredis client with eval and evalsha, got ${client}`);
  }
  return withFallback(
    client,
    c.isCluster === true,
    (s, keys, args) => c.evalsha(s.sha1, keys.length, ...keys, ...args),
    (s, keys, args) => c.eval(s.source, keys.length, ...keys, ...args),
  );
}

/**
 * Wraps an `npm:redis` (node-redis v4 or v5) client or cluster.
 *
 * @param client The node-redis client, connected.
 * @returns A script client for `new Redlock()`.
 * @throws {TypeError} When `client` lacks node-redis's `eval`/`evalSha`.
 *
 * @example Wrapping node-redis explicitly
 * ```ts no-eval
 * import { createClient } from "npm:redis";
 * import { nodeRedisClient, Redlock } from "@x/redlock";
 * const client = await createClient().connect();
 * const redlock = new Redlock([nodeRedisClient(client)]);
 * ```
 */
export function nodeRedisClient(client: NodeRedisLike): ScriptClient {
  const c = client as unknown as { eval: Run; evalSha: Run; masters?: unknown };
  if (typeof c?.eval !== "function" || typeof c.evalSha !== "function") {
    throw new TypeError(`client must be a node-redis client with eval and evalSha, got ${client}`);
  }
  return withFallback(
    client,
    c.masters !== undefined,
    (s, keys, args) => c.evalSha(s.sha1, { keys, arguments: args }),
    (s, keys, args) => c.eval(s.source, { keys, arguments: args }),
  );
}

/**
 * Wraps a deno.land/x/redis (`@db/redis`) or `@upstash/redis` client: anything
 * with `eval(script, keys, args)` and `evalsha(sha1, keys, args)`.
 *
 * @param client The client.
 * @returns A script client for `new Redlock()`.
 * @throws {TypeError} When `client` lacks `eval`/`evalsha`.
 *
 * @example Wrapping deno-redis explicitly
 * ```ts no-eval
 * import { connect } from "jsr:@db/redis";
 * import { denoRedisClient, Redlock } from "@x/redlock";
 * const redlock = new Redlock([denoRedisClient(await connect({ hostname: "127.0.0.1" }))]);
 * ```
 */
export function denoRedisClient(client: DenoRedisLike): ScriptClient {
  const c = client as unknown as { eval: Run; evalsha: Run };
  if (typeof c?.eval !== "function" || typeof c.evalsha !== "function") {
    throw new TypeError(`client must have eval(script, keys, args) and evalsha, got ${client}`);
  }
  return withFallback(
    client,
    false,
    (s, keys, args) => c.evalsha(s.sha1, [...keys], [...args]),
    (s, keys, args) => c.eval(s.source, [...keys], [...args]),
  );
}

const has = (value: object, name: string): boolean =>
  typeof (value as Record<string, unknown>)[name] === "function";

/**
 * Picks the adapter for a client by its shape: a {@linkcode ScriptClient} as
 * it is, then ioredis, node-redis, and deno-redis / Upstash.
 *
 * @param client Any supported client.
 * @returns A script client.
 * @throws {TypeError} When the object fits none of the supported shapes.
 *
 * @example Detecting a client
 * ```ts
 * import { toScriptClient } from "@x/redlock";
 * const own = toScriptClient({ evalScript: () => Promise.resolve(1) });
 * console.log(typeof own.evalScript);
 * ```
 */
export function toScriptClient(client: RedisClient): ScriptClient {
  if (typeof client === "object" && client !== null) {
    if (has(client, "evalScript")) return client as ScriptClient;
    if (has(client, "defineCommand") && has(client, "evalsha")) {
      return ioredisClient(client as IoredisLike);
    }
    if (has(client, "evalSha")) return nodeRedisClient(client as NodeRedisLike);
    if (has(client, "evalsha") && has(client, "eval")) {
      return denoRedisClient(client as DenoRedisLike);
    }
  }
  throw new TypeError(
    `clients must be ioredis, node-redis (npm:redis), deno-redis (@db/redis) or ` +
      `@upstash/redis clients, or objects with evalScript(script, keys, args); got ${
        describeValue(client)
      }`,
  );
}
