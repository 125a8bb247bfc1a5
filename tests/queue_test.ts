import assert from "node:assert/strict";
import {
  duplicateSubscriber,
  type Lock,
  LockConflictError,
  Redlock,
  RequestTimeoutError,
} from "../mod.ts";
import { queueKey } from "../src/protocol/scripts.ts";
import { FaultProxy } from "../scripts/fault_proxy.ts";
import {
  commandCalls,
  connect,
  eventually,
  get,
  integer,
  onEveryServer,
  scriptCalls,
  setup,
  sleep,
} from "./_redis.ts";

const KINDS = ["ioredis", "node-redis"] as const;

/**
 * Asserts that `count` acquires queue for `key` on every server, waiting up
 * to 2 s for it: on a loaded machine a waiter's subscription, and so its
 * place in the queues, may take a while.
 */
async function queuedEverywhere(
  servers: Awaited<ReturnType<typeof setup>>["servers"],
  key: string,
  count: number,
): Promise<void> {
  const cards = () => Promise.all(servers.servers.map((s) => integer(s, "ZCARD", queueKey(key))));
  let found = await cards();
  for (let i = 0; i < 100 && !found.every((n) => n === count); i++) {
    await sleep(20);
    found = await cards();
  }
  assert.deepEqual(found, servers.servers.map(() => count), `${count} queued for ${key}`);
}

/** Releases `held` and asserts that `waiting` gets the lock within `ms`; returns that lock. */
async function handedOver(
  held: Lock,
  waiting: Promise<Lock>,
  ms: number,
  note = "",
): Promise<Lock> {
  const releasedAt = performance.now();
  await held.release();
  const lock = await waiting;
  const waited = performance.now() - releasedAt;
  assert.ok(waited < ms, `${waited} ms after the release${note}`);
  return lock;
}

for (const kind of KINDS) {
  Deno.test(`[${kind}] waiters on one resource get it in the order they queued`, async () => {
    await using env = await setup(kind, 3);
    await using holder = new Redlock(env.clients, { wait: "poll" });
    const held = await holder.acquire("line", 10_000);
    const order: number[] = [];
    const waiters = Array.from({ length: 5 }, () => new Redlock(env.clients, { retryCount: -1 }));
    try {
      const waiting: Promise<void>[] = [];
      for (const [i, redlock] of waiters.entries()) {
        const turn = (async () => {
          const lock = await redlock.acquire("line", 5_000, { timeout: 10_000 });
          order.push(i);
          await sleep(20);
          await lock.release();
        })();
        turn.catch(() => {}); // its rejection is Promise.all's below
        waiting.push(turn);
        // the next waiter starts once this one queued (a loaded machine may take a while)
        await queuedEverywhere(env.servers, "line", i + 1);
      }
      await sleep(100);
      await held.release();
      await Promise.all(waiting);
      assert.deepEqual(order, [0, 1, 2, 3, 4]);
    } finally {
      await Promise.all(waiters.map((w) => w[Symbol.asyncDispose]()));
    }
  });

  Deno.test(
    `[${kind}] a release hands the key to the first waiter, with no request of the waiter`,
    async () => {
      await using env = await setup(kind, 3);
      await using holder = new Redlock(env.clients, { wait: "poll" });
      await using waiter = new Redlock(env.clients);
      // load the release script on every server (a first EVALSHA meets NOSCRIPT and runs EVAL)
      await (await holder.acquire("warm-up", 1_000)).release();
      // A waiter whose messages come more than 5 ms apart (a loaded machine) asks the servers
      // instead, which is also correct; a handoff must still happen in one of three turns.
      const handoffs: boolean[] = [];
      for (let turn = 0; turn < 3 && !handoffs.includes(true); turn++) {
        const key = `baton-${turn}`;
        const held = await holder.acquire(key, 10_000);
        const waiting = waiter.acquire(key, 5_000, { timeout: 5_000 });
        await queuedEverywhere(env.servers, key, 1);
        await sleep(300);
        const before = await Promise.all(env.servers.servers.map(scriptCalls));
        await held.release();
        const lock = await waiting;
        const after = await Promise.all(env.servers.servers.map(scriptCalls));
        const last = lock.attempts.at(-1)!;
        // the release script only: the lock was handed over, not taken by another attempt
        const handed = after.every((n, i) => n - before[i]! === 1);
        if (handed) {
          assert.ok(last.votesFor.length >= 2 && last.votesAgainst.size === 0);
          assert.ok(last.elapsed >= 250, "counted from the attempt that queued");
        }
        handoffs.push(handed);
        assert.ok(lock.remainingTime > 4_000, `${lock.remainingTime} ms left`);
        await onEveryServer(env.servers, key, lock.value);
        await lock.release();
        await onEveryServer(env.servers, key, null);
      }
      assert.ok(handoffs.includes(true), `no handoff in ${handoffs.length} turns`);
    },
  );

  Deno.test(
    `[${kind}] waiters never write to the key they wait for, and a release with nobody queued changes no queue`,
    async () => {
      await using env = await setup(kind, 3);
      await using holder = new Redlock(env.clients, { wait: "poll" });
      await using first = new Redlock(env.clients);
      await using second = new Redlock(env.clients);
      const queueCalls = () =>
        Promise.all(
          env.servers.servers.map((s) => commandCalls(s, "zrem", "zpopmin", "zadd")),
        );
      await (await holder.acquire("warm-up", 1_000)).release();
      const before = await queueCalls();
      await (await holder.acquire("alone", 10_000)).release();
      assert.deepEqual(await queueCalls(), before, "nobody queued: no queue command");
      await onEveryServer(env.servers, "alone", null);

      const held = await holder.acquire("as-written", 10_000);
      await onEveryServer(env.servers, "as-written", held.value);
      const firstWaits = first.acquire("as-written", 5_000, { timeout: 5_000 });
      await sleep(100);
      await queuedEverywhere(env.servers, "as-written", 1); // the first is first in line
      const secondWaits = second.acquire("as-written", 5_000, { timeout: 5_000 });
      // both queue, and the holder's value is exactly what it wrote
      await queuedEverywhere(env.servers, "as-written", 2);
      await onEveryServer(env.servers, "as-written", held.value);
      await held.release();
      const a = await firstWaits;
      // the second still queues, and writes nothing to the first's key
      await onEveryServer(env.servers, "as-written", a.value);
      await a.release();
      const b = await secondWaits;
      await onEveryServer(env.servers, "as-written", b.value);
      await b.release();
      await onEveryServer(env.servers, "as-written", null);
    },
  );

  Deno.test(`[${kind}] extend() while somebody queues keeps the value, and the release still hands the key over`, async () => {
    await using env = await setup(kind, 3);
    await using holder = new Redlock(env.clients, { wait: "poll" });
    // asks again only every 2 s: woken within 400 ms, it was handed the key
    await using waiter = new Redlock(env.clients, { requestTimeout: 2_000 });
    const held = await holder.acquire("kept", 2_000);
    const waiting = waiter.acquire("kept", 5_000, { timeout: 5_000 });
    await sleep(300);
    await held.extend(10_000);
    await onEveryServer(env.servers, "kept", held.value);
    for (const server of env.servers.servers) {
      assert.ok(await integer(server, "PTTL", "kept") > 9_000);
    }
    const lock = await handedOver(held, waiting, 400, " (the TTL was ~9.9 s)");
    await lock.release();
  });

  Deno.test(
    `[${kind}] a waiter still gets a key that lapsed under its queue and was taken by an acquire that did not queue`,
    async () => {
      await using env = await setup(kind, 3);
      await using holder = new Redlock(env.clients, { wait: "poll" });
      await using other = new Redlock(env.clients, { wait: "poll" });
      // unwoken, a queued acquire asks the servers again after requestTimeout (then backs off)
      await using waiter = new Redlock(env.clients, { requestTimeout: 1_000, retryCount: -1 });
      const held = await holder.acquire("lapse", 10_000);
      const waiting = waiter.acquire("lapse", 5_000, { timeout: 8_000 });
      await sleep(200);
      await onEveryServer(env.servers, "lapse", held.value);
      // the held key lapses, and an acquire that does not queue takes it
      for (const server of env.servers.servers) await server.command("DEL", "lapse");
      const taken = await other.acquire("lapse", 10_000);
      for (const server of env.servers.servers) {
        assert.equal(await get(server, "lapse"), taken.value);
        assert.equal(await integer(server, "ZCARD", queueKey("lapse")), 1);
      }
      // the waiter's next attempt finds it held, and leaves it as it is
      await onEveryServer(env.servers, "lapse", taken.value);
      const lock = await handedOver(taken, waiting, 400);
      await lock.release();
    },
  );

  Deno.test(`[${kind}] an acquire that gives up leaves the queue`, async () => {
    await using env = await setup(kind, 3);
    await using holder = new Redlock(env.clients, { wait: "poll" });
    await using first = new Redlock(env.clients, { retryCount: -1 });
    await using second = new Redlock(env.clients, { retryCount: -1 });
    const held = await holder.acquire("impatient", 10_000);
    const gaveUp = first.acquire("impatient", 5_000, { timeout: 200 });
    await sleep(50);
    const waiting = second.acquire("impatient", 5_000, { timeout: 5_000 });
    await assert.rejects(gaveUp, (e: Error) => e.name === "TimeoutError");
    await sleep(300);
    for (const server of env.servers.servers) {
      assert.equal(await integer(server, "ZCARD", queueKey("impatient")), 1);
    }
    const lock = await handedOver(held, waiting, 400);
    await lock.release();
  });

  Deno.test(
    `[${kind}] a queued waiter that went away holds the next one up for at most its lease`,
    async () => {
      await using env = await setup(kind, 3);
      await using holder = new Redlock(env.clients, { wait: "poll" });
      await using waiter = new Redlock(env.clients, { requestTimeout: 200 });
      const held = await holder.acquire("ghost", 10_000);
      // a waiter of a process that crashed, first in line, asking for a 300 ms lease
      const ghost = "00000000-0000-0000-0000-000000000000:1:300";
      for (const server of env.servers.servers) {
        await server.command("ZADD", queueKey("ghost"), "0", ghost);
      }
      const waiting = waiter.acquire("ghost", 5_000, { timeout: 5_000 });
      await sleep(200);
      const releasedAt = performance.now();
      await held.release();
      // handed to the ghost (once the release reached server 0 too): the waiter still queues
      // behind it
      assert.equal(await eventually(() => get(env.servers.servers[0]!, "ghost"), ghost), ghost);
      const lock = await waiting;
      const waited = performance.now() - releasedAt;
      assert.ok(waited >= 250 && waited < 2_000, `${waited} ms after the release`);
      await lock.release();
    },
  );

  Deno.test(
    `[${kind}] a queued waiter nobody wakes asks again after requestTimeout, then after about as long as it has queued, and its lock tells every attempt`,
    async () => {
      await using env = await setup(kind, 3);
      await using holder = new Redlock(env.clients, { wait: "poll" });
      await using waiter = new Redlock(env.clients, { requestTimeout: 100, retryCount: -1 });
      const held = await holder.acquire("patient", 10_000);
      const waiting = waiter.acquire("patient", 5_000, { timeout: 5_000 });
      await sleep(1_700);
      const lock = await handedOver(held, waiting, 400);
      const { attempts } = lock;
      // the first attempt, the one that queued, and one about 0.1, 0.2, 0.4, 0.8 and 1.6 s after
      // it queued (every requestTimeout it would be 18), then the handoff (or, woken, an attempt)
      const asked = attempts.length - 1;
      assert.ok(asked >= 4 && asked <= 9, `${asked} attempts in 1.7 s`);
      // each refused by the holder, as the servers answered (a loaded machine may let a
      // request pass its 100 ms: that vote is a timeout, never anything else)
      const refused = attempts.slice(0, -1).filter((a) => a.votesFor.length === 0);
      assert.ok(refused.length >= 4, `${refused.length} of ${attempts.length} refused`);
      let answered = 0;
      for (const attempt of refused) {
        assert.equal(attempt.membershipSize, 3);
        assert.equal(attempt.quorumSize, 2);
        assert.ok(attempt.elapsed >= 0 && attempt.elapsed < 1_000, `${attempt.elapsed} ms`);
        assert.ok(attempt.votesAgainst.size >= 2);
        let conflicts = 0;
        for (const [server, error] of attempt.votesAgainst) {
          if (error instanceof RequestTimeoutError && error.server === server) continue;
          assert.ok(error instanceof LockConflictError, String(error));
          assert.equal(error.server, server);
          assert.ok(error.ttl > 7_000 && error.ttl <= 10_000, `ttl ${error.ttl}`);
          conflicts++;
        }
        if (conflicts >= 2) answered++;
      }
      assert.ok(answered >= 3, `${answered} of ${refused.length} refusals answered by a quorum`);
      assert.ok(Object.isFrozen(attempts));
      await lock.release();
    },
  );

  Deno.test(
    `[${kind}] two waiters handed one live server each (of three, one down) get the lock in turn`,
    async () => {
      await using env = await setup(kind, 3);
      const options = { requestTimeout: 200, retryCount: -1 };
      await using holder = new Redlock(env.clients, { ...options, wait: "poll" });
      await using first = new Redlock(env.clients, options);
      await using second = new Redlock(env.clients, options);
      const [a, b, c] = env.servers.servers;
      await c!.kill();
      const held = await holder.acquire("split", 10_000);
      const order: string[] = [];
      const take = async (name: string, redlock: Redlock) => {
        const lock = await redlock.acquire("split", 3_000, { timeout: 5_000 });
        order.push(name);
        await sleep(30);
        await lock.release();
      };
      const firstTakes = take("first", first);
      await sleep(100);
      const secondTakes = take("second", second);
      // (each join may wait requestTimeout for the dead server's subscription)
      for (let i = 0; i < 100 && await integer(a!, "ZCARD", queueKey("split")) < 2; i++) {
        await sleep(20);
      }
      // the queues disagree: server b lost the first waiter's place, so the
      // release hands a to the first waiter and b to the second
      assert.equal(await integer(a!, "ZCARD", queueKey("split")), 2);
      assert.equal(await integer(b!, "ZCARD", queueKey("split")), 2);
      await b!.command("ZPOPMIN", queueKey("split"));
      await held.release();
      await Promise.all([firstTakes, secondTakes]);
      // the earlier ticket goes first: the second waiter gave b way
      assert.deepEqual(order, ["first", "second"]);
    },
  );

  Deno.test(
    `[${kind}] a queued waiter cut off from a majority does not keep its key from the next in line`,
    async () => {
      await using env = await setup(kind, 3);
      const [a, b, c] = env.servers.servers;
      // the first waiter reaches server b through a proxy that is cut below
      await using proxy = await FaultProxy.start(b!.port);
      await using viaProxy = await connect(kind, proxy.port);
      const firstClients = [env.clients[0]!, viaProxy.client, env.clients[2]!];
      const options = { requestTimeout: 200, retryCount: -1 };
      await using holder = new Redlock(env.clients, { ...options, wait: "poll" });
      await using first = new Redlock(firstClients, options);
      await using second = new Redlock(env.clients, options);
      for (const redlock of [holder, first, second]) redlock.on("error", () => {});
      await c!.kill();
      const held = await holder.acquire("cut", 10_000);
      proxy.partition();
      // queued on a only (b is cut off, c is down): a release hands it a, and b to the second
      const firstTakes = first.acquire("cut", 3_000, { timeout: 6_000 });
      for (let i = 0; i < 100 && await integer(a!, "ZCARD", queueKey("cut")) < 1; i++) {
        await sleep(20);
      }
      const secondTakes = second.acquire("cut", 3_000, { timeout: 6_000 });
      for (let i = 0; i < 100 && await integer(a!, "ZCARD", queueKey("cut")) < 2; i++) {
        await sleep(20);
      }
      assert.equal(await integer(b!, "ZCARD", queueKey("cut")), 1);
      const releasedAt = performance.now();
      await held.release();
      // the first cannot make a quorum: it frees a for the second instead of keeping it
      const lock = await secondTakes;
      const waited = performance.now() - releasedAt;
      assert.ok(waited < 2_000, `the second waited ${waited} ms after the release`);
      proxy.heal();
      await lock.release();
      await (await firstTakes).release();
    },
  );

  Deno.test(`[${kind}] a queued fencing acquire gets the next token when woken`, async () => {
    await using env = await setup(kind, 3);
    await using holder = new Redlock(env.clients);
    await using waiter = new Redlock(env.clients);
    const held = await holder.acquire("fenced-line", 10_000, { fencing: true });
    const waiting = waiter.acquire("fenced-line", 5_000, { fencing: true, timeout: 5_000 });
    await sleep(300);
    const lock = await handedOver(held, waiting, 400, " (the TTL was ~9.7 s)");
    assert.equal(lock.fencingToken, held.fencingToken! + 1);
    await lock.release();
  });

  Deno.test(
    `[${kind}] a subscriber that does not pass the message still wakes waiters, which then try`,
    async () => {
      await using env = await setup(kind, 3);
      await using holder = new Redlock(env.clients, { wait: "poll" });
      await using waiter = new Redlock(env.clients, {
        subscriber: (client, index, onMessage) =>
          duplicateSubscriber(client, index, (channel) => onMessage(channel)),
      });
      const held = await holder.acquire("mute", 10_000);
      const waiting = waiter.acquire("mute", 5_000, { timeout: 5_000 });
      await sleep(300);
      const lock = await handedOver(held, waiting, 400);
      // not taken on the word of a message it could not read: the last attempt asked the servers
      assert.ok(lock.attempts.at(-1)!.elapsed < 200);
      await onEveryServer(env.servers, "mute", lock.value);
      await lock.release();
    },
  );
}
