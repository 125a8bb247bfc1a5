import assert from "node:assert/strict";
import { ExecutionError, LockLostError, Redlock, type RedlockErrorEvent } from "../mod.ts";
import { get, KINDS, onEveryServer, scriptCalls, setup, sleep } from "./_redis.ts";
import { untilAborted } from "./_abort.ts";

/** Resolves with the signal's reason once it aborts, or rejects after `ms`. */
const aborted = (signal: AbortSignal, ms: number): Promise<unknown> => untilAborted(signal, ms);

for (const kind of KINDS) {
  Deno.test(`[${kind}] using() extends a short lock at least 3 times while the routine runs`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { automaticExtensionThreshold: 300 });
    let first = 0;
    let value = "";
    const result = await redlock.using("long-job", 600, async (signal, context) => {
      first = context.lock.expiration;
      value = context.lock.value;
      await sleep(1_400);
      assert.equal(signal.aborted, false);
      assert.ok(context.extensions >= 3, `${context.extensions} extensions`);
      // each extension's validity runs from its own start: the last one ends well after the first
      assert.ok(context.lock.expiration - first >= 3 * 250);
      assert.ok(context.lock.remainingTime > 0);
      for (const server of env.servers.servers) {
        assert.equal(await get(server, "long-job"), value);
      }
      return context.extensions;
    });
    assert.ok(result >= 3);
    await onEveryServer(env.servers, "long-job", null);
  });

  Deno.test(`[${kind}] using() with a 400 ms lease and no threshold set extends at half the lease`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const extensions = await redlock.using("short-lease", 400, async (signal, context) => {
      await sleep(1_000);
      assert.equal(signal.aborted, false);
      assert.ok(context.lock.remainingTime > 0);
      return context.extensions;
    });
    // extended about every 200 ms (a 500 ms threshold would not fit a 400 ms lease)
    assert.ok(extensions >= 3 && extensions <= 8, `${extensions} extensions`);
    await onEveryServer(env.servers, "short-lease", null);
  });

  Deno.test(`[${kind}] using() aborts the signal with LockLostError when the keys vanish`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, { automaticExtensionThreshold: 300 });
    const reason = await redlock.using("vanish", 600, async (signal) => {
      for (const server of env.servers.servers) await server.command("DEL", "vanish");
      return await aborted(signal, 3_000);
    });
    assert.ok(reason instanceof LockLostError, String(reason));
    assert.ok(reason.attempts.length >= 1);
  });

  Deno.test(`[${kind}] using() aborts the signal with LockLostError when a majority stops`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients, {
      automaticExtensionThreshold: 300,
      requestTimeout: 100,
      retryDelay: 20,
      retryJitter: 10,
    });
    const errors: Error[] = [];
    redlock.on("error", (error) => errors.push(error));
    const start = performance.now();
    const alive = env.servers.servers[0]!;
    let extendCalls = 0;
    const reason = await redlock.using("stopping", 600, async (signal) => {
      const before = await scriptCalls(alive);
      await env.servers.servers[1]!.kill();
      await env.servers.servers[2]!.kill();
      const reason = await aborted(signal, 3_000);
      extendCalls = await scriptCalls(alive) - before;
      return reason;
    });
    assert.ok(reason instanceof LockLostError, String(reason));
    // The signal aborts when the validity ends, the extension having retried until then: by the
    // timer at that instant, or by the extension's own check when a starved process runs it first.
    assert.match(reason.message, /expired before an extension succeeded|the lock expired/);
    assert.ok(extendCalls >= 2, `${extendCalls} extension attempt(s) while the lock was valid`);
    assert.ok(performance.now() - start < 2_000);
    assert.ok(errors.length > 0);
  });

  Deno.test(`[${kind}] using() rejects with the routine's own error and still releases`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    await assert.rejects(
      redlock.using("fails", 5_000, () => Promise.reject(new RangeError("routine broke"))),
      { name: "RangeError", message: "routine broke" },
    );
    await onEveryServer(env.servers, "fails", null);
  });

  Deno.test(
    `[${kind}] using() resolves with the result and reports a failed release as an error event`,
    async () => {
      await using env = await setup(kind, 3);
      const redlock = new Redlock(env.clients, { requestTimeout: 150 });
      const events: RedlockErrorEvent[] = [];
      redlock.addEventListener("error", (e) => events.push(e as RedlockErrorEvent));
      const result = await redlock.using("unreleasable", 5_000, async () => {
        await env.servers.servers[0]!.kill();
        await env.servers.servers[1]!.kill();
        return 42;
      });
      assert.equal(result, 42);
      const whole = events.filter((e) => e.server === -1);
      assert.equal(whole.length, 1);
      assert.ok(whole[0]!.error instanceof ExecutionError);
      assert.ok(events.some((e) => e.server === 0) && events.some((e) => e.server === 1));
    },
  );

  Deno.test(`[${kind}] using() combines the caller's signal with the routine's`, async () => {
    await using env = await setup(kind, 3);
    const redlock = new Redlock(env.clients);
    const controller = new AbortController();
    const reason = new Error("caller gave up");
    const seen = await redlock.using("combined", 5_000, { signal: controller.signal }, (signal) => {
      controller.abort(reason);
      return signal.reason;
    });
    assert.equal(seen, reason);
    await onEveryServer(env.servers, "combined", null);
  });
}
