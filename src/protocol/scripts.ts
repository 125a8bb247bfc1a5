/**
 * The Lua scripts the lock runs, one call per server per operation, so that a
 * multi-resource lock is taken, extended or released all or nothing. Each
 * script's KEYS and ARGV are built next to it by a named helper, and every
 * script replies with an integer.
 *
 * A key holds exactly the value its holder wrote (or `"?"` and a waiter's
 * value while it is reserved for that waiter): nobody else writes to it, so
 * other Redlock implementations can share keys with this one.
 *
 * @module
 */

import {
  CONFLICT,
  LUA_VALUE_ID,
  LUA_VALUE_LEASE,
  RELEASE_CHANNEL,
  RESERVED,
  WAKE_CHANNEL,
} from "./encoding.ts";
import { sha1 } from "./sha1.ts";
import { MsArg } from "../util/time.ts";

/** A Lua script with its SHA-1, as handed to {@linkcode ScriptClient.evalScript}. */
export interface LuaScript {
  /** What the script does, e.g. `"acquire"`. */
  readonly name: string;
  /** The Lua source, for `EVAL`. */
  readonly source: string;
  /** The source's SHA-1 in lowercase hex, for `EVALSHA`. */
  readonly sha1: string;
}

/** The KEYS and ARGV of one script call. */
export interface ScriptCall {
  readonly keys: readonly string[];
  readonly args: readonly string[];
}

/** A Lua script named `name`, with its SHA-1. */
export function script(name: string, source: string): LuaScript {
  return Object.freeze({ name, source, sha1: sha1(source) });
}

/** ACQUIRE's flag for a fencing token. */
const FENCED = "fenced";
/** The seat of a watcher: ordered after every queued acquire. */
export const WATCHER = "*";
/** EXTEND's flag for taking keys that are free. */
export const TAKE_FREE = "take-free";

/**
 * Where an acquire waits for a held resource: nowhere, as a watcher of each
 * resource (the release publishes on the resource's channel), or queued for
 * its one resource with a ticket (the release hands the key to the first).
 */
export type Seat =
  | { readonly kind: "none" }
  | { readonly kind: "watcher" }
  | { readonly kind: "queued"; readonly ticket: string };

/** The seat of an acquire that does not wait in a queue. */
export const NO_SEAT: Seat = Object.freeze({ kind: "none" });

/** The seat of a watcher. */
export const WATCHER_SEAT: Seat = Object.freeze({ kind: "watcher" });

/**
 * Takes every resource for the value when each is free (missing, or
 * reserved for this value by a release). Replies the fencing token (0
 * without fencing), else `-3 - pttl` of the first key held by another value
 * (a negative integer), having written nothing but, for a seat, the value's
 * place in the held key's wait queue (kept alive beyond the holder's TTL).
 * With fencing, every counter is incremented and all are set to the
 * largest, which is the token. Built by {@linkcode acquireCall}.
 */
export const ACQUIRE: LuaScript = script(
  "acquire",
  `local value, seat = ARGV[1], ARGV[4] or ""
local fenced = ARGV[3] == "${FENCED}"
local n = #KEYS
if seat == "${WATCHER}" then
  n = fenced and n / 3 or n / 2
elseif seat ~= "" then
  n = fenced and (n - 1) / 2 or n - 1
elseif fenced then
  n = n / 2
end
if redis.call("EXISTS", unpack(KEYS, 1, n)) > 0 then
  for i = 1, n do
    local holder = redis.call("GET", KEYS[i])
    if holder and holder ~= value and holder ~= "${RESERVED}" .. value then
      local ttl = redis.call("PTTL", KEYS[i])
      if seat ~= "" then
        local queue = seat == "${WATCHER}" and KEYS[#KEYS - n + i] or KEYS[#KEYS]
        if seat == "${WATCHER}" then
          redis.call("ZADD", queue, "NX", "+inf", "${WATCHER}")
        else
          redis.call("ZADD", queue, "NX", seat, value)
        end
        local life = math.max(ttl, 0) + tonumber(ARGV[5])
        if redis.call("PTTL", queue) < life then redis.call("PEXPIRE", queue, life) end
      end
      return ${CONFLICT} - ttl
    end
  end
end
if seat ~= "" and seat ~= "${WATCHER}" then redis.call("ZREM", KEYS[#KEYS], value) end
for i = 1, n do
  redis.call("SET", KEYS[i], value, "PX", ARGV[2])
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

const LEASE_ARG = new MsArg();
const RESERVATION_ARG = new MsArg();

/** What an acquire asks of ACQUIRE besides its resources and value. */
export interface AcquireTerms {
  /** The lease in ms. */
  readonly duration: number;
  /** Whether to hand out a fencing token. */
  readonly fencing: boolean;
  /** Where to wait when a resource is held. */
  readonly seat: Seat;
  /** ms a wait queue must outlive the holder's TTL. */
  readonly queueLife: number;
}

/**
 * KEYS: the n resources, then (with fencing) their n counters, then the
 * wait queue of the one resource (queued) or of each resource (watcher).
 * ARGV: value, duration, the fencing flag, the seat ("" none, "*" watcher,
 * or the ticket), ms the queue outlives the holder. The usual case (no
 * fencing, no seat) sends the first two only.
 */
export function acquireCall(
  resources: readonly string[],
  value: string,
  terms: AcquireTerms,
): ScriptCall {
  const { duration, fencing, seat, queueLife } = terms;
  if (!fencing && seat.kind === "none") {
    return { keys: resources, args: [value, LEASE_ARG.of(duration)] };
  }
  const counters = fencing ? resources.map(fenceKey) : [];
  const queues = seat.kind === "none"
    ? []
    : seat.kind === "watcher"
    ? resources.map(queueKey)
    : [queueKey(resources[0]!)];
  const keys = resources.concat(counters, queues);
  const ticket = seat.kind === "none" ? "" : seat.kind === "watcher" ? WATCHER : seat.ticket;
  return {
    keys,
    args: [value, String(duration), fencing ? FENCED : "", ticket, String(queueLife)],
  };
}

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

/** KEYS and ARGV of FENCE: the counters of `resources`, and the token. */
export function fenceCall(resources: readonly string[], token: number): ScriptCall {
  return { keys: resources.map(fenceKey), args: [String(token)] };
}

/**
 * Sets every resource's expiry to the new lease when each holds the value
 * (or, taking free keys, is missing); replies 0, else `-3 - pttl` of the
 * first key held by another value (pttl `-2`: missing), as ACQUIRE does.
 * Built by {@linkcode extendCall}.
 */
export const EXTEND: LuaScript = script(
  "extend",
  `for _, key in ipairs(KEYS) do
  local holder = redis.call("GET", key)
  if holder ~= ARGV[1] and not (holder == false and ARGV[3] == "${TAKE_FREE}") then
    return ${CONFLICT} - redis.call("PTTL", key)
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
 * KEYS: the resources. ARGV: value, the lease in ms, and the flag that also
 * takes free keys (when `onlyIfLocked` is false).
 */
export function extendCall(
  resources: readonly string[],
  value: string,
  duration: number,
  onlyIfLocked: boolean,
): ScriptCall {
  return { keys: resources, args: [value, String(duration), onlyIfLocked ? "" : TAKE_FREE] };
}

/** What a RELEASE call does with the keys and the wait queues of a value. */
export const RELEASE_MODE = Object.freeze({
  /** Frees the keys the value holds or has reserved, and leaves their queues. */
  release: "release",
  /**
   * For a queued acquire whose attempt failed against another holder: a
   * key the value holds goes to a waiter queued ahead of it (by ticket), or
   * stays with the value when somebody queued is behind and nobody ahead
   * (so that waiters handed different servers do not swap them forever);
   * with nobody queued it is freed. Stays queued, keeps reservations.
   */
  giveWay: "give-way",
  /**
   * For a queued acquire whose attempt could not reach a quorum (server
   * errors): frees the keys the value holds for the next in line, and stays
   * queued, keeping reservations.
   */
  keepPlace: "keep-place",
  /** Only leaves the queues: keys the value holds stay. */
  leaveQueues: "leave-queues",
});

/** One of {@linkcode RELEASE_MODE}'s values. */
export type ReleaseMode = typeof RELEASE_MODE[keyof typeof RELEASE_MODE];

/**
 * Frees every key that holds the value or is reserved for it (as the mode
 * says). A key freed while its wait queue has somebody goes to the first
 * (in give-way mode the value is back in that queue at its ticket first,
 * and keeps the key when it is the first):
 * handed to it (set to its value for the lease its value ends with, see
 * `Redlock`) or, when that lease is 0, reserved for it (set to `"?"` and its
 * value for the given ms, so that only it can take the key); its value is
 * then published on its Redlock's wake channel. When only a watcher's
 * marker is left, the key is deleted and the release published on the
 * resource's channel; with no queue the key is just deleted. Replies how
 * many keys held the value. Built by {@linkcode releaseCall}.
 */
export const RELEASE: LuaScript = script(
  "release",
  `local n = #KEYS / 2
local value, mode = ARGV[1], ARGV[3] or "${RELEASE_MODE.release}"
local queued = redis.call("EXISTS", unpack(KEYS, n + 1, 2 * n)) > 0
local count = 0
if not queued and mode == "${RELEASE_MODE.release}" then
  -- The usual release, nobody queued: the keys held or reserved go in one DEL.
  local freed = {}
  for i = 1, n do
    local holder = redis.call("GET", KEYS[i])
    if holder == value then count = count + 1 end
    if holder == value or holder == "${RESERVED}" .. value then freed[#freed + 1] = KEYS[i] end
  end
  if #freed > 0 then redis.call("DEL", unpack(freed)) end
  return count
end
local giveWay = mode == "${RELEASE_MODE.giveWay}"
local stays = giveWay or mode == "${RELEASE_MODE.keepPlace}"
for i = 1, n do
  local key, queue = KEYS[i], KEYS[n + i]
  local holder = redis.call("GET", key)
  local held = holder == value and mode ~= "${RELEASE_MODE.leaveQueues}"
  if held then count = count + 1 end
  if held or (holder == "${RESERVED}" .. value and not stays) then
    if queued and giveWay then redis.call("ZADD", queue, "NX", ARGV[4], value) end
    local head = queued and redis.call("ZPOPMIN", queue)[1]
    if head == value and not giveWay then head = redis.call("ZPOPMIN", queue)[1] end
    if head == value then
      -- first in line: the key stays with the value
    elseif head == "${WATCHER}" then
      redis.call("DEL", key)
      redis.call("PUBLISH", "${RELEASE_CHANNEL}" .. key, "")
    elseif head then
      local lease = tonumber(string.match(head, "${LUA_VALUE_LEASE}")) or 0
      if lease > 0 then
        redis.call("SET", key, head, "PX", lease)
      else
        redis.call("SET", key, "${RESERVED}" .. head, "PX", ARGV[2])
      end
      redis.call("PUBLISH", "${WAKE_CHANNEL}" .. string.match(head, "${LUA_VALUE_ID}"), head)
    else
      redis.call("DEL", key)
    end
  elseif queued and not stays then
    redis.call("ZREM", queue, value)
  end
end
return count`,
);

/** What a release asks of RELEASE besides its resources and value. */
export interface ReleaseTerms {
  /** ms a key reserved for the next waiter stays reserved. */
  readonly reservation: number;
  /** What to do with the keys and queues. @default {RELEASE_MODE.release} */
  readonly mode?: ReleaseMode;
  /** The value's ticket in the queues, which give-way mode puts it back at. */
  readonly ticket?: string | undefined;
}

/**
 * KEYS: the n resources, then their n wait queues. ARGV: value, ms a
 * reservation lasts, the mode (none for {@linkcode RELEASE_MODE}.release),
 * and the ticket (give-way mode only).
 */
export function releaseCall(
  resources: readonly string[],
  value: string,
  terms: ReleaseTerms,
): ScriptCall {
  const { mode = RELEASE_MODE.release, ticket } = terms;
  const n = resources.length;
  const keys = new Array<string>(2 * n);
  for (let i = 0; i < n; i++) {
    keys[i] = resources[i]!;
    keys[n + i] = queueKey(resources[i]!);
  }
  const args = [value, RESERVATION_ARG.of(terms.reservation)];
  if (mode !== RELEASE_MODE.release) args.push(mode);
  if (mode === RELEASE_MODE.giveWay) {
    if (ticket === undefined) throw new TypeError("give-way mode needs the value's ticket");
    args.push(ticket);
  }
  return { keys, args };
}

/**
 * Replies `-2` when a key is missing (or held by another value), `-1` when
 * every key is held without expiry, else the smallest remaining ms. Built
 * by {@linkcode inspectCall}.
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

/**
 * KEYS: the resources. ARGV: the value, or "" for any holder (a key
 * reserved for a waiter counts as held).
 */
export function inspectCall(resources: readonly string[], value: string): ScriptCall {
  return { keys: resources, args: [value] };
}

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

/** A key beside `resource`, in its Redis Cluster hash slot (its hash tag, or itself as one). */
export function beside(resource: string, suffix: string): string {
  const open = resource.indexOf("{");
  const tagged = open !== -1 && resource.indexOf("}", open + 1) > open + 1;
  return tagged ? `${resource}:${suffix}` : `{${resource}}:${suffix}`;
}
