/**
 * The library on Node and Bun: bundled with `deno bundle` (JavaScript, as a
 * JSR consumer gets it) and run by tests/runtimes/integration.mjs against
 * real servers with ioredis, node-redis, (on Node) Valkey GLIDE and (on
 * Bun) Bun's own client.
 * Needs `node` on PATH and the packages of tests/runtimes/package.json
 * installed in the directory named by REDLOCK_RUNTIMES (.ci/run does both);
 * without them these tests fail, they are not skipped.
 */

import assert from "node:assert/strict";
import { startServers } from "./_redis.ts";

const here = new URL("./runtimes/", import.meta.url);
const STEPS = [
  "acquire",
  "notified-wait",
  "using",
  "dispose",
  "fencing",
  "multi-resource",
  "stopped-minority",
];
const decoder = new TextDecoder();
const INSTALL = "mkdir -p DIR && cp tests/runtimes/package.json DIR && npm install --prefix DIR, " +
  "then set REDLOCK_RUNTIMES=DIR (.ci/run does this)";

/** The directory with the packages installed, or a failure that says how to make it. */
function runtimesDir(): string {
  const dir = Deno.env.get("REDLOCK_RUNTIMES");
  assert.ok(dir, `REDLOCK_RUNTIMES is not set: ${INSTALL}`);
  for (const name of ["ioredis", "redis", "bun", "@valkey/valkey-glide"]) {
    assert.ok(
      exists(`${dir}/node_modules/${name}/package.json`),
      `${name} is not installed in ${dir}: ${INSTALL}`,
    );
  }
  return dir;
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

let bundled: Promise<string> | undefined;

/** Bundles mod.ts once into `dir` and copies the programs beside it. */
function bundle(dir: string): Promise<string> {
  bundled ??= (async () => {
    const out = `${dir}/redlock.mjs`;
    const { success, stderr } = await new Deno.Command(Deno.execPath(), {
      args: ["bundle", "--platform", "browser", "--format", "esm", "-o", out, "mod.ts"],
      cwd: new URL("../", import.meta.url),
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.ok(success, `deno bundle failed: ${decoder.decode(stderr)}`);
    for (const name of ["integration.mjs", "await_using.mjs"]) {
      await Deno.copyFile(new URL(name, here), `${dir}/${name}`);
    }
    return out;
  })();
  return bundled;
}

/** Runs the integration program and returns the steps it passed and its output. */
async function run(executable: string, args: string[]) {
  let output;
  try {
    output = await new Deno.Command(executable, {
      args,
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(60_000),
    }).output();
  } catch (error) {
    throw new Error(`could not run ${executable}: ${error}: install it (.ci/run does)`);
  }
  const stdout = decoder.decode(output.stdout);
  const text = `${stdout}\n${decoder.decode(output.stderr)}`;
  const passed = stdout.split("\n").flatMap((line) => line.match(/^ok (\S+)$/)?.[1] ?? []);
  return { success: output.success, passed, text };
}

const RUNS = [
  ["node", "ioredis"],
  ["node", "node-redis"],
  ["node", "glide"],
  ["bun", "ioredis"],
  ["bun", "node-redis"],
  ["bun", "bun"],
] as const;

Deno.test("the runtimes' packages are pinned as in deno.json", async () => {
  const pinned = JSON.parse(await Deno.readTextFile(new URL("package.json", here)));
  const deno = JSON.parse(await Deno.readTextFile(new URL("../deno.json", import.meta.url)));
  for (const name of ["ioredis", "redis", "@valkey/valkey-glide"]) {
    assert.equal(`npm:${name}@${pinned.dependencies[name]}`, deno.imports[name], name);
  }
});

for (const [runtime, kind] of RUNS) {
  Deno.test(`[${runtime}, ${kind}] the bundled library passes the integration subset`, async () => {
    const dir = runtimesDir();
    const program = await bundle(dir).then(() => `${dir}/integration.mjs`);
    const executable = runtime === "node" ? "node" : `${dir}/node_modules/bun/bin/bun.exe`;
    await using servers = await startServers(3);
    const { success, passed, text } = await run(executable, [
      program,
      `${dir}/redlock.mjs`,
      kind,
      ...servers.ports.map(String),
    ]);
    assert.deepEqual(passed, STEPS, text);
    assert.ok(success, text);
    assert.match(text, new RegExp(`PASS ${runtime} \\S+ ${kind}`));
  });
}
