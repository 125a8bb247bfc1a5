/**
 * The Lua scripts of read-write locks: one call per server per operation
 * (read, write, release; extend is a read or write that must already
 * hold), each replying with an integer as the plain lock's scripts do:
 * `≥ 0` for, `-3 - pttl` against. Every key of one lock shares the hash tag
 * of its name, so a Redis Cluster keeps them in one slot.
 *
 * Per server: the writer's key, the readers' sorted set (values scored by
 * their expiry in the server's own time, from `TIME`; an expired one
 * counts as gone, and a writer or a reader's release drops it), the
 * waiting writer's mark (its value, with PX, refreshed by each of its
 * attempts), and the watched flag (set by a refused waiter that listens,
 * naming readers, writers or both, so that a release that frees the lock
 * for them publishes).
 *
 * The writer's key is the lock's gate: it exists whenever anybody holds
 * the lock, and outlives every holder. It holds a writer's value, or one
 * reader alone (`r:` and its value, see {@linkcode GATE}), or, while the
 * readers' set has readers, `r`; after the last holder, while a writer
 * waits, `?` (free for writers only). So a `SET NX` of the writer's key
 * that succeeds finds nobody holding: it takes the lock for a writer, or
 * for a reader alone, without a script (see docs/protocol.md).
 */

import { beside, type LuaScript, script, type ScriptCall } from "./scripts.ts";
import { CONFLICT, releaseChannel } from "./encoding.ts";

/** The mode of a read-write lock. */
export type Mode = "read" | "write";

/** What the writer's key holds besides a writer's value (values never start so). */
export const GATE = Object.freeze({
  /** The readers in the readers' set hold; the key outlives the last of them. */
  readers: "r",
  /** Prefix of a reader that holds alone: `r:` and its value. */
  lone: "r:",
  /** Nobody holds and a writer waits: free for writers, closed to readers. */
  writersOnly: "?",
});

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

/** Lua shared by the scripts: the keys, the value, the lease and the gate's values. */
const PROLOGUE = `local writer, readers, waiting, watched = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local value, lease, how = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local READERS, LONE, WRITERS_ONLY = "${GATE.readers}", "${GATE.lone}", "${GATE.writersOnly}"
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
  return ${CONFLICT} - ttl
end
`;

/**
 * Takes (or renews) a read lock for the value: refused while a writer
 * holds the lock or waits for it (then `-3 - pttl` of the writer's key or
 * mark). A reader alone in the writer's key (taken by `SET NX`; an
 * acquire's script round after it renews it from its own start) renews
 * there; any other joins the readers' set, its entry expiring `lease` ms
 * from now in the server's time, with a lone reader moved in beside it,
 * and the writer's key (`r`) and the set outliving every entry. An
 * acquire's value is new, so it asks for no entry of its own; expired
 * entries are left for a writer or a reader's release to drop.
 */
export const RW_READ: LuaScript = script(
  "rw-read",
  PROLOGUE + CLOCK + REFUSED + `local holder = redis.call("GET", writer)
if holder == LONE .. value then
  redis.call("PEXPIRE", writer, lease)
  return 0
end
local now
if how ~= "${RW_HOW.acquire}" then
  now = clock()
  local held = tonumber(redis.call("ZSCORE", readers, value))
  if held == nil or held <= now then
    if how == "${RW_HOW.extend}" then return -1 end
    how = "${RW_HOW.acquire}"
  end
end
local lone = holder and string.sub(holder, 1, 2) == LONE
if holder and not lone and holder ~= READERS and holder ~= WRITERS_ONLY then
  return refused(redis.call("PTTL", writer), "${WATCHERS.readers}")
end
if how == "${RW_HOW.acquire}" then
  local ttl = redis.call("PTTL", waiting)
  if ttl ~= -2 then return refused(ttl, "${WATCHERS.readers}") end
end
now = now or clock()
local cover = lease
if lone then
  local left = redis.call("PTTL", writer)
  cover = math.max(lease, left)
  redis.call("ZADD", readers, now + left, string.sub(holder, 3))
end
redis.call("ZADD", readers, now + lease, value)
if redis.call("PTTL", readers) < cover then redis.call("PEXPIRE", readers, cover) end
if holder == READERS then
  redis.call("PEXPIRE", writer, cover, "GT")
else
  redis.call("SET", writer, READERS, "PX", cover)
end
return 0`,
);

/**
 * Takes (or renews) the write lock for the value: refused while another
 * writer or a lone reader holds it (`-3 - pttl` of its key) or readers do
 * (`-3 -` the ms until the last reader expires; a set of expired readers
 * only is dropped). A refused acquire leaves its mark, which blocks new
 * readers, unless another writer's mark is there; the grant removes the
 * value's own mark when an earlier attempt may have left one (ARGV[5]).
 */
export const RW_WRITE: LuaScript = script(
  "rw-write",
  PROLOGUE + CLOCK + REFUSED + `local holder = redis.call("GET", writer)
if holder == value then
  redis.call("SET", writer, value, "PX", lease)
  return 0
end
if how == "${RW_HOW.extend}" then return ${CONFLICT} - redis.call("PTTL", writer) end
local ttl = -2
if holder == READERS then
  local last = redis.call("ZRANGE", readers, -1, -1, "WITHSCORES")[2]
  if last then
    ttl = tonumber(last) - clock()
    if ttl <= 0 then
      redis.call("DEL", readers)
      ttl = -2
    end
  end
elseif holder and holder ~= WRITERS_ONLY then
  ttl = redis.call("PTTL", writer)
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
 * When the last holder goes, the writer's key goes too, or, while a
 * writer's mark is there, stays `?` for as long as the mark. The last
 * unexpired reader's release frees the lock for writers only: it
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
local holder = redis.call("GET", writer)
local function free(marked)
  if marked then
    redis.call("SET", writer, WRITERS_ONLY, "PX", math.max(redis.call("PTTL", waiting), 1))
  else
    redis.call("DEL", writer)
  end
end
if how == "${RW_RELEASE_MODE.read}" then
  if holder == LONE .. value then
    count, freed = 1, true
  else
    count = redis.call("ZREM", readers, value)
    if count > 0 and holder == READERS then
      freed = redis.call("EXISTS", readers) == 0
      if not freed then
        redis.call("ZREMRANGEBYSCORE", readers, "-inf", clock())
        freed = redis.call("EXISTS", readers) == 0
      end
    end
  end
  if freed then free(redis.call("EXISTS", waiting) == 1) end
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
local mark = redis.call("GET", waiting)
if how == "${RW_RELEASE_MODE.write}" and mark == value then
  redis.call("DEL", waiting)
  mark, freed = false, true
end
if holder == value or (freed and holder == WRITERS_ONLY) then
  if holder == value then count = 1 end
  free(mark)
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
  if redis.call("GET", writer) == LONE .. value then return 0 end
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
