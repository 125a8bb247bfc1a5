/**
 * The Lua scripts the lock runs, one call per server per operation, so that a
 * multi-resource lock is taken, extended or released all or nothing.
 *
 * @module
 */

import { sha1 } from "./_sha1.ts";

/** A Lua script with its SHA-1, as handed to {@linkcode ScriptClient.evalScript}. */
export interface LuaScript {
  /** What the script does, e.g. `"acquire"`. */
  readonly name: string;
  /** The Lua source, for `EVAL`. */
  readonly source: string;
  /** The source's SHA-1 in lowercase hex, for `EVALSHA`. */
  readonly sha1: string;
}

function script(name: string, source: string): LuaScript {
  return Object.freeze({ name, source, sha1: sha1(source) });
}

/**
 * KEYS: resources. ARGV: value, duration ms.
 * Returns `{1, 0}` when every key was free and is now set, else `{0, pttl}`
 * of the first key found held (nothing is written then).
 */
export const ACQUIRE: LuaScript = script(
  "acquire",
  `for _, key in ipairs(KEYS) do
  local ttl = redis.call("PTTL", key)
  if ttl ~= -2 then return {0, ttl} end
end
for _, key in ipairs(KEYS) do
  redis.call("SET", key, ARGV[1], "PX", ARGV[2])
end
return {1, 0}`,
);

/**
 * KEYS: resources. ARGV: value, duration ms, "1" to also take free keys.
 * Returns `{1, 0}` when every key is (now) ours with the new expiry, else
 * `{0, pttl}` of the first key held by another value (`-2`: missing).
 */
export const EXTEND: LuaScript = script(
  "extend",
  `for _, key in ipairs(KEYS) do
  local holder = redis.call("GET", key)
  if holder ~= ARGV[1] and not (holder == false and ARGV[3] == "1") then
    return {0, redis.call("PTTL", key)}
  end
end
for _, key in ipairs(KEYS) do
  redis.call("SET", key, ARGV[1], "PX", ARGV[2])
end
return {1, 0}`,
);

/** KEYS: resources. ARGV: value. Deletes the keys that hold the value; returns how many. */
export const RELEASE: LuaScript = script(
  "release",
  `local count = 0
for _, key in ipairs(KEYS) do
  if redis.call("GET", key) == ARGV[1] then
    count = count + redis.call("DEL", key)
  end
end
return count`,
);

/**
 * KEYS: resources. ARGV: value, or "" for any holder.
 * Returns `-2` when a key is missing (or held by another value), `-1` when
 * every key is held without expiry, else the smallest remaining ms.
 */
export const INSPECT: LuaScript = script(
  "inspect",
  `local least = -1
for _, key in ipairs(KEYS) do
  if ARGV[1] ~= "" and redis.call("GET", key) ~= ARGV[1] then return -2 end
  local ttl = redis.call("PTTL", key)
  if ttl == -2 then return -2 end
  if ttl >= 0 and (least == -1 or ttl < least) then least = ttl end
end
return least`,
);
