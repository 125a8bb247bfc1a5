/**
 * The encodings the Lua scripts and the TypeScript share, named once: the
 * scripts' text is built from these constants (see `tests/unit_test.ts`),
 * so that what a script writes and what the code reads back cannot part.
 *
 * @module
 */

/** The largest lease Redis's `PX` takes that fits in a 32-bit timer: 2^31 − 1 ms. */
export const MAX_DURATION = 2 ** 31 - 1;

/**
 * The base of a refusal: a script replies `CONFLICT - pttl` (`pttl` of the
 * key held by another, −1 without expiry, −2 missing), a negative integer,
 * where a grant replies a number ≥ 0.
 */
export const CONFLICT = -3;

/** The holder's PTTL that a refusal `reply` (see {@linkcode CONFLICT}) tells. */
export function conflictTtl(reply: number): number {
  return CONFLICT - reply;
}

/**
 * The prefix of a key that a release reserved for the first waiter of its
 * queue: `?` and the waiter's value, which only that value can take.
 */
export const RESERVED = "?";

/** The prefix of the channel a release of a resource is published on. */
export const RELEASE_CHANNEL = "redlock:release:";

/** The prefix of a Redlock's wake channel (its id follows). */
export const WAKE_CHANNEL = "redlock:wake:";

/**
 * The channel a release of `resource` is published on when nobody queues
 * for it (the release frees the key for anyone).
 */
export function releaseChannel(resource: string): string {
  return RELEASE_CHANNEL + resource;
}

/**
 * The channel of the waiting acquires of one Redlock, by its id (the part of
 * their lock values before the colon): a release that reserved a key for
 * one of them (the first of the key's wait queue) publishes its value there.
 */
export function wakeChannel(id: string): string {
  return WAKE_CHANNEL + id;
}

/**
 * How many request timeouts a wait queue, or a watcher's mark, outlives
 * the holder's TTL: long enough for a refused waiter's next attempt.
 */
const QUEUE_LIFE_TIMEOUTS = 4;

/** The ms a wait queue or watcher's mark outlives the holder, for `requestTimeout`. */
export function queueLife(requestTimeout: number): number {
  return QUEUE_LIFE_TIMEOUTS * requestTimeout;
}

/**
 * A lock value: the Redlock's id (which names its wake channel), a count in
 * base 36, and the lease in ms a release hands the key over for (0: only
 * reserve it). RELEASE reads the id and the lease back with
 * {@linkcode LUA_VALUE_ID} and {@linkcode LUA_VALUE_LEASE}.
 */
export function lockValue(id: string, count: number, lease: number): string {
  return `${id}:${count.toString(36)}:${lease}`;
}

/** The Lua pattern of a lock value's id (see {@linkcode lockValue}). */
export const LUA_VALUE_ID = "^[^:]*";

/** The Lua pattern of a lock value's lease (see {@linkcode lockValue}). */
export const LUA_VALUE_LEASE = ":(%d+)$";
