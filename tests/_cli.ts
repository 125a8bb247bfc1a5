/**
 * Test helpers for the command line: spawn it against test servers, read
 * what it wrote, wait for lines in a file.
 */

import { fileURLToPath } from "node:url";
import { keysLeft, type RedisServers, sleep } from "./_redis.ts";

export const CLI: string = fileURLToPath(new URL("../cli.ts", import.meta.url));
const decoder = new TextDecoder();

/** Options of {@linkcode spawnCli}. */
export interface SpawnOptions {
  /** Run the CLI in a session and process group of its own, as a terminal's foreground job. */
  detached?: boolean;
  /** Run it through this program first (e.g. `unshare`), with these arguments. */
  wrapper?: string[];
}

/** The CLI as a child process of this test, with REDLOCK_REDIS pointing at `servers`. */
export function spawnCli(
  servers: RedisServers | undefined,
  args: string[],
  options: SpawnOptions = {},
): Deno.ChildProcess {
  const env: Record<string, string> = servers
    ? { REDLOCK_REDIS: servers.servers.map((s) => s.url).join(",") }
    : {};
  const [program, ...before] = options.wrapper ?? [];
  const cli = [Deno.execPath(), "run", "-A", CLI, ...args];
  return new Deno.Command(program ?? cli[0]!, {
    args: program === undefined ? cli.slice(1) : [...before, ...cli],
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    detached: options.detached ?? false,
  }).spawn();
}

/** How a CLI process ended. */
export interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Sends SIGKILL to `child` after `ms` unless disposed first, so that no wait on it is unbounded. */
export function deadline(child: Deno.ChildProcess, ms: number): Disposable {
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // exited
    }
  }, ms);
  return { [Symbol.dispose]: () => clearTimeout(timer) };
}

/**
 * What a spawned CLI printed and its exit status; after `ms` it is killed
 * (and its status, 137, fails the test's assertion).
 */
export async function outcome(child: Deno.ChildProcess, ms = 60_000): Promise<Outcome> {
  using _deadline = deadline(child, ms);
  const { code, stdout, stderr } = await child.output();
  return { code, stdout: decoder.decode(stdout), stderr: decoder.decode(stderr) };
}

/** Runs the CLI to its end. */
export function cli(
  servers: RedisServers | undefined,
  args: string[],
  options: SpawnOptions = {},
): Promise<Outcome> {
  return outcome(spawnCli(servers, args, options));
}

/**
 * `redlock status NAME` once no server holds the key NAME, or as it is
 * after 2 s: a release settles on a quorum, and its request to the last
 * server may land after the CLI has exited. The lock's lease must be longer
 * than 2 s, so that only a release can free the key in that time.
 */
export async function statusAfterRelease(servers: RedisServers, name: string): Promise<Outcome> {
  await keysLeft(servers, name);
  return await cli(servers, ["status", name]);
}

export async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "redlock-cli-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

export async function lines(path: string): Promise<string[]> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.split("\n").filter(Boolean);
}

/**
 * Resolves with the lines of `path` once it has `count`; throws after `ms`,
 * or as soon as `child` (the CLI that should write them) exits, with what
 * it said.
 */
export async function waitForLines(
  path: string,
  count: number,
  ms: number,
  child?: Deno.ChildProcess,
): Promise<string[]> {
  let exited: number | undefined;
  child?.status.then((s) => (exited = s.code));
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    const found = await lines(path);
    if (found.length >= count) return found;
    if (exited !== undefined) {
      const said = await new Response(child!.stderr).text().catch(() => "");
      throw new Error(`the CLI exited ${exited} before ${path} had ${count} lines: ${said}`);
    }
    await sleep(20);
  }
  throw new Error(`${path}: fewer than ${count} lines after ${ms} ms: ${await lines(path)}`);
}

/** Whether process `pid` runs (a zombie, waiting for its reaper, does not). */
export function running(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(")") + 2));
  } catch {
    return false;
  }
}

/** Resolves once `pid` no longer runs; throws after `ms`. */
export async function waitGone(pid: number, ms: number): Promise<void> {
  const deadline = performance.now() + ms;
  while (running(pid)) {
    if (performance.now() > deadline) throw new Error(`process ${pid} still runs after ${ms} ms`);
    await sleep(20);
  }
}
