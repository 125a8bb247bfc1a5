import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { PermissionError, Redlock } from "../mod.ts";
import { aclLog, connectAllAs, createUser, lockUserRule, PASSWORD } from "./_acl.ts";
import { type Kind, type RedisServers, startServers } from "./_redis.ts";

const ACL_KINDS = ["ioredis", "node-redis"] as const satisfies readonly Kind[];
const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));
const decoder = new TextDecoder();

/** Three servers with the lock user `locker` of docs/production.md for names under `app:`. */
async function aclServers(): Promise<RedisServers> {
  const servers = await startServers(3);
  try {
    await createUser(servers, await lockUserRule("locker", "app:"));
  } catch (error) {
    await servers.stop();
    throw error;
  }
  return servers;
}

/** Creates `user` on every server: the lock user's rule on "app:" keys, then `rules`. */
async function lockUserLess(servers: RedisServers, user: string, rules: readonly string[]) {
  await createUser(servers, [
    "SETUSER",
    user,
    ...(await lockUserRule("x", "app:")).slice(2),
    ...rules,
  ]);
}

/** Asserts that no server logged an ACL denial. */
async function noDenials(servers: RedisServers): Promise<void> {
  for (const [i, server] of servers.servers.entries()) {
    assert.equal(await aclLog(server), "", `ACL LOG of server ${i}`);
  }
}

for (const kind of ACL_KINDS) {
  Deno.test(`[${kind}] a least-privilege ACL user acquires, waits notified, extends and fences`, async () => {
    await using servers = await aclServers();
    await using a = await connectAllAs(kind, servers, "locker");
    await using b = await connectAllAs(kind, servers, "locker");
    await using holder = new Redlock(a.clients);
    // Polling would ask again only after 3 s: a wake-up before then is the release's message.
    await using waiter = new Redlock(b.clients, { retryDelay: 3_000, retryJitter: 0 });
    const errors: Error[] = [];
    for (const r of [holder, waiter]) r.on("error", (e) => errors.push(e));

    const first = await holder.acquire("app:door", 10_000, { fencing: true });
    const waiting = waiter.acquire("app:door", 10_000, { fencing: true, timeout: 8_000 });
    await new Promise((r) => setTimeout(r, 100));
    const extended = await first.extend(10_000);
    await extended.release();
    const released = performance.now();
    const second = await waiting;
    assert.ok(performance.now() - released < 2_000, "the waiter woke on the release's message");
    assert.ok(second.fencingToken! > first.fencingToken!, "fencing tokens grow");
    await second.release();
    // A hash-tagged name keeps its tag: `{app:x}:board` and its keys beside it.
    await (await holder.acquire(["{app:game}:board", "{app:game}:turn"], 5_000)).release();
    assert.deepEqual(errors.map((e) => e.message), []);
    await noDenials(servers);
  });

  Deno.test(`[${kind}] a least-privilege ACL user runs read-write locks, semaphores and lead()`, async () => {
    await using servers = await aclServers();
    await using a = await connectAllAs(kind, servers, "locker");
    await using redlock = new Redlock(a.clients);
    const errors: Error[] = [];
    redlock.on("error", (e) => errors.push(e));

    const rw = redlock.readWriteLock("app:doc");
    const readers = [await rw.read(5_000), await rw.read(5_000)];
    const writing = rw.write(5_000, { timeout: 5_000 });
    await new Promise((r) => setTimeout(r, 50));
    for (const r of readers) await rw.release(r);
    await rw.release(await writing);

    const sem = redlock.semaphore("app:pool", { permits: 2 });
    const permits = [await sem.acquire(5_000), await sem.acquire(5_000)];
    assert.equal(await sem.tryAcquire(5_000), null, "both permits are held");
    // a waiter for both permits queues; an acquire that finds a slot free reads the queue
    const both = sem.acquire(5_000, { permits: 2, timeout: 5_000 });
    await new Promise((r) => setTimeout(r, 100));
    const renewed = await permits[0]!.extend(5_000);
    await renewed.release();
    assert.equal(await sem.tryAcquire(5_000), null, "the queued waiter comes first");
    await permits[1]!.release();
    await (await both).release();

    const terms: number[] = [];
    const stop = new AbortController();
    await redlock.lead("app:leader", 2_000, (_signal, { term }) => {
      terms.push(term);
      stop.abort();
    }, { signal: stop.signal });
    assert.equal(terms.length, 1);
    assert.ok(terms[0]! > 0, "a term is a fencing token");
    assert.deepEqual(errors.map((e) => e.message), []);
    await noDenials(servers);
  });

  Deno.test(`[${kind}] an ACL user's key outside its pattern fails at once with a PermissionError`, async () => {
    await using servers = await aclServers();
    await using a = await connectAllAs(kind, servers, "locker");
    // With retries that would take over 2 s before giving up.
    await using redlock = new Redlock(a.clients, { retryCount: 10, retryDelay: 200 });
    redlock.on("error", () => {});
    for (const options of [{}, { fencing: true }, { wait: "poll" as const }]) {
      const started = performance.now();
      const error = await redlock.acquire("other:door", 1_000, options).then(
        () => assert.fail("acquired a key outside the user's pattern"),
        (e: unknown) => e,
      );
      assert.ok(error instanceof PermissionError, `${error}`);
      assert.match(error.permission, /no permissions to access one of the keys/);
      assert.match(error.message, /^NOPERM: /);
      assert.match(String(error.cause), /NOPERM/);
      assert.ok(error.server >= 0 && error.server < 3);
      assert.equal(error.attempts.length, 1, "no attempt after the refusal");
      assert.ok(performance.now() - started < 1_500, `failed at once: ${JSON.stringify(options)}`);
    }
    const lock = await redlock.acquire("app:door", 1_000);
    await assert.rejects(
      redlock.readWriteLock("other:doc").read(1_000),
      (e) => e instanceof PermissionError,
    );
    await assert.rejects(
      redlock.semaphore("other:pool", { permits: 2 }).acquire(1_000),
      (e) => e instanceof PermissionError,
    );
    const campaign = redlock.lead("other:leader", 1_000, () => {
      assert.fail("led under a name outside the user's pattern");
    });
    await assert.rejects(campaign, (e) => e instanceof PermissionError);
    await lock.release();
  });

  Deno.test(`[${kind}] a command a script runs, outside the user's rules, fails at once with a PermissionError`, async () => {
    await using servers = await aclServers();
    // The lock user, less ZRANGE: a semaphore reads its wait queue with it.
    await lockUserLess(servers, "nozrange", ["-zrange"]);
    await using a = await connectAllAs(kind, servers, "locker");
    await using b = await connectAllAs(kind, servers, "nozrange");
    await using holder = new Redlock(a.clients);
    await using other = new Redlock(b.clients, { retryCount: 10, retryDelay: 200 });
    other.on("error", () => {});
    const sem = holder.semaphore("app:pool", { permits: 2 });
    const one = await sem.acquire(5_000);
    const both = sem.acquire(5_000, { permits: 2, timeout: 5_000 }); // queues: one slot is free
    await new Promise((r) => setTimeout(r, 100));
    const started = performance.now();
    const error = await other.semaphore("app:pool", { permits: 2 }).acquire(5_000).then(
      () => assert.fail("acquired past the queued waiter"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof PermissionError, `${error}`);
    assert.match(error.permission, /can't run this command/);
    assert.ok(performance.now() - started < 1_500, "failed at once");
    await one.release();
    await (await both).release();
  });

  Deno.test(`[${kind}] an ACL user without a command fails at once, naming the command`, async () => {
    await using servers = await aclServers();
    // The lock user, less EVALSHA and EVAL: every operation needs a script.
    await lockUserLess(servers, "noscripts", ["-evalsha", "-eval"]);
    await using a = await connectAllAs(kind, servers, "noscripts");
    await using redlock = new Redlock(a.clients, { retryCount: 10, retryDelay: 200 });
    redlock.on("error", () => {});
    const started = performance.now();
    const error = await redlock.acquire("app:door", 1_000, { fencing: true }).then(
      () => assert.fail("acquired without EVALSHA"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof PermissionError, `${error}`);
    assert.match(error.permission, /no permissions to run the 'evalsha' command/);
    assert.ok(performance.now() - started < 1_500, "failed at once");

    // And the lock user's rules refuse what a lock never needs.
    await using locker = await connectAllAs(kind, servers, "locker");
    const refused = kind === "ioredis"
      ? (locker.clients[0] as unknown as { call(...a: string[]): Promise<unknown> }).call(
        "KEYS",
        "*",
      )
      : (locker.clients[0] as unknown as { sendCommand(a: string[]): Promise<unknown> })
        .sendCommand(["KEYS", "*"]);
    await assert.rejects(refused, /NOPERM/);
  });
}

Deno.test("cli run and status work as an ACL user given in the URL", async () => {
  await using servers = await aclServers();
  const urls = servers.servers.map((s) => `redis://locker:${PASSWORD}@127.0.0.1:${s.port}`);
  const cli = async (args: string[]) => {
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", CLI, ...args],
      env: { REDLOCK_REDIS: urls.join(",") },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    return { code, stdout: decoder.decode(stdout), stderr: decoder.decode(stderr) };
  };
  const run = await cli([
    "run",
    "--fencing",
    "app:job",
    "--",
    "sh",
    "-c",
    "echo $REDLOCK_FENCING_TOKEN",
  ]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /^\d+\n$/);
  const status = await cli(["status", "app:job"]);
  assert.equal(status.code, 0, status.stderr + status.stdout);
  await noDenials(servers);
  const outside = await cli(["status", "other:job"]);
  assert.equal(outside.code, 69, "refused, as when too few servers answer");
  assert.doesNotMatch(outside.stderr + run.stderr, new RegExp(PASSWORD));
});
