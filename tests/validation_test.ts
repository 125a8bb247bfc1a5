import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { integer, KINDS, scriptCalls, setup } from "./_redis.ts";

type Case = [
  name: string,
  run: (redlock: Redlock) => unknown,
  error: typeof Error,
  message: RegExp,
];

const cases: Case[] = [
  ["an empty resource list", (r) => r.acquire([], 1_000), RangeError, /resources.*\[\]/],
  [
    "a non-string resource",
    (r) => r.acquire([1 as unknown as string], 1_000),
    TypeError,
    /resources\[0\].*1/,
  ],
  ["an empty resource", (r) => r.acquire(["a", ""], 1_000), RangeError, /resources\[1\].*""/],
  ["an empty resource string", (r) => r.acquire("", 1_000), RangeError, /^resources must .*""$/],
  [
    "duplicate resources",
    (r) => r.acquire(["a", "b", "a"], 1_000),
    RangeError,
    /resources\[2\].*"a"/,
  ],
  [
    "resources that are no string or array",
    (r) => r.acquire(42 as unknown as string, 1_000),
    TypeError,
    /resources.*42/,
  ],
  ["a duration of 0", (r) => r.acquire("a", 0), RangeError, /duration.*got 0$/],
  ["a negative duration", (r) => r.acquire("a", -5), RangeError, /duration.*-5/],
  ["a duration of NaN", (r) => r.acquire("a", NaN), RangeError, /duration.*NaN/],
  ["a duration of Infinity", (r) => r.acquire("a", Infinity), RangeError, /duration.*Infinity/],
  ["a non-integer duration", (r) => r.acquire("a", 1.5), RangeError, /duration.*1\.5/],
  ["a duration above 2^31 - 1", (r) => r.acquire("a", 2 ** 31), RangeError, /duration.*2147483648/],
  [
    "a string duration",
    (r) => r.acquire("a", "100" as unknown as number),
    TypeError,
    /duration.*"100"/,
  ],
  [
    "a retryCount of -2",
    (r) => r.acquire("a", 1_000, { retryCount: -2 }),
    RangeError,
    /retryCount.*-2/,
  ],
  [
    "a retryCount of NaN",
    (r) => r.acquire("a", 1_000, { retryCount: NaN }),
    RangeError,
    /retryCount.*NaN/,
  ],
  [
    "a negative retryDelay",
    (r) => r.acquire("a", 1_000, { retryDelay: -1 }),
    RangeError,
    /retryDelay.*-1/,
  ],
  [
    "a retryDelay of NaN",
    (r) => r.acquire("a", 1_000, { retryDelay: NaN }),
    RangeError,
    /retryDelay.*NaN/,
  ],
  [
    "a negative retryJitter",
    (r) => r.acquire("a", 1_000, { retryJitter: -3 }),
    RangeError,
    /retryJitter.*-3/,
  ],
  [
    "a retryJitter of NaN",
    (r) => r.acquire("a", 1_000, { retryJitter: NaN }),
    RangeError,
    /retryJitter.*NaN/,
  ],
  [
    "a driftFactor of 1",
    (r) => r.acquire("a", 1_000, { driftFactor: 1 }),
    RangeError,
    /driftFactor.*got 1$/,
  ],
  [
    "a negative driftFactor",
    (r) => r.acquire("a", 1_000, { driftFactor: -0.1 }),
    RangeError,
    /driftFactor.*-0\.1/,
  ],
  [
    "a requestTimeout of 0",
    (r) => r.acquire("a", 1_000, { requestTimeout: 0 }),
    RangeError,
    /requestTimeout.*got 0$/,
  ],
  ["a negative timeout", (r) => r.acquire("a", 1_000, { timeout: -1 }), RangeError, /timeout.*-1/],
  [
    "a signal that is no AbortSignal",
    (r) => r.acquire("a", 1_000, { signal: {} as AbortSignal }),
    TypeError,
    /signal.*object/,
  ],
  [
    "an automaticExtensionThreshold not below the duration",
    (r) => r.using("a", 1_000, { automaticExtensionThreshold: 1_000 }, () => {}),
    RangeError,
    /automaticExtensionThreshold.*1000.*set in the options/,
  ],
  [
    "a using() without a routine",
    (r) => r.using("a", 1_000, {} as never),
    TypeError,
    /routine.*undefined/,
  ],
  ["a tryAcquire() duration of NaN", (r) => r.tryAcquire("a", NaN), RangeError, /duration.*NaN/],
  [
    "an extend() of something that is no Lock",
    (r) => r.extend({} as never, 1_000),
    TypeError,
    /lock.*object/,
  ],
  ["a release() of null", (r) => r.release(null as never), TypeError, /lock.*null/],
  [
    "a timeout of 0, pointing to tryAcquire()",
    (r) => r.acquire("a", 1_000, { timeout: 0 }),
    RangeError,
    /options\.timeout must be at least 1 ms, got 0.*tryAcquire\(\)/,
  ],
  [
    "an unknown option of acquire()",
    (r) => r.acquire("a", 1_000, { timout: 10 } as never),
    TypeError,
    /^options\.timout is not an option; the options are .*timeout/,
  ],
  [
    "an unknown option of using()",
    (r) => r.using("a", 1_000, { retryCnt: 3 } as never, () => {}),
    TypeError,
    /^options\.retryCnt is not an option/,
  ],
  [
    "an option isLocked() does not take",
    (r) => r.isLocked("a", { timeout: 10 } as never),
    TypeError,
    /^options\.timeout is not an option; the options are requestTimeout, signal$/,
  ],
  [
    "an isLocked() of an array, naming the argument as written",
    (r) => r.isLocked(["a", "b"] as never),
    TypeError,
    /^resource must be a string, got an array of 2$/,
  ],
  [
    "a fencing option that is no boolean",
    (r) => r.acquire("a", 1_000, { fencing: "yes" } as never),
    TypeError,
    /options\.fencing must be a boolean, got "yes"/,
  ],
  ["an isLocked() of an empty resource", (r) => r.isLocked(""), RangeError, /resource.*""/],
];

for (const kind of KINDS) {
  for (const [name, run, type, message] of cases) {
    Deno.test(`[${kind}] rejects ${name} before any request`, async () => {
      await using env = await setup(kind, 3);
      const redlock = new Redlock(env.clients);
      await assert.rejects(async () => await run(redlock), (error: Error) => {
        assert.ok(error instanceof type, `${error.name}: ${error.message}`);
        assert.match(error.message, message);
        return true;
      });
      for (const server of env.servers.servers) {
        assert.equal(await scriptCalls(server), 0, "no script ran");
        assert.equal(await integer(server, "DBSIZE"), 0, "nothing was written");
      }
    });
  }
}

Deno.test("new Redlock() rejects an empty client list", () => {
  assert.throws(() => new Redlock([]), { name: "TypeError", message: /clients.*\[\]/ });
});

Deno.test("new Redlock() rejects an object that is no client, naming the supported ones", () => {
  assert.throws(() => new Redlock([{} as never]), (error: Error) => {
    assert.ok(error instanceof TypeError);
    assert.match(error.message, /clients\[0\]/);
    assert.match(error.message, /ioredis/);
    assert.match(error.message, /node-redis/);
    assert.match(error.message, /deno-redis/);
    return true;
  });
});

Deno.test("new Redlock() rejects the same client twice", () => {
  const client = { evalScript: () => Promise.resolve(0) };
  assert.throws(() => new Redlock([client, client]), {
    name: "TypeError",
    message: /clients\[1\] is the same client as clients\[0\]/,
  });
});

Deno.test("new Redlock() rejects clients that are no array", () => {
  assert.throws(() => new Redlock("redis" as never), { name: "TypeError", message: /"redis"/ });
});

Deno.test("new Redlock() rejects out-of-range options, naming them", () => {
  const client = { evalScript: () => Promise.resolve(0) };
  assert.throws(() => new Redlock([client], { driftFactor: 2 }), {
    name: "RangeError",
    message: /options\.driftFactor.*got 2/,
  });
  assert.throws(() => new Redlock([client], { retryCount: 1.5 }), {
    name: "RangeError",
    message: /options\.retryCount.*1\.5/,
  });
  assert.throws(() => new Redlock([client], { automaticExtensionThreshold: -1 }), {
    name: "RangeError",
    message: /automaticExtensionThreshold.*-1/,
  });
  assert.throws(() => new Redlock([client], { retryDelay: "x" as never }), {
    name: "TypeError",
    message: /retryDelay.*"x"/,
  });
});

Deno.test("new Redlock() rejects an unknown option, naming it", () => {
  const client = { evalScript: () => Promise.resolve(0) };
  assert.throws(() => new Redlock([client], { retryCnt: 3 } as never), {
    name: "TypeError",
    message: /^options\.retryCnt is not an option; the options are .*retryCount/,
  });
  assert.throws(() => new Redlock([client], 5 as never), {
    name: "TypeError",
    message: /options must be an object, got 5/,
  });
});

Deno.test("release() and extend() reject an unknown option before any request", async () => {
  let calls = 0;
  const client = { evalScript: () => (calls++, Promise.resolve(0)) };
  const redlock = new Redlock([client]);
  const lock = await redlock.acquire("a", 1_000);
  const before = calls;
  await assert.rejects(lock.release({ timeout: 5 } as never), {
    name: "TypeError",
    message: /^options\.timeout is not an option; the options are requestTimeout$/,
  });
  await assert.rejects(lock.extend(1_000, { onlyIfLock: true } as never), {
    name: "TypeError",
    message: /^options\.onlyIfLock is not an option/,
  });
  assert.equal(calls, before, "no request");
  assert.ok(lock.remainingTime > 0, "still held");
  await lock.release();
  assert.equal(lock.remainingTime, 0);
});
