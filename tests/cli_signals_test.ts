import assert from "node:assert/strict";
import { startServers } from "./_redis.ts";
import {
  cli,
  lines,
  outcome,
  running,
  spawnCli,
  statusAfterRelease,
  waitForLines,
  waitGone,
  withTempDir,
} from "./_cli.ts";

const NUMBERS = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGTERM: 15 } as const;

/**
 * A command whose shell waits for a grandchild (`sleep`): it notes the
 * pids of both, so that the test can tell whether the whole group stopped.
 */
const script = (dir: string) =>
  `echo $$ > ${dir}/shell; sleep 30 & echo $! > ${dir}/sleep; wait; echo after >> ${dir}/after`;

Deno.test("cli run: SIGHUP, SIGINT, SIGQUIT and SIGTERM stop the command's whole group, release the lock, exit 128 + N", async () => {
  await using servers = await startServers(3);
  // The four at once, each with a lock of its own.
  const entries = Object.entries(NUMBERS) as [Deno.Signal, number][];
  await Promise.all(entries.map(([signal, number]) =>
    withTempDir(async (dir) => {
      const name = `job-${signal}`;
      const child = spawnCli(servers, [
        "run",
        "--grace",
        "5s",
        name,
        "--",
        "sh",
        "-c",
        script(dir),
      ]);
      try {
        await waitForLines(`${dir}/sleep`, 1, 30_000, child);
        const [shell] = (await lines(`${dir}/shell`)).map(Number);
        const [sleep] = (await lines(`${dir}/sleep`)).map(Number);
        assert.ok(running(sleep!), `sleep ${sleep} runs`);
        child.kill(signal);
        const { code, stderr } = await outcome(child);
        assert.equal(code, 128 + number, `${signal}: ${stderr}`);
        // Both were stopped before the CLI exited: no wait needed here.
        assert.equal(running(shell!), false, `${signal}: the shell was stopped`);
        assert.equal(running(sleep!), false, `${signal}: its sleep was stopped`);
        assert.deepEqual(await lines(`${dir}/after`), []);
        const status = await statusAfterRelease(servers, name);
        assert.match(
          status.stdout,
          new RegExp(`^${name}: free\n`),
          `${signal}: the lock was released`,
        );
      } finally {
        try {
          child.kill("SIGKILL");
        } catch {
          // exited
        }
      }
    })
  ));
});

Deno.test("cli run: a lost lock stops the whole group, SIGKILL after --grace for what ignores SIGTERM, exit 76", async () => {
  await using servers = await startServers(3);
  await withTempDir(async (dir) => {
    // A grandchild that ignores SIGTERM; the shell waits for it.
    const stubborn = `trap '' TERM; echo \\$\\$ > ${dir}/stubborn; while :; do sleep 0.05; done`;
    const command = `sh -c "${stubborn}" & wait`;
    const child = spawnCli(servers, [
      "run",
      "--lease",
      "1s",
      "--grace",
      "1500ms",
      "job",
      "--",
      "sh",
      "-c",
      command,
    ]);
    const [a, b] = servers.servers;
    try {
      await waitForLines(`${dir}/stubborn`, 1, 30_000, child);
      const [pid] = (await lines(`${dir}/stubborn`)).map(Number);
      await a!.pause();
      await b!.pause();
      const paused = performance.now();
      const { code, stderr } = await outcome(child);
      const took = performance.now() - paused;
      assert.equal(code, 76, stderr);
      assert.match(stderr, /lost the lock "job": stopping the command/);
      assert.equal(running(pid!), false, "the SIGTERM-proof grandchild was killed");
      // Lost within the lease, then --grace of SIGTERM before the SIGKILL.
      assert.ok(took >= 1_500, `exited ${Math.round(took)} ms after the pause`);
    } finally {
      await a!.resume();
      await b!.resume();
      try {
        child.kill("SIGKILL");
      } catch {
        // exited
      }
    }
  });
});

Deno.test("cli run: one Ctrl-C to the foreground group, or one SIGINT to the CLI, reaches the command exactly once", async () => {
  await using servers = await startServers(3);
  // To the CLI's whole group, as a terminal does on Ctrl-C; to the CLI alone, as `kill -INT`.
  for (const target of ["group", "cli"] as const) {
    await withTempDir(async (dir) => {
      // Counts SIGINTs; runs until stopped (SIGKILL after --grace).
      const counter = `trap 'echo int >> ${dir}/ints' INT; echo ready > ${dir}/ready; ` +
        `i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done`;
      // detached: the CLI leads a group of its own, as a shell's foreground job does.
      const child = spawnCli(servers, ["run", "--grace", "1s", "job", "--", "sh", "-c", counter], {
        detached: true,
      });
      try {
        await waitForLines(`${dir}/ready`, 1, 30_000, child);
        const sent = performance.now();
        Deno.kill(target === "group" ? -child.pid : child.pid, "SIGINT");
        const { code, stderr } = await outcome(child);
        assert.equal(code, 130, `${target}: ${stderr}`);
        assert.deepEqual(await lines(`${dir}/ints`), ["int"], target);
        // Stopped by SIGKILL after --grace, long before its 30 s loop ends.
        assert.ok(performance.now() - sent < 10_000, `${target}: stopped late`);
      } finally {
        try {
          child.kill("SIGKILL");
        } catch {
          // exited
        }
      }
    });
  }
});

Deno.test("cli run: what the command leaves running in its group is stopped before the lock is released", async () => {
  await using servers = await startServers(3);
  await withTempDir(async (dir) => {
    const { code, stderr } = await cli(servers, [
      "run",
      "--grace",
      "5s",
      "job",
      "--",
      "sh",
      "-c",
      `sleep 30 & echo $! > ${dir}/sleep`,
    ]);
    const [sleep] = (await lines(`${dir}/sleep`)).map(Number);
    assert.equal(code, 0, stderr);
    assert.match(stderr, /the command left processes running in its group: stopping them/);
    assert.equal(running(sleep!), false);
  });
});

Deno.test("cli lead: SIGHUP and SIGQUIT stop the command's group, release the lock, exit 0", async () => {
  await using servers = await startServers(3);
  for (const signal of ["SIGHUP", "SIGQUIT"] as const) {
    await withTempDir(async (dir) => {
      const child = spawnCli(servers, [
        "lead",
        "--grace",
        "5s",
        "cron",
        "--",
        "sh",
        "-c",
        script(dir),
      ]);
      try {
        await waitForLines(`${dir}/sleep`, 1, 30_000, child);
        const [sleep] = (await lines(`${dir}/sleep`)).map(Number);
        child.kill(signal);
        const { code, stderr } = await outcome(child);
        assert.equal(code, 0, `${signal}: ${stderr}`);
        await waitGone(sleep!, 1_000);
        const status = await statusAfterRelease(servers, "cron");
        // lead takes fencing tokens (its terms): the counter stays
        assert.match(
          status.stdout,
          /^cron: free(, fencing counter \d+)?\n/,
          `${signal}: the lock was released: ${status.stdout}`,
        );
      } finally {
        try {
          child.kill("SIGKILL");
        } catch {
          // exited
        }
      }
    });
  }
});
