/**
 * The Lua scripts of read-write locks: one call per server per operation
 * (read, write, release; extend is a read or write that must already
 * hold), each replying with an integer as the plain lock's scripts do:
 * `≥ 0` for, `-3 - pttl` against. Every key of one lock shares the hash tag
 * of its name, so a Redis Cluster keeps them in one slot.
 *
 * Per server: the writer's key (its value, with PX), the readers' sorted
 * set (values scored by their expiry in the server's own time, from `TIME`;
 * an expired one counts as gone, and a writer or a reader's release drops
 * it), the waiting writer's mark (its value,
 * with PX, refreshed by each of its attempts), and the watched flag (set by
 * a refused waiter that listens, naming readers, writers or both, so that
 * a release that frees the lock for them publishes).
 */

import { beside, type LuaScript, script, type ScriptCall } from "./scripts.ts";
import { releaseChannel } from "./subscriber.ts";

/** The mode of a read-write lock. */
export type Mode = "read" | "write";

/** What a READ or WRITE call does. */
export const RW_HOW = Object.freeze({
  /** Takes the lock when it is free for the mode. */
  acquire: "acquire",
  /** Renews the lock only while the value holds it. */
  extend: "extend",
  /** Renews the lock, or takes it again when it is free (`onlyIfLocked: false`). */
  extendOrTake: "extend-or-take",
});

/** One of {@linkcode RW_HOW}'s values. */
export type RwHow = typeof RW_HOW[keyof typeof RW_HOW];

/** What a RW_RELEASE call lets go of. */
export const RW_RELEASE_MODE = Object.freeze({
  /** The value's read lock. */
  read: "read",
  /** The value's write lock and its mark. */
  write: "write",
  /** Only the write lock a failed attempt took: the writer still waits, its mark stays. */
  undoWrite: "undo-write",
});

/** One of {@linkcode RW_RELEASE_MODE}'s values. */
export type RwReleaseMode = typeof RW_RELEASE_MODE[keyof typeof RW_RELEASE_MODE];

/** The flag of a refused caller that listens for the release. */
const WATCH = "watch";

/** The flag of a write attempt that may have left its mark (an earlier one was refused). */
const MARKED = "marked";

/** Lua shared by the scripts: the keys, the value and the lease. */
const PROLOGUE = `local writer, readers, waiting, watched = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local value, lease, how = ARGV[1], tonumber(ARGV[2]), ARGV[3]
`;

/** Lua: the server's time in ms, read only where a script needs it. */
const CLOCK = `local function clock()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`;

/** Who a watched flag says listens: readers, writers, or both. */
const WATCHERS = Object.freeze({ readers: "r", writers: "w", both: "rw" });

/**
 * Lua: a refused caller that listens adds its kind (`role`, one of
 * {@linkcode WATCHERS}) to the watched flag (ARGV[6], ARGV[7]).
 */
const REFUSED = `local function refused(ttl, role)
  if ARGV[6] == "${WATCH}" then
    local flag = redis.call("GET", watched)
    if flag and flag ~= role then role = "${WATCHERS.both}" end
    redis.call("SET", watched, role, "PX", math.max(ttl, 0) + tonumber(ARGV[7]))
  end
  return -3 - ttl
end
`;

/**
 * Takes (or renews) a read lock for the value: refused while a writer
 * holds the lock or waits for it (then `-3 - pttl` of the writer's key or
 * mark). The reader's entry expires `lease` ms from now in the server's
 * time; the set outlives its last entry. An acquire's value is new, so it
 * asks for no entry of its own; expired entries are left for a writer or
 * a reader's release to drop (every check reads scores against `TIME`).
 */
export const RW_READ: LuaScript = script(
  "rw-read",
  PROLOGUE + CLOCK + REFUSED + `local now
if how ~= "${RW_HOW.acquire}" then
  now = clock()
  local held = tonumber(redis.call("ZSCORE", readers, value))
  if held == nil or held <= now then
    if how == "${RW_HOW.extend}" then return -1 end
    how = "${RW_HOW.acquire}"
  end
end
if how == "${RW_HOW.acquire}" and redis.call("EXISTS", writer, waiting) > 0 then
  local ttl = redis.call("PTTL", writer)
  if ttl == -2 then ttl = redis.call("PTTL", waiting) end
  if ttl ~= -2 then return refused(ttl, "${WATCHERS.readers}") end
end
redis.call("ZADD", readers, (now or clock()) + lease, value)
if redis.call("PTTL", readers) < lease then redis.call("PEXPIRE", readers, lease) end
return 0`,
);

/**
 * Takes (or renews) the write lock for the value: refused while another
 * writer holds it (`-3 - pttl` of its key) or any reader does (`-3 -` the
 * ms until the last reader expires; a set of expired readers only is
 * dropped). A refused acquire leaves its mark, which blocks new readers,
 * unless another writer's mark is there; the grant removes the value's
 * own mark when an earlier attempt may have left one (ARGV[5]).
 */
export const RW_WRITE: LuaScript = script(
  "rw-write",
  PROLOGUE + CLOCK + REFUSED + `local holder = redis.call("GET", writer)
if holder == value then
  redis.call("SET", writer, value, "PX", lease)
  return 0
end
if how == "${RW_HOW.extend}" then return -3 - redis.call("PTTL", writer) end
local ttl = -2
if holder then
  ttl = redis.call("PTTL", writer)
else
  local last = redis.call("ZRANGE", readers, -1, -1, "WITHSCORES")[2]
  if last then
    ttl = tonumber(last) - clock()
    if ttl <= 0 then
      redis.call("DEL", readers)
      ttl = -2
    end
  end
end
if ttl ~= -2 then
  if how == "${RW_HOW.acquire}" then
    local mark = redis.call("GET", waiting)
    if not mark or mark == value then redis.call("SET", waiting, value, "PX", ARGV[4]) end
  end
  return refused(ttl, "${WATCHERS.writers}")
end
redis.call("SET", writer, value, "PX", lease)
if ARGV[5] == "${MARKED}" and redis.call("GET", waiting) == value then
  redis.call("DEL", waiting)
end
return 0`,
);

/**
 * Releases the value's read or write lock (and, for a writer that is
 * done, its mark; see {@linkcode RW_RELEASE_MODE}), and wakes those it
 * freed the lock for when they listen (the watched flag names them).
 * The last unexpired reader's release frees it for writers only: it
 * publishes on the release channel of the readers' key when a writer
 * listens, and leaves waiting readers asleep. The writer's key or mark
 * going frees it for all: it publishes on the release channel of the
 * writer's key (readers and writers listen there). A reader's release
 * that leaves others drops the expired ones. Replies how many locks the
 * value held (0 or 1).
 */
export const RW_RELEASE: LuaScript = script(
  "rw-release",
  PROLOGUE + CLOCK + `local count, freed = 0, false
local channel = "${releaseChannel("")}"
if how == "${RW_RELEASE_MODE.read}" then
  count = redis.call("ZREM", readers, value)
  if count > 0 then
    freed = redis.call("EXISTS", readers) == 0
    if not freed then
      redis.call("ZREMRANGEBYSCORE", readers, "-inf", clock())
      freed = redis.call("EXISTS", readers) == 0
    end
  end
  local flag = freed and redis.call("GET", watched)
  if flag and flag ~= "${WATCHERS.readers}" then
    if flag == "${WATCHERS.both}" then
      redis.call("SET", watched, "${WATCHERS.readers}", "KEEPTTL")
    else
      redis.call("DEL", watched)
    end
    redis.call("PUBLISH", channel .. readers, "")
  end
  return count
end
if redis.call("GET", writer) == value then
  redis.call("DEL", writer)
  count, freed = 1, true
end
if how == "${RW_RELEASE_MODE.write}" and redis.call("GET", waiting) == value then
  redis.call("DEL", waiting)
  freed = true
end
if freed and redis.call("DEL", watched) == 1 then
  redis.call("PUBLISH", channel .. writer, "")
end
return count`,
);

/** Replies 0 while the value holds the lock in the mode (`how`), else -1. */
export const RW_HOLDS: LuaScript = script(
  "rw-holds",
  PROLOGUE + CLOCK + `if how == "read" then
  local held = tonumber(redis.call("ZSCORE", readers, value))
  if held and held > clock() then return 0 end
elseif redis.call("GET", writer) == value then
  return 0
end
return -1`,
);

/** The keys of the read-write lock `name`, in the order the scripts take them. */
export function rwKeys(name: string): readonly string[] {
  return Object.freeze(
    ["writer", "readers", "waiting", "watched"].map((s) => beside(name, `rw:${s}`)),
  );
}

/** What a READ or WRITE call asks besides the keys and value. */
export interface RwTerms {
  /** The lease in ms. */
  readonly duration: number;
  readonly how: RwHow;
  /** ms the watched flag outlives the holder when a refused caller listens; 0: no flag. */
  readonly watchLife: number;
  /** ms a refused writer's mark lasts (it is renewed by every attempt). */
  readonly markLife: number;
  /** Whether an earlier attempt of this acquire may have left the writer's mark. */
  readonly marked?: boolean;
}

/**
 * KEYS: writer, readers, waiting mark, watched flag. ARGV: value, lease,
 * how, ms the mark lasts, whether the value may have a mark, and for a
 * caller that listens the watch flag and the ms it outlives the holder.
 */
export function rwCall(keys: readonly string[], value: string, terms: RwTerms): ScriptCall {
  const { duration, how, watchLife, markLife, marked = false } = terms;
  const args = [
    value,
    String(duration),
    how,
    String(Math.max(1, Math.ceil(markLife))),
    marked ? MARKED : "",
  ];
  if (watchLife > 0) args.push(WATCH, String(watchLife));
  return { keys, args };
}

/**
 * KEYS: the lock's four keys. ARGV: value, 0, the mode (a {@linkcode Mode}
 * for RW_HOLDS, a {@linkcode RwReleaseMode} for RW_RELEASE).
 */
export function rwModeCall(
  keys: readonly string[],
  value: string,
  mode: Mode | RwReleaseMode,
): ScriptCall {
  return { keys, args: [value, "0", mode] };
}
