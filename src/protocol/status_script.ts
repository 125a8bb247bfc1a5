/**
 * The read-only Lua script behind `redlock status`: what one server holds
 * for a name as a plain lock, a read-write lock and a semaphore, never a
 * holder's value. It writes nothing.
 *
 * @module
 */

import { fenceKey, type LuaScript, queueKey, script, type ScriptCall, WATCHER } from "./scripts.ts";
import { GATE, rwKeys } from "./read_write_scripts.ts";
import { permitsKey, semAliveKey, slotKey } from "./semaphore_script.ts";

/** What the writer's key of a read-write lock holds, as STATUS replies it. */
export const WRITER_STATE = Object.freeze({
  /** No key: nobody holds. */
  none: 0,
  /** A writer's value. */
  writer: 1,
  /** Readers in the readers' set. */
  readers: 2,
  /** One reader alone. */
  lone: 3,
  /** Nobody holds; a writer waits. */
  writersOnly: 4,
});

/** The number of integers before the held slots in a STATUS reply. */
export const STATUS_FIELDS = 10;

/**
 * Replies a flat array of integers: the lock key's PTTL (-2 missing), the
 * values queued for it, whether somebody watches it (1/0), its fencing
 * counter (-1 none); the read-write lock's {@linkcode WRITER_STATE}, the
 * writer key's PTTL, its live readers, whether a writer waits (1/0); the
 * semaphore's stored permits (-1 none), its live waiters; then the index
 * of every slot held (KEYS past the eighth are the slots, in order).
 */
export const STATUS: LuaScript = script(
  "status",
  `local t = redis.call("TIME")
local clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local queued = redis.call("ZCARD", KEYS[2])
local watched = redis.call("ZSCORE", KEYS[2], "${WATCHER}") and 1 or 0
local reply = {redis.call("PTTL", KEYS[1]), queued - watched, watched}
reply[4] = tonumber(redis.call("GET", KEYS[3]) or "-1") or -1
local writer, state, readers = redis.call("GET", KEYS[4]), ${WRITER_STATE.none}, 0
if writer == "${GATE.readers}" then
  state = ${WRITER_STATE.readers}
elseif writer == "${GATE.writersOnly}" then
  state = ${WRITER_STATE.writersOnly}
elseif writer and string.sub(writer, 1, ${GATE.lone.length}) == "${GATE.lone}" then
  state, readers = ${WRITER_STATE.lone}, 1
elseif writer then
  state = ${WRITER_STATE.writer}
end
if state == ${WRITER_STATE.readers} then readers = redis.call("ZCOUNT", KEYS[5], "(" .. clock, "+inf") end
reply[5], reply[6], reply[7] = state, redis.call("PTTL", KEYS[4]), readers
reply[8] = redis.call("EXISTS", KEYS[6])
reply[9] = tonumber(redis.call("GET", KEYS[7]) or "-1") or -1
reply[10] = redis.call("ZCOUNT", KEYS[8], "(" .. clock, "+inf")
for i = 9, #KEYS do
  if redis.call("EXISTS", KEYS[i]) == 1 then reply[#reply + 1] = i - 9 end
end
return reply`,
);

/**
 * KEYS: the lock, its wait queue and fencing counter, the read-write
 * lock's writer, readers and waiting keys, the semaphore's permits key and
 * live waiters, then `slots` slots.
 */
export function statusCall(name: string, slots: number): ScriptCall {
  const [writer, readers, waiting] = rwKeys(name);
  const keys = [name, queueKey(name), fenceKey(name), writer!, readers!, waiting!];
  keys.push(permitsKey(name), semAliveKey(name));
  for (let i = 0; i < slots; i++) keys.push(slotKey(name, i));
  return { keys, args: [] };
}
