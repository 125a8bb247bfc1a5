/**
 * `deno task test`: runs every test with the sanitizers on against Redis
 * servers the tests start themselves (through scripts/redis.ts), then stops
 * anything a failed or interrupted run left behind. Extra arguments go to
 * `deno test` (e.g. `deno task test --filter ioredis`, or test files to run
 * only those). A test that runs past REDLOCK_TEST_LIMIT seconds (120 by
 * default) stops the run, which names it and fails (see `_watchdog.ts`).
 *
 * @module
 */

import { detectEngine, orExplain, reapServers, redisImage } from "./redis.ts";
import { type Overrun, Watchdog } from "./_watchdog.ts";

const engine = await orExplain(detectEngine); // fails early, in one line, when neither way works
const runDir = await Deno.makeTempDir({ prefix: "redlock-test-" });
console.log(
  `Redis servers: ${
    engine === "docker" ? `Docker containers of ${redisImage()}` : "local redis-server"
  }`,
);

// Test files among the arguments run alone; else the whole tests/ directory.
const named = Deno.args.some((arg) => arg.endsWith(".ts"));
const files = named ? [] : ["tests/"];
const wantsRuntimes = !named || Deno.args.some((arg) => arg.endsWith("runtimes_test.ts"));
const runtimes = wantsRuntimes ? await prepareRuntimes() : {};
const child = new Deno.Command(Deno.execPath(), {
  args: ["test", "--allow-all", ...(runtimes.ignore ?? []), ...Deno.args, ...files],
  env: { REDLOCK_RUN_DIR: runDir, ...runtimes.env },
  stdin: "null",
  stdout: "piped",
}).spawn();
const overrun = watch(child, testLimit());

const forward = (signal: Deno.Signal) => () => {
  try {
    child.kill(signal);
  } catch {
    // already gone
  }
};
const onInt = forward("SIGINT");
const onTerm = forward("SIGTERM");
Deno.addSignalListener("SIGINT", onInt);
Deno.addSignalListener("SIGTERM", onTerm);

let code = 1;
try {
  code = (await child.status).code;
  const hung = await overrun;
  if (hung !== undefined) {
    const where = hung.file === undefined ? "" : ` in ${hung.file}`;
    console.error(
      `error: the test "${hung.test}"${where} ran past ${hung.seconds} s: the run was stopped ` +
        "(REDLOCK_TEST_LIMIT sets the limit in seconds)",
    );
    code = 1;
  }
} finally {
  Deno.removeSignalListener("SIGINT", onInt);
  Deno.removeSignalListener("SIGTERM", onTerm);
  const left = await reapServers(runDir);
  if (left > 0) console.error(`stopped ${left} Redis server(s) the test run left behind`);
  await Deno.remove(runDir, { recursive: true }).catch(() => {});
}
Deno.exit(code);

/** Seconds one test may run: REDLOCK_TEST_LIMIT, else 120 (the runner reports each minute). */
function testLimit(): number {
  const set = Deno.env.get("REDLOCK_TEST_LIMIT");
  const limit = set === undefined ? 120 : Number(set);
  if (!(limit > 0)) {
    throw new RangeError(`REDLOCK_TEST_LIMIT must be a number of seconds, got ${set}`);
  }
  return limit;
}

/**
 * Passes the runner's output on and watches it: when a test runs past
 * `limit` seconds, stops the runner (SIGTERM, SIGKILL 5 s later) and
 * resolves to that test.
 */
async function watch(child: Deno.ChildProcess, limit: number): Promise<Overrun | undefined> {
  const dog = new Watchdog(limit);
  const decoder = new TextDecoder();
  let hung: Overrun | undefined;
  for await (const chunk of child.stdout) {
    await Deno.stdout.write(chunk);
    if (hung !== undefined) continue;
    hung = dog.read(decoder.decode(chunk, { stream: true }));
    if (hung === undefined) continue;
    forward("SIGTERM")();
    const kill = setTimeout(forward("SIGKILL"), 5_000);
    child.status.finally(() => clearTimeout(kill));
  }
  return hung;
}

/**
 * The npm packages the Node and Bun tests run (tests/runtimes/package.json),
 * installed once per version of that file under ~/.cache, unless
 * REDLOCK_RUNTIMES names them already (.ci/run does). Without node and npm
 * those tests are left out, and a line says what to install.
 */
async function prepareRuntimes(): Promise<{ env?: Record<string, string>; ignore?: string[] }> {
  if (Deno.env.get("REDLOCK_RUNTIMES")) return {};
  const has = async (command: string) => {
    try {
      const probe = new Deno.Command(command, {
        args: ["--version"],
        stdout: "null",
        stderr: "null",
      });
      return (await probe.output()).success;
    } catch {
      return false; // not on PATH
    }
  };
  if (!(await has("node")) || !(await has("npm"))) {
    console.log(
      "Node and Bun tests (tests/runtimes_test.ts) left out: install Node 20 and npm " +
        "(e.g. apt-get install nodejs npm) to run them",
    );
    return { ignore: ["--ignore=tests/runtimes_test.ts"] };
  }
  const manifest = await Deno.readFile("tests/runtimes/package.json");
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", manifest));
  const tag = [...digest.slice(0, 6)].map((b) => b.toString(16).padStart(2, "0")).join("");
  const home = Deno.env.get("HOME") ?? Deno.env.get("TMPDIR") ?? "/tmp";
  const dir = `${home}/.cache/redlock-runtimes/${tag}`;
  const ready = await Deno.stat(`${dir}/node_modules/bun/package.json`).then(
    () => true,
    () => false,
  );
  if (!ready) {
    console.log(`Installing the Node and Bun test packages once, into ${dir}`);
    await Deno.mkdir(dir, { recursive: true });
    await Deno.writeFile(`${dir}/package.json`, manifest);
    const npm = await new Deno.Command("npm", {
      args: ["install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error"],
      stdout: "null",
    }).output();
    if (!npm.success) {
      console.log("npm install failed: the Node and Bun tests will say what is missing");
    }
  }
  return { env: { REDLOCK_RUNTIMES: dir } };
}
