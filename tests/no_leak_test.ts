/**
 * Nothing of the library outlives what the user asked of it: no listener
 * kept for nobody, no timer after an aborted call, no dispose waiting
 * forever, and no routine started under a signal that already aborted.
 */
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import {
  lead,
  type LuaScript,
  Redlock,
  type ReleaseSubscriber,
  type ScriptClient,
} from "../mod.ts";
import { Direction, FaultProxy } from "../scripts/fault_proxy.ts";
import { hold, onEveryServer, setup, sleep, startServers } from "./_redis.ts";

/** A Redlock that counts the events it builds and dispatches. */
class Counting extends Redlock {
  dispatched = 0;
  override dispatchEvent(event: Event): boolean {
    this.dispatched++;
    return super.dispatchEvent(event);
  }
}

Deno.test("a listener added with { once: true } makes no event once it has run", async () => {
  await using env = await setup("ioredis", 1);
  const redlock = new Counting(env.clients);
  let heard = 0;
  redlock.addEventListener("acquired", () => heard++, { once: true });
  for (let i = 0; i < 3; i++) await (await redlock.acquire(`once-${i}`, 5_000)).release();
  assert.equal(heard, 1);
  assert.equal(redlock.dispatched, 1, "the second and third acquires built no event");
});

Deno.test("a listener added with an already-aborted signal makes no event", async () => {
  await using env = await setup("ioredis", 1);
  const redlock = new Counting(env.clients);
  redlock.addEventListener("acquired", () => {}, { signal: AbortSignal.abort() });
  await (await redlock.acquire("pre-aborted", 5_000)).release();
  assert.equal(redlock.dispatched, 0);
});

Deno.test("a listener whose signal aborts later makes no event after the abort", async () => {
  await using env = await setup("ioredis", 1);
  const redlock = new Counting(env.clients);
  const controller = new AbortController();
  redlock.addEventListener("acquired", () => {}, { signal: controller.signal });
  await (await redlock.acquire("later-1", 5_000)).release();
  assert.equal(redlock.dispatched, 1);
  controller.abort();
  await (await redlock.acquire("later-2", 5_000)).release();
  assert.equal(redlock.dispatched, 1, "no event after the signal aborted");
});

/**
 * Counts the timers of `ms` set and not yet run or cleared while it is in
 * use (a timer left running keeps the user's process alive); clears those
 * left when disposed.
 */
function timersOf(ms: number): { readonly live: Set<unknown> } & Disposable {
  const live = new Set<unknown>();
  const set = globalThis.setTimeout;
  const clear = globalThis.clearTimeout;
  globalThis.setTimeout = ((fn: () => void, delay?: number) => {
    const id = set(() => {
      live.delete(id);
      fn();
    }, delay);
    if (delay === ms) live.add(id);
    return id;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((id?: number) => {
    live.delete(id);
    clear(id);
  }) as typeof clearTimeout;
  return {
    live,
    [Symbol.dispose]() {
      globalThis.setTimeout = set;
      globalThis.clearTimeout = clear;
      for (const id of live) clear(id as number);
    },
  };
}

/** A timeout no other timer of these tests uses. */
const TIMEOUT = 61_234;

Deno.test("a read or write lock with a timeout and an aborted signal rejects and leaves no timer", async () => {
  await using env = await setup("ioredis", 1);
  const redlock = new Redlock(env.clients);
  const reason = new Error("stopped before");
  const signal = AbortSignal.abort(reason);
  const rw = redlock.readWriteLock("rw-pre-aborted");
  using timers = timersOf(TIMEOUT);
  await assert.rejects(rw.read(5_000, { timeout: TIMEOUT, signal }), (e) => e === reason);
  await assert.rejects(rw.write(5_000, { timeout: TIMEOUT, signal }), (e) => e === reason);
  assert.equal(timers.live.size, 0, "no timeout timer left running");
});

Deno.test("a semaphore acquire with a timeout and an aborted signal rejects and leaves no timer", async () => {
  await using env = await setup("ioredis", 1);
  const redlock = new Redlock(env.clients);
  const reason = new Error("stopped before");
  const permits = redlock.semaphore("sem-pre-aborted", { permits: 2 });
  using timers = timersOf(TIMEOUT);
  await assert.rejects(
    permits.acquire(5_000, { timeout: TIMEOUT, signal: AbortSignal.abort(reason) }),
    (e) => e === reason,
  );
  assert.equal(timers.live.size, 0, "no timeout timer left running");
});

Deno.test("dispose settles although a custom subscriber's close() never does", async () => {
  await using env = await setup("ioredis", 1);
  let closes = 0;
  const stuck: ReleaseSubscriber = {
    subscribe: () => Promise.resolve(),
    unsubscribe: () => Promise.resolve(),
    close: () => {
      closes++;
      return new Promise<void>(() => {});
    },
  };
  const redlock = new Redlock(env.clients, { wait: "notify", subscriber: () => stuck });
  await hold(env.servers.servers[0]!, "stuck-close", "someone-else", 60_000);
  await assert.rejects(redlock.acquire("stuck-close", 5_000, { retryCount: 1, retryDelay: 50 }));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = await Promise.race([
    redlock[Symbol.asyncDispose]().then(() => true),
    new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), 5_000)),
  ]).finally(() => clearTimeout(timer));
  assert.equal(closes, 1);
  assert.equal(settled, true, "dispose settled within 5 s");
});

/** ioredis behind `ScriptClient`, calling `before(n)` as its `n`-th script call starts. */
class Watched implements ScriptClient {
  calls = 0;
  constructor(readonly real: Redis, readonly before: (n: number) => void) {}
  evalScript(script: LuaScript, keys: readonly string[], args: readonly string[]) {
    this.before(++this.calls);
    return this.real.eval(script.source, keys.length, ...keys, ...args);
  }
}

Deno.test("acquire() with fencing rejects with the reason when its signal aborts during the fencing round, leaving no key", async () => {
  const servers = await startServers(3);
  const reals = servers.servers.map((s) => new Redis({ host: "127.0.0.1", port: s.port }));
  try {
    const controller = new AbortController();
    const reason = new Error("stop during the fencing round");
    // The second script call is the fencing round (the first is the acquire's).
    const clients = reals.map((r, i) =>
      new Watched(r, (n) => {
        if (i === 0 && n === 2) controller.abort(reason);
      })
    );
    const redlock = new Redlock(clients);
    await assert.rejects(
      redlock.acquire("fenced-abort", 60_000, { fencing: true, signal: controller.signal }),
      (e) => e === reason,
    );
    assert.equal(clients[0]!.calls >= 2, true, "the fencing round ran");
    await onEveryServer(servers, "fenced-abort", null);
    await redlock[Symbol.asyncDispose]();
  } finally {
    for (const r of reals) r.disconnect();
    await servers.stop();
  }
});

Deno.test("acquire() aborted during the fencing round also releases a server that answers the acquire late", async () => {
  await using servers = await startServers(3);
  // Server 2 answers 300 ms late: the acquire's round is won without it.
  await using proxy = await FaultProxy.start(servers.ports[2]!);
  const reals = [
    new Redis({ host: "127.0.0.1", port: servers.ports[0]! }),
    new Redis({ host: "127.0.0.1", port: servers.ports[1]! }),
    new Redis({ host: "127.0.0.1", port: proxy.port }),
  ];
  try {
    const warm = new Redlock(reals);
    await (await warm.acquire("warm", 5_000, { fencing: true })).release();
    await warm[Symbol.asyncDispose]();
    proxy.delay(300, { direction: Direction.ToClient });
    const controller = new AbortController();
    const reason = new Error("stop during the fencing round");
    const clients = reals.map((r, i) =>
      new Watched(r, (n) => {
        if (i === 0 && n === 2) controller.abort(reason);
      })
    );
    const redlock = new Redlock(clients, { requestTimeout: 1_000 });
    await assert.rejects(
      redlock.acquire("late-fenced", 60_000, { fencing: true, signal: controller.signal }),
      (e) => e === reason,
    );
    // The late server's answer lands after the abort: its key is released then too.
    const end = performance.now() + 2_000;
    while (await servers.servers[2]!.command("EXISTS", "late-fenced") !== ":0\r\n") {
      if (performance.now() > end) break;
      await sleep(25);
    }
    await onEveryServer(servers, "late-fenced", null);
    await redlock[Symbol.asyncDispose]();
  } finally {
    for (const r of reals) r.disconnect();
  }
});

Deno.test("using() whose signal aborts after the acquire releases, rejects with the reason and never starts the routine", async () => {
  await using env = await setup("ioredis", 3);
  const redlock = new Redlock(env.clients);
  const controller = new AbortController();
  const reason = new Error("stop after the acquire");
  redlock.on("acquired", () => controller.abort(reason));
  let started = false;
  await assert.rejects(
    redlock.using("abort-between", 60_000, { signal: controller.signal }, () => {
      started = true;
      return Promise.resolve();
    }),
    (e) => e === reason,
  );
  assert.equal(started, false);
  await onEveryServer(env.servers, "abort-between", null);
});

Deno.test("lead() whose signal aborts after the acquire releases, resolves and never starts the routine", async () => {
  await using env = await setup("ioredis", 3);
  const redlock = new Redlock(env.clients);
  const controller = new AbortController();
  redlock.on("acquired", () => controller.abort(new Error("stop campaigning")));
  let started = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const ended = await Promise.race([
    lead(redlock, "lead-abort-between", 60_000, () => {
      started = true;
    }, { signal: controller.signal }).then(() => true),
    new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), 10_000)),
  ]).finally(() => clearTimeout(timer));
  assert.equal(ended, true, "lead() resolved within 10 s");
  assert.equal(started, false);
  await onEveryServer(env.servers, "lead-abort-between", null);
});

/** ioredis clients that keep the connections they duplicate (the subscribers). */
class Duplicating extends Redis {
  readonly duplicates: Redis[] = [];
  override duplicate(...args: Parameters<Redis["duplicate"]>): Redis {
    const made = super.duplicate(...args);
    this.duplicates.push(made);
    return made;
  }
}

Deno.test("dispose right after an ioredis subscriber reconnected leaves no unhandled rejection", async () => {
  const servers = await startServers(1);
  await using proxy = await FaultProxy.start(servers.ports[0]!);
  const client = new Duplicating({ host: "127.0.0.1", port: proxy.port, retryStrategy: () => 50 });
  client.on("error", () => {});
  const unhandled: unknown[] = [];
  const onUnhandled = (event: PromiseRejectionEvent) => {
    event.preventDefault();
    unhandled.push(event.reason);
  };
  globalThis.addEventListener("unhandledrejection", onUnhandled);
  try {
    const redlock = new Redlock([client], { wait: "notify", retryDelay: 100 });
    const held = await redlock.acquire("resubscribe", 10_000);
    // a wait that stays subscribed while the subscriber reconnects
    const stop = new AbortController();
    const waiting = redlock.acquire("resubscribe", 5_000, { retryCount: -1, signal: stop.signal });
    for (let i = 0; i < 100 && client.duplicates[0]?.status !== "ready"; i++) await sleep(20);
    const subscriber = client.duplicates[0]!;
    assert.equal(subscriber.status, "ready", "the subscriber connected");
    await sleep(100); // subscribed
    // Once it is ready again, the replies are held (a re-subscribe is never
    // answered) and the Redlock is disposed.
    const disposed = new Promise<void>((resolve) =>
      subscriber.once("ready", () => {
        proxy.partition(Direction.ToClient);
        setTimeout(() => redlock[Symbol.asyncDispose]().then(resolve), 0);
      })
    );
    proxy.reset();
    await disposed;
    proxy.heal();
    stop.abort(new Error("done"));
    await assert.rejects(waiting, /done/);
    await held.release();
    await sleep(300); // for a rejection nobody handles to surface
    assert.deepEqual(unhandled.map(String), []);
  } finally {
    globalThis.removeEventListener("unhandledrejection", onUnhandled);
    proxy.heal();
    client.disconnect();
    await servers.stop();
  }
});
