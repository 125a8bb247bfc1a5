import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { type LeadContext, Redlock } from "../mod.ts";
import { onEveryServer, type RedisServers, setup, sleep, startServers } from "./_redis.ts";
import { untilAborted } from "./_abort.ts";

const CAMPAIGNER = fileURLToPath(new URL("./fixtures/campaigner.ts", import.meta.url));

Deno.test("lead() rejects bad arguments before any request", async () => {
  let calls = 0;
  const redlock = new Redlock([{ evalScript: () => Promise.resolve(calls++) }]);
  const routine = () => {};
  const bad: [unknown[], typeof TypeError | typeof RangeError, RegExp][] = [
    [["", 1_000, routine], RangeError, /name must not be empty, got ""/],
    [[["a", "b"], 1_000, routine], TypeError, /name must be a string, got an array of 2/],
    [["a", 0, routine], RangeError, /duration .* got 0/],
    [["a", NaN, routine], RangeError, /duration .* got NaN/],
    [["a", 1_000, "run"], TypeError, /routine must be a function, got "run"/],
    [["a", 1_000, routine, null], TypeError, /options must be an object, got null/],
    [["a", 1_000, routine, { timeout: 5 }], TypeError, /options.timeout is set by lead/],
    [["a", 1_000, routine, { signal: "stop" }], TypeError, /options.signal must be an AbortSignal/],
    [
      ["a", 1_000, routine, { automaticExtensionThreshold: 1_000 }],
      RangeError,
      /automaticExtensionThreshold/,
    ],
  ];
  for (const [args, type, message] of bad) {
    // deno-lint-ignore no-explicit-any
    await assert.rejects(redlock.lead(...(args as [any, any, any, any])), type);
    // deno-lint-ignore no-explicit-any
    await assert.rejects(redlock.lead(...(args as [any, any, any, any])), message);
  }
  assert.equal(calls, 0);
});

Deno.test("using() rejects options given after the routine, before any request", async () => {
  let calls = 0;
  const redlock = new Redlock([{ evalScript: () => Promise.resolve(calls++) }]);
  const routine = () => "ran";
  const late = { signal: AbortSignal.abort(), timout: 5 };
  const message =
    /using\(\) takes its options before the routine .*got a routine, then a plain object/;
  // deno-lint-ignore no-explicit-any
  const loose = (f: (...args: any[]) => Promise<unknown>) => f;
  await assert.rejects(loose(redlock.using.bind(redlock))("a", 1_000, routine, late), message);
  const semaphore = redlock.semaphore("s", { permits: 2 });
  await assert.rejects(loose(semaphore.using.bind(semaphore))(1_000, routine, late), message);
  const doc = redlock.readWriteLock("d");
  await assert.rejects(loose(doc.using.bind(doc))("read", 1_000, routine, late), message);
  assert.equal(calls, 0);
});

Deno.test("lead() reports a routine's error, backs off, and leads again with a higher term", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients, { retryDelay: 150, retryJitter: 0 });
  const errors: Error[] = [];
  redlock.on("error", (error) => errors.push(error));
  const stop = new AbortController();
  const terms: number[] = [];
  const starts: number[] = [];
  let stopSeen: unknown;
  await redlock.lead("job", 2_000, async (signal, { term, lock }: LeadContext) => {
    terms.push(term);
    starts.push(performance.now());
    assert.equal(lock.fencingToken, term);
    if (terms.length < 3) throw new Error(`failure ${terms.length}`);
    // the third term leads until told to stop; that abort reaches the routine
    setTimeout(() => stop.abort(new Error("stop")), 50);
    await untilAborted(signal, 10_000);
    stopSeen = signal.reason;
  }, { signal: stop.signal });
  assert.deepEqual(errors.map((e) => e.message), ["failure 1", "failure 2"]);
  assert.ok(terms[0]! < terms[1]! && terms[1]! < terms[2]!, `terms ${terms}`);
  // backoff: 150 ms after the first failure, 300 ms after the second
  assert.ok(starts[1]! - starts[0]! >= 140, `first backoff ${starts[1]! - starts[0]!} ms`);
  assert.ok(starts[2]! - starts[1]! >= 290, `second backoff ${starts[2]! - starts[1]!} ms`);
  assert.equal((stopSeen as Error).message, "stop");
  await onEveryServer(env.servers, "job", null); // released when the routine settled
});

Deno.test("lead() resolves at once when its signal aborts while campaigning, leaving the holder alone", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const holder = await redlock.acquire("busy", 5_000);
  const stop = new AbortController();
  let ran = false;
  const campaign = redlock.lead("busy", 2_000, () => {
    ran = true;
  }, { signal: stop.signal });
  await sleep(100);
  const start = performance.now();
  stop.abort();
  await campaign;
  assert.ok(performance.now() - start < 1_000);
  assert.equal(ran, false);
  assert.equal(await redlock.isValid(holder), true);
  await holder.release();
});

/** A line a campaigner wrote: `start`/`end` of a term, `ready`, `exit`. */
interface Entry {
  event: string;
  pid: number;
  term: number;
  at: number;
}

async function entries(log: string): Promise<Entry[]> {
  const text = await Deno.readTextFile(log).catch(() => "");
  return text.trim().split("\n").filter(Boolean).map((line) => {
    const [event, pid, term, at] = line.split(" ");
    return { event: event!, pid: Number(pid), term: Number(term), at: Number(at) };
  });
}

/** Waits until `log` has `count` entries of `event`, and returns them. */
async function waitFor(log: string, event: string, count: number, ms: number): Promise<Entry[]> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    const found = (await entries(log)).filter((e) => e.event === event);
    if (found.length >= count) return found;
    await sleep(20);
  }
  throw new Error(`no ${count} "${event}" lines in ${ms} ms:\n${await Deno.readTextFile(log)}`);
}

/** Campaigner processes over `servers`, each by PID; only these are ever signalled. */
class Campaigners implements AsyncDisposable {
  readonly children = new Map<number, Deno.ChildProcess>();
  readonly killed = new Set<number>();
  constructor(readonly log: string, readonly name: string, readonly lease: number) {}

  spawn(servers: RedisServers, env: Record<string, string> = {}): Deno.ChildProcess {
    const child = new Deno.Command(Deno.execPath(), {
      env,
      args: [
        "run",
        "-A",
        CAMPAIGNER,
        this.log,
        this.name,
        String(this.lease),
        ...servers.ports.map(String),
      ],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    this.children.set(child.pid, child);
    return child;
  }

  signal(pid: number, signal: Deno.Signal): void {
    if (signal === "SIGKILL") this.killed.add(pid);
    this.children.get(pid)!.kill(signal);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    for (const [pid, child] of this.children) {
      try {
        child.kill(this.killed.has(pid) ? "SIGKILL" : "SIGTERM");
      } catch {
        // exited already
      }
    }
    await Promise.all([...this.children.values()].map((c) => c.status));
  }
}

/**
 * Checks that terms never overlap: every `start` follows the `end` of the
 * term before, or the `start` of a leader that was killed; and terms grow.
 */
function checkOneLeaderAtATime(log: Entry[], killed: Set<number>): void {
  let current: Entry | undefined;
  for (const entry of log) {
    if (entry.event === "start") {
      if (current) {
        assert.ok(killed.has(current.pid), `term ${entry.term} began during term ${current.term}`);
        assert.ok(entry.term > current.term, `term ${entry.term} after ${current.term}`);
      }
      current = entry;
    } else if (entry.event === "end") {
      assert.equal(entry.pid, current?.pid, `end of a term that was not leading: ${entry.term}`);
      assert.equal(entry.term, current!.term);
      current = undefined;
    }
  }
  const terms = log.filter((e) => e.event === "start").map((e) => e.term);
  assert.deepEqual(terms, [...terms].sort((a, b) => a - b));
  assert.equal(new Set(terms).size, terms.length, `terms repeat: ${terms}`);
}

Deno.test("lead() across processes: one leader at a time, handover on abort, failover after kill -9", async () => {
  await using servers = await startServers(3);
  const dir = await Deno.makeTempDir({ prefix: "redlock-lead-" });
  const log = `${dir}/log`;
  const lease = 1_500;
  const retryWait = 100 + 50; // the campaigners' retryDelay + retryJitter
  try {
    await using campaigners = new Campaigners(log, "leader", lease);
    for (let i = 0; i < 3; i++) campaigners.spawn(servers);
    await waitFor(log, "ready", 3, 20_000);
    const [first] = await waitFor(log, "start", 1, 5_000);

    // Handover: the leader resigns on SIGTERM; another leads about one handoff later.
    campaigners.signal(first!.pid, "SIGTERM");
    const [, second] = await waitFor(log, "start", 2, 5_000);
    const [end] = await waitFor(log, "end", 1, 1_000);
    assert.equal((await campaigners.children.get(first!.pid)!.status).code, 0);
    const handover = second!.at - end!.at;
    assert.ok(handover < 1_000, `handover took ${handover} ms`);

    // Failover: the new leader's process dies; another leads within the lease plus a retry wait.
    const killedAt = Date.now();
    campaigners.signal(second!.pid, "SIGKILL");
    assert.equal((await campaigners.children.get(second!.pid)!.status).signal, "SIGKILL");
    const [, , third] = await waitFor(log, "start", 3, lease + retryWait + 5_000);
    const failover = third!.at - killedAt;
    assert.ok(failover <= lease + retryWait + 2_000, `failover took ${failover} ms`);
    assert.notEqual(third!.pid, second!.pid);

    // The last one resigns too; nothing is left running or locked.
    for (const pid of campaigners.children.keys()) {
      if (pid !== first!.pid && pid !== second!.pid) campaigners.signal(pid, "SIGTERM");
    }
    for (const [pid, child] of campaigners.children) {
      if (pid !== second!.pid) assert.equal((await child.status).code, 0);
    }
    const history = await entries(log);
    checkOneLeaderAtATime(history, campaigners.killed);
    assert.equal(history.filter((e) => e.event === "exit").length, 2);
    await onEveryServer(servers, "leader", null);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a leader stopped between its term's start and its listening for the abort still stops", async () => {
  await using servers = await startServers(3);
  const dir = await Deno.makeTempDir({ prefix: "redlock-lead-" });
  const log = `${dir}/log`;
  try {
    await using campaigners = new Campaigners(log, "early-stop", 1_500);
    // It pauses 500 ms after writing "start": the SIGTERM lands before it listens.
    const child = campaigners.spawn(servers, { CAMPAIGNER_PAUSE_MS: "500" });
    await waitFor(log, "start", 1, 20_000);
    campaigners.signal(child.pid, "SIGTERM");
    let timer: ReturnType<typeof setTimeout> | undefined;
    const status = await Promise.race([
      child.status,
      new Promise<undefined>((resolve) => timer = setTimeout(() => resolve(undefined), 10_000)),
    ]).finally(() => clearTimeout(timer));
    if (status === undefined) campaigners.killed.add(child.pid); // disposed with SIGKILL
    assert.equal(status?.code, 0, "it ended within 10 s of the SIGTERM");
    await waitFor(log, "end", 1, 1_000);
    await onEveryServer(servers, "early-stop", null);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
