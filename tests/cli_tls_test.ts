import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { startTlsServers, type TlsServers } from "./_redis_tls.ts";

const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));
const decoder = new TextDecoder();

/** The CLI as a child process with `env`; its status and output. */
async function cli(args: string[], env: Record<string, string>) {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, ...args],
    env,
    clearEnv: false,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code, stdout: decoder.decode(stdout), stderr: decoder.decode(stderr) };
}

const rediss = (tls: TlsServers) => tls.tlsPorts.map((p) => `rediss://127.0.0.1:${p}`).join(",");

Deno.test("cli run and status over rediss:// with --tls-ca or REDLOCK_TLS_CA", async () => {
  await using tls = await startTlsServers(3);
  const { caFile } = tls.certificates;
  const env = { REDLOCK_REDIS: rediss(tls) };
  const run = await cli(
    [
      "run",
      "--tls-ca",
      caFile,
      "--fencing",
      "tls:job",
      "--",
      "sh",
      "-c",
      "echo $REDLOCK_FENCING_TOKEN",
    ],
    env,
  );
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /^\d+\n$/);
  // The command ran under the lock, taken over TLS: a quorum of servers counted its fencing token.
  let counted = 0;
  for (const server of tls.servers.servers) {
    if (/^\$\d+\r\n\d+\r\n/.test(await server.command("GET", "{tls:job}:fence"))) counted++;
  }
  assert.ok(counted >= 2, `fencing counters on ${counted} of 3 servers`);
  // The command holds the lock until the test has seen it held (at most 60 s).
  const done = `${tls.certificates.dir}/done`;
  const wait = `for i in $(seq 1200); do [ -e ${done} ] && exit 0; sleep 0.05; done; exit 1`;
  const held = cli(
    [
      "run",
      "--tls-ca",
      caFile,
      "--lease",
      "5s",
      "--wait",
      "20s",
      "tls:held",
      "--",
      "sh",
      "-c",
      wait,
    ],
    env,
  );
  let ended = false;
  held.then(() => (ended = true), () => (ended = true));
  const withCa = { ...env, REDLOCK_TLS_CA: caFile };
  const deadline = performance.now() + 40_000;
  let status = await cli(["status", "tls:held"], withCa);
  while (status.code !== 1 && !ended && performance.now() < deadline) {
    status = await cli(["status", "tls:held"], withCa);
  }
  await Deno.writeTextFile(done, "");
  assert.equal(
    status.code,
    1,
    `held: ${status.stdout}${status.stderr}${ended ? (await held).stderr : ""}`,
  );
  assert.match(status.stdout, /tls:held: held/);
  const ran = await held;
  assert.equal(ran.code, 0, ran.stderr);
  const free = await cli(["status", "tls:held"], withCa);
  assert.equal(free.code, 0, free.stderr);
});

Deno.test("cli over rediss:// without the servers' CA cannot lock; a bad --tls-ca is a usage error", async () => {
  await using tls = await startTlsServers(3);
  const env = { REDLOCK_REDIS: rediss(tls) };
  const untrusted = await cli(["run", "tls:job", "--", "true"], env);
  assert.equal(untrusted.code, 69, untrusted.stderr);
  const missing = await cli(
    ["status", "--tls-ca", `${tls.certificates.dir}/nothing.pem`, "x"],
    env,
  );
  assert.equal(missing.code, 64);
  assert.match(missing.stderr, /^redlock: --tls-ca cannot read/);
  const notPem = await cli(["status", "x"], { ...env, REDLOCK_TLS_CA: tls.certificates.keyFile });
  assert.equal(notPem.code, 64);
  assert.match(notPem.stderr, /--tls-ca must be a file of PEM certificates/);
});
