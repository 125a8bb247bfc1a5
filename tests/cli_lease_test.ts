/**
 * The lease is the law through the command line: `cli.ts run` sends its
 * command SIGTERM when the lock's validity ends without a successful
 * extension, before any other client can hold the lock. The CLI reaches 3
 * servers through fault proxies (in a process of their own) that stop
 * forwarding once its command runs; another client reaches the servers
 * directly and waits for the lock. The command records the instant of its
 * SIGTERM and this process the instant of the other client's grant, both on
 * the machine's wall clock (Date.now()), as they are taken in two processes.
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Redlock } from "../mod.ts";
import { Direction, ProxyProcess } from "../scripts/fault_proxy.ts";
import { connect, type Connection, sleep, startServers } from "./_redis.ts";

const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));
const RECORDER = fileURLToPath(new URL("./fixtures/sigterm_recorder.ts", import.meta.url));
const decoder = new TextDecoder();

/** The CLI's `EXIT.LOST`: the lock was lost and the command stopped. */
const EXIT_LOST = 76;
/** ms the CLI and its command may take to start and hold the lock (two Deno processes). */
const READY_MS = 30_000;
/** ms the CLI may take to exit once the proxies forward again. */
const EXIT_MS = 15_000;

/** Resolves to `promise`'s value, or rejects naming `what` after `ms`; clears its timer. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/**
 * The first line of `file` that starts with `word`, polling every 10 ms for
 * at most `ms`; fails early once `exited()` says the CLI is gone without it.
 */
async function lineOf(file: string, word: string, ms: number, exited: () => boolean) {
  const deadline = performance.now() + ms;
  for (;;) {
    const gone = exited();
    const text = await Deno.readTextFile(file).catch(() => "");
    const line = text.split("\n").find((l) => l.startsWith(`${word} `));
    if (line !== undefined) return line;
    if (gone) throw new Error(`the CLI exited before its command wrote "${word}"`);
    if (performance.now() > deadline) throw new Error(`no "${word}" in ${file} within ${ms} ms`);
    await sleep(10);
  }
}

/** What one race between the CLI, cut off, and a direct client saw. */
interface Race {
  /** Date.now() in the command when it got SIGTERM. */
  readonly sigtermAt: number;
  /** Date.now() in this process when the other client's acquire resolved. */
  readonly grantAt: number;
  /** The CLI's exit status. */
  readonly code: number;
  /** The CLI's stderr. */
  readonly stderr: string;
}

/** `cli.ts run` of the recorder under the lock "job", through `ports`. */
function spawnCli(ports: readonly number[], lease: number, file: string): Deno.ChildProcess {
  const redis = ports.flatMap((port) => ["--redis", `redis://127.0.0.1:${port}`]);
  const command = [Deno.execPath(), "run", "--allow-write", RECORDER, file];
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, "run", ...redis, "--lease", `${lease / 1000}s`, "--grace", "2s"]
      .concat(["job", "--", ...command]),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

/**
 * Runs the recorder under the CLI through proxies, cuts the proxies once it
 * runs, and has another client wait for the lock on the servers directly.
 */
async function race(lease: number): Promise<Race> {
  await using servers = await startServers(3);
  await using proxies = await ProxyProcess.start(servers.ports);
  const dir = await Deno.makeTempDir({ prefix: "redlock-cli-lease-" });
  const file = `${dir}/recorder`;
  const connections: Connection[] = [];
  const cli = spawnCli(proxies.ports, lease, file);
  let exited = false;
  const output = cli.output().finally(() => (exited = true));
  try {
    for (const port of servers.ports) connections.push(await connect("ioredis", port));
    await using other = new Redlock(connections.map((c) => c.client), {
      retryCount: -1,
      retryDelay: 10,
      retryJitter: 5,
    });
    await lineOf(file, "ready", READY_MS, () => exited);
    await proxies.send({ op: "partition", direction: Direction.Both });
    let grantAt = NaN;
    const granted = other.acquire("job", lease, { timeout: 4 * lease }).then((lock) => {
      grantAt = Date.now();
      return lock;
    });
    granted.catch(() => {}); // awaited below; a rejection before then is not unhandled
    let sigterm: string;
    try {
      sigterm = await lineOf(file, "sigterm", 4 * lease, () => exited);
      await (await within(granted, 4 * lease, "the other client's grant")).release();
    } finally {
      // The held requests pass now: the CLI's release goes through and it exits.
      await proxies.send({ op: "heal" });
    }
    const { code, stderr } = await within(output, EXIT_MS, "the CLI's exit");
    const sigtermAt = Number(sigterm.split(" ")[1]);
    return { sigtermAt, grantAt, code, stderr: decoder.decode(stderr) };
  } finally {
    await stop(cli, output, () => exited);
    for (const connection of connections) await connection.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Ends a CLI still running after a failure: SIGTERM (passed to its command), then SIGKILL. */
async function stop(cli: Deno.ChildProcess, output: Promise<unknown>, exited: () => boolean) {
  const kill = (signal: Deno.Signal) => {
    try {
      if (!exited()) cli.kill(signal);
    } catch {
      // exited meanwhile
    }
  };
  kill("SIGTERM");
  await within(output, 5_000, "the CLI's exit after SIGTERM").catch(() => kill("SIGKILL"));
  await output;
}

/** Races run at most per lease before the test fails. */
const RACES = 3;
/** How late (ms) a SIGTERM may come and its race still be run again. */
const SLIP_MS = 100;

for (const lease of [1_000, 2_000, 3_000]) {
  Deno.test(`cli run sends its command SIGTERM when the validity ends, before another client holds the lock (lease ${lease} ms)`, async () => {
    // The margin is the drift allowance (12 to 32 ms here), which a
    // descheduled CLI or command can eat: a race whose SIGTERM came at most
    // SLIP_MS late is run again; later fails at once. Every race must end
    // with the lock lost.
    const gaps: number[] = [];
    for (let i = 0; i < RACES && !(gaps.at(-1)! > 0); i++) {
      const seen = await race(lease);
      const gap = seen.grantAt - seen.sigtermAt;
      assert.ok(Number.isFinite(gap), `no gap: ${JSON.stringify(seen)}`);
      assert.equal(seen.code, EXIT_LOST, `exit status; stderr: ${seen.stderr}`);
      gaps.push(gap);
      assert.ok(gap > -SLIP_MS, `the SIGTERM came ${-gap} ms after the other client's grant`);
    }
    const shown = gaps.map((gap) => gap > 0 ? `${gap} ms before` : `${-gap} ms after`).join(", ");
    assert.ok(gaps.at(-1)! > 0, `in ${RACES} races the SIGTERM came after the grant: ${shown}`);
    console.log(`cli run, lease ${lease} ms: SIGTERM ${shown} the grant`);
  });
}
