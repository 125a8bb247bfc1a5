import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Redlock } from "../mod.ts";
import { connectAll, type RedisServers, sleep, startServers } from "./_redis.ts";

const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));
const decoder = new TextDecoder();

/** The CLI as a child process of this test, with REDLOCK_REDIS pointing at `servers`. */
function spawnCli(servers: RedisServers | undefined, args: string[]): Deno.ChildProcess {
  const env: Record<string, string> = servers
    ? { REDLOCK_REDIS: servers.servers.map((s) => s.url).join(",") }
    : {};
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, ...args],
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function cli(servers: RedisServers | undefined, args: string[]): Promise<Outcome> {
  const { code, stdout, stderr } = await spawnCli(servers, args).output();
  return { code, stdout: decoder.decode(stdout), stderr: decoder.decode(stderr) };
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "redlock-cli-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function lines(path: string): Promise<string[]> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.split("\n").filter(Boolean);
}

async function waitForLines(path: string, count: number, ms: number): Promise<string[]> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    const found = await lines(path);
    if (found.length >= count) return found;
    await sleep(20);
  }
  throw new Error(`${path}: fewer than ${count} lines after ${ms} ms: ${await lines(path)}`);
}

Deno.test("cli --help of each command shows its usage and the exit statuses", async () => {
  for (const args of [["--help"], ["run", "--help"], ["lead", "-h"], ["status", "--help"]]) {
    const { code, stdout } = await cli(undefined, args);
    assert.equal(code, 0, args.join(" "));
    assert.match(stdout, /^Usage: redlock/);
    assert.match(stdout, /75 the lock could not be had/);
    assert.match(stdout, /76 the lock was lost/);
  }
  assert.match((await cli(undefined, ["run", "--help"])).stdout, /--wait D/);
});

Deno.test("cli rejects bad arguments with one line and the usage, no stack trace, no password", async () => {
  const cases: [string[], RegExp][] = [
    [[], /a command is missing/],
    [["frob"], /unknown command "frob"/],
    [
      ["run", "--redis", "redis://a:1", "--lease", "30", "x", "--", "true"],
      /--lease must be a duration such as 500ms/,
    ],
    [
      ["run", "--redis", "redis://a:1", "--wait", "5 m", "x", "--", "true"],
      /--wait must be a duration/,
    ],
    [["run", "--redis", "redis://a:1", "x"], /COMMAND is missing/],
    [["run", "--redis", "redis://a:1", "--frob", "x", "--", "true"], /unknown option --frob/],
    [["run", "x", "--", "true"], /no Redis server/],
    [["status", "--redis", "http://user:hunter2@a:1", "x"], /redis:\/\/ or rediss:\/\/ URL/],
    [["status", "--redis", "redis://user:hunter2@:1", "x"], /redis:\/\/ or rediss:\/\/ URL/],
    [["status", "--redis", "redis://a:1", "--lease"], /--lease/],
  ];
  for (const [args, message] of cases) {
    const { code, stderr } = await cli(undefined, args);
    assert.equal(code, 64, args.join(" "));
    const [first, second] = stderr.split("\n");
    assert.match(first!, /^redlock: /);
    assert.match(first!, message);
    assert.match(second!, /^Usage: redlock/);
    assert.doesNotMatch(stderr, /\n\s+at /);
    assert.doesNotMatch(stderr, /hunter2/);
  }
});

Deno.test("cli run: four concurrent runs never interleave, each gets a greater fencing token", async () => {
  await using servers = await startServers(3);
  await withTempDir(async (dir) => {
    const file = `${dir}/log`;
    const script = `echo "start $REDLOCK_FENCING_TOKEN" >> ${file}; sleep 0.2; ` +
      `echo "end $REDLOCK_FENCING_TOKEN" >> ${file}`;
    const runs = await Promise.all(
      [0, 1, 2, 3].map(() =>
        cli(servers, [
          "run",
          "--fencing",
          "--wait",
          "30s",
          "--lease",
          "2s",
          "nightly",
          "--",
          "sh",
          "-c",
          script,
        ])
      ),
    );
    assert.deepEqual(runs.map((r) => r.code), [0, 0, 0, 0], runs.map((r) => r.stderr).join());
    const log = await lines(file);
    assert.equal(log.length, 8);
    const tokens: number[] = [];
    for (let i = 0; i < 8; i += 2) {
      const [start, token] = log[i]!.split(" ");
      assert.equal(start, "start");
      assert.equal(log[i + 1], `end ${token}`, `interleaved: ${log}`);
      tokens.push(Number(token));
    }
    assert.ok(tokens.every((t, i) => i === 0 || t > tokens[i - 1]!), `tokens ${tokens}`);
  });
});

Deno.test("cli run passes the command's status through; status tells held and free", async () => {
  await using servers = await startServers(3);
  assert.equal((await cli(servers, ["run", "job", "--", "sh", "-c", "exit 7"])).code, 7);
  assert.equal((await cli(servers, ["run", "job", "--", "sh", "-c", "kill -TERM $$"])).code, 143);
  const free = await cli(servers, ["status", "job"]);
  assert.equal(free.code, 0);
  assert.match(free.stdout, /^job: free\n/);

  await using clients = await connectAll("ioredis", servers);
  await using redlock = new Redlock(clients.clients);
  const holder = await redlock.acquire("job", 10_000);
  const held = await cli(servers, ["status", "job"]);
  assert.equal(held.code, 1);
  assert.match(held.stdout, /^job: held, \d+ ms left/);
  await holder.release();
});

Deno.test("cli run returns 75 without running the command when another holds the lock", async () => {
  await using servers = await startServers(3);
  await using clients = await connectAll("ioredis", servers);
  await using redlock = new Redlock(clients.clients);
  const holder = await redlock.acquire("job", 10_000);
  await withTempDir(async (dir) => {
    for (const wait of [[], ["--wait", "300ms"]]) {
      const start = performance.now();
      const { code, stderr } = await cli(servers, [
        "run",
        ...wait,
        "job",
        "--",
        "touch",
        `${dir}/ran`,
      ]);
      assert.equal(code, 75, stderr);
      assert.match(stderr, /held by another/);
      if (wait.length) assert.ok(performance.now() - start >= 300);
    }
    assert.equal(await Deno.stat(`${dir}/ran`).then(() => true, () => false), false);
  });
  await holder.release();
});

Deno.test("cli run stops the command and returns 76 when a majority pauses past the lease", async () => {
  await using servers = await startServers(3);
  await withTempDir(async (dir) => {
    const file = `${dir}/log`;
    // The command notes SIGTERM and exits; the CLI must then report the loss.
    const script = `trap 'echo terminated >> ${file}; exit 0' TERM; echo started >> ${file}; ` +
      `while :; do sleep 0.05; done`;
    const child = spawnCli(servers, [
      "run",
      "--lease",
      "1s",
      "--grace",
      "2s",
      "job",
      "--",
      "sh",
      "-c",
      script,
    ]);
    await waitForLines(file, 1, 10_000);
    const [a, b] = servers.servers;
    await a!.pause();
    await b!.pause();
    try {
      const { code, stderr } = await child.output();
      assert.equal(code, 76, decoder.decode(stderr));
      assert.match(decoder.decode(stderr), /lost the lock "job": stopping the command/);
    } finally {
      await a!.resume();
      await b!.resume();
    }
    assert.deepEqual(await lines(file), ["started", "terminated"]);
  });
});

Deno.test("cli lead restarts the command and fails over to the other process after kill -9", async () => {
  await using servers = await startServers(3);
  await withTempDir(async (dir) => {
    const file = `${dir}/log`;
    // Each start notes the term, the lead process ($PPID) and the command's pid (exec).
    const script = `echo "$REDLOCK_FENCING_TOKEN $PPID $$" >> ${file}; exec sleep 1.5`;
    const lease = 1_500;
    const leaders = [0, 1].map(() =>
      spawnCli(servers, [
        "lead",
        "--lease",
        `${lease}ms`,
        "--grace",
        "1s",
        "cron",
        "--",
        "sh",
        "-c",
        script,
      ])
    );
    const byPid = new Map(leaders.map((p) => [p.pid, p]));
    const parse = (line: string) => line.split(" ").map(Number) as [number, number, number];
    try {
      // The command exits after 1.5 s and is started again (by either process).
      const [, second] = (await waitForLines(file, 2, 20_000)).map(parse);
      const [, leaderPid, commandPid] = second!;
      assert.ok(byPid.has(leaderPid), `${leaderPid} is one of ours`);
      const killedAt = Date.now();
      byPid.get(leaderPid)!.kill("SIGKILL");
      // Its command is orphaned (kill -9 leaves no way to stop it); it was spawned for this test.
      try {
        Deno.kill(commandPid, "SIGKILL");
      } catch {
        // exited already
      }
      await byPid.get(leaderPid)!.output();
      const after = (await waitForLines(file, 3, lease + 5_000)).map(parse);
      const third = after[2]!;
      assert.ok(
        Date.now() - killedAt <= lease + 300 + 3_000,
        `failover ${Date.now() - killedAt} ms`,
      );
      assert.notEqual(third[1], leaderPid);
      const terms = after.map(([term]) => term);
      assert.ok(terms.every((t, i) => i === 0 || t > terms[i - 1]!), `terms ${terms}`);

      const survivor = byPid.get(third[1])!;
      survivor.kill("SIGTERM");
      const { code } = await survivor.output();
      assert.equal(code, 0);
      // its last command was stopped with it
      const last = parse((await lines(file)).at(-1)!);
      assert.equal(last[1], third[1]);
      assert.equal(await Deno.stat(`/proc/${last[2]}`).then(() => true, () => false), false);
      const free = await cli(servers, ["status", "cron"]);
      assert.equal(free.code, 0, free.stdout);
    } finally {
      for (const p of leaders) {
        try {
          p.kill("SIGKILL");
        } catch {
          // exited already
        }
        await p.status;
      }
    }
  });
});
