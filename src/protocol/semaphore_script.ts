/**
 * The Lua script of semaphores. A semaphore of `permits` is that many
 * slots, each an ordinary Redlock key (`{name}:sem:0`, `{name}:sem:1`, …);
 * a permit is one slot held on a quorum, released and extended by the
 * plain RELEASE and EXTEND scripts; `k` permits are `k` slots, each held
 * on a quorum, taken all or none (one lock on the `k` slot keys). Beside
 * the slots, `{name}:sem:permits` holds the number of slots the holders
 * use, so that a holder that counts differently is told, and a wait queue
 * (`{name}:sem:queue`, with `{name}:sem:alive` and `{name}:sem:wants`)
 * serves waiters first come, first served.
 */

import { CONFLICT } from "./encoding.ts";
import {
  beside,
  extendCall,
  type LuaScript,
  queueKey,
  script,
  type ScriptCall,
  TAKE_FREE,
  WATCHER,
} from "./scripts.ts";

/**
 * A SEM_ACQUIRE reply at or below this tells a mismatch: the holders use
 * `MISMATCH - reply` permits. (Conflict replies, `-3 - pttl`, stay above it.)
 */
export const MISMATCH = -(2 ** 40);

/** SEM_ACQUIRE's `want` for "the lowest free slots". */
export const ANY_SLOT: readonly number[] = Object.freeze([]);

/** SEM_ACQUIRE's flag for a value that holds no slot yet (its acquire's first round). */
const NEW_VALUE = "new";

/**
 * A refusal's TTL when slots are free but waiters queued ahead need them
 * first: no holder's TTL bounds the wait then.
 */
export const QUEUED_AHEAD = 2 ** 31 - 1;

/**
 * Takes `count` slots for the value, all or none: the `want`ed ones
 * (dropping any other slot the value holds) or, for {@linkcode ANY_SLOT},
 * those the value holds already and else the lowest free ones (a new
 * value, ARGV[6], holds none: the first free ones will do).
 *
 * First come, first served: the live waiters queued ahead of the value's
 * ticket (for an acquire without one, `tryAcquire()`, every live waiter)
 * have the slots they asked for first, so it is refused when their counts
 * summed leave fewer than `count` of the slots that are free or the
 * value's. A waiter for many permits is not overtaken by later ones for
 * few, and waiters for few do not block each other while slots are free.
 * Stale waiters met on the way are dropped; a waiter whose count is not
 * stored counts as every permit.
 *
 * Replies the slot's index for one slot, the sorted indices for several;
 * when refused, `-3 - pttl` of the slot that frees first
 * ({@linkcode QUEUED_AHEAD} when only the queue refused), having dropped
 * every slot the value held here, queued the value at its ticket with its
 * count (alive for ARGV[8] ms more) and, for a watcher (ARGV[9]), left the
 * watcher marker in every slot's wait queue, so that the release of any
 * slot publishes (see RELEASE); when the stored number of permits differs,
 * `MISMATCH - stored` having written nothing. The permits key outlives
 * every slot taken with it by two leases: it is written (for three leases)
 * when it is missing, in the same command that reads it, and set again
 * when its TTL is below two leases, so that the next acquires with that
 * lease need not write it, and a handle's acquires within a lease of this
 * one may take a slot by `SET NX` alone (see `Semaphore`).
 */
export const SEM_ACQUIRE: LuaScript = script(
  "sem-acquire",
  `local value, lease, permits = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local stored = redis.call("SET", KEYS[1], permits, "NX", "GET", "PX", 3 * lease)
if stored and stored ~= permits then return ${MISMATCH} - tonumber(stored) end
local p, k, ticket = tonumber(permits), tonumber(ARGV[5]), ARGV[7]
local queue, alive, wants = KEYS[2], KEYS[3], KEYS[4]
local function clock()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function room()
  local n = 0
  for i = 0, p - 1 do
    local holder = redis.call("GET", KEYS[i + 5])
    if not holder or holder == value then n = n + 1 end
  end
  return n
end
local function ahead()
  if redis.call("EXISTS", queue) == 0 then return false end
  local now, before = clock(), ticket == "" and "+inf" or "(" .. ticket
  local need, free = k, nil
  for _, other in ipairs(redis.call("ZRANGE", queue, "-inf", before, "BYSCORE")) do
    if other ~= value then
      if tonumber(redis.call("ZSCORE", alive, other) or "0") > now then
        free = free or room()
        need = need + tonumber(redis.call("ZSCORE", wants, other) or permits)
        if need > free then return true end
      else
        redis.call("ZREM", queue, other)
        redis.call("ZREM", alive, other)
        redis.call("ZREM", wants, other)
      end
    end
  end
  return false
end
local took, shortest, refused = {}, nil, false
local function conflict(i)
  local ttl = redis.call("PTTL", KEYS[i + 5])
  if shortest == nil or ttl < shortest then shortest = ttl end
end
if ARGV[4] ~= "" then
  local wanted = {}
  for slot in string.gmatch(ARGV[4], "%d+") do wanted[tonumber(slot)] = true end
  for i = 0, p - 1 do
    local holder = redis.call("GET", KEYS[i + 5])
    if wanted[i] then
      if holder and holder ~= value then
        refused = true
        conflict(i)
      else
        took[#took + 1] = i
      end
    elseif holder == value then
      redis.call("DEL", KEYS[i + 5])
    end
  end
else
  local fresh, free = ARGV[6] == "${NEW_VALUE}", {}
  for i = 0, p - 1 do
    local holder = redis.call("GET", KEYS[i + 5])
    if holder == value then
      if #took < k then took[#took + 1] = i else redis.call("DEL", KEYS[i + 5]) end
    elseif not holder then
      if #free < k then free[#free + 1] = i end
      if fresh and #free == k then break end
    else
      conflict(i)
    end
  end
  for _, i in ipairs(free) do
    if #took < k then took[#took + 1] = i end
  end
  refused = #took < k
end
if refused or ahead() then
  for i = 0, p - 1 do
    if redis.call("GET", KEYS[i + 5]) == value then redis.call("DEL", KEYS[i + 5]) end
  end
  if ticket ~= "" then
    local life = tonumber(ARGV[8])
    redis.call("ZADD", queue, ticket, value)
    redis.call("ZADD", alive, clock() + life, value)
    redis.call("ZADD", wants, k, value)
    for _, key in ipairs({queue, alive, wants}) do
      if redis.call("PTTL", key) < life then redis.call("PEXPIRE", key, life) end
    end
  end
  if ARGV[9] then
    for i = 0, p - 1 do
      local watchers = KEYS[p + i + 5]
      redis.call("ZADD", watchers, "NX", "+inf", "${WATCHER}")
      local life = math.max(redis.call("PTTL", KEYS[i + 5]), 0) + tonumber(ARGV[9])
      if redis.call("PTTL", watchers) < life then redis.call("PEXPIRE", watchers, life) end
    end
  end
  return ${CONFLICT} - (shortest or ${QUEUED_AHEAD})
end
if ticket ~= "" then
  redis.call("ZREM", queue, value)
  redis.call("ZREM", alive, value)
  redis.call("ZREM", wants, value)
end
table.sort(took)
for _, i in ipairs(took) do redis.call("SET", KEYS[i + 5], value, "PX", lease) end
if stored and redis.call("PTTL", KEYS[1]) < 2 * lease then
  redis.call("SET", KEYS[1], permits, "PX", 3 * lease)
end
if k == 1 then return took[1] end
return took`,
);

/**
 * Leaves the semaphore's wait queue (KEYS: the queue, the alive set, the
 * wants set; ARGV: the value). Replies how many it took out of the alive set.
 */
export const SEM_LEAVE: LuaScript = script(
  "sem-leave",
  `redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("ZREM", KEYS[3], ARGV[1])
return redis.call("ZREM", KEYS[2], ARGV[1])`,
);

/** KEYS and ARGV of SEM_LEAVE. */
export function semLeaveCall(name: string, value: string): ScriptCall {
  return { keys: [semQueueKey(name), semAliveKey(name), semWantsKey(name)], args: [value] };
}

/** The key that holds the number of permits of the semaphore `name`. */
export function permitsKey(name: string): string {
  return beside(name, "sem:permits");
}

/**
 * The wait queue of the semaphore `name`: a sorted set of waiting values
 * scored by their tickets (first come, first served).
 */
export function semQueueKey(name: string): string {
  return beside(name, "sem:queue");
}

/**
 * Until when each queued value of the semaphore `name` is alive: a sorted
 * set of the values scored by their deadlines in the server's time.
 */
export function semAliveKey(name: string): string {
  return beside(name, "sem:alive");
}

/**
 * How many permits each queued value of the semaphore `name` asks for: a
 * sorted set of the values in its wait queue scored by their counts.
 */
export function semWantsKey(name: string): string {
  return beside(name, "sem:wants");
}

/** The key of slot `index` of the semaphore `name`. */
export function slotKey(name: string, index: number): string {
  return beside(name, `sem:${index}`);
}

/** What a SEM_ACQUIRE call asks for besides the name, permits, value and lease. */
export interface SemAcquireTerms {
  /** The slots wanted, or {@linkcode ANY_SLOT}'s `[]` for any `count`. */
  readonly want: readonly number[];
  /** How many slots. @default {1} */
  readonly count?: number;
  /** Whether the value holds no slot yet (the acquire's first round). @default {false} */
  readonly fresh?: boolean;
  /** The value's place in the wait queue (its acquire's start), or "" for none. @default {""} */
  readonly ticket?: string;
  /** ms a queued value stays alive without another attempt. @default {0} */
  readonly aliveFor?: number;
  /** ms the slots' watcher markers outlive their holders; 0: not a watcher. @default {0} */
  readonly queueLife?: number;
}

/**
 * KEYS: the permits key, the wait queue, its alive and wants sets, then
 * every slot (then, for a watcher, every slot's wait queue). ARGV: value, lease,
 * permits, the wanted slots (comma-separated, "" for any), how many,
 * whether the value is new, its ticket, ms it stays queued, then, for a
 * watcher, the ms the slots' wait queues outlive their holders.
 */
export function semAcquireCall(
  name: string,
  permits: number,
  value: string,
  duration: number,
  terms: SemAcquireTerms,
): ScriptCall {
  const { want, count = 1, fresh = false, ticket = "", aliveFor = 0, queueLife = 0 } = terms;
  const slots: string[] = [];
  for (let i = 0; i < permits; i++) slots.push(slotKey(name, i));
  const keys = [permitsKey(name), semQueueKey(name), semAliveKey(name), semWantsKey(name)];
  keys.push(...slots);
  const args = [
    value,
    String(duration),
    String(permits),
    want.join(","),
    String(count),
    fresh ? NEW_VALUE : "",
    ticket,
    String(aliveFor),
  ];
  if (queueLife === 0) return { keys, args };
  return { keys: [...keys, ...slots.map(queueKey)], args: [...args, String(queueLife)] };
}

/**
 * EXTEND of a permit's slots (one, or `k` for `k` permits, all or none)
 * that also renews the permits key (the last key), as SEM_ACQUIRE does: written (for three leases) when it is missing, set
 * again when its TTL is below two leases, and left alone when it holds
 * another count. So the key outlives an extended permit, and a holder
 * counting differently is still told. Replies as EXTEND.
 */
export const SEM_EXTEND: LuaScript = script(
  "sem-extend",
  `local slots, key = #KEYS - 1, KEYS[#KEYS]
for i = 1, slots do
  local holder = redis.call("GET", KEYS[i])
  if holder ~= ARGV[1] and not (holder == false and ARGV[3] == "${TAKE_FREE}") then
    return ${CONFLICT} - redis.call("PTTL", KEYS[i])
  end
end
local lease, permits = tonumber(ARGV[2]), ARGV[4]
local stored = redis.call("SET", key, permits, "NX", "GET", "PX", 3 * lease)
if stored == permits and redis.call("PTTL", key) < 2 * lease then
  redis.call("SET", key, permits, "PX", 3 * lease)
end
for i = 1, slots do
  if redis.call("PEXPIRE", KEYS[i], lease) == 0 then
    redis.call("SET", KEYS[i], ARGV[1], "PX", lease)
  end
end
return 0`,
);

/** What a permit is: its semaphore's name and number of permits. */
export interface PermitTerms {
  readonly name: string;
  readonly permits: number;
}

/**
 * KEYS: the permit's slots, then the permits key. ARGV: as EXTEND's, then
 * the number of permits.
 */
export function semExtendCall(
  slots: readonly string[],
  terms: PermitTerms,
  value: string,
  duration: number,
  onlyIfLocked: boolean,
): ScriptCall {
  const { args } = extendCall(slots, value, duration, onlyIfLocked);
  return { keys: [...slots, permitsKey(terms.name)], args: [...args, String(terms.permits)] };
}
