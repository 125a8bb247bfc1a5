/**
 * The history checker: pure functions over what the workers reported and
 * what the guarded store logged, all instants in one shared time base
 * (`performance.timeOrigin + performance.now()` of each process).
 *
 * A hold counts from the moment `acquire()` returned to the earlier of its
 * release (when the holder stopped using it) and `lock.expiration`: only the
 * valid part of a lease is promised to be exclusive. A hold run by `using()`
 * counts until its routine's signal aborted or the routine ended, whichever
 * is first, and not beyond: `using()` promises to abort the signal before
 * anyone else can hold the lock (unless its process was paused).
 *
 * @module
 */

import type { FencedOutcome } from "./_protocol.ts";
import type { StoreState } from "./_store.ts";

/** A guarded write of one hold. */
export interface HoldWrite {
  /** When the worker sent it. */
  readonly start: number;
  /** When the store's reply came back. */
  readonly end: number;
  readonly fenced: FencedOutcome;
}

/** One successful acquisition and what its holder did with it. */
export interface Hold {
  /** `worker:hold`, as in the store's log. */
  readonly id: string;
  readonly worker: number;
  readonly resource: string;
  /** When `acquire()` returned. */
  readonly acquiredAt: number;
  /** `lock.expiration`: the end of validity. */
  readonly expiration: number;
  /** When the holder stopped using it: the start of its release, or its death. */
  readonly releasedAt?: number | undefined;
  /** `lock.fencingToken`, null when none was given. */
  readonly token: number | null;
  /** Its guarded write, once reported. */
  readonly write?: HoldWrite | undefined;
  /** True when a fault stopped the holder's process during the hold. */
  readonly paused?: boolean | undefined;
  /** True when the hold was a `using()` routine. */
  readonly using?: boolean | undefined;
  /** When the `using()` routine's signal aborted, if it did. */
  readonly abortedAt?: number | undefined;
}

/**
 * The end of a hold's valid part. A `using()` routine is valid until its
 * signal aborts (or it ends), even past `lock.expiration`: a signal that
 * aborts late makes an overlap. A paused process cannot be told in time, so
 * its hold ends at the expiration, as does one whose end was never reported.
 */
export function validEnd(hold: Hold): number {
  const stopped = Math.min(hold.releasedAt ?? Infinity, hold.abortedAt ?? Infinity);
  if (hold.using === true && hold.paused !== true && stopped !== Infinity) return stopped;
  return Math.min(stopped, hold.expiration);
}

/** Two holds of one resource whose valid parts overlap. */
export interface Overlap {
  readonly resource: string;
  /** The hold acquired first. */
  readonly first: string;
  readonly second: string;
  /** How long both were valid at once, in ms. */
  readonly ms: number;
}

function byResource(holds: readonly Hold[]): Map<string, Hold[]> {
  const groups = new Map<string, Hold[]>();
  for (const hold of holds) {
    const group = groups.get(hold.resource) ?? [];
    group.push(hold);
    groups.set(hold.resource, group);
  }
  for (const group of groups.values()) group.sort((a, b) => a.acquiredAt - b.acquiredAt);
  return groups;
}

/**
 * Every pair of holds of one resource whose valid parts overlap: with a
 * healthy majority of servers, each is a safety violation.
 */
export function findOverlaps(holds: readonly Hold[]): Overlap[] {
  const overlaps: Overlap[] = [];
  for (const [resource, group] of byResource(holds)) {
    const open: Hold[] = [];
    for (const hold of group) {
      const start = hold.acquiredAt;
      const end = validEnd(hold);
      for (let i = open.length - 1; i >= 0; i--) {
        if (validEnd(open[i]!) <= start) open.splice(i, 1);
      }
      if (end <= start) continue;
      for (const earlier of open) {
        overlaps.push({
          resource,
          first: earlier.id,
          second: hold.id,
          ms: Math.min(validEnd(earlier), end) - start,
        });
      }
      open.push(hold);
    }
  }
  return overlaps;
}

/** A guarded write that finished after its lease ran out. */
export interface StaleWrite {
  readonly hold: string;
  readonly resource: string;
  /** ms between the end of the lease and the write's reply. */
  readonly lateBy: number;
  /** Whether a fault stopped the holder's process (the paused-holder case). */
  readonly paused: boolean;
  /** Holds of the resource that were validly held after the lease ran out and before the write. */
  readonly overlapping: readonly string[];
  readonly fenced: FencedOutcome;
}

/**
 * Every write that finished after its hold's lease ran out: the known limit
 * of leases (a holder paused past its lease still writes). Only fencing
 * makes the store refuse such a write.
 */
export function findStaleWrites(holds: readonly Hold[]): StaleWrite[] {
  const stale: StaleWrite[] = [];
  for (const [resource, group] of byResource(holds)) {
    for (const hold of group) {
      const write = hold.write;
      if (write === undefined || write.end <= hold.expiration) continue;
      const overlapping = group
        .filter((other) =>
          other !== hold && other.acquiredAt < write.end && validEnd(other) > hold.expiration
        )
        .map((other) => other.id);
      stale.push({
        hold: hold.id,
        resource,
        lateBy: write.end - hold.expiration,
        paused: hold.paused === true,
        overlapping,
        fenced: write.fenced,
      });
    }
  }
  return stale;
}

/** A hold whose fencing token is not above every token acquired before it. */
export interface TokenViolation {
  readonly resource: string;
  readonly hold: string;
  readonly token: number;
  /** The largest token of an earlier acquisition. */
  readonly after: number;
  readonly afterHold: string;
}

/** The latest instant a hold can have been acquired: its report, or its lease's end if earlier. */
function acquiredBy(hold: Hold): number {
  return Math.min(hold.acquiredAt, hold.expiration);
}

/**
 * Holds (in order of acquisition, each placed no later than its lease's end) whose token does not exceed every earlier
 * token of the same resource. Holds without a token are ignored.
 */
export function checkTokenOrder(holds: readonly Hold[]): TokenViolation[] {
  const violations: TokenViolation[] = [];
  for (const [resource, group] of byResource(holds)) {
    // A lock is acquired before its validity ends; a worker that reports the
    // acquisition later (a stalled process) is placed at that bound.
    const ordered = [...group].sort((a, b) => acquiredBy(a) - acquiredBy(b));
    let max = -Infinity;
    let maxHold = "";
    for (const hold of ordered) {
      if (hold.token === null) continue;
      if (hold.token <= max) {
        violations.push({
          resource,
          hold: hold.id,
          token: hold.token,
          after: max,
          afterHold: maxHold,
        });
      } else {
        max = hold.token;
        maxHold = hold.id;
      }
    }
  }
  return violations;
}

/** A read-modify-write another hold's write came between. */
export interface Interference {
  readonly resource: string;
  /** The hold whose read-modify-write was cut into. */
  readonly hold: string;
  /** The holds that wrote between its read and its write. */
  readonly by: readonly string[];
  /** True when a stale write is involved: the known limit of leases, not a violation. */
  readonly explained: boolean;
}

/** What the guarded store's history says about one resource. */
export interface StoreAnalysis {
  readonly resource: string;
  /** Writes the store applied (its log is the authority). */
  readonly writes: number;
  /** The plain counter at the end. */
  readonly value: number;
  /** Writes lost in the plain counter: `writes − value`. */
  readonly lostUpdates: number;
  readonly interferences: readonly Interference[];
  /** Fenced writes accepted, rejected, and lost (`accepted − value`). */
  readonly fencedAccepted: number;
  readonly fencedRejected: number;
  readonly fencedLost: number;
}

/**
 * Reads the store's log of one resource: lost updates of the plain counter,
 * which read-modify-writes were cut into by whom, and the fenced counter's
 * balance. A write is stale when `isStale(hold)` says so.
 */
export function analyseStore(
  state: StoreState,
  isStale: (hold: string) => boolean,
): StoreAnalysis {
  const lastRead = new Map<string, number>();
  const interferences: Interference[] = [];
  let writes = 0;
  state.log.forEach((op, index) => {
    if (op.op === "read") {
      lastRead.set(op.hold, index);
      return;
    }
    writes++;
    const from = lastRead.get(op.hold) ?? -1;
    const by = new Set<string>();
    for (let i = from + 1; i < index; i++) {
      const other = state.log[i]!;
      if (other.op === "write" && other.hold !== op.hold) by.add(other.hold);
    }
    if (by.size > 0) {
      interferences.push({
        resource: state.resource,
        hold: op.hold,
        by: [...by],
        explained: isStale(op.hold) || [...by].some(isStale),
      });
    }
  });
  return {
    resource: state.resource,
    writes,
    value: state.value,
    lostUpdates: writes - state.value,
    interferences,
    fencedAccepted: state.fencedAccepted,
    fencedRejected: state.fencedRejected,
    fencedLost: state.fencedAccepted - state.fencedValue,
  };
}

/** One `acquire()` call. */
export interface AcquireCall {
  readonly start: number;
  readonly end: number;
  readonly ok: boolean;
  /** Attempts it made, when known. */
  readonly attempts?: number | undefined;
}

/** A span of time during which a fault was active. */
export interface Span {
  readonly start: number;
  readonly end: number;
}

/** Success rate and latency of a set of acquire calls. */
export interface AcquireStats {
  readonly calls: number;
  readonly ok: number;
  /** ms, of successful calls; NaN when there were none. */
  readonly p50: number;
  readonly p99: number;
  /** ms, the longest call, successful or not. */
  readonly longest: number;
}

/** The `p`-th percentile (0–100, nearest rank) of `values`; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

function stats(calls: readonly AcquireCall[]): AcquireStats {
  const ok = calls.filter((c) => c.ok).map((c) => c.end - c.start);
  return {
    calls: calls.length,
    ok: ok.length,
    p50: percentile(ok, 50),
    p99: percentile(ok, 99),
    longest: calls.reduce((max, c) => Math.max(max, c.end - c.start), 0),
  };
}

/** Splits acquire calls into those that overlapped a fault and those that did not. */
export function acquireStats(
  calls: readonly AcquireCall[],
  faults: readonly Span[],
): { healthy: AcquireStats; faulty: AcquireStats; all: AcquireStats } {
  const faulty = (c: AcquireCall) => faults.some((f) => f.start < c.end && c.start < f.end);
  return {
    healthy: stats(calls.filter((c) => !faulty(c))),
    faulty: stats(calls.filter(faulty)),
    all: stats(calls),
  };
}

/**
 * The longest an acquire may take with these settings: every attempt's round
 * timeout, every wait between attempts, and (with fencing) one write-back
 * round. A wait polls `retryDelay + retryJitter`; with release-notified
 * waiting (the library's default) it may instead last until the holder's
 * lease ends, at most `maxLease` + 1 ms, and the first one also subscribes
 * (one more `requestTimeout`).
 */
export function acquireBound(
  settings: {
    readonly retryCount: number;
    readonly retryDelay: number;
    readonly retryJitter: number;
    readonly requestTimeout: number;
  },
  notify?: { readonly maxLease: number },
): number {
  const { retryCount, retryDelay, retryJitter, requestTimeout } = settings;
  const poll = retryDelay + retryJitter;
  const wait = notify === undefined ? poll : Math.max(poll, notify.maxLease + 1);
  const subscribe = notify === undefined ? 0 : requestTimeout;
  return (retryCount + 2) * requestTimeout + subscribe + retryCount * wait;
}
