/**
 * The protocol floor: the least work a Redlock can do. Acquire is one
 * `SET key value NX PX ttl` per server, sent to all at once, settled as soon
 * as a majority has answered either way; release is one EVALSHA
 * compare-and-delete per server, settled the same way. No validation, no
 * drift, no timers, no retries (W3 alone waits `retryDelay` and tries again,
 * as every library there does). A lock on several resources (W4) cannot be
 * one SET, so there it is one EVALSHA of the smallest all-or-nothing script.
 *
 * @module
 */

import type { IoredisClient, NodeRedisClient } from "./_connect.ts";

/** The floor's view of one server. */
export interface FloorServer {
  /** `SET key value NX PX ttl`; true when it was set. */
  set(key: string, value: string, ttl: number): Promise<boolean>;
  /** EVALSHA of a loaded script. */
  evalsha(sha: string, keys: readonly string[], args: readonly string[]): Promise<unknown>;
  /** SCRIPT LOAD; resolves to the SHA-1. */
  load(source: string): Promise<string>;
}

/** Compare-and-delete of one key. */
export const RELEASE_ONE = `if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`;

/** Compare-and-delete of every key. */
export const RELEASE_MANY = `local n = 0
for _, key in ipairs(KEYS) do
  if redis.call("GET", key) == ARGV[1] then n = n + redis.call("DEL", key) end
end
return n`;

/** All-or-nothing SET NX PX of every key. */
export const ACQUIRE_MANY = `if redis.call("EXISTS", unpack(KEYS)) > 0 then return 0 end
for _, key in ipairs(KEYS) do redis.call("SET", key, ARGV[1], "PX", ARGV[2]) end
return 1`;

/** Adapts an ioredis client. */
export function ioredisFloor(client: IoredisClient): FloorServer {
  return {
    set: async (key, value, ttl) => (await client.set(key, value, "PX", ttl, "NX")) === "OK",
    evalsha: (sha, keys, args) => client.evalsha(sha, keys.length, ...keys, ...args),
    load: async (source) => String(await client.script("LOAD", source)),
  };
}

/**
 * Adapts a node-redis client, without its per-command timeout signal (the
 * lock's adapter sends its commands the same way; see docs/benchmarks.md).
 */
export function nodeRedisFloor(redis: NodeRedisClient): FloorServer {
  const client = redis.withCommandOptions({ timeout: 0 });
  return {
    set: async (key, value, ttl) =>
      (await client.set(key, value, {
        condition: "NX",
        expiration: { type: "PX", value: ttl },
      })) ===
        "OK",
    evalsha: (sha, keys, args) =>
      client.evalSha(sha, { keys: [...keys], arguments: [...args] }) as Promise<unknown>,
    load: (source) => client.scriptLoad(source),
  };
}

/**
 * Sends `send` to every server and resolves as soon as `quorum` said yes
 * (true) or a quorum has become impossible (false). Errors count as no.
 */
export function majority(
  servers: readonly FloorServer[],
  quorum: number,
  send: (server: FloorServer, index: number) => Promise<boolean>,
): Promise<{ ok: boolean; no: boolean[] }> {
  return new Promise((resolve) => {
    const n = servers.length;
    const no = new Array<boolean>(n).fill(false);
    let ayes = 0;
    let noes = 0;
    let done = false;
    const settle = () => {
      if (done) return;
      if (ayes >= quorum) {
        done = true;
        resolve({ ok: true, no });
      } else if (noes > n - quorum) {
        done = true;
        resolve({ ok: false, no });
      }
    };
    servers.forEach((server, i) => {
      send(server, i).then(
        (ok) => {
          if (ok) ayes++;
          else {
            no[i] = true;
            noes++;
          }
          settle();
        },
        () => {
          noes++;
          settle();
        },
      );
    });
  });
}

/** The floor over a set of servers. */
export class Floor {
  readonly #servers: readonly FloorServer[];
  readonly #quorum: number;
  #releaseOne = "";
  #releaseMany = "";
  #acquireMany = "";

  constructor(servers: readonly FloorServer[]) {
    this.#servers = servers;
    this.#quorum = Math.floor(servers.length / 2) + 1;
  }

  /** Loads the scripts on every server. */
  async load(): Promise<void> {
    const [one, many, acquire] = await Promise.all(
      [RELEASE_ONE, RELEASE_MANY, ACQUIRE_MANY].map((source) =>
        Promise.all(this.#servers.map((s) => s.load(source)))
      ),
    );
    this.#releaseOne = one![0]!;
    this.#releaseMany = many![0]!;
    this.#acquireMany = acquire![0]!;
  }

  /**
   * One attempt: the value when a majority took every key, else null; a
   * partial take is undone on every server that did not say no (also on those
   * that have not answered yet: one connection runs its requests in order).
   */
  async tryAcquire(keys: readonly string[], ttl: number): Promise<string | null> {
    const value = crypto.randomUUID();
    const ttlArg = String(ttl);
    const { ok, no } = await majority(
      this.#servers,
      this.#quorum,
      keys.length === 1
        ? (s) => s.set(keys[0]!, value, ttl)
        : async (s) => (await s.evalsha(this.#acquireMany, keys, [value, ttlArg])) === 1,
    );
    if (ok) return value;
    this.#servers.forEach((s, i) => {
      if (!no[i]) s.evalsha(this.#releaseScript(keys), keys, [value]).catch(() => {});
    });
    return null;
  }

  /** Compare-and-delete on every server; true when a majority answered. */
  async release(keys: readonly string[], value: string): Promise<boolean> {
    const sha = this.#releaseScript(keys);
    const { ok } = await majority(
      this.#servers,
      this.#quorum,
      async (s) => (await s.evalsha(sha, keys, [value]), true),
    );
    return ok;
  }

  #releaseScript(keys: readonly string[]): string {
    return keys.length === 1 ? this.#releaseOne : this.#releaseMany;
  }
}
