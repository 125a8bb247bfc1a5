import assert from "node:assert/strict";
import {
  acquireBound,
  acquireStats,
  analyseStore,
  checkTokenOrder,
  findOverlaps,
  findStaleWrites,
  type Hold,
  percentile,
} from "../chaos/_history.ts";
import type { StoreOp, StoreState } from "../chaos/_store.ts";

function hold(id: string, init: Partial<Hold> & { acquiredAt: number; expiration: number }): Hold {
  return {
    id,
    worker: Number(id.split(":")[0]),
    resource: "r",
    token: null,
    ...init,
  };
}

function store(log: StoreOp[], value: number, fenced: Partial<StoreState> = {}): StoreState {
  return {
    resource: "r",
    value,
    fencedValue: 0,
    fencedAccepted: 0,
    fencedRejected: 0,
    log,
    ...fenced,
  };
}

const read = (h: string, value: number): StoreOp => ({ op: "read", hold: h, value });
const write = (h: string, r: number, previous: number): StoreOp => ({
  op: "write",
  hold: h,
  read: r,
  previous,
});

Deno.test("findOverlaps() reports two valid leases that overlap on one resource", () => {
  const overlaps = findOverlaps([
    hold("1:1", { acquiredAt: 100, expiration: 300, releasedAt: 250 }),
    hold("2:1", { acquiredAt: 200, expiration: 400, releasedAt: 350 }),
  ]);
  assert.deepEqual(overlaps, [{ resource: "r", first: "1:1", second: "2:1", ms: 50 }]);
});

Deno.test("findOverlaps() reports a third hold that overlaps both earlier ones", () => {
  const overlaps = findOverlaps([
    hold("1:1", { acquiredAt: 0, expiration: 500 }),
    hold("2:1", { acquiredAt: 100, expiration: 500 }),
    hold("3:1", { acquiredAt: 200, expiration: 300 }),
  ]);
  assert.deepEqual(overlaps.map((o) => [o.first, o.second]), [
    ["1:1", "2:1"],
    ["1:1", "3:1"],
    ["2:1", "3:1"],
  ]);
});

Deno.test("findOverlaps() ends a hold at its release, not at its expiration", () => {
  const overlaps = findOverlaps([
    hold("1:1", { acquiredAt: 100, expiration: 2_000, releasedAt: 150 }),
    hold("2:1", { acquiredAt: 160, expiration: 2_000, releasedAt: 200 }),
  ]);
  assert.deepEqual(overlaps, []);
});

Deno.test("findOverlaps() ends a hold at its expiration when its holder was paused past it", () => {
  const overlaps = findOverlaps([
    hold("1:1", { acquiredAt: 100, expiration: 300, releasedAt: 900, paused: true }),
    hold("2:1", { acquiredAt: 350, expiration: 600, releasedAt: 400 }),
  ]);
  assert.deepEqual(overlaps, []);
});

Deno.test("findOverlaps() ends a using() hold when its signal aborted, even past its expiration", () => {
  const late = findOverlaps([
    hold("1:1", { acquiredAt: 100, expiration: 300, abortedAt: 360, releasedAt: 400, using: true }),
    hold("2:1", { acquiredAt: 350, expiration: 600, releasedAt: 500 }),
  ]);
  assert.deepEqual(late.map((o) => [o.first, o.second, o.ms]), [["1:1", "2:1", 10]]);
  const inTime = findOverlaps([
    hold("1:1", { acquiredAt: 100, expiration: 300, abortedAt: 299, releasedAt: 400, using: true }),
    hold("2:1", { acquiredAt: 300, expiration: 600, releasedAt: 500 }),
  ]);
  assert.deepEqual(inTime, []);
});

Deno.test("findOverlaps() ends a paused using() hold at its expiration", () => {
  const overlaps = findOverlaps([
    hold("1:1", {
      acquiredAt: 100,
      expiration: 300,
      abortedAt: 900,
      releasedAt: 900,
      using: true,
      paused: true,
    }),
    hold("2:1", { acquiredAt: 350, expiration: 600, releasedAt: 400 }),
  ]);
  assert.deepEqual(overlaps, []);
});

Deno.test("findOverlaps() does not compare holds of different resources", () => {
  const overlaps = findOverlaps([
    hold("1:1", { acquiredAt: 100, expiration: 300, resource: "a" }),
    hold("2:1", { acquiredAt: 200, expiration: 400, resource: "b" }),
  ]);
  assert.deepEqual(overlaps, []);
});

Deno.test("findStaleWrites() reports a write after the lease and the holder it overlapped", () => {
  const stale = findStaleWrites([
    hold("1:1", {
      acquiredAt: 100,
      expiration: 300,
      releasedAt: 900,
      paused: true,
      write: { start: 880, end: 890, fenced: "rejected" },
    }),
    hold("2:1", {
      acquiredAt: 350,
      expiration: 600,
      releasedAt: 400,
      write: { start: 380, end: 390, fenced: "accepted" },
    }),
    hold("3:1", { acquiredAt: 950, expiration: 1_200, releasedAt: 1_000 }),
  ]);
  assert.deepEqual(stale, [{
    hold: "1:1",
    resource: "r",
    lateBy: 590,
    paused: true,
    overlapping: ["2:1"],
    fenced: "rejected",
  }]);
});

Deno.test("findStaleWrites() ignores writes that finished within the lease", () => {
  const stale = findStaleWrites([
    hold("1:1", {
      acquiredAt: 100,
      expiration: 300,
      releasedAt: 200,
      write: { start: 150, end: 160, fenced: "n/a" },
    }),
  ]);
  assert.deepEqual(stale, []);
});

Deno.test("checkTokenOrder() reports a token not above an earlier acquisition's", () => {
  const violations = checkTokenOrder([
    hold("1:1", { acquiredAt: 100, expiration: 200, token: 5 }),
    hold("2:1", { acquiredAt: 300, expiration: 400, token: 5 }),
    hold("3:1", { acquiredAt: 500, expiration: 600, token: 7 }),
  ]);
  assert.deepEqual(violations, [
    { resource: "r", hold: "2:1", token: 5, after: 5, afterHold: "1:1" },
  ]);
});

Deno.test("checkTokenOrder() places a hold its worker reported after its lease ended at that end", () => {
  // 2:1 was acquired (token 6) before its lease ended at 250, but its stalled worker reported it
  // only at 320, after 3:1 (token 7) had been acquired
  const late = checkTokenOrder([
    hold("1:1", { acquiredAt: 100, expiration: 200, token: 5 }),
    hold("2:1", { acquiredAt: 320, expiration: 250, token: 6 }),
    hold("3:1", { acquiredAt: 300, expiration: 400, token: 7 }),
  ]);
  assert.deepEqual(late, []);
  // a token that is smaller than one handed out before its own lease began is still reported
  const inverted = checkTokenOrder([
    hold("1:1", { acquiredAt: 100, expiration: 200, token: 7 }),
    hold("2:1", { acquiredAt: 320, expiration: 250, token: 6 }),
  ]);
  assert.deepEqual(inverted, [
    { resource: "r", hold: "2:1", token: 6, after: 7, afterHold: "1:1" },
  ]);
});

Deno.test("checkTokenOrder() ignores holds without a token", () => {
  const violations = checkTokenOrder([
    hold("1:1", { acquiredAt: 100, expiration: 200, token: 5 }),
    hold("2:1", { acquiredAt: 300, expiration: 400 }),
  ]);
  assert.deepEqual(violations, []);
});

Deno.test("analyseStore() finds no lost update in serial read-modify-writes", () => {
  const analysis = analyseStore(
    store([read("1:1", 0), write("1:1", 0, 0), read("2:1", 1), write("2:1", 1, 1)], 2),
    () => false,
  );
  assert.equal(analysis.writes, 2);
  assert.equal(analysis.lostUpdates, 0);
  assert.deepEqual(analysis.interferences, []);
});

Deno.test("analyseStore() blames lost updates on the stale write that cut in", () => {
  // 1:1 reads 0 and stalls; 2:1 and 3:1 each add one; 1:1 writes 1 over 2.
  const analysis = analyseStore(
    store([
      read("1:1", 0),
      read("2:1", 0),
      write("2:1", 0, 0),
      read("3:1", 1),
      write("3:1", 1, 1),
      write("1:1", 0, 2),
    ], 1),
    (h) => h === "1:1",
  );
  assert.equal(analysis.writes, 3);
  assert.equal(analysis.lostUpdates, 2);
  assert.deepEqual(analysis.interferences, [
    { resource: "r", hold: "1:1", by: ["2:1", "3:1"], explained: true },
  ]);
});

Deno.test("analyseStore() calls an interleaving of two in-lease writes unexplained", () => {
  const analysis = analyseStore(
    store([read("1:1", 0), read("2:1", 0), write("2:1", 0, 0), write("1:1", 0, 1)], 1),
    () => false,
  );
  assert.equal(analysis.lostUpdates, 1);
  assert.deepEqual(analysis.interferences, [
    { resource: "r", hold: "1:1", by: ["2:1"], explained: false },
  ]);
});

Deno.test("analyseStore() counts fenced writes accepted but not in the fenced value as lost", () => {
  const analysis = analyseStore(
    store([], 0, { fencedAccepted: 5, fencedValue: 4, fencedRejected: 2 }),
    () => false,
  );
  assert.equal(analysis.fencedLost, 1);
  assert.equal(analysis.fencedRejected, 2);
});

Deno.test("acquireStats() splits calls by whether a fault was active during them", () => {
  const stats = acquireStats(
    [
      { start: 0, end: 10, ok: true },
      { start: 100, end: 400, ok: true },
      { start: 150, end: 160, ok: false },
      { start: 600, end: 604, ok: true },
    ],
    [{ start: 140, end: 300 }],
  );
  assert.deepEqual(
    [stats.healthy.calls, stats.healthy.ok, stats.faulty.calls, stats.faulty.ok],
    [2, 2, 2, 1],
  );
  assert.equal(stats.faulty.p50, 300);
  assert.equal(stats.all.longest, 300);
});

Deno.test("percentile() takes the nearest rank and is NaN for no values", () => {
  assert.equal(percentile([5, 1, 4, 2, 3], 50), 3);
  assert.equal(percentile([5, 1, 4, 2, 3], 99), 5);
  assert.equal(percentile([7], 1), 7);
  assert.ok(Number.isNaN(percentile([], 50)));
});

Deno.test("acquireBound() adds every round's timeout, the fence round and every retry's longest wait", () => {
  const settings = { retryCount: 6, retryDelay: 100, retryJitter: 100, requestTimeout: 200 };
  assert.equal(acquireBound(settings), 8 * 200 + 6 * 200);
});

Deno.test("acquireBound() lets a notified wait last a whole lease, plus one subscribe", () => {
  const settings = { retryCount: 6, retryDelay: 100, retryJitter: 100, requestTimeout: 200 };
  assert.equal(acquireBound(settings, { maxLease: 2_000 }), 8 * 200 + 200 + 6 * 2_001);
});
