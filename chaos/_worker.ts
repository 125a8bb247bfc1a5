/**
 * A chaos worker: a separate process that contends for the resources with
 * short leases and, while it holds one, does a read-modify-write of the
 * guarded store. It reports every step as a JSON line on stdout; the parent
 * sends commands as JSON lines on stdin and may SIGSTOP or SIGKILL it.
 *
 * Usage (by chaos.ts only): `deno run -A chaos/_worker.ts '<WorkerConfig JSON>'`
 *
 * @module
 */

import { Redis } from "ioredis";
import { type AcquireOptions, type Lock, Redlock } from "../mod.ts";
import { lines } from "./_lines.ts";
import { type Command, instant, type Report, type WorkerConfig } from "./_protocol.ts";
import { Rng } from "./_rng.ts";
import { GuardedStore, holdTag } from "./_store.ts";
import { Uncaught } from "./_uncaught.ts";

/** ms of validity a hold wants left, beyond its think time, before it writes. */
const MARGIN = 50;

const config = JSON.parse(Deno.args[0] ?? "") as WorkerConfig;
const rng = new Rng(config.seed);
const w = config.id;

function send(report: Report): void {
  console.log(JSON.stringify(report));
}

// Reported, and then kept from ending the worker: the run fails on any.
new Uncaught((message) => send({ ev: "uncaught", w, t: instant(), message }));

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const describe = (error: unknown) =>
  error instanceof Error
    ? { error: error.name, message: error.message.split("\n")[0]! }
    : { error: "Error", message: String(error) };

/**
 * A lock-server connection: a request to a server that is down fails at once
 * and is never replayed later (no offline queue, no resend), like a request
 * lost in a partition. A lock exists only where a server acknowledged it.
 */
function lockClient(port: number): Redis {
  const client = new Redis({
    host: "127.0.0.1",
    port,
    maxRetriesPerRequest: null,
    retryStrategy: () => 50,
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
  });
  client.on("error", () => {});
  return client;
}

function ready(client: Redis, timeout: number): Promise<void> {
  if (client.status === "ready") return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, timeout);
    function done() {
      clearTimeout(timer);
      client.off("ready", done);
      resolve();
    }
    client.on("ready", done);
  });
}

const clients = config.ports.map(lockClient);
const storeClient = new Redis({
  host: "127.0.0.1",
  port: config.storePort,
  maxRetriesPerRequest: null,
  retryStrategy: () => 50,
});
storeClient.on("error", () => {});
const store = new GuardedStore(storeClient, config.prefix);
const redlock = new Redlock(clients, config.settings);
const serverErrors: Record<string, number> = {};
redlock.on("error", (error) => {
  const key = `${error.name}: ${error.message.split("\n")[0]!.replace(/\d+/g, "N").slice(0, 60)}`;
  serverErrors[key] = (serverErrors[key] ?? 0) + 1;
});
// Asks for fencing tokens; a library without them ignores the option and
// leaves lock.fencingToken undefined.
const acquireOptions: AcquireOptions & { fencing?: boolean } = {
  ...config.settings,
  fencing: true,
};

let stopping = false;
let lingerNext = false;

async function listen(): Promise<void> {
  for await (const line of lines(Deno.stdin.readable)) {
    if (line.trim() === "") continue;
    const command = JSON.parse(line) as Command;
    if (command.op === "ping") send({ ev: "pong", w, t0: command.t0, t: instant() });
    else if (command.op === "linger") lingerNext = true;
    else if (command.op === "stop") stopping = true;
  }
  // The parent is gone: nobody will read a report again.
  Deno.exit(0);
}

/** The `using()` hold under way: its number and its lock's value. */
let usingHold: { h: number; value: string } | undefined;
redlock.on("extended", ({ lock, previous }) => {
  if (usingHold === undefined || previous.value !== usingHold.value) return;
  const t = instant();
  send({
    ev: "extended",
    w,
    h: usingHold.h,
    start: t,
    t,
    expiration: lock.expiration,
    error: null,
  });
});

/** Calls `then` with the instant `signal` aborts (at once when it has already). */
function onAbort(signal: AbortSignal, then: (t: number) => void): void {
  if (signal.aborted) then(instant());
  else signal.addEventListener("abort", () => then(instant()), { once: true });
}

/**
 * Long work under `using()`, which extends the lock: the routine reads,
 * works, and writes only while its signal has not aborted.
 */
async function holdUsing(h: number, r: string, lease: number): Promise<void> {
  const think = rng.int(config.longThinkMin, config.longThinkMax);
  const start = instant();
  send({ ev: "acquiring", w, h, r, lease, t: start });
  let stoppedAt: number | undefined;
  try {
    await redlock.using(r, lease, acquireOptions, async (signal, context) => {
      const { lock } = context;
      const token = typeof lock.fencingToken === "number" ? lock.fencingToken : null;
      const attempts = lock.attempts.length;
      const t = instant();
      send({
        ev: "acquired",
        w,
        h,
        r,
        lease,
        start,
        t,
        expiration: lock.expiration,
        token,
        attempts,
        using: true,
      });
      usingHold = { h, value: lock.value };
      onAbort(
        signal,
        (t) => send({ ev: "aborted", w, h, t, error: describe(signal.reason).error }),
      );
      try {
        await guardedWork(signal, context, r, h, token, think);
      } finally {
        stoppedAt = instant();
        usingHold = undefined;
      }
    });
  } catch (error) {
    if (stoppedAt === undefined) {
      send({ ev: "failed", w, h, r, start, t: instant(), ...describe(error) });
      return;
    }
  }
  send({ ev: "released", w, h, start: stoppedAt!, t: instant(), error: null });
}

/** A `using()` routine's read-modify-write: skips the write once its signal aborted. */
async function guardedWork(
  signal: AbortSignal,
  context: { readonly lock: Lock },
  r: string,
  h: number,
  token: number | null,
  think: number,
): Promise<void> {
  const tag = holdTag(w, h);
  try {
    const read = await store.read(r, tag, token);
    send({ ev: "read", w, h, t: instant(), value: read.value, fenced: read.fenced });
    await sleep(think);
    if (signal.aborted) {
      send({ ev: "skipped", w, h, t: instant(), remaining: context.lock.remainingTime });
      return;
    }
    const writeStart = instant();
    const written = await store.write(r, tag, read, token);
    const { previous, fenced } = written;
    send({
      ev: "wrote",
      w,
      h,
      start: writeStart,
      t: instant(),
      value: read.value + 1,
      previous,
      fenced,
    });
  } catch (error) {
    send({ ev: "error", w, t: instant(), message: describe(error).message });
  }
}

async function holdOnce(h: number): Promise<void> {
  const r = rng.pick(config.resources);
  // a hold the parent asked to linger gets the longest lease (it is to work long)
  const drawn = rng.int(config.leaseMin, config.leaseMax);
  const lease = lingerNext ? config.leaseMax : drawn;
  if (rng.chance(config.longShare) && !lingerNext) return await holdUsing(h, r, lease);
  const start = instant();
  send({ ev: "acquiring", w, h, r, lease, t: start });
  let lock: Lock;
  try {
    lock = await redlock.acquire(r, lease, acquireOptions);
  } catch (error) {
    send({ ev: "failed", w, h, r, start, t: instant(), ...describe(error) });
    return;
  }
  const token = typeof lock.fencingToken === "number" ? lock.fencingToken : null;
  send({
    ev: "acquired",
    w,
    h,
    r,
    lease,
    start,
    t: instant(),
    expiration: lock.expiration,
    token,
    attempts: lock.attempts.length,
  });
  const tag = holdTag(w, h);
  try {
    const read = await store.read(r, tag, token);
    send({ ev: "read", w, h, t: instant(), value: read.value, fenced: read.fenced });
    const think = rng.int(config.thinkMin, config.thinkMax);
    // a careful holder checks that its lease leaves room for the work
    const remaining = lock.remainingTime;
    if (remaining < think + MARGIN) {
      send({ ev: "skipped", w, h, t: instant(), remaining });
    } else {
      // A lingering hold stands for one whose work stalls after that check
      // (a GC pause, a swap-in, SIGSTOP): the parent stops the process or
      // crashes servers during its lingerMs.
      const linger = lingerNext;
      lingerNext = false;
      if (linger) {
        send({ ev: "thinking", w, h, t: instant(), expiration: lock.expiration });
        await sleep(config.lingerMs);
      } else {
        await sleep(think);
      }
      const writeStart = instant();
      const written = await store.write(r, tag, read, token);
      send({
        ev: "wrote",
        w,
        h,
        start: writeStart,
        t: instant(),
        value: read.value + 1,
        previous: written.previous,
        fenced: written.fenced,
      });
    }
  } catch (error) {
    send({ ev: "error", w, t: instant(), message: describe(error).message });
  }
  const releaseStart = instant();
  try {
    await lock.release();
    send({ ev: "released", w, h, start: releaseStart, t: instant(), error: null });
  } catch (error) {
    send({ ev: "released", w, h, start: releaseStart, t: instant(), ...describe(error) });
  }
}

listen();
await Promise.all([...clients, storeClient].map((c) => ready(c, 3_000)));
send({ ev: "ready", w, t: instant() });

for (let h = 1; !stopping; h++) {
  await sleep(rng.int(0, config.idleMax));
  if (stopping) break;
  await holdOnce(h);
}
for (const client of [...clients, storeClient]) client.disconnect();
send({ ev: "bye", w, t: instant(), serverErrors });
Deno.exit(0);
