/**
 * Adapters from the supported Redis clients to the one call the lock needs:
 * run a Lua script with keys and arguments.
 *
 * @module
 */

import type { LuaScript } from "../protocol/scripts.ts";
import { describeValue } from "../util/validate.ts";
import { MsArg } from "../util/time.ts";

/**
 * What the lock asks of a Redis connection: run a Lua script, and optionally
 * two plain commands. Implement it to use a client that is not auto-detected.
 */
export interface ScriptClient {
  /**
   * Runs `script` with `keys` and `args` and resolves to its reply (every
   * script replies with an integer: resolve it as a number). Use `EVALSHA` with `script.sha1` and fall
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
  /**
   * Optional: sends `SET key value PX ms NX` and resolves to true when the
   * key was set, false when it already existed. When every client of a
   * Redlock has both this and {@linkcode ScriptClient.pttl}, a lock on one
   * resource without fencing is taken with this command instead of a
   * script, which costs the server several times less.
   *
   * @param key The resource.
   * @param value The lock's value.
   * @param ms The lease in ms.
   * @returns Whether the key was set.
   */
  setIfAbsent?(key: string, value: string, ms: number): Promise<boolean>;
  /**
   * Optional: sends `PTTL key` and resolves to the key's remaining time to
   * live in ms, `-1` without expiry or `-2` when it is missing. Asked only
   * after {@linkcode ScriptClient.setIfAbsent} found the key held, for the
   * holder's TTL.
   *
   * @param key The resource.
   * @returns The remaining time to live in ms, or −1 or −2.
   */
  pttl?(key: string): Promise<number>;
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

/** The shape of Bun's built-in client (`Bun.RedisClient`, or `Bun.redis`). */
export interface BunRedisLike {
  /** `send(command, args)`: any command, with string arguments. */
  send(command: string, args: string[]): Promise<unknown>;
}

/** The shape of a Valkey GLIDE (`npm:@valkey/valkey-glide`) `GlideClient`. */
export interface GlideLike {
  /** `customCommand(args)`: any command, as an array of strings. */
  customCommand(...args: never[]): unknown;
  /** Present on GLIDE clients; used to tell them apart. */
  invokeScript(...args: never[]): unknown;
}

/** Any client `new Redlock()` accepts. */
export type RedisClient =
  | ScriptClient
  | IoredisLike
  | NodeRedisLike
  | DenoRedisLike
  | BunRedisLike
  | GlideLike;

type Run = (...args: unknown[]) => Promise<unknown>;

/**
 * Whether `error` is the server's `NOSCRIPT` reply to an `EVALSHA` (the
 * script is not loaded), wherever the client puts the code in its message:
 * `NOSCRIPT …`, `-NOSCRIPT …`, `Command failed: NOSCRIPT …` (Upstash's
 * pipelines) or `… NoScriptError: …` (Valkey GLIDE). Every adapter's
 * EVALSHA → EVAL fallback asks this one test.
 *
 * @param error What the client rejected with.
 * @returns True for a NOSCRIPT reply.
 */
export function isNoScript(error: unknown): boolean {
  const message = error instanceof Error
    ? error.message
    : typeof error === "string"
    ? error
    : undefined;
  return message !== undefined && NOSCRIPT.test(message);
}

/** The error code where clients put one: first, after `-`, or after `: `. */
const NOSCRIPT = /(?:^|: |(?:^|\s)-\s?)(?:NOSCRIPT|NoScriptError)\b/;

type Plain = Pick<ScriptClient, "setIfAbsent" | "pttl">;

/** What stands for a hidden argument in a client's error. */
const HIDDEN = "[hidden]";

/**
 * Arguments at least this long are hidden in errors: lock values (a
 * Redlock's id and more), never a lease, count or mode.
 */
const SECRET_LENGTH = 16;

/**
 * Hides the long ones among `args` (a lock's value: whoever knows it can
 * release the lock) in `error` as clients report a failed command: in its
 * message and stack (Upstash writes "command was: […]"), and in ioredis's
 * `command.args`. Keys, leases and modes stay. Returns `error`.
 *
 * @param error What the client rejected with.
 * @param args The command's arguments past its keys.
 * @returns The same error, with the values hidden.
 */
function hideValues(error: unknown, args: readonly string[]): unknown {
  if (!(error instanceof Error)) return error;
  const secrets = args.filter((arg) => arg.length >= SECRET_LENGTH);
  if (secrets.length === 0) return error;
  const hide = (text: string) => secrets.reduce((t, secret) => t.replaceAll(secret, HIDDEN), text);
  const { message, stack } = error;
  if (secrets.some((secret) => message.includes(secret))) error.message = hide(message);
  if (typeof stack === "string" && secrets.some((secret) => stack.includes(secret))) {
    error.stack = hide(stack);
  }
  const command = (error as { command?: { args?: unknown } }).command;
  if (typeof command === "object" && command !== null && Array.isArray(command.args)) {
    command.args = command.args.map((arg) =>
      typeof arg === "string" && secrets.includes(arg) ? HIDDEN : arg
    );
  }
  return error;
}

function withFallback(
  client: object,
  cluster: boolean,
  sha: (script: LuaScript, keys: readonly string[], args: readonly string[]) => Promise<unknown>,
  full: (script: LuaScript, keys: readonly string[], args: readonly string[]) => Promise<unknown>,
  plain: Plain = {},
): ScriptClient {
  return {
    cluster,
    evalScript(script, keys, args) {
      let reply: Promise<unknown>;
      try {
        reply = Promise.resolve(sha(script, keys, args));
      } catch (error) {
        return Promise.reject(error);
      }
      return reply.catch((error) => {
        if (!isNoScript(error)) throw hideValues(error, args);
        return full(script, keys, args).catch((error) => {
          throw hideValues(error, args);
        });
      });
    },
    ...plain,
    toString: () => `ScriptClient(${client.constructor?.name ?? "object"})`,
  } as ScriptClient;
}

/** The reply of `SET … NX`: "OK" when set, null when the key existed. */
function wasSet(reply: unknown): boolean {
  if (reply === "OK") return true;
  if (reply === null) return false;
  throw new TypeError(`SET NX sent an unexpected reply: ${describeValue(reply)}`);
}

/** The reply of `PTTL`: an integer. */
function toTtl(reply: unknown): number {
  if (typeof reply === "number" && Number.isInteger(reply)) return reply;
  throw new TypeError(`PTTL sent an unexpected reply: ${describeValue(reply)}`);
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
  const c = client as unknown as {
    eval: Run;
    evalsha: Run;
    set?: Run;
    pttl?: Run;
    isCluster?: boolean;
  };
  if (typeof c?.eval !== "function" || typeof c.evalsha !== "function") {
    throw new TypeError(`client must be an ioredis client with eval and evalsha, got ${client}`);
  }
  const { set, pttl } = c;
  return withFallback(
    client,
    c.isCluster === true,
    // Keys and arguments as arrays: ioredis flattens a command's arguments anyway.
    (s, keys, args) => c.evalsha(s.sha1, keys.length, keys, args),
    (s, keys, args) => c.eval(s.source, keys.length, keys, args),
    typeof set === "function" && typeof pttl === "function"
      ? {
        setIfAbsent: (key, value, ms) =>
          set.call(c, key, value, "PX", ms, "NX").then(wasSet, (error) => {
            throw hideValues(error, [value]);
          }),
        pttl: (key) => pttl.call(c, key).then(toTtl),
      }
      : {},
  );
}

/**
 * node-redis's command options for the lock's commands: no client-side
 * timeout. From v6 every command otherwise gets an `AbortSignal.timeout()` of
 * 5 s, which the runtime keeps alive until it fires, long after the reply;
 * the lock bounds each request with its own timer instead.
 */
const NO_CLIENT_TIMEOUT = Object.freeze({ timeout: 0 });

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
  const c = client as unknown as { eval: Run; evalSha: Run; sendCommand?: Run; masters?: unknown };
  if (typeof c?.eval !== "function" || typeof c.evalSha !== "function") {
    throw new TypeError(`client must be a node-redis client with eval and evalSha, got ${client}`);
  }
  const cluster = c.masters !== undefined;
  const { sendCommand } = c;
  if (typeof sendCommand !== "function") {
    return withFallback(
      client,
      cluster,
      (s, keys, args) => c.evalSha(s.sha1, { keys, arguments: args }),
      (s, keys, args) => c.eval(s.source, { keys, arguments: args }),
    );
  }
  // Raw commands: they cost less than evalSha()'s options, and v4 and v5 spell
  // set()'s NX and PX differently (an option a version ignores would drop
  // the NX). A cluster's sendCommand takes the key that routes the command first.
  return commandClient(
    client,
    cluster
      ? (args, key) => sendCommand.call(c, key, false, args, NO_CLIENT_TIMEOUT)
      : (args) => sendCommand.call(c, args, NO_CLIENT_TIMEOUT),
    cluster,
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

/**
 * Wraps a client that sends any command as `send(command, args)`: Bun's
 * built-in `Bun.RedisClient` (and `Bun.redis`).
 *
 * @param client The Bun client.
 * @returns A script client for `new Redlock()`.
 * @throws {TypeError} When `client` lacks `send`.
 *
 * @example Wrapping Bun's client explicitly
 * ```ts no-eval
 * import { bunRedisClient, Redlock } from "@x/redlock";
 * // deno-lint-ignore no-explicit-any
 * const { RedisClient } = (globalThis as any).Bun;
 * const redlock = new Redlock([bunRedisClient(new RedisClient("redis://127.0.0.1:6379"))]);
 * ```
 */
export function bunRedisClient(client: BunRedisLike): ScriptClient {
  const c = client as unknown as { send: (command: string, args: string[]) => Promise<unknown> };
  if (typeof c?.send !== "function") {
    throw new TypeError(`client must have send(command, args), got ${describeValue(client)}`);
  }
  return commandClient(client, (args) => c.send(args[0]!, args.slice(1)));
}

/**
 * Wraps a Valkey GLIDE (`npm:@valkey/valkey-glide`) standalone `GlideClient`.
 *
 * @param client The GLIDE client.
 * @returns A script client for `new Redlock()`.
 * @throws {TypeError} When `client` lacks `customCommand`.
 *
 * @example Wrapping Valkey GLIDE explicitly
 * ```ts no-eval
 * import { GlideClient } from "npm:@valkey/valkey-glide";
 * import { glideClient, Redlock } from "@x/redlock";
 * const client = await GlideClient.createClient({ addresses: [{ host: "127.0.0.1", port: 6379 }] });
 * const redlock = new Redlock([glideClient(client)]);
 * ```
 */
export function glideClient(client: GlideLike): ScriptClient {
  const c = client as unknown as { customCommand: (args: string[]) => Promise<unknown> };
  if (typeof c?.customCommand !== "function") {
    throw new TypeError(`client must have customCommand(args), got ${describeValue(client)}`);
  }
  return commandClient(client, (args) => c.customCommand(args));
}

/**
 * A script client over a client that sends raw commands given as arrays;
 * `key` is the key that routes the command in a cluster.
 */
function commandClient(
  client: object,
  send: (args: string[], key: string) => Promise<unknown>,
  cluster = false,
): ScriptClient {
  const lease = new MsArg();
  const call = (first: string, s: LuaScript, keys: readonly string[], args: readonly string[]) =>
    send(
      [first, first === "EVALSHA" ? s.sha1 : s.source, String(keys.length), ...keys, ...args],
      keys[0] ?? "",
    );
  return withFallback(
    client,
    cluster,
    (s, keys, args) => call("EVALSHA", s, keys, args),
    (s, keys, args) => call("EVAL", s, keys, args),
    {
      setIfAbsent: (key, value, ms) =>
        send(["SET", key, value, "PX", lease.of(ms), "NX"], key).then(wasSet, (error) => {
          throw hideValues(error, [value]);
        }),
      pttl: (key) => send(["PTTL", key], key).then(toTtl),
    },
  );
}

const has = (value: object, name: string): boolean =>
  typeof (value as Record<string, unknown>)[name] === "function";

/**
 * Picks the adapter for a client by its shape: a {@linkcode ScriptClient} as
 * it is, then ioredis, node-redis, Valkey GLIDE, Bun's `RedisClient` (has
 * `send(command, args)`), and deno-redis / Upstash.
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
    if (has(client, "customCommand") && has(client, "invokeScript")) {
      return glideClient(client as GlideLike);
    }
    // Bun's client also has eval and evalsha, with another calling convention.
    if (has(client, "send") && !has(client, "sendCommand")) {
      return bunRedisClient(client as BunRedisLike);
    }
    if (has(client, "evalsha") && has(client, "eval")) {
      return denoRedisClient(client as DenoRedisLike);
    }
  }
  throw new TypeError(
    `clients must be ioredis, node-redis (npm:redis), deno-redis (@db/redis), ` +
      `@upstash/redis, Bun.RedisClient or Valkey GLIDE clients, or objects with evalScript(script, keys, args); got ${
        describeValue(client)
      }`,
  );
}
