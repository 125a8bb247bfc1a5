/**
 * A bounded stress of queued acquires with abort signals
 * and timeouts while servers are killed and restarted. Every acquire must
 * settle soon after its signal or timeout; after it settled, no listener of
 * the library may be left on the caller's signal; nothing may be left
 * running (sanitizers on). Prints counts; STRESS_MS (default 4000) bounds it.
 */
import assert from "node:assert/strict";
import { type Lock, Redlock } from "../mod.ts";
import { queueKey } from "../src/protocol/scripts.ts";
import { type Kind, setup, sleep } from "./_redis.ts";

const STRESS_MS = Number(Deno.env.get("STRESS_MS") ?? 4_000);
const WORKERS = Number(Deno.env.get("STRESS_WORKERS") ?? 40);
const FAULT = Deno.env.get("STRESS_FAULT") ?? "kill";
const HOLD_MS = Number(Deno.env.get("STRESS_HOLD_MS") ?? 15);

/**
 * A signal whose listeners are tracked: `late()` counts the listeners that
 * ran after `settled` was set (left behind by an acquire that had ended).
 */
function trackedController() {
  const controller = new AbortController();
  const signal = controller.signal;
  const wrappers = new Map<unknown, EventListener>();
  const state = { settled: false, lateCalls: 0, attached: 0 };
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  Object.defineProperty(signal, "addEventListener", {
    value: (type: string, listener: EventListenerOrEventListenerObject, options?: unknown) => {
      if (wrappers.has(listener)) return;
      const wrapper: EventListener = (event) => {
        wrappers.delete(listener);
        state.attached--;
        if (state.settled) state.lateCalls++;
        if (typeof listener === "function") listener.call(signal, event);
        else listener.handleEvent(event);
      };
      wrappers.set(listener, wrapper);
      state.attached++;
      add(type, wrapper, options as AddEventListenerOptions);
    },
  });
  Object.defineProperty(signal, "removeEventListener", {
    value: (type: string, listener: EventListenerOrEventListenerObject, options?: unknown) => {
      const wrapper = wrappers.get(listener);
      if (wrapper === undefined) return;
      wrappers.delete(listener);
      state.attached--;
      remove(type, wrapper, options as EventListenerOptions);
    },
  });
  return { controller, signal, state };
}

interface Tally {
  acquired: number;
  aborted: number;
  timedOut: number;
  otherErrors: Map<string, number>;
  hung: string[];
  leftListeners: number;
  lateListenerCalls: number;
  overlaps: number;
  handoffs: number;
  kills: number;
}

async function stress(kind: Kind): Promise<Tally> {
  await using env = await setup(kind, 3);
  const redlocks = Array.from(
    { length: 3 },
    () => new Redlock(env.clients, { retryCount: -1, requestTimeout: 150 }),
  );
  const keys = ["s0", "s1", "s2"];
  const holding = new Map<string, number>(keys.map((k) => [k, 0]));
  const tally: Tally = {
    acquired: 0,
    aborted: 0,
    timedOut: 0,
    otherErrors: new Map(),
    hung: [],
    leftListeners: 0,
    lateListenerCalls: 0,
    overlaps: 0,
    handoffs: 0,
    kills: 0,
  };
  const end = performance.now() + STRESS_MS;
  let stopped = false;
  for (const r of redlocks) {
    r.addEventListener("acquired", (e) => {
      if ((e as unknown as { handoff: boolean }).handoff) tally.handoffs++;
    });
    r.addEventListener("error", () => {});
  }

  async function one(w: number, i: number): Promise<void> {
    const key = keys[(w + i) % keys.length]!;
    const redlock = redlocks[(w * 7 + i) % redlocks.length]!;
    const mode = Math.random();
    const { controller, signal, state } = trackedController();
    let bound: number;
    let acquiring: Promise<Lock>;
    let abortTimer: ReturnType<typeof setTimeout> | undefined;
    if (mode < 0.4) {
      const at = Math.random() * 400;
      abortTimer = setTimeout(() => controller.abort(new Error("stress abort")), at);
      bound = at;
      acquiring = redlock.acquire(key, 300, { signal, timeout: 4_000 });
    } else if (mode < 0.8) {
      const timeout = 20 + Math.floor(Math.random() * 600);
      bound = timeout;
      acquiring = redlock.acquire(key, 300, { signal, timeout });
    } else {
      bound = 3_000;
      acquiring = redlock.acquire(key, 300, { signal, timeout: 3_000 });
    }
    const started = performance.now();
    let watchdog: ReturnType<typeof setTimeout> | undefined;
    const hung = new Promise<"hung">((
      r,
    ) => (watchdog = setTimeout(() => r("hung"), bound + 6_000)));
    const result = await Promise.race([
      acquiring.then((lock) => ({ lock }), (error) => ({ error })),
      hung,
    ]);
    clearTimeout(watchdog);
    clearTimeout(abortTimer);
    state.settled = true;
    if (result === "hung") {
      tally.hung.push(`${kind} worker ${w} #${i} mode ${mode.toFixed(2)} bound ${bound}`);
      // keep waiting for it (bounded), so that nothing is left running
      await Promise.race([acquiring.catch(() => {}), sleep(10_000)]);
      return;
    }
    if ("lock" in result) {
      tally.acquired++;
      const n = holding.get(key)! + 1;
      holding.set(key, n);
      if (n > 1) tally.overlaps++;
      await sleep(Math.random() * HOLD_MS);
      holding.set(key, holding.get(key)! - 1);
      await result.lock.release().catch(() => {});
    } else {
      const e = result.error as Error;
      if (e?.message === "stress abort") tally.aborted++;
      else if (e?.name === "TimeoutError") tally.timedOut++;
      else {
        const name = `${e?.name}: ${String(e?.message).slice(0, 50)}`;
        tally.otherErrors.set(name, (tally.otherErrors.get(name) ?? 0) + 1);
      }
    }
    void started;
    // anything the library left on the signal runs now, after the acquire ended
    await sleep(20);
    controller.abort(new Error("after the end"));
    tally.lateListenerCalls += state.lateCalls;
    tally.leftListeners += state.attached > 0 ? 1 : 0;
  }

  async function worker(w: number): Promise<void> {
    for (let i = 0; performance.now() < end; i++) await one(w, i);
  }

  async function chaos(): Promise<void> {
    let n = 0;
    while (!stopped && performance.now() < end - 2_000) {
      await sleep(1_500 + Math.random() * 1_000);
      if (stopped) break;
      const server = env.servers.servers[n++ % 3]!;
      tally.kills++;
      if (FAULT === "pause") {
        await server.pause();
        await sleep(300 + Math.random() * 500);
        await server.resume();
      } else {
        await server.kill();
        await sleep(300 + Math.random() * 500);
        await server.start();
      }
    }
  }

  try {
    const workers = Array.from({ length: WORKERS }, (_, w) => worker(w));
    const faults = chaos();
    await Promise.all(workers);
    stopped = true;
    await faults;
    // every interest forgotten: the subscriber connections close LINGER_MS after the last wait
    await sleep(Number(Deno.env.get("STRESS_LINGER_WAIT") ?? 1_000));
    for (const server of env.servers.servers) {
      const list = await server.command("CLIENT", "LIST");
      const subscribed = list.split("\n").filter((line) => /\bsub=[1-9]/.test(line));
      assert.equal(subscribed.length, 0, `subscribers left on ${server.port}: ${subscribed}`);
    }
  } finally {
    stopped = true;
    await Promise.all(redlocks.map((r) => r[Symbol.asyncDispose]()));
  }
  // queue entries expire after 4 request timeouts
  await sleep(800);
  for (const server of env.servers.servers) {
    for (const key of keys) {
      const reply = await server.command("EXISTS", queueKey(key), key);
      assert.equal(reply.trim(), ":0", `${key} or its queue left on ${server.port}`);
    }
  }
  return tally;
}

for (const kind of ["ioredis", "node-redis"] as const) {
  Deno.test(`[${kind}] stress: every acquire settles, leaves no listener, nothing runs after`, async () => {
    const tally = await stress(kind);
    console.log(JSON.stringify({ ...tally, otherErrors: Object.fromEntries(tally.otherErrors) }));
    assert.deepEqual(tally.hung, [], "acquires that never settled");
    assert.equal(tally.lateListenerCalls, 0, "listeners that ran after their acquire ended");
    assert.equal(tally.leftListeners, 0, "acquires that left a listener on the signal");
  });
}
