import assert from "node:assert/strict";
import { Redlock } from "../mod.ts";
import config from "../deno.json" with { type: "json" };
import { connectAll, startServers } from "./_redis.ts";
import {
  cli,
  lines,
  type Outcome,
  outcome,
  spawnCli,
  statusAfterRelease,
  waitForLines,
  withTempDir,
} from "./_cli.ts";

Deno.test("cli --help of each command lists its options and only its own exit statuses", async () => {
  const help = async (args: string[]) => {
    const { code, stdout, stderr } = await cli(undefined, args);
    assert.equal(code, 0, args.join(" "));
    assert.equal(stderr, "");
    assert.match(stdout, /^Usage: redlock/);
    return stdout;
  };
  const statuses = (text: string) =>
    [...text.slice(text.indexOf("Exit status")).matchAll(/^ {2}(\d+)/gm)].map((m) => Number(m[1]));
  const main = await help(["--help"]);
  assert.deepEqual(statuses(main), [64, 69, 70]);
  const run = await help(["run", "--help"]);
  assert.match(run, /--wait D/);
  assert.deepEqual(statuses(run), [128, 75, 76, 127, 64, 69, 70]);
  assert.match(run, /128 \+ N/);
  const lead = await help(["lead", "-h"]);
  assert.doesNotMatch(lead, /--wait|--fencing/);
  assert.deepEqual(statuses(lead), [0, 127, 64, 69, 70]);
  const status = await help(["status", "--help"]);
  assert.deepEqual(statuses(status), [0, 1, 64, 69, 70]);
  assert.doesNotMatch(status, /\b(75|76|126|127)\b/);
});

Deno.test("cli --version prints deno.json's version", async () => {
  const { code, stdout } = await cli(undefined, ["--version"]);
  assert.equal(code, 0);
  assert.equal(stdout, `redlock ${config.version}\n`);
});

Deno.test("cli rejects bad arguments with one line and one usage line, no stack trace, no password", async () => {
  const r = ["--redis", "redis://a:1"];
  const cases: [string[], RegExp][] = [
    [[], /a command is missing/],
    [["frob"], /unknown command "frob"/],
    [["-x"], /unknown option -x/],
    [["--frob=1"], /unknown option --frob$/],
    [["run", ...r, "--lease", "30", "x", "--", "true"], /--lease must be a duration such as 500ms/],
    [["run", ...r, "--wait", "5 m", "x", "--", "true"], /--wait must be a duration/],
    [["run", ...r, "x"], /-- and the command are missing/],
    [["run", ...r, "x", "--"], /COMMAND is missing after --/],
    [["run", ...r, "x", "echo", "ok"], /unexpected argument "echo"/],
    [["run", ...r, "x", "y", "--", "echo", "ok"], /unexpected argument "y"/],
    [["run", ...r, "-q", "echo", "hello"], /unknown option -q$/],
    [["run", ...r, "-w", "5s", "x", "--", "echo", "ok"], /unknown option -w$/],
    [["run", ...r, "--frob", "x", "--", "true"], /unknown option --frob$/],
    [["lead", ...r, "--wait", "1s", "x", "--", "true"], /unknown option --wait$/],
    [["run", ...r, "--fencing=yes", "x", "--", "true"], /--fencing takes no value/],
    [["run", ...r, "--lease", "1s", "--lease", "2s", "x", "--", "true"], /--lease given twice/],
    [["run", "x", "--", "true"], /no Redis server/],
    [["status", ...r, "x", "--", "true"], /status takes no command/],
    [["status", ...r, "x", ""], /NAME must not be empty/],
    [["status", ...r], /NAME is missing/],
    [["status", "--redis", "redis://a:99999", "x"], /port must be from 1 to 65535/],
    [["status", "--redis", "http://user:hunter2@a:1", "x"], /redis:\/\/ or rediss:\/\/ URL/],
    [["status", "--redis", "redis://user:hunter2@:1", "x"], /redis:\/\/ or rediss:\/\/ URL/],
    [["status", "--redis", "redis://user:hunter2@a:99999", "x"], /port must be/],
    [["status", "--redis", "redis://a:1", "--redis"], /--redis needs a value/],
  ];
  // Five at a time: each is a process of its own.
  const outcomes: Outcome[] = [];
  for (let i = 0; i < cases.length; i += 5) {
    outcomes.push(
      ...await Promise.all(cases.slice(i, i + 5).map(([args]) => cli(undefined, args))),
    );
  }
  for (const [i, [args, message]] of cases.entries()) {
    const { code, stdout, stderr } = outcomes[i]!;
    const what = `${args.join(" ")}: ${stderr}`;
    assert.equal(code, 64, what);
    assert.equal(stdout, "", what);
    const [first, second, ...more] = stderr.split("\n");
    assert.match(first!, /^redlock: /, what);
    assert.match(first!, message, what);
    const topic = ["run", "lead", "status"].includes(args[0]!) ? args[0] : "run\\|lead\\|status";
    assert.match(second!, new RegExp(`^Usage: redlock ${topic} \\[options\\] NAME`), what);
    assert.deepEqual(more, [""], what);
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
  const free = await statusAfterRelease(servers, "job");
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
  const holder = await redlock.acquire("job", 120_000); // outlives the runs, however slow
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
    await waitForLines(file, 1, 30_000, child);
    const [a, b] = servers.servers;
    await a!.pause();
    await b!.pause();
    try {
      const { code, stderr } = await outcome(child);
      assert.equal(code, 76, stderr);
      assert.match(stderr, /lost the lock "job": stopping the command/);
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
      const { code } = await outcome(survivor);
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
