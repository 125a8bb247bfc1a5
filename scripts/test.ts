/**
 * `deno task test`: runs every test with the sanitizers on against Redis
 * servers the tests start themselves (through scripts/redis.ts), then stops
 * anything a failed or interrupted run left behind. Extra arguments go to
 * `deno test` (e.g. `deno task test --filter ioredis`, or test files to run
 * only those).
 *
 * @module
 */

import { detectEngine, orExplain, reapServers, redisImage } from "./redis.ts";

const engine = await orExplain(detectEngine); // fails early, in one line, when neither way works
const runDir = await Deno.makeTempDir({ prefix: "redlock-test-" });
console.log(
  `Redis servers: ${
    engine === "docker" ? `Docker containers of ${redisImage()}` : "local redis-server"
  }`,
);

// Test files among the arguments run alone; else the whole tests/ directory.
const files = Deno.args.some((arg) => arg.endsWith(".ts")) ? [] : ["tests/"];
const child = new Deno.Command(Deno.execPath(), {
  args: ["test", "--allow-all", ...Deno.args, ...files],
  env: { REDLOCK_RUN_DIR: runDir },
  stdin: "null",
}).spawn();

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
} finally {
  Deno.removeSignalListener("SIGINT", onInt);
  Deno.removeSignalListener("SIGTERM", onTerm);
  const left = await reapServers(runDir);
  if (left > 0) console.error(`stopped ${left} Redis server(s) the test run left behind`);
  await Deno.remove(runDir, { recursive: true }).catch(() => {});
}
Deno.exit(code);
