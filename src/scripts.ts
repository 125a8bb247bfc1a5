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
 * KEYS: the n resources, then (when ARGV[3] is "1") their n fencing counters.
 * ARGV: value, duration ms, "1" for a fencing token.
 * Returns `{1, token}` when every key was free and is now set (token 0
 * without fencing), else `{0, pttl}` of the first key found held; nothing is
 * written then. With fencing, every counter is incremented and all are set to
 * the largest, which is the token.
 */
export const ACQUIRE: LuaScript = script(
  "acquire",
  `local n = #KEYS
if ARGV[3] == "1" then n = n / 2 end
if redis.call("EXISTS", unpack(KEYS, 1, n)) > 0 then
  for i = 1, n do
    local ttl = redis.call("PTTL", KEYS[i])
    if ttl ~= -2 then return {0, ttl} end
  end
end
for i = 1, n do
  redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
if n == #KEYS then return {1, 0} end
local token = 0
for i = n + 1, #KEYS do
  local count = redis.call("INCR", KEYS[i])
  if count > token then token = count end
end
for i = n + 1, #KEYS do
  redis.call("SET", KEYS[i], token)
end
return {1, token}`,
);

/**
 * KEYS: fencing counters. ARGV: a token.
 * Raises every counter below the token to it; returns 1.
 */
export const FENCE: LuaScript = script(
  "fence",
  `local token = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  if tonumber(redis.call("GET", key) or "0") < token then
    redis.call("SET", key, ARGV[1])
  end
end
return 1`,
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

/**
 * KEYS: resources. ARGV: value. Deletes the keys that hold the value, and
 * publishes each deletion on the resource's release channel (see
 * `releaseChannel()`) for waiting acquires; returns how many it deleted.
 */
export const RELEASE: LuaScript = script(
  "release",
  `local count = 0
for _, key in ipairs(KEYS) do
  if redis.call("GET", key) == ARGV[1] then
    count = count + redis.call("DEL", key)
    redis.call("PUBLISH", "redlock:release:" .. key, "")
  end
end
return count`,
);

/**
 * The key of the fencing counter of `resource`: beside it, in the same
 * Redis Cluster hash slot, never expiring.
 */
export function fenceKey(resource: string): string {
  const open = resource.indexOf("{");
  const tagged = open !== -1 && resource.indexOf("}", open + 1) > open + 1;
  return tagged ? `${resource}:fence` : `{${resource}}:fence`;
}

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
