import assert from "node:assert/strict";
import {
  ExecutionError,
  LockConflictError,
  LockLostError,
  Redlock,
  RequestTimeoutError,
  ResourceLockedError,
} from "../mod.ts";
import {
  commandCalls,
  get,
  hold,
  integer,
  KINDS,
  onEveryServer,
  onServer,
  scriptCalls,
  setup,
  sleep,
} from "./_redis.ts";

for (const kind of KINDS) {
  for (const count of [1, 3, 5]) {
    Deno.test(
      `[${kind}] acquire() keeps 20 concurrent read-modify-writers exclusive on ${count} server(s)`,
      async () => {
        await using env = await setup(kind, count);
        const redlock = new Redlock(env.clients, { retryDelay: 5, retryJitter: 10 });
        const store = env.servers.servers[0]!;
        let holders = 0;
        let maxHolders = 0;
        const intervals: [number, number][] = [];
        const worker = async () => {
          const lock = await redlock.acquire("counter-lock", 2_000, {
            retryCount: -1,
            timeout: 60_000,
          });
          const start = performance.now();
          holders++;
          maxHolders = Math.max(maxHolders, holders);
          const value = Number(await get(store, "counter") ?? 0);
          await sleep(2);
          await store.command("SET", "counter", String(value + 1));
          holders--;
          intervals.push([start, performance.now()]);
          await lock.release();
        };
        await Promise.all(Array.from({ length: 20 }, worker));
        assert.equal(await get(store, "counter"), "20");
        assert.equal(maxHolders, 1);
        intervals.sort((a, b) => a[0] - b[0]);
        for (let i = 1; i < intervals.length; i++) {
          assert.ok(
            intervals[i]![0] >= intervals[i - 1]![1],
            `hold ${i} started before hold ${i - 1} ended`,
          );
        }
      },
    );
  }

  Deno.test(`[${kind}] acquire() succeeds with a minority of servers stopped`, async () => {
    await using env = await setup(kind, 5);
    const redlock = new Redlock(env.clients, { requestTimeout: 300 });
    await env.servers.servers[1]!.kill();
    await env.servers.servers[3]!.kill();
    const lock = await redlock.acquire("minority", 5_000);
    assert.equal(lock.attempts.length, 1);
    assert.ok(lock.attempts[0]!.votesFor.length >= 3);
    assert.equal(await get(env.servers.servers[0]!, "minority"), lock.value);
    await lock.release();
    assert.equal(await get(env.servers.servers[0]!, "minority"), null);
  });

  Deno.test(
    `[${kind}] acquire() rejects with ExecutionError naming the servers when a majority is stopped`,
    async () => {
      await using env = await setup(kind, 3);
      const redlock = new Redlock(env.clients, {
        requestTimeout: 200,
        retryCount: 2,
        retryDelay: 50,
        retryJitter: 0,
      });
      const errors: number[] = [];
      redlock.on("error", (_error, event) => errors.push(event.server));
      await env.servers.servers[1]!.kill();
      await env.servers.servers[2]!.kill();
      const start = performance.now();
      const error = await redlock.acquire("majority", 5_000).then(
        () => assert.fail("acquire should fail"),
        (e) => e,
      );
      const elapsed = performance.now() - start;
      assert.ok(error instanceof ExecutionError);
      assert.ok(!(error instanceof ResourceLockedError));
      assert.equal(error.attempts.length, 3);
      const last = error.attempts.at(-1)!;
      // the stopped servers' votes settle the attempt, with or without server 0's answer
      assert.ok(last.votesFor.every((server) => server === 0));
      assert.deepEqual([...last.votesAgainst.keys()].sort(), [1, 2]);
      assert.match(error.message, /server 1/);
      assert.match(error.message, /server 2/);
      assert.ok(elapsed < 3 * (200 + 50) + 2_000, `took ${elapsed} ms`);
      assert.ok(errors.includes(1) && errors.includes(2));
      assert.ok(!errors.includes(0));
      assert.equal(await get(env.servers.servers[0]!, "majority"), null);
    },
  );

  Deno.test(
    `[${kind}] acquire() settles an even split of 4 servers with ResourceLockedError`,
    async () => {
      await using env = await setup(kind, 4);
      const [a, b, c, d] = env.servers.servers;
      await hold(a!, "split", "other", 10_000);
      await hold(b!, "split", "other", 10_000);
      const redlock = new Redlock(env.clients, { retryCount: 0, requestTimeout: 2_000 });
      const start = performance.now();
      const error = await redlock.acquire("split", 5_000).then(
        () => assert.fail("acquire should fail"),
        (e) => e,
      );
      assert.ok(error instanceof ResourceLockedError, String(error));
      assert.ok(performance.now() - start < 1_500);
      const stats = error.attempts[0]!;
      assert.equal(stats.quorumSize, 3);
      // it settles as soon as the two conflicts make a quorum impossible
      assert.deepEqual([...stats.votesAgainst.keys()].sort(), [0, 1]);
      assert.ok([...stats.votesAgainst.values()].every((e) => e instanceof LockConflictError));
      assert.ok(stats.votesFor.every((server) => server === 2 || server === 3));
      // the half it took is released again; the other holder's keys stay
      for (let i = 0; i < 50 && (await get(c!, "split") ?? await get(d!, "split")); i++) {
        await sleep(10);
      }
      assert.equal(await get(c!, "split"), null);
      assert.equal(await get(d!, "split"), null);
      assert.equal(await get(a!, "split"), "other");
      assert.equal(await get(b!, "split"), "other");
    },
  );

  Deno.test(
    `[${kind}] acquire() pays at most requestTimeout per attempt for a paused server`,
    async () => {
      await using env = await setup(kind, 3);
      const [a, b] = env.servers.servers;
      const redlock = new Redlock(env.clients, {
        requestTimeout: 1_000,
        retryCount: 2,
        retryDelay: 0,
        retryJitter: 0,
        wait: "poll",
      });
      await b!.pause();
      try {
        const fast = performance.now();
        const lock = await redlock.acquire("paused", 5_000);
        const settled = performance.now() - fast;
        assert.ok(settled < 1_000, `two healthy servers settle without waiting: ${settled} ms`);
        await lock.release();

        // one server holds it for another value, one is paused: every attempt waits for the pause
        await hold(a!, "paused", "other", 10_000);
        const start = performance.now();
        const error = await redlock.acquire("paused", 5_000).then(
          () => assert.fail("acquire should fail"),
          (e) => e,
        );
        const elapsed = performance.now() - start;
        assert.ok(error instanceof ExecutionError);
        assert.equal(error.attempts.length, 3);
        for (const attempt of error.attempts) {
          assert.ok(attempt.elapsed < 1_000 + 500, `attempt took ${attempt.elapsed} ms`);
          assert.ok(attempt.votesAgainst.get(1) instanceof RequestTimeoutError);
        }
        assert.ok(elapsed >= 3 * 1_000 - 50 && elapsed < 3 * 1_000 + 2_000, `took ${elapsed} ms`);
      } finally {
        await b!.resume();
      }
    },
  );

  Deno.test(
    `[${kind}] a request a settled round left behind is reported as timed out at its deadline`,
    async () => {
      await using env = await setup(kind, 3);
      const paused = env.servers.servers[2]!;
      await using redlock = new Redlock(env.clients, { requestTimeout: 300, retryCount: 0 });
      const timeouts: { server: number; timeout: number }[] = [];
      redlock.on("error", (error) => {
        if (error instanceof RequestTimeoutError) timeouts.push(error);
      });
      await paused.pause();
      try {
        // acquire and release: vote rounds; isValid(): a round of INSPECT
        const lock = await redlock.acquire("left-behind", 5_000);
        assert.equal(await redlock.isValid(lock), true);
        await lock.release();
        assert.deepEqual(timeouts, [], "nothing is due before the deadline");
        await sleep(700);
        assert.deepEqual(
          timeouts.map(({ server, timeout }) => ({ server, timeout })),
          [0, 1, 2].map(() => ({ server: 2, timeout: 300 })),
          "one timeout per round, for the paused server",
        );
      } finally {
        await paused.resume();
      }
      await sleep(100);
      assert.equal(timeouts.length, 3, "the late replies add none");
    },
  );

  Deno.test(`[${kind}] acquire() still works after SCRIPT FLUSH on every server`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const first = await redlock.acquire("flush", 5_000);
    for (const server of env.servers.servers) await server.command("SCRIPT", "FLUSH");
    await first.release();
    await onEveryServer(env.servers, "flush", null);
    for (const server of env.servers.servers) await server.command("SCRIPT", "FLUSH");
    const second = await redlock.acquire("flush", 5_000);
    await onEveryServer(env.servers, "flush", second.value);
    await second.release();
    const info = await env.servers.servers[0]!.command("INFO", "commandstats");
    assert.match(info, /cmdstat_eval:calls=[1-9]/, "the NOSCRIPT fallback ran EVAL");
  });

  Deno.test(
    `[${kind}] acquire() of several resources takes none of them on a server where one is held`,
    async () => {
      await using env = await setup(kind, 3);
      const [a, b, c] = env.servers.servers;
      await hold(a!, "{r}:2", "other", 10_000);
      const redlock = new Redlock(env.clients, { retryCount: 0 });
      const lock = await redlock.acquire(["{r}:1", "{r}:2", "{r}:3"], 5_000);
      assert.deepEqual([...lock.attempts[0]!.votesFor].sort(), [1, 2]);
      assert.equal(await get(a!, "{r}:1"), null);
      assert.equal(await get(a!, "{r}:3"), null);
      assert.equal(await get(a!, "{r}:2"), "other");
      for (const server of [b!, c!]) {
        for (const key of ["{r}:1", "{r}:2", "{r}:3"]) {
          assert.equal(await get(server, key), lock.value);
        }
      }
      await lock.release();
      // The release settles on a quorum: server b may answer after it did.
      await onServer(b!, "{r}:1", null);
      assert.equal(await get(a!, "{r}:2"), "other");
      assert.ok(await scriptCalls(a!) > 0);
    },
  );

  Deno.test(`[${kind}] acquire() gives a validity of duration minus time and drift`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { driftFactor: 0.01 });
    const before = Date.now();
    const lock = await redlock.acquire("validity", 10_000);
    const after = Date.now();
    // drift: round(0.01 × 10 000) + 2 = 102 ms
    assert.ok(lock.expiration <= after + 10_000 - 102 + 1, `${lock.expiration - after}`);
    assert.ok(lock.expiration >= before + 10_000 - 102 - 200, `${lock.expiration - before}`);
    assert.ok(lock.remainingTime > 9_000 && lock.remainingTime <= 10_000 - 102);
    assert.equal(typeof lock.value, "string");
    // the Redlock's random id, a count, and the lease a release may hand over
    assert.match(lock.value, /^[0-9a-f-]{36}:[0-9a-z]+:10000$/);
    await lock.release();
  });

  Deno.test(
    `[${kind}] acquire() of one resource uses SET NX and still reports the holder's TTL in LockConflictError`,
    async () => {
      await using env = await setup(kind, 3);
      const [a, b, c] = env.servers.servers;
      const redlock = new Redlock(env.clients, { retryCount: 0, wait: "poll" });
      // deno-redis has no plain-command adapter: it keeps the script
      const plain = kind !== "deno-redis";
      const scripts = await scriptCalls(a!);
      const sets = await commandCalls(a!, "set");
      const lock = await redlock.acquire("plain", 5_000);
      const scripted = await scriptCalls(a!) - scripts;
      assert.ok(plain ? scripted === 0 : scripted > 0, `${scripted} script calls`);
      // Redis counts the SET a script makes too
      assert.equal(await commandCalls(a!, "set") - sets, 1);
      assert.equal(await get(a!, "plain"), lock.value);
      const ttl = await integer(a!, "PTTL", "plain");
      assert.ok(ttl > 4_000 && ttl <= 5_000, `PX ${ttl}`);
      await lock.release();
      await onEveryServer(env.servers, "plain", null);

      // another holder on two servers: conflicts that carry its TTL
      await hold(a!, "plain", "other", 8_000);
      await hold(b!, "plain", "other", 8_000);
      const pttls = await commandCalls(a!, "pttl");
      const error = await redlock.acquire("plain", 5_000).then(
        () => assert.fail("acquire should fail"),
        (e) => e,
      );
      assert.ok(error instanceof ResourceLockedError, String(error));
      const stats = error.attempts[0]!;
      assert.deepEqual([...stats.votesAgainst.keys()].sort(), [0, 1]);
      for (const server of [0, 1]) {
        const vote = stats.votesAgainst.get(server);
        assert.ok(vote instanceof LockConflictError, String(vote));
        assert.equal(vote.server, server);
        assert.ok(vote.ttl > 7_000 && vote.ttl <= 8_000, `ttl ${vote.ttl}`);
      }
      assert.equal(await commandCalls(a!, "pttl") - pttls, 1, "one PTTL after the failed SET");
      // giving up released what it took on the free server; the holder's keys stay
      assert.equal(await get(c!, "plain"), null);
      assert.equal(await get(a!, "plain"), "other");

      // a holder's key without expiry: ttl -1
      for (const server of [a!, b!]) await server.command("SET", "forever", "other");
      const forever = await redlock.acquire("forever", 5_000).then(
        () => assert.fail("acquire should fail"),
        (e) => e,
      );
      assert.ok(forever instanceof ResourceLockedError, String(forever));
      for (const server of [0, 1]) {
        const vote = forever.attempts[0]!.votesAgainst.get(server);
        assert.ok(vote instanceof LockConflictError && vote.ttl === -1, String(vote));
      }
    },
  );

  Deno.test(
    `[${kind}] acquire() and extend() by script report the holder's TTL in LockConflictError`,
    async () => {
      await using env = await setup(kind, 3);
      const [a, b] = env.servers.servers;
      const redlock = new Redlock(env.clients, { retryCount: 0, wait: "poll" });
      const conflicts = (error: unknown): number[] => {
        assert.ok(
          error instanceof ResourceLockedError || error instanceof LockLostError,
          String(error),
        );
        const against = error.attempts[0]!.votesAgainst;
        assert.deepEqual([...against.keys()].sort(), [0, 1]);
        return [0, 1].map((server) => {
          const vote = against.get(server);
          assert.ok(vote instanceof LockConflictError, String(vote));
          return vote.ttl;
        });
      };
      const failure = (p: Promise<unknown>) =>
        p.then(() => assert.fail("should fail"), (e: unknown) => e);
      // the second of two resources held for 8 s; with fencing; without expiry
      for (const server of [a!, b!]) await hold(server, "{s}:b", "other", 8_000);
      for (const fencing of [false, true]) {
        const error = await failure(redlock.acquire(["{s}:a", "{s}:b"], 5_000, { fencing }));
        for (const ttl of conflicts(error)) assert.ok(ttl > 7_000 && ttl <= 8_000, `ttl ${ttl}`);
      }
      for (const server of [a!, b!]) await server.command("SET", "{s}:b", "other");
      const forever = await failure(redlock.acquire(["{s}:a", "{s}:b"], 5_000));
      assert.deepEqual(conflicts(forever), [-1, -1]);
      // an extend that finds the key gone: -2
      const lock = await redlock.acquire("gone", 5_000);
      await onEveryServer(env.servers, "gone", lock.value);
      for (const server of [a!, b!]) await server.command("DEL", "gone");
      assert.deepEqual(conflicts(await failure(lock.extend(5_000))), [-2, -2]);
      await lock.release();
    },
  );
}
