/**
 * A read-only look at a name on every server: the plain lock (TTL,
 * waiters, fencing counter), the read-write lock (a writer or readers) and
 * the semaphore (permits in use), per server and as a quorum's verdict.
 * Never a holder's value.
 *
 * @module
 */

import type { Redlock } from "../api/redlock.ts";
import { contextOf } from "../api/redlock_context.ts";
import { STATUS, STATUS_FIELDS, statusCall, WRITER_STATE } from "../protocol/status_script.ts";
import type { Member } from "../quorum/round.ts";
import { within } from "../util/delay.ts";
import { drift, now } from "../util/time.ts";
import { describeValue } from "../util/validate.ts";

/** What one server holds for a name; `error` when it did not answer. */
export interface ServerStatus {
  /** The server's index in the Redlock. */
  readonly server: number;
  /** Why the server could not tell, if it could not. */
  readonly error?: string;
  /** The lock key's remaining ms: null when missing, Infinity without expiry. */
  readonly ttl: number | null;
  /** Values queued for the lock. */
  readonly waiters: number;
  /** Whether waiters watch the lock for its release (they are not counted). */
  readonly watched: boolean;
  /** The lock's fencing counter, or null when it never fenced. */
  readonly fencing: number | null;
  /** The read-write lock's writer (ms left), or null. */
  readonly writer: number | null;
  /** The read-write lock's live readers. */
  readonly readers: number;
  /** Whether a writer waits for the read-write lock. */
  readonly writerWaiting: boolean;
  /** The semaphore's permits as its holders stored them, or null. */
  readonly permits: number | null;
  /** The semaphore's slots held on this server. */
  readonly slots: readonly number[];
  /** Acquires waiting for the semaphore. */
  readonly semaphoreWaiters: number;
}

/** A quorum's verdict on one kind of lock: held, free, or unknown (no quorum either way). */
export type Verdict = "held" | "free" | "unknown";

/** The servers' views of a name and a quorum's verdicts. */
export interface NameStatus {
  readonly name: string;
  /** How many servers make a quorum. */
  readonly quorum: number;
  /** Held when any kind is held on a quorum; unknown when none is and a kind is undecided. */
  readonly verdict: Verdict;
  /** The plain lock on a quorum, its ms left (the quorum's), waiters and fencing counter. */
  readonly lock: {
    readonly verdict: Verdict;
    readonly ttl: number | null;
    readonly waiters: number;
    readonly watched: boolean;
    readonly fencing: number | null;
  };
  /** The read-write lock: a writer, readers (on a quorum), or nobody. */
  readonly readWrite: {
    readonly verdict: Verdict;
    readonly writer: boolean;
    readonly readers: number;
    readonly writerWaiting: boolean;
  };
  /** The semaphore, when its permits are stored: slots held on a quorum of `permits`. */
  readonly semaphore: {
    readonly verdict: Verdict;
    readonly permits: number;
    readonly inUse: number;
    readonly waiters: number;
  } | null;
  /** Each server's view, in the Redlock's order. */
  readonly servers: readonly ServerStatus[];
}

/** The integers of a STATUS reply, or a TypeError for anything else. */
function integers(reply: unknown, server: number): number[] {
  if (
    !Array.isArray(reply) || reply.length < STATUS_FIELDS ||
    !reply.every((n) => Number.isInteger(Number(n)))
  ) {
    throw new TypeError(`server ${server} sent an unexpected reply: ${describeValue(reply)}`);
  }
  return reply.map(Number);
}

/** One server's view: STATUS, then once more with the slots when it stores permits. */
async function readServer(member: Member, name: string): Promise<ServerStatus> {
  const run = async (slots: number) => {
    const call = statusCall(name, slots);
    const reply = await member.runner.evalScript(STATUS, call.keys, call.args);
    return integers(reply, member.index);
  };
  let r = await run(0);
  if (r[8]! > 0) r = await run(r[8]!);
  const state = r[4]!;
  const held = state === WRITER_STATE.writer;
  return {
    server: member.index,
    ttl: r[0] === -2 ? null : r[0] === -1 ? Infinity : r[0]!,
    waiters: r[1]!,
    watched: r[2] === 1,
    fencing: r[3]! < 0 ? null : r[3]!,
    writer: held ? (r[5] === -1 ? Infinity : Math.max(r[5]!, 0)) : null,
    readers: r[6]!,
    writerWaiting: r[7] === 1,
    permits: r[8]! < 0 ? null : r[8]!,
    slots: r.slice(STATUS_FIELDS),
    semaphoreWaiters: r[9]!,
  };
}

/** The verdict of `held` servers out of `answered`. */
function verdictOf(held: number, answered: number, quorum: number): Verdict {
  if (held >= quorum) return "held";
  return answered - held >= quorum ? "free" : "unknown";
}

/** The quorum-th largest of `values` (0 when fewer). */
function quorumth(values: readonly number[], quorum: number): number {
  return [...values].sort((a, b) => b - a)[quorum - 1] ?? 0;
}

/** The least ms a server is given to tell: a status is one look, not a hot path. */
const MIN_STATUS_MS = 1_000;

/**
 * Reads what every server holds for `name`, each within the Redlock's
 * `requestTimeout` (at least {@linkcode MIN_STATUS_MS}), and a quorum's
 * verdict on each kind of lock.
 *
 * @param redlock The Redlock whose servers to read.
 * @param name The lock's name.
 * @returns The servers' views and the verdicts.
 * @throws {TypeError} When `name` is no string.
 * @throws {RangeError} When `name` is empty.
 */
export async function readStatus(redlock: Redlock, name: string): Promise<NameStatus> {
  // Making a handle (which sends nothing) checks the name and shares the Redlock's servers.
  redlock.readWriteLock(name);
  const { servers, settings } = contextOf(redlock);
  const { quorum } = servers;
  const start = now();
  const limit = Math.max(settings.requestTimeout, MIN_STATUS_MS);
  const views = await Promise.all(servers.members.map(async (member) => {
    try {
      const view = await within(readServer(member, name), limit);
      if (view === undefined) throw new Error(`no answer within ${limit} ms`);
      return view;
    } catch (error) {
      return unreachable(member.index, error);
    }
  }));
  const elapsed = now() - start;
  const answered = views.filter((v) => v.error === undefined);
  const lockHeld = answered.flatMap((v) => v.ttl === null ? [] : [v.ttl]);
  const lockVerdict = verdictOf(lockHeld.length, answered.length, quorum);
  let ttl: number | null = null;
  if (lockVerdict === "held") {
    const left = quorumth(lockHeld, quorum);
    ttl = left === Infinity ? Infinity : Math.max(
      0,
      Math.floor(left - elapsed - drift(left, settings.driftFactor)),
    );
  }
  const max = (f: (v: ServerStatus) => number) => Math.max(0, ...answered.map(f));
  const fencing = answered.some((v) => v.fencing !== null) ? max((v) => v.fencing ?? 0) : null;
  const writers = answered.filter((v) => v.writer !== null).length;
  const reading = answered.filter((v) => v.readers > 0);
  const anyHolder = answered.filter((v) => v.writer !== null || v.readers > 0).length;
  const rwHeld = writers >= quorum || reading.length >= quorum;
  const readWrite = {
    verdict: rwHeld ? "held" : verdictOf(anyHolder, answered.length, quorum) as Verdict,
    writer: writers >= quorum,
    readers: reading.length >= quorum ? quorumth(reading.map((v) => v.readers), quorum) : 0,
    writerWaiting: answered.filter((v) => v.writerWaiting).length >= quorum,
  };
  const missing = views.length - answered.length;
  const semaphore = semaphoreVerdict(answered, missing, quorum);
  const verdicts = [lockVerdict, readWrite.verdict, semaphore?.verdict ?? "free"];
  return {
    name,
    quorum,
    verdict: verdicts.includes("held") ? "held" : verdicts.includes("unknown") ? "unknown" : "free",
    lock: {
      verdict: lockVerdict,
      ttl,
      waiters: max((v) => v.waiters),
      watched: answered.some((v) => v.watched),
      fencing,
    },
    readWrite,
    semaphore,
    servers: views,
  };
}

/**
 * The semaphore's verdict: a permit in use is a slot held on a quorum;
 * unknown when the servers that did not answer could make one more.
 */
function semaphoreVerdict(answered: readonly ServerStatus[], missing: number, quorum: number) {
  const permits = Math.max(0, ...answered.map((v) => v.permits ?? 0));
  if (permits === 0) return null;
  const counts = new Map<number, number>();
  for (const view of answered) {
    for (const slot of view.slots) counts.set(slot, (counts.get(slot) ?? 0) + 1);
  }
  const inUse = [...counts.values()].filter((n) => n >= quorum).length;
  const undecided = answered.length < quorum ||
    (missing > 0 && [...counts.values()].some((n) => n < quorum && n + missing >= quorum));
  const verdict: Verdict = inUse > 0 ? "held" : undecided ? "unknown" : "free";
  return {
    verdict,
    permits,
    inUse,
    waiters: Math.max(0, ...answered.map((v) => v.semaphoreWaiters)),
  };
}

/** The view of a server that could not tell. */
function unreachable(server: number, error: unknown): ServerStatus {
  return {
    server,
    error: error instanceof Error ? error.message : String(error),
    ttl: null,
    waiters: 0,
    watched: false,
    fencing: null,
    writer: null,
    readers: 0,
    writerWaiting: false,
    permits: null,
    slots: [],
    semaphoreWaiters: 0,
  };
}
