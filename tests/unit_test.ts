import assert from "node:assert/strict";
import { sha1 } from "../src/protocol/sha1.ts";
import { hashSlot } from "../src/protocol/hash_slot.ts";
import { drift, MsArg, validUntil } from "../src/util/time.ts";
import { deadline, delay } from "../src/util/delay.ts";
import { ACQUIRE, EXTEND, INSPECT, RELEASE } from "../src/protocol/scripts.ts";
import { Alarm, forgetTimer, IDLE_MS, inFlight, type Member, round } from "../src/quorum/round.ts";
import { Conflict, freeIn, VotesAgainst } from "../src/quorum/votes.ts";
import { type Electorate, type VoteBallot, VoteRound } from "../src/quorum/vote_round.ts";
import { AttemptLog } from "../src/acquire/attempts.ts";
import { missingPermission } from "../src/api/errors.ts";
import {
  ExecutionError,
  LockConflictError,
  Redlock,
  RequestTimeoutError,
  type ScriptClient,
} from "../mod.ts";

async function subtleSha1(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test("sha1() agrees with crypto.subtle for empty, short, long and non-ASCII text", async () => {
  for (const text of ["", "abc", "a".repeat(55), "b".repeat(56), "c".repeat(1000), "tür 🔒"]) {
    assert.equal(sha1(text), await subtleSha1(text), JSON.stringify(text.slice(0, 10)));
  }
});

Deno.test("the scripts carry the SHA-1 of their source", async () => {
  for (const script of [ACQUIRE, EXTEND, RELEASE, INSPECT]) {
    assert.equal(script.sha1, await subtleSha1(script.source), script.name);
  }
});

Deno.test("hashSlot() matches Redis's CLUSTER KEYSLOT and honours hash tags", () => {
  assert.equal(hashSlot("foo"), 12182);
  assert.equal(hashSlot("123456789"), 12739);
  assert.equal(hashSlot("{user1000}.following"), hashSlot("{user1000}.followers"));
  assert.equal(hashSlot("{user1000}.following"), hashSlot("user1000"));
  assert.equal(hashSlot("foo{}{bar}"), hashSlot("foo{}{bar}")); // empty tag: whole key
  assert.notEqual(hashSlot("foo{}{bar}"), hashSlot("bar"));
});

Deno.test("drift() is round(factor × duration) + 2 and validUntil() subtracts it", () => {
  assert.equal(drift(10_000, 0.01), 102);
  assert.equal(drift(250, 0.01), 5); // round(2.5) = 3
  assert.equal(drift(1_000, 0), 2);
  assert.equal(validUntil(100, 10_000, 0.01), 100 + 10_000 - 102);
});

Deno.test("MsArg gives each ms as its decimal string, also when the ms change", () => {
  const arg = new MsArg();
  for (const ms of [500, 500, 10_000, 500, 1, 2 ** 31 - 1, 2 ** 31 - 1]) {
    assert.equal(arg.of(ms), String(ms));
  }
});

Deno.test("delay() rejects with the signal's reason and leaves no timer", async () => {
  const controller = new AbortController();
  const waiting = delay(10_000, controller.signal);
  const reason = new Error("stop");
  controller.abort(reason);
  await assert.rejects(waiting, (e) => e === reason);
  const aborted = AbortSignal.abort(reason);
  await assert.rejects(delay(10, aborted), (e) => e === reason);
});

Deno.test("deadline() aborts with a TimeoutError DOMException and dispose() clears it", async () => {
  const { signal, dispose } = deadline(undefined, 20);
  await assert.rejects(
    delay(5_000, signal),
    (e) => e instanceof DOMException && e.name === "TimeoutError",
  );
  dispose();
  const kept = deadline(undefined, 10_000);
  kept.dispose();
  assert.equal(kept.signal?.aborted, false);
});

/** A member whose requests answer after `ms` (at once when 0, never when Infinity). */
function member(index: number, ms: number): Member {
  const answer = () =>
    new Promise<number>((resolve) => {
      if (ms === 0) resolve(index);
      else if (ms !== Infinity) setTimeout(() => resolve(index), ms);
    });
  const runner: ScriptClient = { evalScript: answer };
  return { index, client: runner, runner };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Counts the timers made through the global functions that are still pending. */
async function watchTimers(): Promise<
  { live: () => number; made: () => number; restore: () => void }
> {
  // A round of an earlier test still waits for a request (its deadline reports it): let it end,
  // then the sweeper's last tick.
  for (let waited = 0; inFlight() > 0 && waited < 30_000; waited += 50) await sleep(50);
  assert.equal(inFlight(), 0, "a round of an earlier test is still in flight");
  await sleep(3 * IDLE_MS);
  // a timer the sweeper kept from an earlier test would be set again unseen
  forgetTimer();
  const saved = { setTimeout, clearTimeout };
  const live = new Set<unknown>();
  let made = 0;
  const g = globalThis as unknown as Record<string, unknown>;
  g.setTimeout = (fn: () => void, ms?: number) => {
    const id = saved.setTimeout(() => {
      live.delete(id);
      fn();
    }, ms);
    live.add(id);
    made++;
    // a Node-style timer set again by refresh() is pending again
    const timer = id as unknown as { refresh?: () => unknown };
    const refresh = timer.refresh;
    if (typeof refresh === "function") {
      timer.refresh = () => {
        live.add(id);
        return refresh.call(timer);
      };
    }
    return id;
  };
  g.clearTimeout = (id?: number) => {
    live.delete(id);
    saved.clearTimeout(id);
  };
  return { live: () => live.size, made: () => made, restore: () => Object.assign(g, saved) };
}

Deno.test("round() times out each round at its own deadline and leaves no timer behind once idle", async () => {
  const timers = await watchTimers();
  try {
    const errors: [number, string][] = [];
    const options = (timeout: number) => ({
      timeout,
      done: () => false,
      onError: (error: Error, m: Member) => errors.push([m.index, error.name]),
    });
    const start = performance.now();
    const took = (p: Promise<unknown>) => p.then(() => performance.now() - start);
    // a long round first, then a short one: the short one must not wait for the long one
    const long = round(
      [member(0, 5), member(1, Infinity)],
      (m) => m.runner.evalScript(RELEASE, [], []),
      options(300),
    );
    const short = round(
      [member(2, Infinity)],
      (m) => m.runner.evalScript(RELEASE, [], []),
      options(40),
    );
    const [longMs, shortMs] = await Promise.all([took(long), took(short)]);
    assert.ok(shortMs >= 39 && shortMs < 200, `short round settled after ${shortMs} ms`);
    assert.ok(longMs >= 299 && longMs < 600, `long round settled after ${longMs} ms`);
    const tally = await long;
    assert.deepEqual([...tally.answers], [[0, 0]]);
    assert.ok(tally.errors.get(1) instanceof RequestTimeoutError);
    assert.deepEqual(errors.sort(), [[1, "RequestTimeoutError"], [2, "RequestTimeoutError"]]);
    // rounds one after another share the one sweeper, which stops IDLE_MS after the last
    await sleep(IDLE_MS + 20);
    assert.equal(timers.live(), 0, "a timer still pending after the timed-out rounds");
    const made = timers.made();
    for (let i = 0; i < 20; i++) {
      await round([member(0, 0)], (m) => m.runner.evalScript(RELEASE, [], []), options(500));
      assert.ok(timers.live() <= 1, `${timers.live()} timers pending after round ${i}`);
    }
    // one, or two if something paused the process for IDLE_MS
    assert.ok(timers.made() - made <= 2, `20 rounds in a row made ${timers.made() - made} timers`);
    await sleep(IDLE_MS + 20);
    assert.equal(timers.live(), 0, `a timer still pending ${IDLE_MS + 20} ms after the last round`);
  } finally {
    timers.restore();
  }
});

Deno.test("round(): rounds for several IDLE_MS in a row share one timer, which still times a round out", async () => {
  // a server that answers after 3 ms, on a timer the count below leaves out
  const unwatched = setTimeout;
  const slow: Member = {
    index: 0,
    client: { evalScript: () => Promise.resolve(0) },
    runner: { evalScript: () => new Promise((resolve) => unwatched(() => resolve(0), 3)) },
  };
  const timers = await watchTimers();
  try {
    const options = (timeout: number) => ({ timeout, done: () => false, onError: () => {} });
    const send = (m: Member) => m.runner.evalScript(RELEASE, [], []);
    await sleep(IDLE_MS + 20);
    const made = timers.made();
    const end = performance.now() + 6 * IDLE_MS;
    let rounds = 0;
    while (performance.now() < end) {
      await round([slow], send, options(500));
      rounds++;
    }
    // where timers have refresh(), the sweeper sets the one it made again every IDLE_MS
    const shared = typeof (setTimeout(() => {}, 0) as { refresh?: unknown }).refresh === "function";
    const most = shared ? 2 : 8;
    assert.ok(
      timers.made() - made <= most + 1,
      `${rounds} rounds made ${timers.made() - made} timers`,
    );
    const start = performance.now();
    const tally = await round([member(1, Infinity)], send, options(45));
    const took = performance.now() - start;
    assert.ok(took >= 44 && took < 450, `timed out after ${took} ms`);
    assert.ok(tally.errors.get(1) instanceof RequestTimeoutError);
    await sleep(IDLE_MS + 20);
    assert.equal(timers.live(), 0, `a timer still pending ${IDLE_MS + 20} ms after the last round`);
  } finally {
    timers.restore();
  }
});

Deno.test("round() tallies an answer its judge asks more for, and gives one that comes after it settled to late()", async () => {
  const late: [number, unknown][] = [];
  const tally = await round<string>(
    [member(0, 0), member(1, 0), member(2, 30)],
    (m) => m.runner.evalScript(RELEASE, [], []),
    {
      timeout: 500,
      onError: () => {},
      done: ({ answers }) => answers.size >= 2,
      // server 0's reply needs a second request before it counts
      judge: (reply, m) => m.index === 0 ? sleep(5).then(() => `asked ${reply}`) : `got ${reply}`,
      late: (m, answer) => late.push([m.index, answer]),
    },
  );
  assert.deepEqual([...tally.answers], [[1, "got 1"], [0, "asked 0"]]);
  await sleep(50);
  assert.deepEqual(late, [[2, "got 2"]]);
  const failed = await round<number>([member(0, 0)], (m) => m.runner.evalScript(RELEASE, [], []), {
    timeout: 500,
    onError: () => {},
    done: () => false,
    judge: () => Promise.reject(new TypeError("bad second reply")),
  });
  assert.equal(failed.answers.size, 0);
  assert.equal(failed.errors.get(0)?.message, "bad second reply");
});

/** Three members, quorum 2, whose failures are kept in `emitted`. */
function electorate(members: Member[], emitted: [number, Error][]): Electorate {
  return {
    members,
    quorum: 2,
    emit: (error, m) => emitted.push([m.index, error]),
    failure: (error) => error,
    refused: () => {},
  };
}

Deno.test("VoteRound settles on a quorum, counts its ballot as the votes came, and hands a later one to late()", async () => {
  const emitted: [number, Error][] = [];
  const late: [number, unknown, number[]][] = [];
  const ballots: VoteBallot[] = [];
  const judge = (reply: unknown, m: Member) =>
    m.index === 2 ? new Conflict(2, 250) : reply as number;
  const won = await new VoteRound(
    electorate([member(0, 5), member(1, 0), member(2, 40)], emitted),
    {
      keys: ["k"],
      timeout: 500,
      signal: undefined,
      start: performance.now(),
      send: (m) => m.runner.evalScript(RELEASE, [], []),
      judge,
      decide: (ballot) => (ballots.push(ballot), ballot),
      late: (m, vote, tally) => late.push([m.index, vote, [...tally.answers.keys()]]),
    },
  ).promise;
  assert.equal(won.ok, true);
  assert.equal(won.token, 1);
  assert.equal(won.heldFor, Infinity);
  assert.deepEqual(won.stats.votesFor, [1, 0]);
  assert.equal(won.stats.votesAgainst.size, 0);
  assert.equal(won.stats, won.stats, "the stats are made once");
  await sleep(80);
  assert.equal(late.length, 1);
  assert.equal(late[0]![0], 2);
  assert.ok(late[0]![1] instanceof Conflict);
  assert.deepEqual(late[0]![2], [1, 0]);
  // a conflict, a vote for and a server that never answers: no quorum, the timeout is a failure
  const lost = await new VoteRound(
    electorate([member(0, 0), member(1, Infinity), member(2, 0)], emitted),
    {
      keys: ["k"],
      timeout: 50,
      signal: undefined,
      start: performance.now(),
      send: (m) => m.runner.evalScript(RELEASE, [], []),
      judge: (reply, m) => m.index === 0 ? new Conflict(0, 250) : reply as number,
      decide: (ballot) => (ballots.push(ballot), ballot),
    },
  ).promise;
  assert.equal(ballots.length, 2);
  assert.equal(lost.ok, false);
  assert.equal(lost.heldFor, 250);
  assert.deepEqual(lost.stats.votesFor, [2]);
  assert.equal(lost.stats.votesAgainst.conflicts, 1);
  assert.ok(lost.stats.votesAgainst.get(0) instanceof LockConflictError);
  assert.ok(lost.stats.votesAgainst.get(1) instanceof RequestTimeoutError);
  assert.ok(lost.stats.elapsed >= 49);
  assert.deepEqual(emitted.map(([server, error]) => [server, error.name]), [
    [1, "RequestTimeoutError"],
  ]);
});

Deno.test("round() calls aborted() once when its signal aborts it, before it rejects", async () => {
  const controller = new AbortController();
  const events: string[] = [];
  const settled = round([member(0, Infinity)], (m) => m.runner.evalScript(RELEASE, [], []), {
    timeout: 500,
    signal: controller.signal,
    onError: () => {},
    done: () => false,
    aborted: () => events.push("aborted"),
  }).catch((error) => events.push(`rejected: ${error}`));
  controller.abort("stop");
  await settled;
  assert.deepEqual(events, ["aborted", "rejected: stop"]);
  // a round that settled first is not aborted
  const other = new AbortController();
  await round([member(0, 0)], (m) => m.runner.evalScript(RELEASE, [], []), {
    timeout: 500,
    signal: other.signal,
    onError: () => {},
    done: () => false,
    aborted: () => events.push("aborted late"),
  });
  other.abort();
  assert.deepEqual(events, ["aborted", "rejected: stop"]);
});

Deno.test("round() sends before it sets its timer, and rejects when a send aborts its signal", async () => {
  await sleep(3 * IDLE_MS); // no sweeper left from an earlier round
  const timers = await watchTimers();
  const controller = new AbortController();
  const events: string[] = [];
  try {
    const rejected = round([member(0, Infinity)], (m) => {
      events.push(`sent with ${timers.made()} timer(s) made`);
      controller.abort("gone");
      return m.runner.evalScript(RELEASE, [], []);
    }, {
      timeout: 500,
      signal: controller.signal,
      onError: () => {},
      done: () => false,
      aborted: () => events.push("aborted"),
    });
    await assert.rejects(rejected, (e) => e === "gone");
    assert.deepEqual(events, ["sent with 0 timer(s) made", "aborted"]);
  } finally {
    timers.restore();
  }
});

/** An Alarm that calls `fire` when it goes off. */
class CallbackAlarm extends Alarm {
  readonly #fire: () => void;
  constructor(fire: () => void) {
    super();
    this.#fire = fire;
  }
  protected override ring(): void {
    this.#fire();
  }
}

Deno.test("Alarm fires once at its deadline, moves, cancels, and shares the one sweeper", async () => {
  const timers = await watchTimers();
  try {
    const fired: string[] = [];
    const start = performance.now();
    let firedAt = 0;
    const early = new CallbackAlarm(() => {
      fired.push("early");
      firedAt = performance.now() - start;
    });
    const cancelled = new CallbackAlarm(() => fired.push("cancelled"));
    const moved = new CallbackAlarm(() => fired.push("moved"));
    early.at(start + 30);
    cancelled.at(start + 20);
    moved.at(start + 5_000);
    cancelled.cancel();
    moved.at(start + 60);
    const near = new CallbackAlarm(() => fired.push("near"));
    near.at(start + 5);
    // a deadline with slack rides on the sweeper already due (for `near`): no timer of its own
    const made = timers.made();
    const slack = new CallbackAlarm(() => fired.push("slack"));
    slack.at(performance.now() + 1, IDLE_MS);
    assert.equal(timers.made(), made, "an alarm with slack made a timer");
    await sleep(150);
    // (a sweep that comes late may fire several at once, in the order they were set)
    assert.deepEqual([...fired].sort(), ["early", "moved", "near", "slack"]);
    assert.ok(fired.indexOf("early") < fired.indexOf("moved"), fired.join());
    assert.ok(firedAt >= 29 && firedAt < 1_000, `the 30 ms alarm fired after ${firedAt} ms`);
    assert.ok(timers.made() <= 8, `5 alarms made ${timers.made()} timers`);
    await sleep(IDLE_MS + 20);
    assert.equal(timers.live(), 0, "a timer still pending after the alarms");
  } finally {
    timers.restore();
  }
});

Deno.test("a long Alarm alone costs one timer, and none once cancelled", async () => {
  const timers = await watchTimers();
  try {
    /** Resolves when `alarm` fires, or rejects after 5 s (one more timer, cleared). */
    const firing = (set: (fire: () => void) => void) =>
      new Promise<void>((resolve, reject) => {
        const guard = setTimeout(() => reject(new Error("the alarm never fired")), 5_000);
        set(() => {
          clearTimeout(guard);
          resolve();
        });
      });
    const made = timers.made();
    await firing((fire) => new CallbackAlarm(fire).at(performance.now() + 200));
    // one timer for the alarm, one for the guard: the sweeper did not tick while it was far off
    assert.equal(timers.made() - made, 2);
    assert.equal(timers.live(), 0);
    const cancelled = new CallbackAlarm(() => assert.fail("a cancelled alarm fired"));
    cancelled.at(performance.now() + 60_000);
    assert.equal(timers.live(), 1);
    cancelled.cancel();
    assert.equal(timers.live(), 0, "a cancelled far-off alarm left its timer");
    // one cancelled by an earlier one due in the same sweep does not fire
    let second = 0;
    const later = new CallbackAlarm(() => second++);
    const at = performance.now() + 20;
    await firing((fire) => {
      new CallbackAlarm(() => {
        later.cancel();
        fire();
      }).at(at);
      later.at(at);
    });
    assert.equal(second, 0);
    await sleep(IDLE_MS + 20);
    assert.equal(timers.live(), 0);
  } finally {
    timers.restore();
  }
});

Deno.test("VotesAgainst lists conflicts as LockConflictErrors, then failures, made once", () => {
  const timeout = new RequestTimeoutError(2, 100);
  const votes = new VotesAgainst(
    [new Conflict(3, 40), new Conflict(0, -1)],
    new Map([[2, timeout]]),
  );
  assert.equal(votes.size, 3);
  assert.ok(votes.has(0) && votes.has(2) && !votes.has(1));
  assert.ok(votes.isConflict(3) && !votes.isConflict(2));
  assert.equal(votes.conflicts, 2);
  assert.deepEqual([...votes.keys()], [3, 0, 2]);
  const conflict = votes.get(3);
  assert.ok(conflict instanceof LockConflictError);
  assert.equal(conflict.server, 3);
  assert.equal(conflict.ttl, 40);
  assert.match(conflict.message, /server 3 holds the resource for another value for 40 ms more/);
  assert.equal(votes.get(3), conflict, "made once");
  assert.equal(votes.get(2), timeout);
  assert.equal(votes.get(1), undefined);
  const seen: [number, string][] = [];
  votes.forEach((error, server, map) => {
    assert.equal(map, votes);
    seen.push([server, error.name]);
  });
  assert.deepEqual(seen, [[3, "LockConflictError"], [0, "LockConflictError"], [
    2,
    "RequestTimeoutError",
  ]]);
  assert.deepEqual([...votes].map(([server]) => server), [3, 0, 2]);
  assert.equal(Object.prototype.toString.call(votes), "[object Map]");
  assert.match(Deno.inspect(votes), /^Map\(3\) \{\s*3 => LockConflictError/);
});

Deno.test("acquire() sends SET NX only for one resource without fencing when every client can", async () => {
  const calls: string[] = [];
  const fake = (plain: boolean, index: number): ScriptClient => {
    const store = new Map<string, string>();
    const client: ScriptClient = {
      evalScript: (script, keys, args) => {
        calls.push(`${index}:${script.name}`);
        if (script.name === "acquire") {
          for (const key of keys) store.set(key, args[0]!);
          return Promise.resolve(keys.length > 1 && args[2] === "1" ? 1 : 0);
        }
        return Promise.resolve(1); // release, fence
      },
    };
    if (!plain) return client;
    return {
      ...client,
      setIfAbsent: (key, value) => {
        calls.push(`${index}:set`);
        if (store.has(key)) return Promise.resolve(false);
        store.set(key, value);
        return Promise.resolve(true);
      },
      pttl: () => Promise.resolve(1_000),
    };
  };
  const take = async (redlock: Redlock, resources: string | string[], fencing = false) => {
    calls.length = 0;
    const lock = await redlock.acquire(resources, 1_000, { fencing });
    const sent = calls.filter((c) => !c.endsWith("release") && !c.endsWith("fence"));
    await lock.release();
    return sent.map((c) => c.split(":")[1]).sort();
  };
  const all = new Redlock([0, 1, 2].map((i) => fake(true, i)));
  assert.deepEqual(await take(all, "one"), ["set", "set", "set"]);
  assert.deepEqual(await take(all, ["{m}:1", "{m}:2"]), ["acquire", "acquire", "acquire"]);
  assert.deepEqual(await take(all, "fenced", true), ["acquire", "acquire", "acquire"]);
  const mixed = new Redlock([fake(true, 0), fake(false, 1), fake(true, 2)]);
  assert.deepEqual(await take(mixed, "one"), ["acquire", "acquire", "acquire"]);
});

Deno.test("AttemptLog gives back an attempt's elapsed exactly as measured", () => {
  const log = new AttemptLog(3, 2);
  const stats = (elapsed: number) => ({
    membershipSize: 3,
    quorumSize: 2,
    votesFor: [1],
    votesAgainst: new VotesAgainst([new Conflict(2, 950)], new Map()),
    elapsed,
  });
  for (const elapsed of [1.2345678, 0.000123, 1e9 + 0.5]) log.push(stats(elapsed));
  assert.deepEqual(log.list().map((a) => a.elapsed), [1.2345678, 0.000123, 1e9 + 0.5]);
});

Deno.test("AttemptLog gives back every attempt as pushed, a failed server's error included", () => {
  const log = new AttemptLog(3, 2);
  const refused = new Error("connection closed");
  const pushed = [
    {
      votesFor: [],
      votesAgainst: new VotesAgainst([new Conflict(2, 950), new Conflict(0, 940)], new Map()),
      elapsed: 1.25,
    },
    {
      votesFor: [1],
      votesAgainst: new VotesAgainst([new Conflict(0, 400)], new Map([[2, refused]])),
      elapsed: 3.5,
    },
    { votesFor: [2, 0], votesAgainst: new Map<number, Error>(), elapsed: 0.5 },
  ].map((a) => ({ membershipSize: 3, quorumSize: 2, ...a }));
  for (const stats of pushed) log.push(stats);
  const listed = log.list();
  assert.equal(listed.length, 3);
  listed.forEach((stats, i) => {
    const want = pushed[i]!;
    assert.equal(stats.membershipSize, 3);
    assert.equal(stats.quorumSize, 2);
    assert.equal(stats.elapsed, want.elapsed);
    assert.deepEqual(stats.votesFor, want.votesFor);
    const against = [...stats.votesAgainst].map(([server, e]) =>
      [server, e instanceof LockConflictError ? e.ttl : e] as const
    );
    const expected = [...want.votesAgainst].map(([server, e]) =>
      [server, e instanceof LockConflictError ? e.ttl : e] as const
    );
    assert.deepEqual(against, expected);
  });
  assert.equal(listed[1]!.votesAgainst.get(2), refused);
});

Deno.test("missingPermission() reads NOPERM and a script's ACL refusals, nothing else", () => {
  const of = (message: string) => missingPermission(new Error(message));
  assert.equal(
    of("NOPERM this user has no permissions to run the 'evalsha' command"),
    "this user has no permissions to run the 'evalsha' command",
  );
  const script = " script: 9e5c, on @user_script:22.";
  for (
    const refusal of [
      "The user executing the script can't run this command or subcommand",
      "The user executing the script can't access at least one of the keys mentioned in the command",
      "The user executing the script can't publish to the channel mentioned in the command",
      "ACL failure in script: User locker has no permissions to run the 'zrange' command",
    ]
  ) {
    assert.equal(of(`ERR ${refusal}${script}`), `${refusal}${script}`);
  }
  assert.equal(
    of("ERR Error running script (call to f_9e5c): @user_script:1: WRONGTYPE"),
    undefined,
  );
  assert.equal(of("BUSY Redis is busy running a script"), undefined);
});

Deno.test("an acquire whose quorum came after its lease was used up says so", async () => {
  // Every server votes for, 20 ms later: a 5 ms lease is used up by then.
  const slow = { evalScript: () => delay(20).then(() => 0) };
  const redlock = new Redlock([slow], { retryCount: 0 });
  await assert.rejects(
    redlock.acquire("a", 5),
    (error: unknown) => {
      assert.ok(error instanceof ExecutionError);
      assert.match(
        error.message,
        /1 of 1 servers for, quorum 1, but too little of the lease was left/,
      );
      return true;
    },
  );
});

Deno.test("freeIn() waits for as many keys to expire as a quorum lacks votes", () => {
  // 3 servers held at slightly different times, quorum 2: the second key decides
  assert.equal(freeIn([390, 388, 395], 2), 390);
  // one vote for already: the first key to expire is enough
  assert.equal(freeIn([390, 388], 1), 388);
  // a failed server may vote for next time, so nothing lacks: still the first key
  assert.equal(freeIn([390], 0), 390);
  // fewer keys expire than a quorum lacks (the others never do): the first one
  assert.equal(freeIn([500, 200], 3), 200);
  assert.equal(freeIn([], 2), Infinity);
  assert.equal(freeIn(undefined, 2), Infinity);
});
