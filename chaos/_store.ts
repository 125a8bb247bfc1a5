/**
 * The guarded store: what the workers protect with the lock. It lives on a
 * Redis server that is not part of the Redlock and suffers no faults, and
 * holds for each resource
 *
 * - a plain counter, updated by read, think, write `read + 1` with no check at
 *   all: a lost update shows as a final value below the number of writes;
 * - a fenced counter, updated the same way but through scripts that reject any
 *   read or write whose fencing token is older than the newest one seen
 *   (Kleppmann's fencing): a stale holder's write is refused;
 * - a log of every read and write in the order the store applied them, which
 *   tells which write interleaved with which read-modify-write.
 *
 * @module
 */

import type { Redis } from "ioredis";
import type { FencedOutcome } from "./_protocol.ts";

/**
 * KEYS: count, fenced, log. ARGV: tag, token or "".
 * → {plain value, fenced outcome: 1 accepted | 0 rejected | -1 n/a, fenced value}
 */
const READ = `local v = tonumber(redis.call("GET", KEYS[1]) or "0")
redis.call("RPUSH", KEYS[3], "R:" .. ARGV[1] .. ":" .. v)
if ARGV[2] == "" then return {v, -1, 0} end
local newest = tonumber(redis.call("HGET", KEYS[2], "token") or "-1")
local fenced = tonumber(redis.call("HGET", KEYS[2], "value") or "0")
if tonumber(ARGV[2]) < newest then
  redis.call("HINCRBY", KEYS[2], "rejected", 1)
  return {v, 0, fenced}
end
redis.call("HSET", KEYS[2], "token", ARGV[2])
return {v, 1, fenced}`;

/**
 * KEYS: count, fenced, log. ARGV: tag, plain value read, token or "", fenced value read.
 * Writes what was read + 1 to both counters (the fenced one only if the token
 * is not older than the newest seen). → {previous plain value, fenced outcome}
 */
const WRITE = `local read = tonumber(ARGV[2])
local previous = tonumber(redis.call("GET", KEYS[1]) or "0")
redis.call("SET", KEYS[1], read + 1)
redis.call("RPUSH", KEYS[3], "W:" .. ARGV[1] .. ":" .. read .. ":" .. previous)
if ARGV[3] == "" then return {previous, -1} end
local newest = tonumber(redis.call("HGET", KEYS[2], "token") or "-1")
if tonumber(ARGV[3]) < newest then
  redis.call("HINCRBY", KEYS[2], "rejected", 1)
  return {previous, 0}
end
redis.call("HSET", KEYS[2], "token", ARGV[3], "value", tonumber(ARGV[4]) + 1)
redis.call("HINCRBY", KEYS[2], "accepted", 1)
return {previous, 1}`;

function keys(prefix: string, resource: string): [string, string, string] {
  return [
    `${prefix}:count:${resource}`,
    `${prefix}:fenced:${resource}`,
    `${prefix}:log:${resource}`,
  ];
}

const outcome = (code: unknown): FencedOutcome =>
  code === 1 ? "accepted" : code === 0 ? "rejected" : "n/a";

function triple(reply: unknown): [number, unknown, number] {
  if (!Array.isArray(reply) || typeof reply[0] !== "number") {
    throw new TypeError(`unexpected store reply ${JSON.stringify(reply)}`);
  }
  return [reply[0], reply[1], typeof reply[2] === "number" ? reply[2] : 0];
}

/** What a hold read from the store. */
export interface StoreRead {
  /** The plain counter. */
  readonly value: number;
  /** The fenced counter, when the read was accepted. */
  readonly fencedValue: number;
  readonly fenced: FencedOutcome;
}

/** The store as a worker uses it. */
export class GuardedStore {
  readonly #client: Redis;
  readonly #prefix: string;

  constructor(client: Redis, prefix: string) {
    this.#client = client;
    this.#prefix = prefix;
  }

  /** Reads the plain counter; with a token, also registers it with the fenced counter. */
  async read(
    resource: string,
    tag: string,
    token: number | null,
  ): Promise<StoreRead> {
    const [value, code, fencedValue] = triple(
      await this.#client.eval(READ, 3, ...keys(this.#prefix, resource), tag, token ?? ""),
    );
    return { value, fencedValue, fenced: outcome(code) };
  }

  /** Writes what was read + 1; returns the plain value it overwrote and the fenced outcome. */
  async write(
    resource: string,
    tag: string,
    read: StoreRead,
    token: number | null,
  ): Promise<{ previous: number; fenced: FencedOutcome }> {
    const [previous, code] = triple(
      await this.#client.eval(
        WRITE,
        3,
        ...keys(this.#prefix, resource),
        tag,
        String(read.value),
        token ?? "",
        String(read.fencedValue),
      ),
    );
    return { previous, fenced: outcome(code) };
  }
}

/** One entry of the store's log, in the order the store applied it. */
export type StoreOp =
  | { readonly op: "read"; readonly hold: string; readonly value: number }
  | {
    readonly op: "write";
    readonly hold: string;
    readonly read: number;
    readonly previous: number;
  };

/** What the store holds for one resource at the end of a case. */
export interface StoreState {
  readonly resource: string;
  /** The plain counter. */
  readonly value: number;
  /** The fenced counter, and how many fenced writes it accepted and rejected. */
  readonly fencedValue: number;
  readonly fencedAccepted: number;
  readonly fencedRejected: number;
  readonly log: readonly StoreOp[];
}

/** The tag a hold writes into the log: `worker:hold`. */
export const holdTag = (worker: number, hold: number): string => `${worker}:${hold}`;

function parse(entry: string): StoreOp {
  const [kind, w, h, a, b] = entry.split(":");
  const hold = `${w}:${h}`;
  if (kind === "R") return { op: "read", hold, value: Number(a) };
  return { op: "write", hold, read: Number(a), previous: Number(b) };
}

/** Reads the final state of every resource's store (the parent, after a case). */
export async function readStore(
  client: Redis,
  prefix: string,
  resources: readonly string[],
): Promise<StoreState[]> {
  const states: StoreState[] = [];
  for (const resource of resources) {
    const [count, fenced, log] = keys(prefix, resource);
    const value = Number(await client.get(count) ?? 0);
    const f = await client.hgetall(fenced);
    const entries = await client.lrange(log, 0, -1);
    states.push({
      resource,
      value,
      fencedValue: Number(f.value ?? 0),
      fencedAccepted: Number(f.accepted ?? 0),
      fencedRejected: Number(f.rejected ?? 0),
      log: entries.map(parse),
    });
  }
  return states;
}
