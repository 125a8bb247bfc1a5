/**
 * `deno task demo:lead`: three "hosts" run the same scheduler with
 * `redlock lead` (the command line) over three Redis servers; exactly one
 * runs it at a time. The leading host crashes (`kill -9` of its process
 * group and of its command's, as a power loss would) and another takes over within the
 * lease; then the new leader is told to stop (SIGTERM) and hands over at
 * once.
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import { startServers } from "./redis.ts";

const CLI = fileURLToPath(new URL("../cli.ts", import.meta.url));
const HOSTS = ["alpha", "bravo", "charlie"];
const LEASE_MS = 2_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

console.log("Starting 3 Redis servers …");
await using servers = await startServers(3);
const dir = await Deno.makeTempDir({ prefix: "redlock-demo-lead-" });
const leaders = `${dir}/leaders`;
const t0 = Date.now();
const stamp = () => `${((Date.now() - t0) / 1000).toFixed(2).padStart(6)} s`;

/**
 * A host: `redlock lead` in its own process group. Its command runs in a
 * group of its own (the CLI's doing), so a crash kills both groups, as a
 * host's power loss would.
 */
class Host {
  readonly process: Deno.ChildProcess;
  constructor(readonly name: string) {
    // The scheduler notes each start (host, term, time) and ticks every 500 ms.
    const scheduler = `echo "${name} $REDLOCK_FENCING_TOKEN $(date +%s%3N) $$" >> ${leaders}; ` +
      `while :; do echo "tick (term $REDLOCK_FENCING_TOKEN)"; sleep 0.5; done`;
    this.process = new Deno.Command("setsid", {
      args: [
        Deno.execPath(),
        "run",
        "-A",
        CLI,
        "lead",
        "--lease",
        `${LEASE_MS}ms`,
        "--grace",
        "1s",
        "scheduler",
        "--",
        "sh",
        "-c",
        scheduler,
      ],
      env: { REDLOCK_REDIS: servers.servers.map((s) => s.url).join(",") },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    void this.#print(this.process.stdout);
    void this.#print(this.process.stderr);
  }

  async #print(stream: ReadableStream<Uint8Array>): Promise<void> {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop()!;
      for (const line of lines) console.log(`${stamp()}  [${this.name.padEnd(7)}] ${line}`);
    }
  }

  /**
   * A crash: SIGKILL to the host's process group (setsid made it its
   * leader) and to its command's (`commandPid` leads it).
   */
  crash(commandPid: number): void {
    Deno.kill(-this.process.pid, "SIGKILL");
    try {
      Deno.kill(-commandPid, "SIGKILL");
    } catch {
      // gone already
    }
  }
}

/** The lines of the leaders file: `host term ms pid` (pid: the command's). */
async function leaderLines(): Promise<string[][]> {
  const text = await Deno.readTextFile(leaders).catch(() => "");
  return text.split("\n").filter(Boolean).map((l) => l.split(" "));
}

async function nextLeader(count: number): Promise<string[]> {
  for (;;) {
    const lines = await leaderLines();
    if (lines.length >= count) return lines[count - 1]!;
    await sleep(10);
  }
}

const hosts = new Map(HOSTS.map((name) => [name, new Host(name)]));
try {
  const [first, term1, , pid1] = await nextLeader(1);
  console.log(`${stamp()}  ${first} leads (term ${term1}); the others campaign`);
  await sleep(2_000);

  console.log(`${stamp()}  ${first} crashes: kill -9 of its process groups`);
  const crashedAt = Date.now();
  hosts.get(first!)!.crash(Number(pid1));
  await hosts.get(first!)!.process.status;
  hosts.delete(first!);
  const [second, term2, at2] = await nextLeader(2);
  console.log(
    `${stamp()}  ${second} took over (term ${term2}) ${Number(at2) - crashedAt} ms after the ` +
      `crash (lease ${LEASE_MS} ms)`,
  );
  await sleep(2_000);

  console.log(`${stamp()}  ${second} is told to stop (SIGTERM): it stops its command and resigns`);
  const stoppedAt = Date.now();
  hosts.get(second!)!.process.kill("SIGTERM");
  const [third, term3, at3] = await nextLeader(3);
  console.log(
    `${stamp()}  ${third} took over (term ${term3}) ${
      Number(at3) - stoppedAt
    } ms after the SIGTERM`,
  );
  await hosts.get(second!)!.process.status;
  hosts.delete(second!);
  await sleep(1_500);
  const terms = (await leaderLines()).map(([host, term]) => `${host} ${term}`);
  console.log(`${stamp()}  leaders in order (host, term): ${terms.join(", ")}`);
} finally {
  for (const host of hosts.values()) host.process.kill("SIGTERM");
  await Promise.all([...hosts.values()].map((h) => h.process.status));
  await Deno.remove(dir, { recursive: true });
}
