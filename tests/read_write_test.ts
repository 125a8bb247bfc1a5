import assert from "node:assert/strict";
import {
  ExecutionError,
  LockLostError,
  type ReadWriteLock,
  Redlock,
  ResourceLockedError,
} from "../mod.ts";
import { toScriptClient } from "../src/clients/clients.ts";
import {
  RW_HOLDS,
  RW_HOW,
  RW_READ,
  rwCall,
  rwKeys,
  rwModeCall,
} from "../src/protocol/read_write_scripts.ts";
import {
  commandCalls,
  eventually,
  integer,
  type Kind,
  onEveryServer,
  type RedisServers,
  scriptCalls,
  setup,
  sleep,
} from "./_redis.ts";

/** The client kinds these tests run with. */
const RW_KINDS: readonly Kind[] = ["ioredis", "node-redis"];

/** Hold intervals by mode, checked for a writer overlapping anyone. */
class Tracker {
  readers = 0;
  writers = 0;
  maxReaders = 0;
  overlaps: string[] = [];
  grants = { read: 0, write: 0 };

  enter(mode: "read" | "write"): void {
    this.grants[mode]++;
    if (mode === "write") {
      if (this.writers > 0 || this.readers > 0) {
        this.overlaps.push(`writer with ${this.writers} writers, ${this.readers} readers`);
      }
      this.writers++;
    } else {
      if (this.writers > 0) this.overlaps.push(`reader with ${this.writers} writers`);
      this.readers++;
      this.maxReaders = Math.max(this.maxReaders, this.readers);
    }
  }

  leave(mode: "read" | "write"): void {
    if (mode === "write") this.writers--;
    else this.readers--;
  }
}

/** How many keys all servers hold together. */
async function keysOn(servers: RedisServers): Promise<number> {
  let total = 0;
  for (const s of servers.servers) total += await integer(s, "DBSIZE");
  return total;
}

/** Rejects unless `work` rejects with an error of `type` whose message matches. */
async function rejects(work: () => Promise<unknown>, type: ErrorConstructor, pattern: RegExp) {
  await assert.rejects(work, (error: Error) => {
    assert.ok(error instanceof type, `${error.name}: ${error.message}`);
    assert.match(error.message, pattern);
    return true;
  });
}

/** Resolves when `promise` settles, or to "pending" after `ms`. */
function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | "pending"> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    promise,
    new Promise<"pending">((r) => (timer = setTimeout(() => r("pending"), ms))),
  ]).finally(() => clearTimeout(timer));
}

for (const kind of RW_KINDS) {
  for (const count of [1, 3, 5]) {
    Deno.test(
      `[${kind}] read-write lock on ${count} server(s): readers share, no writer overlaps anyone`,
      async () => {
        await using env = await setup(kind, count);
        const redlock = new Redlock(env.clients, { retryDelay: 10, retryJitter: 20 });
        const rw = redlock.readWriteLock("doc");
        const tracker = new Tracker();
        const worker = async (mode: "read" | "write", rounds: number) => {
          for (let i = 0; i < rounds; i++) {
            const lock = await rw[mode](5_000, { retryCount: -1, timeout: 60_000 });
            tracker.enter(mode);
            await sleep(mode === "read" ? 15 : 5);
            tracker.leave(mode);
            await lock.release();
          }
        };
        await Promise.all([
          ...Array.from({ length: 6 }, () => worker("read", 8)),
          worker("write", 6),
          worker("write", 6),
        ]);
        assert.deepEqual(tracker.overlaps, []);
        assert.equal(tracker.grants.read, 48);
        assert.equal(tracker.grants.write, 12);
        assert.ok(tracker.maxReaders >= 2, `at most ${tracker.maxReaders} readers at once`);
        assert.equal(await keysOn(env.servers), 0, "every key gone after the last release");
      },
    );
  }

  Deno.test(`[${kind}] readers share a read-write lock and a writer waits for them`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryDelay: 20, retryJitter: 0 });
    const rw = redlock.readWriteLock("shared");
    const a = await rw.read(10_000);
    const b = await rw.tryRead(10_000);
    assert.ok(b !== null, "a second reader gets the lock");
    assert.equal(await rw.tryWrite(10_000), null);
    await a.release();
    assert.equal(await rw.tryWrite(10_000), null, "one reader left");
    await b.release();
    const w = await rw.tryWrite(10_000);
    assert.ok(w !== null);
    assert.equal(await rw.tryRead(10_000), null, "a writer excludes readers");
    assert.equal(await rw.tryWrite(10_000), null, "and writers");
    await w.release();
    assert.ok(await rw.tryRead(10_000) !== null);
  });

  Deno.test(`[${kind}] a free lock is taken by SET NX of its gate; a second reader joins the set`, async () => {
    await using env = await setup(kind, 3);
    // (A loaded machine's slow answer must not count as a failed server: every server is checked.)
    const redlock = new Redlock(env.clients, { requestTimeout: 5_000 });
    const rw = redlock.readWriteLock("gate");
    const [writer, readers] = rwKeys("gate");
    // Scripts loaded first: a release's EVALSHA that meets NOSCRIPT sends EVAL only once the reply
    // is back, and a SET NX sent meanwhile on that connection would land before it.
    const warm = redlock.readWriteLock("warm");
    await (await warm.write(10_000)).release();
    await (await warm.read(10_000)).release();
    await onEveryServer(env.servers, rwKeys("warm")[0]!, null);
    const before = await Promise.all(env.servers.servers.map((s) => scriptCalls(s)));
    const w = await rw.write(10_000);
    await onEveryServer(env.servers, writer!, w.value);
    const after = await Promise.all(env.servers.servers.map((s) => scriptCalls(s)));
    assert.deepEqual(after, before, "no script: a plain SET NX took it");
    await w.release();
    const alone = await rw.read(10_000);
    await onEveryServer(env.servers, writer!, `r:${alone.value}`);
    // The handle's next acquire skips SET NX once one found the gate held.
    assert.equal(await rw.tryWrite(10_000), null, "a lone reader excludes writers");
    const second = await rw.read(10_000);
    await onEveryServer(env.servers, writer!, "r");
    for (const s of env.servers.servers) {
      assert.equal(await integer(s, "ZCARD", readers!), 2, "the lone reader moved into the set");
      assert.ok(await integer(s, "PTTL", writer!) > 9_000, "the gate outlives both");
    }
    assert.equal(await rw.tryWrite(10_000), null);
    const fresh = redlock.readWriteLock("gate"); // tries SET NX first: the gate "r" refuses it
    assert.equal(await fresh.tryWrite(10_000), null, "readers in the set exclude writers");
    await alone.release();
    assert.equal(await rw.tryWrite(10_000), null, "one reader left");
    assert.equal(await redlock.readWriteLock("gate").tryWrite(10_000), null);
    await second.release();
    assert.equal(await keysOn(env.servers), 0, "the gate went with the last reader");
  });

  Deno.test(`[${kind}] after the last reader the gate stays closed to readers while a writer waits`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryDelay: 2_000, retryJitter: 0 });
    const rw = redlock.readWriteLock("closed");
    const reader = await rw.read(10_000);
    const writing = rw.write(10_000, { timeout: 10_000 });
    await sleep(200); // refused, marked, listening
    await reader.release();
    // A new handle: its first read tries SET NX of the gate, which the mark keeps at "?".
    const other = redlock.readWriteLock("closed");
    assert.equal(await other.tryRead(10_000), null, "no reader slips in ahead of the writer");
    const w = await writing;
    assert.equal(await other.tryRead(10_000), null);
    await w.release();
    const r = await redlock.readWriteLock("closed").tryRead(10_000);
    assert.ok(r !== null, "the gate went with the writer and its mark");
    await r.release();
    assert.equal(await keysOn(env.servers), 0);
  });

  Deno.test(`[${kind}] a waiting writer blocks new readers and gets the lock next`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryDelay: 50, retryJitter: 0 });
    const rw = redlock.readWriteLock("pref");
    const first = await rw.read(10_000);
    const writing = rw.write(10_000, { retryCount: -1, timeout: 20_000 });
    await sleep(200); // the writer was refused at least once: its mark is there
    assert.equal(await rw.tryRead(10_000), null, "a new reader waits behind the writer");
    assert.equal(await settledWithin(writing, 100), "pending");
    await first.release();
    const w = await writing;
    assert.equal(await rw.tryRead(10_000), null);
    await w.release();
    const r = await rw.tryRead(10_000);
    assert.ok(r !== null, "the mark went with the writer");
    await r.release();
  });

  Deno.test(`[${kind}] a writer that gives up lifts its mark, and a lost mark expires`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryDelay: 30, retryJitter: 0 });
    const rw = redlock.readWriteLock("gone");
    const reader = await rw.read(10_000);
    await assert.rejects(rw.write(10_000, { retryCount: 2 }), ResourceLockedError);
    const second = await rw.tryRead(10_000);
    assert.ok(second !== null, "the writer's mark went when it gave up");
    assert.equal(await rw.tryWrite(10_000), null);
    const fourth = await rw.tryRead(10_000);
    assert.ok(fourth !== null, "so did the mark of a writer that tried once");
    await fourth.release();
    // A writer that crashed while it waited leaves its mark, which lasts a retry wait or so.
    for (const s of env.servers.servers) {
      await s.command("SET", "{gone}:rw:waiting", "crashed", "PX", "300");
    }
    assert.equal(await rw.tryRead(10_000), null);
    await sleep(400);
    const third = await rw.tryRead(10_000);
    assert.ok(third !== null, "the crashed writer's mark expired");
    for (const lock of [reader, second, third]) await lock.release();
  });

  Deno.test(`[${kind}] a crashed reader blocks a writer only until its lease ends`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryDelay: 50, retryJitter: 0 });
    const rw = redlock.readWriteLock("crash");
    await rw.read(400); // never released
    assert.equal(await rw.tryWrite(5_000), null);
    const start = performance.now();
    const w = await rw.write(5_000, { timeout: 5_000 });
    const waited = performance.now() - start;
    assert.ok(waited < 2_000, `waited ${waited} ms`);
    for (const s of env.servers.servers) {
      assert.equal(
        await integer(s, "ZCARD", "{crash}:rw:readers"),
        0,
        "the expired reader dropped",
      );
    }
    await w.release();
  });

  Deno.test(`[${kind}] extend() keeps a lock's mode; an expired one is lost`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const rw = redlock.readWriteLock("ext");
    let r = await rw.read(300);
    r = await r.extend(5_000);
    await sleep(400);
    assert.ok(r.remainingTime > 0);
    assert.equal(await r.isValid(), true);
    assert.equal(await rw.tryWrite(1_000), null, "still read-locked after the first lease");
    const other = await rw.tryRead(1_000);
    assert.ok(other !== null, "still shared: a read lock");
    await other.release();
    await r.release();
    assert.equal(await r.isValid(), false);
    let w = await rw.write(300);
    w = await w.extend(5_000);
    await sleep(400);
    assert.equal(await rw.tryRead(1_000), null, "still write-locked after the first lease");
    await w.release();
    const short = await rw.read(100);
    await sleep(200);
    await assert.rejects(short.extend(1_000), LockLostError);
  });

  Deno.test(`[${kind}] await using and using() release read-write locks`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const rw = redlock.readWriteLock("scoped");
    {
      await using _w = await rw.write(5_000);
      assert.equal(await rw.tryRead(5_000), null);
    }
    const r = await rw.tryRead(5_000);
    assert.ok(r !== null, "released at the end of the block");
    await r.release();
    const result = await rw.using("write", 400, async (signal, context) => {
      await sleep(700); // longer than the lease: extended
      assert.equal(signal.aborted, false);
      assert.ok(context.lock.remainingTime > 0);
      assert.ok(context.extensions >= 1);
      assert.equal(await rw.tryRead(5_000), null);
      return 7;
    });
    assert.equal(result, 7);
    await rw.using("read", 5_000, { timeout: 1_000 }, async () => {
      const other = await rw.tryRead(5_000);
      assert.ok(other !== null);
      await other.release();
    });
    assert.equal(await keysOn(env.servers), 0);
  });

  Deno.test(`[${kind}] read-write locks hold with a minority stopped and fail with a majority`, async () => {
    await using env = await setup(kind, 5);
    const redlock = new Redlock(env.clients, {
      requestTimeout: 200,
      retryCount: 1,
      retryDelay: 20,
    });
    const rw = redlock.readWriteLock("quorum");
    await env.servers.servers[1]!.kill();
    await env.servers.servers[3]!.kill();
    const r = await rw.read(5_000);
    assert.ok(r.attempts.at(-1)!.votesFor.length >= 3);
    assert.equal(await rw.tryWrite(5_000), null);
    await r.release();
    const w = await rw.write(5_000);
    await w.release();
    await env.servers.servers[4]!.kill();
    const error = await rw.read(5_000).then(() => assert.fail("read should fail"), (e) => e);
    assert.ok(error instanceof ExecutionError && !(error instanceof ResourceLockedError));
    await assert.rejects(rw.write(5_000), ExecutionError);
    for (const s of [env.servers.servers[0]!, env.servers.servers[2]!]) {
      assert.equal(await integer(s, "DBSIZE"), 0, "nothing left behind by the failed acquires");
    }
  });

  Deno.test(`[${kind}] a reader's release wakes a waiting writer without polling`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { retryDelay: 3_000, retryJitter: 0 });
    const rw = redlock.readWriteLock("wake");
    const r = await rw.read(20_000);
    const writing = rw.write(5_000, { timeout: 10_000 });
    await sleep(300);
    const start = performance.now();
    await r.release();
    const w = await writing;
    const waited = performance.now() - start;
    assert.ok(waited < 1_500, `woken ${waited} ms after the release (retryDelay 3000)`);
    await w.release();
  });

  Deno.test(`[${kind}] an expired reader's entry counts as gone, and the last reader's release drops it`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const rw = redlock.readWriteLock("stale");
    const crashed = await rw.read(100); // never released
    const live = await rw.read(5_000);
    await sleep(250);
    const keys = rwKeys("stale");
    const runner = toScriptClient(env.clients[0]!);
    const renew = rwCall(keys, crashed.value, {
      duration: 5_000,
      how: RW_HOW.extend,
      watchLife: 0,
      markLife: 1,
      marked: true,
    });
    assert.equal(await runner.evalScript(RW_READ, renew.keys, renew.args), -1, "not renewed");
    const holds = rwModeCall(keys, crashed.value, "read");
    assert.equal(await runner.evalScript(RW_HOLDS, holds.keys, holds.args), -1, "not held");
    await live.release();
    // (the release settles on a quorum: its request to the last server may land just after)
    for (const s of env.servers.servers) {
      const left = await eventually(() => integer(s, "EXISTS", keys[1]!), 0);
      assert.equal(left, 0, "the expired entry dropped");
    }
  });

  Deno.test(`[${kind}] the last reader's release wakes writers only, a writer's release everybody`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const rw = redlock.readWriteLock("flag");
    const watched = rwKeys("flag")[3]!;
    const flag = (value: string) =>
      Promise.all(env.servers.servers.map((s) => s.command("SET", watched, value, "PX", "10000")));
    const publishes = () => Promise.all(env.servers.servers.map((s) => commandCalls(s, "publish")));
    const before = await publishes();
    await flag("r"); // readers wait for a writer's mark: a reader's release frees nothing for them
    await (await rw.read(5_000)).release();
    await onEveryServer(env.servers, watched, "r");
    assert.deepEqual(await publishes(), before, "no reader woken by a reader's release");
    await flag("rw");
    await (await rw.read(5_000)).release();
    await onEveryServer(env.servers, watched, "r");
    assert.deepEqual(await publishes(), before.map((n) => n + 1), "the writers woken");
    await (await rw.write(5_000)).release();
    await onEveryServer(env.servers, watched, null);
    assert.deepEqual(await publishes(), before.map((n) => n + 2), "the readers woken");
  });
}

Deno.test("read-write locks reject bad input before any request, leaving nothing written", async () => {
  await using env = await setup("ioredis", 3);
  const redlock = new Redlock(env.clients);
  const calls = () => Promise.all(env.servers.servers.map((s) => scriptCalls(s)));
  const before = await calls();
  for (const name of ["", 5, undefined, null]) {
    assert.throws(
      () => redlock.readWriteLock(name as string),
      name === "" ? RangeError : TypeError,
    );
  }
  const rw: ReadWriteLock = redlock.readWriteLock("bad");
  for (const duration of [0, -1, 1.5, NaN, Infinity, 2 ** 31]) {
    await rejects(() => rw.read(duration), RangeError, /duration/);
    await rejects(() => rw.write(duration), RangeError, /duration/);
    await rejects(() => rw.tryRead(duration), RangeError, /duration/);
    await rejects(() => rw.using("read", duration, () => {}), RangeError, /duration/);
  }
  await rejects(() => rw.read("5" as unknown as number), TypeError, /duration/);
  await rejects(() => rw.read(1_000, { timout: 5 } as never), TypeError, /timout/);
  await rejects(() => rw.write(1_000, { fencing: true } as never), TypeError, /fencing/);
  await rejects(() => rw.read(1_000, { timeout: 0 }), RangeError, /timeout/);
  await rejects(() => rw.read(1_000, { retryCount: 1.5 }), RangeError, /retryCount/);
  await rejects(() => rw.using("both" as "read", 1_000, () => {}), TypeError, /mode/);
  await rejects(() => rw.using("read", 1_000, {}, 5 as never), TypeError, /routine/);
  await rejects(
    () => rw.using("read", 1_000, { automaticExtensionThreshold: 1_000 }, () => {}),
    RangeError,
    /automaticExtensionThreshold/,
  );
  const after = await calls();
  assert.deepEqual(after, before, "no script ran");
  assert.equal(await keysOn(env.servers), 0);
  const plain = await redlock.acquire("plain", 1_000);
  await rejects(() => rw.release(plain), TypeError, /not made by/);
  await rejects(() => rw.extend(plain, 1_000), TypeError, /not made by/);
  await plain.release();
  assert.equal(await keysOn(env.servers), 0);
  for (const s of env.servers.servers) assert.equal(await commandCalls(s, "zadd"), 0);
});

Deno.test("a Redlock's release(), extend(), isValid() and remainingTtl() refuse a read-write lock", async () => {
  await using env = await setup("ioredis", 3);
  const redlock = new Redlock(env.clients);
  const rw = redlock.readWriteLock("doc");
  for (const mode of ["read", "write"] as const) {
    const lock = mode === "read" ? await rw.read(5_000) : await rw.write(5_000);
    const keys = await keysOn(env.servers);
    const before = await Promise.all(env.servers.servers.map((s) => scriptCalls(s)));
    const owner = /made by an instance of ReadWriteLock, not a Redlock/;
    await rejects(() => redlock.release(lock), TypeError, owner);
    await rejects(() => redlock.extend(lock, 5_000), TypeError, owner);
    await rejects(() => redlock.isValid(lock), TypeError, owner);
    assert.throws(() => redlock.remainingTtl(lock), { name: "TypeError", message: owner });
    assert.deepEqual(
      await Promise.all(env.servers.servers.map((s) => scriptCalls(s))),
      before,
      "no script ran",
    );
    assert.equal(await keysOn(env.servers), keys, `the ${mode} lock's keys are all there`);
    assert.equal(await rw.tryWrite(1_000), null, `the ${mode} lock still holds`);
    assert.ok(lock.remainingTime > 0);
    await lock.release();
  }
  assert.equal(await keysOn(env.servers), 0);
});

/** A writer that overlapped anything is reported, and so would be a broken lock (the tracker works). */
Deno.test("the read-write tracker reports a writer that overlaps a reader", () => {
  const tracker = new Tracker();
  tracker.enter("read");
  tracker.enter("write");
  assert.equal(tracker.overlaps.length, 1);
  tracker.leave("write");
  tracker.enter("read");
  assert.equal(tracker.maxReaders, 2);
});
