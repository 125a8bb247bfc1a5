import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Redlock } from "../mod.ts";
import { connectAll, type RedisServers, sleep, startServers } from "./_redis.ts";

const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));
const decoder = new TextDecoder();

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** `redlock status` as a child process, with REDLOCK_REDIS pointing at `servers`. */
async function status(servers: RedisServers, args: string[]): Promise<Outcome> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, "status", ...args],
    env: { REDLOCK_REDIS: servers.servers.map((s) => s.url).join(",") },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code, stdout: decoder.decode(stdout), stderr: decoder.decode(stderr) };
}

/** The JSON lines of an outcome, by name. */
function parsed(outcome: Outcome): Map<string, Record<string, unknown>> {
  const lines = outcome.stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l));
  return new Map(lines.map((l) => [l.name, l]));
}

Deno.test("status shows a held lock's TTL, waiters and fencing counter on each server", async () => {
  await using servers = await startServers(3);
  await using clients = await connectAll("ioredis", servers);
  await using redlock = new Redlock(clients.clients);
  const holder = await redlock.acquire("job", 60_000, { fencing: true });
  const waiting = redlock.acquire("job", 5_000, { retryCount: -1, timeout: 20_000 });
  waiting.catch(() => {}); // awaited below; a failed assertion must not leave it unhandled
  // a refused attempt of the waiter watches the lock, then queues on every server
  const waiter = "(1 waiting|waiters watching)";
  let out = await status(servers, ["job"]);
  const end = performance.now() + 8_000;
  while (!new RegExp(`^job: .*${waiter}`).test(out.stdout) && performance.now() < end) {
    await sleep(50);
    out = await status(servers, ["job"]);
  }
  assert.equal(out.code, 1, out.stderr);
  const [head, ...rest] = out.stdout.trim().split("\n");
  assert.match(head!, new RegExp(`^job: held, \\d+ ms left, ${waiter}, fencing counter 1$`));
  assert.equal(rest.length, 3);
  for (const line of rest) {
    const server =
      `^ {2}server \\d 127\\.0\\.0\\.1:\\d+: held, \\d+ ms left, ${waiter}, fencing 1$`;
    assert.match(line, new RegExp(server));
  }
  assert.ok(!out.stdout.includes(holder.value), "never the value");
  await holder.release();
  await (await waiting).release();
});

Deno.test("status names why a server is down and still gives the quorum's verdict", async () => {
  await using servers = await startServers(3);
  await using clients = await connectAll("ioredis", servers);
  await using redlock = new Redlock(clients.clients);
  const holder = await redlock.acquire("job", 60_000);
  await servers.servers[2]!.kill();
  const out = await status(servers, ["job"]);
  assert.equal(out.code, 1, out.stderr);
  const lines = out.stdout.trim().split("\n");
  assert.match(lines[0]!, /^job: held, \d+ ms left$/);
  assert.match(lines[3]!, /^ {2}server 2 127\.0\.0\.1:\d+: unreachable \(connection refused\)$/);
  assert.match(lines[1]!, /held/);
  const free = await status(servers, ["other"]);
  assert.equal(free.code, 0);
  assert.match(free.stdout, /^other: free\n/);
  await servers.servers[1]!.kill();
  const unknown = await status(servers, ["job"]);
  assert.equal(unknown.code, 69, unknown.stdout);
  assert.match(unknown.stdout, /^job: unknown, too few servers agree \(1 of 3 answered\)/);
  assert.match(unknown.stderr, /too few Redis servers answered/);
  await holder.release().catch(() => {});
});

Deno.test("status --json reports several names: a read-write lock, a semaphore, a free name", async () => {
  await using servers = await startServers(3);
  await using clients = await connectAll("node-redis", servers);
  await using redlock = new Redlock(clients.clients);
  const rw = redlock.readWriteLock("doc");
  const readers = [await rw.read(60_000), await rw.read(60_000)];
  const sem = redlock.semaphore("pdf", { permits: 3 });
  const permits = [await sem.acquire(60_000), await sem.acquire(60_000)];
  const out = await status(servers, ["--json", "doc", "pdf", "nobody"]);
  assert.equal(out.code, 1, out.stderr);
  const byName = parsed(out);
  const doc = byName.get("doc")!;
  assert.equal(doc.verdict, "held");
  assert.deepEqual(doc.readWrite, {
    verdict: "held",
    writer: false,
    readers: 2,
    writerWaiting: false,
  });
  const pdf = byName.get("pdf")!;
  assert.equal(pdf.verdict, "held");
  assert.deepEqual(pdf.semaphore, { verdict: "held", permits: 3, inUse: 2, waiters: 0 });
  assert.equal(byName.get("nobody")!.verdict, "free");
  assert.equal((byName.get("nobody")!.servers as unknown[]).length, 3);
  for (const lock of [...readers, ...permits]) assert.ok(!out.stdout.includes(lock.value));
  const text = await status(servers, ["doc", "pdf"]);
  assert.match(text.stdout, /^doc: read-locked by 2 readers$/m);
  assert.match(text.stdout, /^pdf: 2 of 3 permits in use$/m);
  for (const lock of [...readers, ...permits]) await lock.release();
  const writer = await rw.write(60_000);
  const written = parsed(await status(servers, ["--json", "doc"])).get("doc")!;
  assert.equal((written.readWrite as { writer: boolean }).writer, true);
  await writer.release();
  const after = await status(servers, ["doc", "pdf"]);
  assert.equal(after.code, 0, after.stdout);
  assert.match(after.stdout, /^pdf: 0 of 3 permits in use$/m);
});
