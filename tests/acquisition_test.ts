/**
 * The acquire state machine, driven through the public API against real
 * servers whose replies a {@linkcode Gate} delays, reorders or fails: late
 * answers, aborts mid-round, giving up with a release in flight, handoffs.
 * Outcomes are read from the lock, its errors and the servers' keys and
 * queues, so that the tests hold whichever object runs the acquire.
 */

import assert from "node:assert/strict";
import {
  ExecutionError,
  type ExecutionStats,
  Lock,
  LockConflictError,
  Redlock,
  type RedlockOptions,
  RequestTimeoutError,
  ResourceLockedError,
} from "../mod.ts";
import { queueKey } from "../src/protocol/scripts.ts";
import { connectAll, get, hold, integer, onServer, sleep } from "./_redis.ts";
import { type Call, Gate, tick } from "./_scripted_client.ts";

/** Servers behind a gate, and a Redlock over the gated clients (and their subscribers). */
interface Scripted extends AsyncDisposable {
  readonly gate: Gate;
  readonly redlock: Redlock;
}

async function scripted(
  count: number,
  options: RedlockOptions,
  gateOptions: { plain?: boolean } = {},
): Promise<Scripted> {
  const gate = await Gate.start(count, gateOptions);
  const redlock = new Redlock(gate.clients, { subscriber: gate.subscriber, ...options });
  return {
    gate,
    redlock,
    [Symbol.asyncDispose]: async () => {
      await redlock[Symbol.asyncDispose]();
      await gate[Symbol.asyncDispose]();
    },
  };
}

/** Asserts that `error` says servers failed, not that the resource is busy. */
function assertServersFailed(error: unknown): asserts error is ExecutionError {
  assert.ok(error instanceof ExecutionError, String(error));
  assert.ok(!(error instanceof ResourceLockedError), `not busy: ${error}`);
}

/** The value of `key` on every server. */
const values = (gate: Gate, key: string): Promise<(string | null)[]> =>
  Promise.all(gate.servers.servers.map((s) => get(s, key)));

/** How many acquires wait in the queue of `key` on every server. */
const queued = (gate: Gate, key: string): Promise<number[]> =>
  Promise.all(gate.servers.servers.map((s) => integer(s, "ZCARD", queueKey(key))));

/** Whether `value` is another holder's (the servers may decorate it; we only hold "other"). */
const isOther = (value: string | null | undefined): boolean => value?.startsWith("other") === true;

/** Sets `key` to "other" on the given servers: another holder, for 10 s. */
async function heldByOther(gate: Gate, key: string, servers: number[]): Promise<void> {
  for (const i of servers) await hold(gate.servers.servers[i]!, key, "other", 10_000);
}

/** The rejection of `promise`, which must reject. */
function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then((value) => assert.fail(`expected a rejection, got ${value}`), (e) => e);
}

const sorted = (servers: Iterable<number>): number[] => [...servers].sort((a, b) => a - b);

/** Waits until every call has answered. */
const answered = (calls: readonly Call[]): Promise<unknown> =>
  Promise.all(calls.map((c) => c.answered)).then(tick);

/** The servers the stats name as voting against. */
const against = (stats: ExecutionStats): number[] => sorted(stats.votesAgainst.keys());

// (1) late answers before the lock is granted

for (const reply of ["its grant", "an error"] as const) {
  Deno.test(
    `acquire() releases a key a server took after its queued round had failed (the reply: ${reply}), and keeps waiting`,
    async () => {
      await using env = await scripted(3, { requestTimeout: 1_000, retryCount: -1 });
      const { gate, redlock } = env;
      const errors: [number, Error][] = [];
      redlock.on("error", (error, event) => errors.push([event.server, error]));
      const lost = new Error("socket reset");
      await heldByOther(gate, "late", [0, 1]);
      // the second attempt is the first in the queue; server 2's answer to it comes late
      gate.hold({ script: "acquire", server: 2, nth: 2 });
      const abort = new AbortController();
      const outcome = rejection(redlock.acquire("late", 5_000, { signal: abort.signal }));
      const second = await gate.sent({ script: "acquire", nth: 2 }, 3);
      const late = second.find((c) => c.server === 2)!;
      await answered(second.filter((c) => c !== late));
      // the round settled on the two conflicts; server 2 took the key all the same
      assert.equal(late.state, "held");
      const taken = (await values(gate, "late"))[2];
      assert.ok(typeof taken === "string" && !isOther(taken), `server 2 holds ${taken}`);
      if (reply === "its grant") await gate.deliver(late);
      else {
        await gate.fail(lost, late);
        assert.deepEqual(errors, [[2, lost]], "reported, though the round had settled");
      }
      const [release] = await gate.sent({ script: "release", server: 2, after: late });
      await answered([release!]);
      assert.equal((await values(gate, "late"))[2], null, "released behind the late answer");
      // still waiting (in the queue of the servers that are held), not granted
      assert.equal(gate.find({ script: "acquire", after: late }).length, 0, "no attempt since");
      const reason = new Error("enough");
      abort.abort(reason);
      assert.equal(await outcome, reason);
      const leaving = await gate.sent({ script: "release", after: release! }, 3);
      await answered(leaving);
      const [a, b, c] = await values(gate, "late");
      assert.ok(isOther(a!) && isOther(b!), "the other holder keeps its keys");
      assert.equal(c, null);
      assert.deepEqual(await queued(gate, "late"), [0, 0, 0]);
    },
  );
}

/**
 * A queued attempt's reply that reaches the lock after its round settled but
 * before the acquire noted that it settled is a late answer like any other:
 * a grant is released, not left on the server with the acquire's value until
 * the lease ends. The round tells its own late answers.
 */
Deno.test({
  name:
    "a queued acquire releases a key granted in the same batch as the conflicts that settled its round",
  fn: async () => {
    await using env = await scripted(3, { requestTimeout: 1_000, retryCount: -1 });
    const { gate, redlock } = env;
    gate.hold({ script: "acquire" });
    const missed: number[] = [];
    // the grant reaches the lock 0 to 12 microtasks after the conflicts: on a real
    // connection replies of several servers often come in one batch
    for (let delay = 0; delay <= 12; delay++) {
      const key = `batch-${delay}`;
      await heldByOther(gate, key, [0, 1]);
      const abort = new AbortController();
      const before = gate.calls.at(-1);
      const outcome = rejection(redlock.acquire(key, 5_000, { signal: abort.signal }));
      const first = await gate.sent({ script: "acquire", after: before }, 3);
      await gate.deliver(...first);
      // the first attempt in the queue
      const [a, b, c] = await gate.sent({ script: "acquire", after: first.at(-1) }, 3);
      await Promise.all([a!.ran, b!.ran, c!.ran]);
      gate.open(a!);
      gate.open(b!);
      for (let i = 0; i < delay; i++) await null;
      gate.open(c!);
      await answered([a!, b!, c!]);
      if (gate.find({ script: "release", server: 2, after: c! }).length === 0) missed.push(delay);
      abort.abort(new Error("next"));
      await outcome;
      await answered(gate.find({ script: "release", after: c! }));
      assert.equal(await get(gate.servers.servers[2]!, key), null);
    }
    assert.deepEqual(missed, [], "delays (in microtasks) after which the grant was not released");
  },
});

/**
 * The same race the other way round: a conflict that comes right behind the
 * grant takes the acquire's entry out of that server's queue, or its next
 * release would hand the key to an acquire that is gone.
 */
Deno.test({
  name: "a queued acquire leaves the queue of a conflict that came in the same batch as the grant",
  fn: async () => {
    await using env = await scripted(3, { requestTimeout: 100, retryCount: -1 });
    const { gate, redlock } = env;
    gate.hold({ script: "acquire" });
    const missed: number[] = [];
    for (let delay = 0; delay <= 6; delay++) {
      const key = `granted-batch-${delay}`;
      await heldByOther(gate, key, [0, 1, 2]);
      const before = gate.calls.at(-1);
      const acquiring = redlock.acquire(key, 5_000, { timeout: 3_000 });
      const first = await gate.sent({ script: "acquire", after: before }, 3);
      await gate.deliver(...first);
      // the first attempt in the queue: three conflicts
      const second = await gate.sent({ script: "acquire", after: first.at(-1) }, 3);
      await gate.deliver(...second);
      for (const server of gate.servers.servers.slice(0, 2)) await server.command("DEL", key);
      // the next attempt (within requestTimeout): two grants, then the conflict
      const [a, b, c] = await gate.sent({ script: "acquire", after: second.at(-1) }, 3);
      await Promise.all([a!.ran, b!.ran, c!.ran]);
      gate.open(a!);
      gate.open(b!);
      for (let i = 0; i < delay; i++) await null;
      gate.open(c!);
      const lock = await acquiring;
      await answered([a!, b!, c!]);
      await answered(gate.find({ script: "release", after: c! }));
      if (await integer(gate.servers.servers[2]!, "ZCARD", queueKey(key)) !== 0) missed.push(delay);
      await lock.release();
    }
    assert.deepEqual(missed, [], "delays (in microtasks) after which the queue entry stayed");
  },
});

/**
 * A queued round's grant from server 2 that comes after the next round was
 * sent to server 2 is not released behind that next round, which counted
 * server 2 for the lock (releasing it let valid leases overlap under faults):
 * the later request, which runs after it on that connection, speaks for the
 * server.
 */
Deno.test(
  "a queued acquire does not release a key that a later round counted when an earlier round's grant comes late",
  async () => {
    await using env = await scripted(3, { requestTimeout: 300, retryCount: -1 });
    const { gate, redlock } = env;
    await heldByOther(gate, "later", [0, 1]);
    // the first queued attempt (the second) takes server 2, but its reply is held
    gate.hold({ script: "acquire", server: 2, nth: 2 });
    const acquiring = redlock.acquire("later", 5_000, { timeout: 5_000 });
    const second = await gate.sent({ script: "acquire", nth: 2 }, 3);
    const late = second.find((c) => c.server === 2)!;
    await answered(second.filter((c) => c !== late));
    // server 1 frees up; the next attempt wins on servers 1 and 2
    await gate.servers.servers[1]!.command("DEL", "later");
    const third = await gate.sent({ script: "acquire", nth: 3 }, 3);
    await Promise.all(third.map((c) => c.ran));
    await gate.deliver(late);
    const lock = await acquiring;
    assert.deepEqual(sorted(lock.attempts.at(-1)!.votesFor), [1, 2]);
    await answered(gate.find({ script: "release" }));
    const [zero, one, two] = await values(gate, "later");
    assert.ok(isOther(zero));
    assert.equal(one, lock.value);
    assert.equal(two, lock.value, "server 2 still holds the lock it voted for");
    assert.ok(await redlock.isValid(lock));
    await lock.release();
    assert.deepEqual((await values(gate, "later")).slice(1), [null, null]);
  },
);

// (2) late answers after the lock is granted

Deno.test(
  "acquire() keeps a key granted after the lock was, and a late conflict does not break the lock",
  async () => {
    await using env = await scripted(5, { wait: "poll", retryCount: 0 });
    const { gate, redlock } = env;
    await heldByOther(gate, "kept", [4]);
    gate.hold({ script: "acquire", server: 3 });
    gate.hold({ script: "acquire", server: 4 });
    const lock = await redlock.acquire("kept", 5_000);
    assert.equal(lock.attempts.length, 1);
    assert.deepEqual(sorted(lock.attempts[0]!.votesFor), [0, 1, 2]);
    assert.equal(lock.attempts[0]!.votesAgainst.size, 0);
    const [forIt, conflict] = gate.held();
    // the conflict first, then the grant
    await gate.deliver(conflict!, forIt!);
    const after = await values(gate, "kept");
    assert.deepEqual(after.slice(0, 4), [lock.value, lock.value, lock.value, lock.value]);
    assert.ok(isOther(after[4]!));
    assert.equal(gate.find({ script: "release" }).length, 0, "nothing released behind the lock");
    assert.ok(await redlock.isValid(lock));
    await lock.release();
    const [, , , , other] = await values(gate, "kept");
    assert.deepEqual((await values(gate, "kept")).slice(0, 4), [null, null, null, null]);
    assert.ok(isOther(other!), "the other holder's key is untouched");
  },
);

Deno.test(
  "a queued acquire keeps a key granted after the lock was, and leaves the queue of a late conflict",
  async () => {
    await using env = await scripted(5, { requestTimeout: 500, retryCount: -1 });
    const { gate, redlock } = env;
    await heldByOther(gate, "line", [0, 1, 2, 3, 4]);
    gate.hold({ script: "acquire", server: 3, nth: 3 });
    gate.hold({ script: "acquire", server: 4, nth: 3 });
    const acquiring = redlock.acquire("line", 5_000, { timeout: 5_000 });
    // the first attempt in the queue met five conflicts
    await answered(await gate.sent({ script: "acquire", nth: 2 }, 5));
    assert.deepEqual(await queued(gate, "line"), [1, 1, 1, 1, 1]);
    // the other holder's keys expire on four servers; the next attempt (no message wakes
    // it: within requestTimeout) takes them
    for (const server of gate.servers.servers.slice(0, 4)) await server.command("DEL", "line");
    const lock = await acquiring;
    assert.equal(lock.attempts.length, 3);
    assert.deepEqual(sorted(lock.attempts[2]!.votesFor), [0, 1, 2]);
    const [forIt, conflict] = gate.held();
    assert.equal(forIt!.server, 3);
    await gate.deliver(conflict!, forIt!);
    // server 4 is told that the acquire no longer waits; the others dropped it when they granted
    await answered(await gate.sent({ script: "release", server: 4, after: conflict! }));
    const after = await values(gate, "line");
    assert.deepEqual(after.slice(0, 4), [lock.value, lock.value, lock.value, lock.value]);
    assert.ok(isOther(after[4]!));
    assert.deepEqual(await queued(gate, "line"), [0, 0, 0, 0, 0]);
    assert.ok(await redlock.isValid(lock));
    await lock.release();
    assert.deepEqual((await values(gate, "line")).slice(0, 4), [null, null, null, null]);
  },
);

// (3) abort mid-round

Deno.test(
  "acquire() rejects with signal.reason while the replies are out, and releases whatever landed",
  async () => {
    await using env = await scripted(3, { wait: "poll" });
    const { gate, redlock } = env;
    gate.hold({ script: "acquire" });
    const abort = new AbortController();
    const outcome = rejection(redlock.acquire("aborted", 5_000, { signal: abort.signal }));
    const acquires = await gate.sent({ script: "acquire" }, 3);
    const reason = new Error("stop");
    abort.abort(reason);
    assert.equal(await outcome, reason);
    assert.ok(acquires.every((c) => c.state === "held"), "rejected before any reply");
    // a release follows the acquire on every server (each ran both, in order)
    const releases = await gate.sent({ script: "release" }, 3);
    assert.deepEqual(sorted(releases.map((c) => c.server)), [0, 1, 2]);
    assert.ok(releases.every((r) => acquires.every((a) => r.id > a.id)));
    await gate.deliver(...acquires);
    await answered(releases);
    assert.deepEqual(await values(gate, "aborted"), [null, null, null]);
    assert.equal(gate.find({ script: "acquire" }).length, 3, "no attempt after the abort");
  },
);

Deno.test(
  "acquire() aborted during a queued attempt leaves no key and no queue entry",
  async () => {
    await using env = await scripted(3, {});
    const { gate, redlock } = env;
    await heldByOther(gate, "aborted-line", [0, 1]);
    gate.hold({ script: "acquire", nth: 2 });
    const abort = new AbortController();
    const outcome = rejection(redlock.acquire("aborted-line", 5_000, { signal: abort.signal }));
    const second = await gate.sent({ script: "acquire", nth: 2 }, 3);
    const reason = new Error("stop");
    abort.abort(reason);
    assert.equal(await outcome, reason);
    assert.ok(second.every((c) => c.state === "held"), "rejected before any reply");
    const releases = await gate.sent({ script: "release", after: second.at(-1)! }, 3);
    await gate.deliver(...second);
    await answered(releases);
    const [a, b, c] = await values(gate, "aborted-line");
    assert.ok(isOther(a!) && isOther(b!));
    assert.equal(c, null);
    assert.deepEqual(await queued(gate, "aborted-line"), [0, 0, 0]);
  },
);

Deno.test(
  "acquire() with a timeout rejects with a TimeoutError when no reply comes, leaving no key",
  async () => {
    await using env = await scripted(3, { wait: "poll", requestTimeout: 2_000 });
    const { gate, redlock } = env;
    gate.hold({ script: "acquire" });
    const start = performance.now();
    const error = await rejection(redlock.acquire("slow", 5_000, { timeout: 100 }));
    const elapsed = performance.now() - start;
    assert.ok(error instanceof DOMException && error.name === "TimeoutError", String(error));
    assert.ok(elapsed >= 95 && elapsed < 1_000, `${elapsed} ms`);
    const releases = await gate.sent({ script: "release" }, 3);
    await gate.deliver(...gate.held({ script: "acquire" }));
    await answered(releases);
    assert.deepEqual(await values(gate, "slow"), [null, null, null]);
  },
);

/**
 * An abort does not wait for the unsubscribe of the Redlock's wake channel
 * while another acquire of the same Redlock still waits: a paused server
 * could hold that unsubscribe, and so the rejection, for many seconds.
 */
Deno.test({
  name:
    "acquire() aborted in the queue rejects at once while a server's subscriber connection hangs",
  fn: async () => {
    await using env = await scripted(3, { requestTimeout: 200 });
    const { gate, redlock } = env;
    await heldByOther(gate, "{room}:a", [0, 1, 2]);
    await heldByOther(gate, "queued", [0, 1, 2]);
    // another acquire of this Redlock waits too (for the release of one of two resources)
    const watching = new AbortController();
    const watcher = rejection(
      redlock.acquire(["{room}:a", "{room}:b"], 5_000, { signal: watching.signal }),
    );
    const abort = new AbortController();
    const outcome = rejection(redlock.acquire("queued", 5_000, { signal: abort.signal }));
    // each made two attempts: the first, and one as a watcher or in the queue
    await answered(await gate.sent({ script: "acquire" }, 12));
    const paused = gate.servers.servers[2]!;
    await paused.pause();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const reason = new Error("stop");
    const start = performance.now();
    abort.abort(reason);
    const first = await Promise.race([
      outcome.then(() => "rejected"),
      new Promise((resolve) => timer = setTimeout(() => resolve("still pending"), 1_000)),
    ]);
    const elapsed = performance.now() - start;
    clearTimeout(timer);
    await paused.resume();
    assert.equal(await outcome, reason);
    watching.abort(reason);
    await watcher;
    assert.equal(first, "rejected", `after ${elapsed} ms`);
  },
});

// (4) giving up with a release in flight

Deno.test(
  "acquire() that runs out of retries rejects only once its release has answered",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0 });
    const { gate, redlock } = env;
    await heldByOther(gate, "pending", [0, 1]);
    // server 2 answers first, so that the attempt counts its vote for
    gate.hold({ script: "acquire", server: 0 });
    gate.hold({ script: "acquire", server: 1 });
    gate.hold({ script: "release", server: 2 });
    let settled = false;
    const outcome = rejection(redlock.acquire("pending", 5_000)).finally(() => settled = true);
    await answered(await gate.sent({ script: "acquire", server: 2 }));
    await gate.deliver(...gate.held({ script: "acquire" }));
    const [release] = await gate.sent({ script: "release", server: 2 });
    await tick();
    assert.equal(settled, false, "waits for the release");
    assert.equal((await values(gate, "pending"))[2], null, "the server ran the release");
    await gate.deliver(release!);
    const error = await outcome;
    assert.ok(error instanceof ResourceLockedError, String(error));
    assert.equal(error.attempts.length, 1);
    assert.deepEqual(error.attempts[0]!.votesFor, [2]);
    assert.deepEqual(against(error.attempts[0]!), [0, 1]);
    assert.equal(gate.find({ script: "release" }).length, 1, "released where it took the key");
  },
);

Deno.test(
  "acquire() that runs out of retries rejects after requestTimeout when its release does not answer",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0, requestTimeout: 200 });
    const { gate, redlock } = env;
    const errors: [number, Error][] = [];
    redlock.on("error", (error, event) => errors.push([event.server, error]));
    await heldByOther(gate, "unanswered", [0, 1]);
    gate.hold({ script: "release" });
    const outcome = rejection(redlock.acquire("unanswered", 5_000));
    await gate.sent({ script: "release" });
    const sentAt = performance.now();
    const error = await outcome;
    const waited = performance.now() - sentAt;
    assert.ok(error instanceof ResourceLockedError, String(error));
    assert.ok(waited >= 190 && waited < 1_500, `rejected ${waited} ms after the release was sent`);
    assert.ok(
      errors.some(([server, e]) => server === 2 && e instanceof RequestTimeoutError),
      "the release's timeout is reported",
    );
    assert.deepEqual((await values(gate, "unanswered")).slice(2), [null]);
  },
);

Deno.test("acquire() that gives up in the queue has left every queue when it rejects", async () => {
  await using env = await scripted(3, { retryCount: 1 });
  const { gate, redlock } = env;
  await heldByOther(gate, "given-up", [0, 1, 2]);
  const error = await rejection(redlock.acquire("given-up", 5_000));
  assert.ok(error instanceof ResourceLockedError, String(error));
  assert.equal(error.attempts.length, 2);
  // no polling: the rejection waited for the releases that leave the queues
  assert.deepEqual(await queued(gate, "given-up"), [0, 0, 0]);
  assert.ok((await values(gate, "given-up")).every(isOther));
});

// (5) handoffs

/**
 * A holder over plain clients holds `key` on every server but the last; the
 * waiter takes the key there in its first queued attempt, which fails, and
 * releases it; the holder takes that server again, and the waiter's next
 * attempt queues there too. Then the holder lets go (a handoff from every
 * server), with the messages held.
 */
async function handoffAfterRelease(gate: Gate, waiter: Redlock, key: string) {
  const plain = await connectAll("ioredis", gate.servers);
  const holder = new Redlock(plain.clients, { wait: "poll" });
  const last = gate.servers.servers.at(-1)!;
  const n = gate.servers.servers.length;
  try {
    const held = await holder.acquire(key, 10_000);
    await last.command("DEL", key);
    // the first queued attempt (the second) takes the key on the last server, which answers
    // first, and releases it again
    for (let i = 0; i < n - 1; i++) gate.hold({ script: "acquire", server: i, nth: 2 });
    const waiting = waiter.acquire(key, 5_000, { timeout: 5_000 });
    waiting.catch(() => {}); // (awaited by the test; not left unhandled when a step here fails)
    const [taken] = await gate.sent({ script: "acquire", server: n - 1, nth: 2 });
    await answered([taken!]);
    await gate.deliver(...gate.held({ script: "acquire" }));
    await answered(await gate.sent({ script: "release", server: n - 1, after: taken! }));
    assert.equal(await get(last, key), null);
    // the holder takes it back (an extend that retakes expired keys)
    const extended = await holder.extend(held, 10_000, { onlyIfLocked: false });
    await onServer(last, key, held.value); // (the extend settled on a quorum, maybe before it)
    // the next attempt, within requestTimeout, queues on every server
    await answered(await gate.sent({ script: "acquire", nth: 3 }, n));
    assert.deepEqual(await queued(gate, key), gate.servers.servers.map(() => 1));
    gate.holdMessages(...gate.servers.servers.keys());
    await holder.release(extended);
    for (let i = 0; i < n; i++) await gate.heard(i);
    return { waiting, handedAt: gate.calls.at(-1)! };
  } finally {
    await holder[Symbol.asyncDispose]();
    await plain[Symbol.asyncDispose]();
  }
}

Deno.test(
  "a queued acquire takes a handoff from a quorum of servers it has not released to, with no attempt",
  async () => {
    await using env = await scripted(3, { requestTimeout: 800 });
    const { gate, redlock: waiter } = env;
    const { waiting, handedAt } = await handoffAfterRelease(gate, waiter, "baton");
    await gate.deliverMessages(0, 1);
    const lock: Lock = await waiting;
    assert.equal(gate.find({ script: "acquire", after: handedAt }).length, 0, "no attempt");
    const last = lock.attempts.at(-1)!;
    assert.deepEqual(sorted(last.votesFor), [0, 1]);
    assert.equal(last.votesAgainst.size, 0);
    await gate.deliverMessages(2);
    assert.deepEqual(await values(gate, "baton"), [lock.value, lock.value, lock.value]);
    await lock.release();
    assert.deepEqual(await values(gate, "baton"), [null, null, null]);
  },
);

Deno.test(
  "a handoff from a server the queued acquire released to does not count toward the quorum",
  async () => {
    await using env = await scripted(3, { requestTimeout: 800 });
    const { gate, redlock: waiter } = env;
    const { waiting, handedAt } = await handoffAfterRelease(gate, waiter, "baton");
    // servers 0 and 2 announce it: a quorum of messages, but one from a server released to
    await gate.deliverMessages(2, 0);
    const lock: Lock = await waiting;
    const asked = gate.find({ script: "acquire", after: handedAt });
    assert.ok(asked.length >= 2, "the acquire asked the servers instead");
    const last = lock.attempts.at(-1)!;
    assert.ok(last.votesFor.length >= 2 && last.votesAgainst.size === 0);
    assert.ok(last.elapsed < 400, `the last attempt is a round of its own (${last.elapsed} ms)`);
    await gate.deliverMessages(1);
    assert.deepEqual(await values(gate, "baton"), [lock.value, lock.value, lock.value]);
    await lock.release();
    assert.deepEqual(await values(gate, "baton"), [null, null, null]);
  },
);

/**
 * A handoff may count a server whose answer to a lost round is still out:
 * once the lock is granted, that late grant must be kept (releasing it would
 * leave the lock on fewer servers than it counted).
 */
Deno.test(
  "a late grant of a lost round is kept when a handoff counted that server",
  async () => {
    await using env = await scripted(5, { requestTimeout: 2_000, retryCount: -1 });
    const { gate, redlock: waiter } = env;
    const plain = await connectAll("ioredis", gate.servers);
    const holder = new Redlock(plain.clients, { wait: "poll" });
    /** Releases the holder's lock on some servers only, as its release would there. */
    const releaseOn = async (lock: Lock, servers: number[]) => {
      await using part = new Redlock(servers.map((i) => plain.clients[i]!));
      const init = { resources: lock.resources, value: lock.value, attempts: [] };
      await part.release(new Lock({ ...init, owner: part, validUntil: 1e12 }));
    };
    try {
      const held = await holder.acquire("counted", 10_000);
      const waiting = waiter.acquire("counted", 5_000, { timeout: 8_000 });
      waiting.catch(() => {});
      // queued on every server (the second attempt is the first in the queue)
      await answered(await gate.sent({ script: "acquire", nth: 2 }, 5));
      // server 2 is handed over to the waiter; its message wakes it, and its third attempt
      // finds its own value there (a grant, held back) and the holder's everywhere else
      gate.hold({ script: "acquire", server: 2, nth: 3 });
      await releaseOn(held, [2]);
      const third = await gate.sent({ script: "acquire", nth: 3 }, 5);
      const late = third.find((c) => c.server === 2)!;
      await answered(third.filter((c) => c !== late));
      // servers 0 and 1 are handed over too: with server 2's, a quorum of 3 handed it the key
      await releaseOn(held, [0, 1]);
      const lock = await waiting;
      assert.deepEqual(sorted(lock.attempts.at(-1)!.votesFor), [0, 1, 2], "a handoff");
      await gate.deliver(late);
      await answered(gate.find({ script: "release" }));
      const after = await values(gate, "counted");
      assert.deepEqual(after.slice(0, 3), [lock.value, lock.value, lock.value]);
      assert.ok(await waiter.isValid(lock));
      await lock.release();
      await holder.release(held).catch(() => {});
    } finally {
      await holder[Symbol.asyncDispose]();
      await plain[Symbol.asyncDispose]();
    }
  },
);

// (6) errors and timeouts

Deno.test(
  "acquire() counts a refused request and an unanswered one as votes against, in the stats and events",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0, requestTimeout: 200 });
    const { gate, redlock } = env;
    const events: [number, Error][] = [];
    redlock.on("error", (error, event) => events.push([event.server, error]));
    const refused = new Error("connection closed");
    gate.refuse({ script: "acquire", server: 1 }, refused);
    gate.hold({ script: "acquire", server: 2 });
    const error = await rejection(redlock.acquire("faulty", 5_000));
    assertServersFailed(error);
    assert.equal(error.attempts.length, 1);
    const [stats] = error.attempts;
    assert.deepEqual(stats!.votesFor, [0]);
    assert.deepEqual(against(stats!), [1, 2]);
    assert.equal(stats!.votesAgainst.get(1), refused);
    const timeout = stats!.votesAgainst.get(2);
    assert.ok(timeout instanceof RequestTimeoutError && timeout.server === 2, String(timeout));
    assert.ok(events.some(([server, e]) => server === 1 && e === refused));
    assert.ok(events.some(([server, e]) => server === 2 && e instanceof RequestTimeoutError));
    // server 0 was released before the rejection; server 2 ran the acquire, then the release
    assert.equal((await values(gate, "faulty"))[0], null);
    await gate.deliver(...gate.held());
    assert.deepEqual(await values(gate, "faulty"), [null, null, null]);
  },
);

Deno.test(
  "acquire() counts replies lost after the servers ran it as votes against, and releases those keys",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0 });
    const { gate, redlock } = env;
    const lost = new Error("socket reset");
    gate.hold({ script: "acquire", server: 1 });
    gate.hold({ script: "acquire", server: 2 });
    const rejected = rejection(redlock.acquire("lost", 5_000));
    // Server 0's vote counts first; then the servers 1 and 2 ran it, and their replies are lost.
    const [first] = await gate.sent({ script: "acquire", server: 0 });
    await first!.answered;
    await gate.fail(
      lost,
      ...(await gate.sent({ script: "acquire" }, 3)).filter((c) => c.server > 0),
    );
    const error = await rejected;
    assertServersFailed(error);
    const [stats] = error.attempts;
    assert.deepEqual(stats!.votesFor, [0]);
    assert.equal(stats!.votesAgainst.get(1), lost);
    assert.equal(stats!.votesAgainst.get(2), lost);
    // the rejection came after the releases answered
    assert.deepEqual(await values(gate, "lost"), [null, null, null]);
  },
);

Deno.test(
  "acquire() gets the lock from a quorum despite a refused request, and the stats say so",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0 });
    const { gate, redlock } = env;
    const refused = new Error("connection closed");
    gate.refuse({ script: "acquire", server: 0 }, refused);
    const lock = await redlock.acquire("one-down", 5_000);
    const [stats] = lock.attempts;
    assert.deepEqual(sorted(stats!.votesFor), [1, 2]);
    assert.equal(stats!.votesAgainst.get(0), refused);
    assert.deepEqual(await values(gate, "one-down"), [null, lock.value, lock.value]);
    await lock.release();
    assert.deepEqual(await values(gate, "one-down"), [null, null, null]);
  },
);

// (7) reordered replies

for (const order of [[0, 1, 2], [2, 1, 0], [1, 2, 0]]) {
  Deno.test(`acquire() gets the same lock when the replies come in the order ${order}`, async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0 });
    const { gate, redlock } = env;
    gate.hold({ script: "acquire" });
    let lock: Lock | undefined;
    const acquiring = redlock.acquire("ordered", 5_000).then((l) => lock = l);
    const calls = await gate.sent({ script: "acquire" }, 3);
    await gate.deliver(calls[order[0]!]!);
    assert.equal(lock, undefined, "one vote is no quorum");
    await gate.deliver(calls[order[1]!]!);
    await acquiring;
    assert.deepEqual(sorted(lock!.attempts[0]!.votesFor), sorted(order.slice(0, 2)));
    await gate.deliver(calls[order[2]!]!);
    assert.deepEqual(await values(gate, "ordered"), [lock!.value, lock!.value, lock!.value]);
    await lock!.release();
    assert.deepEqual(await values(gate, "ordered"), [null, null, null]);
  });

  Deno.test(
    `acquire() fails the same way when two conflicts and a grant come in the order ${order}`,
    async () => {
      await using env = await scripted(3, { wait: "poll", retryCount: 0 });
      const { gate, redlock } = env;
      await heldByOther(gate, "ordered", [0, 1]);
      gate.hold({ script: "acquire" });
      const outcome = rejection(redlock.acquire("ordered", 5_000));
      const calls = await gate.sent({ script: "acquire" }, 3);
      for (const server of order) await gate.deliver(calls[server]!);
      const error = await outcome;
      assert.ok(error instanceof ResourceLockedError, String(error));
      assert.deepEqual(against(error.attempts[0]!), [0, 1]);
      // server 2's grant counts only if it came before the round settled
      const grantFirst = order.indexOf(2) < 2;
      assert.deepEqual(error.attempts[0]!.votesFor, grantFirst ? [2] : []);
      const [a, b, c] = await values(gate, "ordered");
      assert.ok(isOther(a!) && isOther(b!));
      assert.equal(c, null);
    },
  );
}

// one resource by SET NX (clients with setIfAbsent and pttl)

Deno.test(
  "acquire() by SET NX releases a grant that came after two conflicts had settled the round",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0 }, { plain: true });
    const { gate, redlock } = env;
    await heldByOther(gate, "plain-late", [0, 1]);
    gate.hold({ script: "set", server: 2 });
    const outcome = rejection(redlock.acquire("plain-late", 5_000));
    // SET NX refused twice, then the holder's TTL asked twice: the round settles
    await answered(await gate.sent({ script: "pttl" }, 2));
    const [late] = gate.held({ script: "set" });
    await gate.deliver(late!);
    const error = await outcome;
    assert.ok(error instanceof ResourceLockedError, String(error));
    const [stats] = error.attempts;
    assert.deepEqual(stats!.votesFor, [], "the grant came too late to count");
    assert.deepEqual(against(stats!), [0, 1]);
    const conflict = stats!.votesAgainst.get(0);
    assert.ok(conflict instanceof LockConflictError && conflict.ttl > 9_000, String(conflict));
    assert.deepEqual(gate.find({ script: "release" }).map((c) => c.server), [2]);
    const [a, b, c] = await values(gate, "plain-late");
    assert.ok(isOther(a) && isOther(b));
    assert.equal(c, null);
  },
);

Deno.test(
  "acquire() by SET NX aborted mid-round rejects with signal.reason and frees every server",
  async () => {
    await using env = await scripted(3, { wait: "poll" }, { plain: true });
    const { gate, redlock } = env;
    gate.hold({ script: "set" });
    const abort = new AbortController();
    const outcome = rejection(redlock.acquire("plain-aborted", 5_000, { signal: abort.signal }));
    const sets = await gate.sent({ script: "set" }, 3);
    const reason = new Error("stop");
    abort.abort(reason);
    assert.equal(await outcome, reason);
    const releases = await gate.sent({ script: "release" }, 3);
    assert.ok(sets.every((c) => c.state === "held"), "rejected before any reply");
    await gate.deliver(...sets);
    await answered(releases);
    assert.deepEqual(await values(gate, "plain-aborted"), [null, null, null]);
  },
);

// more branches

Deno.test(
  "acquire() whose quorum answered after the lease ran out gets no lock and leaves no key",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0 });
    const { gate, redlock } = env;
    gate.hold({ script: "acquire" });
    const outcome = rejection(redlock.acquire("too-slow", 40));
    const calls = await gate.sent({ script: "acquire" }, 3);
    await sleep(60); // the lease (40 ms less drift) ends while the replies are held
    await gate.deliver(...calls);
    const error = await outcome;
    assertServersFailed(error);
    assert.equal(error.attempts[0]!.votesFor.length >= 2, true, "a quorum said yes, too late");
    assert.deepEqual(await values(gate, "too-slow"), [null, null, null]);
  },
);

Deno.test(
  "a fencing acquire whose token no quorum confirmed in time releases its keys",
  async () => {
    await using env = await scripted(3, { wait: "poll", retryCount: 0, requestTimeout: 200 });
    const { gate, redlock } = env;
    gate.hold({ script: "fence", server: 1 });
    gate.hold({ script: "fence", server: 2 });
    const error = await rejection(redlock.acquire("fenced", 5_000, { fencing: true }));
    assertServersFailed(error);
    assert.ok(error.attempts[0]!.votesFor.length >= 2, "the keys were granted");
    assert.ok(gate.find({ script: "release" }).length >= 3, "released on every server");
    await gate.deliver(...gate.held());
    assert.deepEqual(await values(gate, "fenced"), [null, null, null]);
  },
);
