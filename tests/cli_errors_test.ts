import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import { command } from "../scripts/redis.ts";
import { FaultProxy } from "../scripts/fault_proxy.ts";
import { CliRedis, requestTimeoutFor } from "../src/cli/redis.ts";
import { commandCalls, connectAll, integer, type RedisServers, startServers } from "./_redis.ts";
import { cli, deadline, outcome, spawnCli, withTempDir } from "./_cli.ts";

/** A loopback port nobody listens on: a connection to it is refused. */
function refusedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** Reads `stream` until `pattern` matches what it said; throws after `ms`. */
async function readUntil(
  stream: ReadableStream<Uint8Array>,
  pattern: RegExp,
  ms: number,
): Promise<string> {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  const timer = setTimeout(() => reader.cancel(), ms);
  try {
    while (!pattern.test(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`no ${pattern} within ${ms} ms in: ${text}`);
      text += value;
    }
    return text;
  } finally {
    clearTimeout(timer);
    reader.releaseLock();
  }
}

Deno.test("cli names each failing server by its URL without the password, and the cause, exit 69", async () => {
  await using servers = await startServers(1);
  const port = servers.ports[0]!;
  await command(port, "ACL", "SETUSER", "ops", "on", ">right-one", "~*", "+@all");
  const refused = refusedPort();
  const cases: [string, RegExp][] = [
    [
      `redis://ops:hunter2@127.0.0.1:${port}`,
      /redis:\/\/ops:\*\*\*@127\.0\.0\.1:\d+: authentication failed/,
    ],
    [
      `redis://127.0.0.1:${refused}`,
      new RegExp(`redis://127\\.0\\.0\\.1:${refused}: connection refused`),
    ],
    [
      `rediss://ops:hunter2@127.0.0.1:${port}`,
      /rediss:\/\/ops:\*\*\*@127\.0\.0\.1:\d+: TLS expected/,
    ],
  ];
  for (const [url, message] of cases) {
    const { code, stdout, stderr } = await cli(undefined, ["status", "--redis", url, "job"]);
    assert.equal(code, 69, `${url}: ${stderr}`);
    assert.match(stdout, /^job: unknown, too few servers agree \(0 of 1 answered\)\n/);
    assert.match(
      stderr,
      /^redlock: too few Redis servers answered to tell whether "job" is held: /,
    );
    assert.match(stderr, message);
    assert.doesNotMatch(stderr, /hunter2/);
  }
  // The right password works.
  const ok = await cli(undefined, [
    "status",
    "--redis",
    `redis://ops:right-one@127.0.0.1:${port}`,
    "job",
  ]);
  assert.match(ok.stdout, /^job: free\n/, ok.stderr);
});

Deno.test("cli names an unknown host (resolved in a network namespace of its own: no query leaves)", async () => {
  // unshare --net: only a loopback that is down, so the resolver fails without sending anything.
  const { code, stderr } = await cli(undefined, [
    "status",
    "--redis",
    "redis://redlock-test.invalid:6379",
    "job",
  ], { wrapper: ["unshare", "--net"] });
  assert.equal(code, 69, stderr);
  assert.match(stderr, /redis:\/\/redlock-test\.invalid:6379: unknown host redlock-test\.invalid/);
});

Deno.test("cli run exits 69, naming the servers, when 2 of 3 are down, also with --wait", async () => {
  await using servers = await startServers(3);
  const [, b, c] = servers.servers;
  await b!.stop();
  await c!.stop();
  await withTempDir(async (dir) => {
    for (const wait of [[], ["--wait", "2s"]]) {
      const { code, stderr } = await cli(servers, [
        "run",
        ...wait,
        "job",
        "--",
        "touch",
        `${dir}/ran`,
      ]);
      assert.equal(code, 69, `${wait}: ${stderr}`);
      assert.match(stderr, /too few Redis servers answered to lock "job"; the command was not run/);
      for (const server of [b!, c!]) {
        assert.match(
          stderr,
          new RegExp(`redis://127\\.0\\.0\\.1:${server.port}: connection refused`),
        );
      }
    }
    assert.equal(await Deno.stat(`${dir}/ran`).then(() => true, () => false), false);
  });
});

const urls = (servers: RedisServers) => servers.servers.map((s) => s.url);

Deno.test("cli connect: a refused server costs nothing extra, a paused one at most the request timeout", async () => {
  await using servers = await startServers(3);
  const lease = 30_000;
  const bound = requestTimeoutFor(lease);
  const refused = `redis://127.0.0.1:${refusedPort()}`;
  {
    // Settled at the refusal, not at the request timeout.
    await using redis = await CliRedis.connect([refused], lease);
    assert.ok(redis.connectMs < bound, `a refused server: ${Math.round(redis.connectMs)} ms`);
  }
  {
    await using redis = await CliRedis.connect([...urls(servers).slice(0, 2), refused], lease);
    const lock = await redis.redlock.acquire("job", 1_000);
    await lock.release();
  }
  const paused = servers.servers[2]!;
  await paused.pause();
  try {
    // How late a timer of the same length fires on this loop now (the machine may be busy).
    const t0 = performance.now();
    const lateness = new Promise<number>((resolve) =>
      setTimeout(() => resolve(performance.now() - t0 - bound), bound)
    );
    await using redis = await CliRedis.connect(urls(servers), lease);
    const late = Math.max(0, await lateness);
    assert.ok(redis.connectMs >= bound - 5, `waited ${Math.round(redis.connectMs)} ms`);
    assert.ok(
      redis.connectMs <= bound + late + 50,
      `a paused server: ${Math.round(redis.connectMs)} ms (timers ${Math.round(late)} ms late)`,
    );
    const start = performance.now();
    const lock = await redis.redlock.acquire("job", 1_000);
    assert.ok(performance.now() - start < bound, "the acquire did not wait for the paused server");
    await lock.release();
  } finally {
    await paused.resume();
  }
});

Deno.test("cli run prints nothing after a successful run while a slow server still answers", async () => {
  await using servers = await startServers(3);
  // The third server answers 100 ms late: each round settles on the other two first.
  await using proxy = await FaultProxy.start(servers.ports[2]!);
  proxy.delay(100);
  const list = [...urls(servers).slice(0, 2), `redis://127.0.0.1:${proxy.port}`];
  for (let i = 0; i < 4; i++) {
    const { code, stderr } = await cli(undefined, [
      "run",
      ...list.flatMap((url) => ["--redis", url]),
      "job",
      "--",
      "true",
    ]);
    assert.equal(code, 0, stderr);
    assert.equal(stderr, "", `run ${i}`);
  }
});

Deno.test("cli lead says when it waits for another leader", async () => {
  await using servers = await startServers(3);
  await using clients = await connectAll("ioredis", servers);
  await using redlock = new Redlock(clients.clients);
  const holder = await redlock.acquire("cron", 20_000);
  const child = spawnCli(servers, ["lead", "--lease", "2s", "cron", "--", "true"]);
  try {
    const said = await readUntil(child.stderr, /waiting: "cron" is led by another process/, 15_000);
    assert.doesNotMatch(said, /leading "cron"/);
  } finally {
    child.kill("SIGTERM");
    using _deadline = deadline(child, 30_000);
    const { code } = await child.status;
    assert.equal(code, 0);
    await child.stdout.cancel();
    await holder.release();
  }
});

Deno.test("cli lead gives up with 69 after 3 leases without a quorum, naming the servers", async () => {
  const ports = [refusedPort(), refusedPort(), refusedPort()];
  const child = spawnCli(undefined, [
    "lead",
    ...ports.flatMap((port) => ["--redis", `redis://127.0.0.1:${port}`]),
    "--lease",
    "1s",
    "cron",
    "--",
    "true",
  ]);
  {
    const start = performance.now();
    const { code, stderr } = await outcome(child, 30_000);
    assert.equal(code, 69, stderr);
    assert.ok(performance.now() - start >= 3_000, "gave up after 3 leases, not before");
    assert.match(
      stderr,
      /waiting: too few Redis servers answered: .*connection refused.*; giving up after 3 s/,
    );
    assert.match(stderr, /no quorum of Redis servers for 3 s: giving up/);
    for (const port of ports) assert.match(stderr, new RegExp(`127\\.0\\.0\\.1:${port}`));
  }
});

Deno.test("cli run and lead exit 127 for a missing command and 126 for one not executable, sending nothing", async () => {
  await using servers = await startServers(1);
  await withTempDir(async (dir) => {
    const plain = `${dir}/not-executable.sh`;
    await Deno.writeTextFile(plain, "#!/bin/sh\nexit 0\n");
    await Deno.chmod(plain, 0o644);
    const cases: [string[], number, RegExp][] = [
      [["run", "job", "--", "no-such-program-xyz"], 127, /no-such-program-xyz/],
      [["lead", "job", "--", "no-such-program-xyz"], 127, /no-such-program-xyz/],
      [["run", "job", "--", plain], 126, /not-executable\.sh/],
      [["lead", "job", "--", plain], 126, /not-executable\.sh/],
    ];
    const before = await commandCalls(servers.servers[0]!, "set", "evalsha", "eval");
    for (const [args, status, named] of cases) {
      const { code, stderr } = await cli(servers, args);
      assert.equal(code, status, `${args.join(" ")}: ${stderr}`);
      assert.match(stderr, named);
    }
    const after = await commandCalls(servers.servers[0]!, "set", "evalsha", "eval");
    assert.equal(after, before, "no lock command reached the server");
    assert.equal(await integer(servers.servers[0]!, "DBSIZE"), 0);
  });
});
