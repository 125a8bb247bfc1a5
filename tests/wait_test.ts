import assert from "node:assert/strict";
import {
  ExecutionError,
  Redlock,
  ResourceLockedError,
  type ScriptClient,
  toScriptClient,
} from "../mod.ts";
import { get, hold, KINDS, scriptCalls, setup, sleep } from "./_redis.ts";

for (const kind of KINDS) {
  Deno.test(`[${kind}] acquire() rejects at once with signal.reason when aborted while waiting`, async () => {
    await using env = await setup(kind, 3);
    for (const server of env.servers.servers) await hold(server, "busy", "other", 60_000);
    const redlock = new Redlock(env.clients, { retryCount: -1, retryDelay: 30_000 });
    const controller = new AbortController();
    const reason = new Error("user left");
    const waiting = redlock.acquire("busy", 5_000, { signal: controller.signal });
    await sleep(100);
    const start = performance.now();
    controller.abort(reason);
    await assert.rejects(waiting, (e) => e === reason);
    // (a bound far below the retry delay and the holder's lease, far above a loaded machine's lag)
    const took = performance.now() - start;
    assert.ok(took < 3_000, `rejected ${took} ms after the abort, not at once`);
    // still the other holder's, as it wrote it
    for (const server of env.servers.servers) {
      assert.equal(await get(server, "busy"), "other");
    }
  });

  for (const resources of [["{rb}:a", "{rb}:b"], ["{rb}:a"]]) {
    Deno.test(
      `[${kind}] acquire() of ${resources.length} resource(s) gives up within the retry settings, not the holder's lease`,
      async () => {
        await using env = await setup(kind, 3);
        for (const server of env.servers.servers) await hold(server, "{rb}:a", "other", 30_000);
        await using redlock = new Redlock(env.clients, {
          retryCount: 3,
          retryDelay: 100,
          retryJitter: 0,
        });
        const start = performance.now();
        await assert.rejects(redlock.acquire(resources, 5_000), ResourceLockedError);
        const elapsed = performance.now() - start;
        // three sleeps of at most 100 ms, plus the requests
        assert.ok(elapsed < 1_500, `${elapsed} ms`);
        for (const server of env.servers.servers) {
          assert.equal(await get(server, "{rb}:a"), "other");
          assert.equal(await get(server, "{rb}:b"), null);
        }
      },
    );
  }

  Deno.test(`[${kind}] acquire() rejects with a TimeoutError after options.timeout`, async () => {
    await using env = await setup(kind, 3);
    for (const server of env.servers.servers) await hold(server, "slow", "other", 30_000);
    const redlock = new Redlock(env.clients, { retryCount: -1, retryDelay: 50 });
    const start = performance.now();
    await assert.rejects(
      redlock.acquire("slow", 5_000, { timeout: 300 }),
      (e) => e instanceof DOMException && e.name === "TimeoutError",
    );
    const elapsed = performance.now() - start;
    // not before the timeout; long before the holder's lease ends
    assert.ok(elapsed >= 290 && elapsed < 5_000, `${elapsed} ms`);
    // still the other holder's, as it wrote it
    for (const server of env.servers.servers) {
      assert.equal(await get(server, "slow"), "other");
    }
  });

  Deno.test(`[${kind}] acquire() with an aborted signal sends nothing`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const reason = new Error("already");
    await assert.rejects(
      redlock.acquire("x", 1_000, { signal: AbortSignal.abort(reason) }),
      (e) => e === reason,
    );
    for (const server of env.servers.servers) assert.equal(await scriptCalls(server), 0);
  });

  Deno.test(`[${kind}] acquire() aborted mid-request leaves nothing locked`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { requestTimeout: 2_000 });
    await env.servers.servers[2]!.pause();
    await env.servers.servers[1]!.pause();
    const controller = new AbortController();
    const waiting = redlock.acquire("mid", 10_000, { signal: controller.signal });
    await sleep(50);
    controller.abort(new Error("stop"));
    await assert.rejects(waiting, /stop/);
    await env.servers.servers[1]!.resume();
    await env.servers.servers[2]!.resume();
    // A client that does not pipeline (the deno-redis fixture) sends the release only once
    // the acquire's reply is back: let the resumed servers drain both before looking.
    await sleep(500);
    const values = () => Promise.all(env.servers.servers.map((s) => get(s, "mid")));
    for (let i = 0; i < 100 && (await values()).some((v) => v !== null); i++) await sleep(10);
    assert.deepEqual(await values(), [null, null, null]);
  });

  for (const wait of ["poll", "notify"] as const) {
    Deno.test(
      `[${kind}] acquire() with retryCount -1 and wait: "${wait}" waits until the holder's lease ends`,
      async () => {
        await using env = await setup(kind, 3);
        // The holder's keys end 30 ms apart: a quorum is free only when the second one ends.
        const servers = env.servers.servers;
        for (const [i, server] of servers.entries()) {
          await hold(server, "patient", "other", 400 + 30 * i);
        }
        await using redlock = new Redlock(env.clients, {
          retryCount: -1,
          retryDelay: 50,
          retryJitter: 10,
          wait,
        });
        const start = performance.now();
        const lock = await redlock.acquire("patient", 5_000, { timeout: 5_000 });
        assert.ok(performance.now() - start >= 380, "not before the holder's lease ended");
        if (wait === "poll" || kind === "deno-redis") {
          assert.ok(lock.attempts.length > 3, `polled: ${lock.attempts.length} attempts`);
        } else {
          // woken once the TTL of a quorum's keys ended (no release was published): no polling
          // in between, and no attempt when only the first key has expired
          assert.ok(lock.attempts.length <= 3, `notified: ${lock.attempts.length} attempts`);
        }
        assert.equal(await get(env.servers.servers[0]!, "patient"), lock.value);
        await lock.release();
      },
    );
  }

  Deno.test(`[${kind}] acquire() that gives up on a held resource throws ResourceLockedError`, async () => {
    await using env = await setup(kind, 3);
    for (const server of env.servers.servers) await hold(server, "kept", "other", 10_000);
    const redlock = new Redlock(env.clients, {
      retryCount: 2,
      retryDelay: 10,
      retryJitter: 0,
      wait: "poll",
    });
    const error = await redlock.acquire("kept", 5_000).then(
      () => assert.fail("must fail"),
      (e) => e,
    );
    assert.ok(error instanceof ResourceLockedError);
    assert.equal(error.name, "ResourceLockedError");
    assert.equal(error.attempts.length, 3);
  });

  Deno.test(`[${kind}] acquire() uses a retryDelay function of the attempt number`, async () => {
    await using env = await setup(kind, 1);
    await hold(env.servers.servers[0]!, "fn", "other", 10_000);
    const seen: number[] = [];
    const redlock = new Redlock(env.clients, {
      retryCount: 3,
      retryJitter: 0,
      wait: "poll",
      retryDelay: (attempt) => (seen.push(attempt), 10 * attempt),
    });
    await assert.rejects(redlock.acquire("fn", 1_000), ResourceLockedError);
    assert.deepEqual(seen, [1, 2, 3]);
  });

  Deno.test(`[${kind}] tryAcquire() makes exactly one attempt and returns a Lock or null`, async () => {
    await using env = await setup(kind, 3);
    let acquires = 0;
    const counted = env.clients.map((client): ScriptClient => {
      const runner = toScriptClient(client);
      return {
        evalScript: (script, keys, args) => {
          if (script.name === "acquire") acquires++;
          return runner.evalScript(script, keys, args);
        },
      };
    });
    const redlock = new Redlock(counted, { retryCount: 10 });
    const lock = await redlock.tryAcquire("try", 5_000);
    assert.ok(lock !== null);
    assert.equal(lock.attempts.length, 1);
    assert.equal(acquires, 3);
    assert.equal(await redlock.tryAcquire("try", 5_000), null);
    assert.equal(acquires, 6, "one attempt (one request per server), no retry");
    await lock.release();
  });

  Deno.test(`[${kind}] tryAcquire() throws ExecutionError when a quorum is lost to server errors`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { requestTimeout: 150 });
    await env.servers.servers[0]!.kill();
    await env.servers.servers[1]!.kill();
    const error = await redlock.tryAcquire("try", 5_000).then(
      () => assert.fail("must throw"),
      (e) => e,
    );
    assert.ok(error instanceof ExecutionError);
    assert.ok(!(error instanceof ResourceLockedError));
  });
}
