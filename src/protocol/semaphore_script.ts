/**
 * The Lua script of semaphores. A semaphore of `permits` is that many
 * slots, each an ordinary Redlock key (`{name}:sem:0`, `{name}:sem:1`, …);
 * a permit is one slot held on a quorum, released and extended by the
 * plain RELEASE and EXTEND scripts. Beside the slots, `{name}:sem:permits`
 * holds the number of slots the holders use, so that a holder that counts
 * differently is told.
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

/** SEM_ACQUIRE's `want` for "the lowest free slot". */
export const ANY_SLOT = -1;

/** SEM_ACQUIRE's flag for a value that holds no slot yet (its acquire's first round). */
const NEW_VALUE = "new";

/**
 * Takes a slot for the value: `want` (dropping any other slot the value
 * holds) or, for {@linkcode ANY_SLOT}, the one the value holds already or
 * else the lowest free one (a new value, ARGV[5], holds none: the first
 * free one will do). Replies the slot's index; when none is free,
 * `-3 - pttl` of the wanted slot (or of the slot that frees first), and a
 * watcher (ARGV[6] given) leaves the watcher marker in every slot's wait
 * queue, so that the release of any slot publishes (see RELEASE); when
 * the stored number of permits differs, `MISMATCH - stored` having written
 * nothing. The permits key outlives every slot taken with it by two
 * leases: it is written (for three leases) when it is missing, in the
 * same command that reads it, and set again when its TTL is below two
 * leases, so that the next acquires with that lease need not write it,
 * and a handle's acquires within a lease of this one may take a slot by
 * `SET NX` alone (see `Semaphore`).
 */
export const SEM_ACQUIRE: LuaScript = script(
  "sem-acquire",
  `local value, lease, permits = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local stored = redis.call("SET", KEYS[1], permits, "NX", "GET", "PX", 3 * lease)
if stored and stored ~= permits then return ${MISMATCH} - tonumber(stored) end
local p, want, took = tonumber(permits), tonumber(ARGV[4]), -1
if want >= 0 then
  for i = 0, p - 1 do
    if i ~= want and redis.call("GET", KEYS[i + 2]) == value then redis.call("DEL", KEYS[i + 2]) end
  end
  local holder = redis.call("GET", KEYS[want + 2])
  if holder and holder ~= value then return ${CONFLICT} - redis.call("PTTL", KEYS[want + 2]) end
  took = want
else
  local fresh, free, shortest = ARGV[5] == "${NEW_VALUE}", -1, nil
  for i = 0, p - 1 do
    local holder = redis.call("GET", KEYS[i + 2])
    if holder == value then
      took = i
      break
    elseif not holder then
      if free == -1 then free = i end
      if fresh then break end
    elseif free == -1 then
      local ttl = redis.call("PTTL", KEYS[i + 2])
      if shortest == nil or ttl < shortest then shortest = ttl end
    end
  end
  if took == -1 then took = free end
  if took == -1 then
    if ARGV[6] then
      for i = 0, p - 1 do
        local queue = KEYS[p + i + 2]
        redis.call("ZADD", queue, "NX", "+inf", "${WATCHER}")
        local life = math.max(redis.call("PTTL", KEYS[i + 2]), 0) + tonumber(ARGV[6])
        if redis.call("PTTL", queue) < life then redis.call("PEXPIRE", queue, life) end
      end
    end
    return ${CONFLICT} - shortest
  end
end
redis.call("SET", KEYS[took + 2], value, "PX", lease)
if stored and redis.call("PTTL", KEYS[1]) < 2 * lease then
  redis.call("SET", KEYS[1], permits, "PX", 3 * lease)
end
return took`,
);

/** The key that holds the number of permits of the semaphore `name`. */
export function permitsKey(name: string): string {
  return beside(name, "sem:permits");
}

/** The key of slot `index` of the semaphore `name`. */
export function slotKey(name: string, index: number): string {
  return beside(name, `sem:${index}`);
}

/**
 * KEYS: the permits key, then every slot (then, for a watcher, every
 * slot's wait queue). ARGV: value, lease, permits, the wanted slot,
 * whether the value is new (holds no slot), then, for a watcher, the ms
 * the queues outlive the slots' holders.
 */
export function semAcquireCall(
  name: string,
  permits: number,
  value: string,
  duration: number,
  want: number,
  options: { readonly fresh?: boolean; readonly queueLife?: number } = {},
): ScriptCall {
  const { fresh = false, queueLife = 0 } = options;
  const slots: string[] = [];
  for (let i = 0; i < permits; i++) slots.push(slotKey(name, i));
  const keys = [permitsKey(name), ...slots];
  const args = [value, String(duration), String(permits), String(want), fresh ? NEW_VALUE : ""];
  if (queueLife === 0) return { keys, args };
  return { keys: [...keys, ...slots.map(queueKey)], args: [...args, String(queueLife)] };
}

/**
 * EXTEND of a permit's slot that also renews the permits key, as
 * SEM_ACQUIRE does: written (for three leases) when it is missing, set
 * again when its TTL is below two leases, and left alone when it holds
 * another count. So the key outlives an extended permit, and a holder
 * counting differently is still told. Replies as EXTEND.
 */
export const SEM_EXTEND: LuaScript = script(
  "sem-extend",
  `local holder = redis.call("GET", KEYS[1])
if holder ~= ARGV[1] and not (holder == false and ARGV[3] == "${TAKE_FREE}") then
  return ${CONFLICT} - redis.call("PTTL", KEYS[1])
end
local lease, permits = tonumber(ARGV[2]), ARGV[4]
local stored = redis.call("SET", KEYS[2], permits, "NX", "GET", "PX", 3 * lease)
if stored == permits and redis.call("PTTL", KEYS[2]) < 2 * lease then
  redis.call("SET", KEYS[2], permits, "PX", 3 * lease)
end
if redis.call("PEXPIRE", KEYS[1], lease) == 0 then
  redis.call("SET", KEYS[1], ARGV[1], "PX", lease)
end
return 0`,
);

/** What a permit is: its semaphore's name and number of permits. */
export interface PermitTerms {
  readonly name: string;
  readonly permits: number;
}

/**
 * KEYS: the permit's slot, the permits key. ARGV: as EXTEND's, then the
 * number of permits.
 */
export function semExtendCall(
  slot: string,
  terms: PermitTerms,
  value: string,
  duration: number,
  onlyIfLocked: boolean,
): ScriptCall {
  const { args } = extendCall([slot], value, duration, onlyIfLocked);
  return { keys: [slot, permitsKey(terms.name)], args: [...args, String(terms.permits)] };
}
