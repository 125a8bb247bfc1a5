/**
 * `deno task bench:cli-lease`: does `redlock run` stop its command before
 * another client can hold the lock? The CLI runs a command under a lock
 * through three fault proxies; once the command runs, every proxy stops
 * forwarding (the holder is cut off, its servers are not), while another
 * client, connected to the servers directly, waits for the same lock. One
 * sample: the time from the command's SIGTERM (noted by the command) to the
 * other client's grant, both read from the wall clock of this machine.
 * Positive: the command was told to stop first, as it must be.
 *
 * ```sh
 * deno task bench:cli-lease                  # leases 1 s, 2 s and 3 s, 3 runs each
 * deno task bench:cli-lease --runs 5
 * ```
 *
 * Prints each gap and exits 1 when one is not positive.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { Redlock } from "../mod.ts";
import { FaultProxy } from "../scripts/fault_proxy.ts";
import { type RedisServers, startServers } from "../scripts/redis.ts";
import { sleep } from "./_stats.ts";

const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));

const { values } = parseArgs({
  args: Deno.args,
  options: { runs: { type: "string", default: "3" } },
});
const runs = Number(values.runs);

/** Waits for `path` to hold a line; its text, or throws after `ms`. */
async function firstLine(path: string, ms: number): Promise<string> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    const text = await Deno.readTextFile(path).catch(() => "");
    if (text.includes("\n")) return text.split("\n")[0]!;
    await sleep(5);
  }
  throw new Error(`${path}: nothing after ${ms} ms`);
}

/** One sample: ms from the command's SIGTERM to the other client's grant. */
async function sample(servers: RedisServers, lease: number, name: string): Promise<number> {
  const proxies = await Promise.all(servers.ports.map((port) => FaultProxy.start(port)));
  const dir = await Deno.makeTempDir({ prefix: "redlock-cli-lease-" });
  const clients = servers.ports.map((port) => new Redis({ host: "127.0.0.1", port }));
  const other = new Redlock(clients, { retryDelay: 5, retryJitter: 0 });
  // Perl notes the instant SIGTERM arrives in its handler (a shell's trap would fork `date`).
  const command = [
    "perl",
    "-MTime::HiRes=time",
    "-e",
    `$SIG{TERM} = sub { open my $f, ">", "${dir}/term"; printf $f "%.1f\\n", time() * 1000; ` +
    `close $f; exit 0 }; open my $u, ">", "${dir}/up"; print $u "up\\n"; close $u; sleep 1 while 1`,
  ];
  const cli = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      CLI,
      "run",
      "--lease",
      `${lease}ms`,
      "--grace",
      "5s",
      name,
      "--",
      ...command,
    ],
    env: { REDLOCK_REDIS: proxies.map((p) => `redis://127.0.0.1:${p.port}`).join(",") },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  try {
    await firstLine(`${dir}/up`, 30_000);
    for (const proxy of proxies) proxy.partition();
    const lock = await other.acquire(name, 10_000, { retryCount: -1, timeout: 4 * lease + 5_000 });
    const granted = Date.now();
    await lock.release();
    const { code, stderr } = await cli.output();
    if (code !== 76) throw new Error(`the CLI exited ${code}: ${new TextDecoder().decode(stderr)}`);
    return Math.round(granted - Number(await firstLine(`${dir}/term`, 5_000)));
  } finally {
    try {
      cli.kill("SIGKILL");
    } catch {
      // exited
    }
    await Promise.all(proxies.map((p) => p.close()));
    for (const client of clients) client.disconnect();
    await Deno.remove(dir, { recursive: true });
  }
}

await using servers = await startServers(3);
let failed = false;
for (const lease of [1_000, 2_000, 3_000]) {
  const gaps: number[] = [];
  for (let i = 0; i < runs; i++) gaps.push(await sample(servers, lease, `cli-lease-${lease}-${i}`));
  failed ||= gaps.some((gap) => gap <= 0);
  console.log(
    `lease ${lease} ms: SIGTERM to the command, then the next grant ${gaps.join(", ")} ms later`,
  );
}
if (failed) {
  console.log("a gap is not positive: another client held the lock before the command was stopped");
}
Deno.exit(failed ? 1 : 0);
