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
 * KEYS: the n resources, then (when ARGV[3] is "1") their n fencing
 * counters, then the wait queue of the one resource (when ARGV[4] is a
 * ticket) or of each resource (when it is "*").
 * ARGV: value, duration ms, "1" for a fencing token, the waiter's ticket,
 * "*" for a watcher or "" (or none) for neither, ms the queue must outlive
 * the holder.
 * A key counts as free when it is missing, reserved for this value or
 * handed to it (see RELEASE). Returns the token (0 without fencing) when
 * every key was free and is now set, else `-3 - pttl` of the first key found
 * held (a negative integer: a number costs the server and the client less
 * than an array); then nothing is written but, with a ticket, the value's
 * entry in the wait queue (ordered by ticket, then value) or, for a
 * watcher, the marker "*" (ordered last) in the held key's queue, which
 * tells its release to publish; either is kept alive beyond the holder's
 * TTL, and the held key is marked (see below). With fencing, every counter
 * is incremented and all are set to the largest, which is the token.
 *
 * The mark: a key whose queue may hold somebody ends with "!" (appended to
 * the holder's value, or to a reservation), so that a release of an
 * unmarked key deletes it without looking at the queue. A queued acquire
 * or a watcher that takes a key marks it when somebody (else) still
 * queues; a key taken back by the value that holds it keeps its mark. (A
 * key that expired under its queue and was then taken by an acquire that
 * did not queue, or by an extend that takes free keys, is not marked: its
 * waiters then come at their next try, and mark it when they find it
 * held.)
 */
export const ACQUIRE: LuaScript = script(
  "acquire",
  `local value, ticket = ARGV[1], ARGV[4] or ""
local fenced = ARGV[3] == "1"
local n = #KEYS
if ticket == "*" then
  n = fenced and n / 3 or n / 2
elseif ticket ~= "" then
  n = fenced and (n - 1) / 2 or n - 1
elseif fenced then
  n = n / 2
end
local marked
if redis.call("EXISTS", unpack(KEYS, 1, n)) > 0 then
  marked = {}
  for i = 1, n do
    local holder = redis.call("GET", KEYS[i])
    if holder then
      local mark = string.byte(holder, -1) == 33
      if mark then holder = string.sub(holder, 1, -2) end
      if holder ~= value and holder ~= "?" .. value then
        local ttl = redis.call("PTTL", KEYS[i])
        if ticket ~= "" then
          local queue = ticket == "*" and KEYS[#KEYS - n + i] or KEYS[#KEYS]
          if ticket == "*" then
            redis.call("ZADD", queue, "NX", "+inf", "*")
          else
            redis.call("ZADD", queue, "NX", ticket, value)
          end
          local life = math.max(ttl, 0) + tonumber(ARGV[5])
          if redis.call("PTTL", queue) < life then redis.call("PEXPIRE", queue, life) end
          if not mark then redis.call("APPEND", KEYS[i], "!") end
        end
        return -3 - ttl
      end
      marked[i] = mark
    end
  end
end
if ticket == "*" then
  marked = marked or {}
  for i = 1, n do
    marked[i] = marked[i] or redis.call("EXISTS", KEYS[#KEYS - n + i]) == 1
  end
elseif ticket ~= "" then
  redis.call("ZREM", KEYS[#KEYS], value)
  marked = {redis.call("EXISTS", KEYS[#KEYS]) == 1}
end
for i = 1, n do
  redis.call("SET", KEYS[i], marked and marked[i] and value .. "!" or value, "PX", ARGV[2])
end
if not fenced then return 0 end
local token = 0
for i = n + 1, 2 * n do
  local count = redis.call("INCR", KEYS[i])
  if count > token then token = count end
end
for i = n + 1, 2 * n do
  redis.call("SET", KEYS[i], token)
end
return token`,
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
 * Returns 0 when every key is (now) ours with the new expiry (a key keeps
 * its mark, see ACQUIRE), else `-3 - pttl` of the first key held by another
 * value (pttl `-2`: missing), as ACQUIRE does.
 */
export const EXTEND: LuaScript = script(
  "extend",
  `for _, key in ipairs(KEYS) do
  local holder = redis.call("GET", key)
  if holder ~= ARGV[1] and holder ~= ARGV[1] .. "!" and not (holder == false and ARGV[3] == "1") then
    return -3 - redis.call("PTTL", key)
  end
end
for _, key in ipairs(KEYS) do
  if redis.call("PEXPIRE", key, ARGV[2]) == 0 then
    redis.call("SET", key, ARGV[1], "PX", ARGV[2])
  end
end
return 0`,
);

/**
 * KEYS: the n resources, then their n wait queues. ARGV: value, ms a
 * reservation lasts, and "" (or none) to release and leave the queues, "1"
 * to release keys that hold the value but stay in the queues (and keep
 * reservations), "2" only to leave the queues (keys that hold the value
 * stay).
 * Frees every key that holds the value or is reserved for it (a value that
 * holds a key, or had it reserved, is no longer in its queue: the acquire
 * script or the release that handed it the key took it out). A key without
 * the mark (see ACQUIRE) is just deleted: nobody queued for it. A marked
 * one goes to the first waiter of its queue: handed to it (set to its value
 * for the lease its value ends with, see `Redlock`) or, when that is 0,
 * reserved for it (set to "?" and its value for the given ms, so that only
 * it can take the key), marked again when others still queue; its value is
 * then published on its Redlock's channel (see `wakeChannel()`). When only a
 * watcher's marker "*" is left there, the key is deleted, the marker taken
 * and "" published on the resource's release channel (see
 * `releaseChannel()`); with an empty queue the key is just deleted. Returns
 * how many keys held the value.
 */
export const RELEASE: LuaScript = script(
  "release",
  `local n = #KEYS / 2
local value, mode = ARGV[1], ARGV[3] or ""
local count = 0
for i = 1, n do
  local key, queue = KEYS[i], KEYS[n + i]
  local holder = redis.call("GET", key)
  local marked = holder and string.byte(holder, -1) == 33
  if marked then holder = string.sub(holder, 1, -2) end
  local held = holder == value and mode ~= "2"
  if held then count = count + 1 end
  local frees = held or (holder == "?" .. value and mode ~= "1")
  if frees and not marked then
    redis.call("DEL", key)
  elseif frees then
    local head = redis.call("ZPOPMIN", queue)[1]
    if head == value then head = redis.call("ZPOPMIN", queue)[1] end
    if head == "*" then
      redis.call("DEL", key)
      redis.call("PUBLISH", "redlock:release:" .. key, "")
    elseif head then
      local lease = tonumber(string.match(head, ":(%d+)$")) or 0
      local mark = redis.call("EXISTS", queue) == 1 and "!" or ""
      if lease > 0 then
        redis.call("SET", key, head .. mark, "PX", lease)
      else
        redis.call("SET", key, "?" .. head .. mark, "PX", ARGV[2])
      end
      redis.call("PUBLISH", "redlock:wake:" .. string.match(head, "^[^:]*"), head)
    else
      redis.call("DEL", key)
    end
  elseif mode ~= "1" then
    redis.call("ZREM", queue, value)
  end
end
return count`,
);

/**
 * The key of the fencing counter of `resource`: beside it, in the same
 * Redis Cluster hash slot, never expiring.
 */
export function fenceKey(resource: string): string {
  return beside(resource, "fence");
}

/**
 * The key of the wait queue of `resource` (a sorted set of waiting values),
 * in the same Redis Cluster hash slot; it expires once nobody waits.
 */
export function queueKey(resource: string): string {
  return beside(resource, "waiters");
}

function beside(resource: string, suffix: string): string {
  const open = resource.indexOf("{");
  const tagged = open !== -1 && resource.indexOf("}", open + 1) > open + 1;
  return tagged ? `${resource}:${suffix}` : `{${resource}}:${suffix}`;
}

/**
 * KEYS: resources. ARGV: value, or "" for any holder (a key reserved for a
 * waiter counts as held).
 * Returns `-2` when a key is missing (or held by another value), `-1` when
 * every key is held without expiry, else the smallest remaining ms.
 */
export const INSPECT: LuaScript = script(
  "inspect",
  `local least = -1
for _, key in ipairs(KEYS) do
  if ARGV[1] ~= "" then
    local holder = redis.call("GET", key)
    if holder ~= ARGV[1] and holder ~= ARGV[1] .. "!" then return -2 end
  end
  local ttl = redis.call("PTTL", key)
  if ttl == -2 then return -2 end
  if ttl >= 0 and (least == -1 or ttl < least) then least = ttl end
end
return least`,
);
