/**
 * `deno task chaos:lead`: the leader-election chaos case. Campaigner
 * processes (chaos/_lead_worker.ts) run `lead()` for one name over 3 Redis
 * servers while servers are stopped (SIGSTOP) or killed (restarted after a
 * lease, so that no valid lock is forgotten), the leader's process is
 * paused past its lease (SIGSTOP/SIGCONT) or killed (`kill -9`, then
 * replaced), or cut off from every server by its proxies while the others
 * reach them (each campaigner has proxies of its own). Afterwards every term's validity (from its start to the abort
 * of its routine's signal, or its lock's last known expiration when its
 * process was paused or killed) is checked: two valid leaders at once, or a
 * term not above the one before, fail the run.
 *
 * ```sh
 * deno task chaos:lead                        # 30 s, random seed
 * deno task chaos:lead --seconds 20 --seed 1  # what CI runs
 * deno task chaos:lead --forgetful --faults server-kill   # servers without persistence
 * ```
 *
 * Exits 0 when safe, 1 when two leaders overlapped, 2 on a usage or setup error.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { type RedisServer, startServers } from "../scripts/redis.ts";
import { FaultProxy } from "../scripts/fault_proxy.ts";
import { PreciseTimer } from "../scripts/_precise_timer.ts";
import { Rng } from "./_rng.ts";

const WORKER = fileURLToPath(new URL("./_lead_worker.ts", import.meta.url));
const NAME = "chaos:leader";

/** One term as its leader recorded it. */
export interface Term {
  readonly pid: number;
  readonly term: number;
  /** When its routine started (Date.now()). */
  readonly start: number;
  /**
   * When it stopped being a valid leader: when its routine's signal aborted
   * (even past its lock's expiration: `lead()` promises the abort first);
   * for a leader paused during its term, or one that never reported its
   * end (killed), the earlier of that and its lock's last expiration.
   */
  readonly until: number;
}

/** Two terms whose validity overlapped. */
export interface LeaderOverlap {
  readonly first: Term;
  readonly second: Term;
  /** ms both were valid. */
  readonly ms: number;
}

/**
 * A span during which a campaigner did not run: the parent stopped it
 * (SIGSTOP), or it found its event loop stalled (`stall`).
 */
interface Pause {
  readonly pid: number;
  readonly start: number;
  end: number;
  readonly stall: boolean;
}

/**
 * The leader pauses noted in a log (`# <Date.now()> pause|resume leader
 * <pid>`), and the stalls the campaigners noted (`# <from> stall leader <pid> <to>`).
 */
function readPauses(lines: readonly string[]): Pause[] {
  const pauses: Pause[] = [];
  for (const line of lines) {
    const [, at, what, role, pid, to] = line.split(" ");
    if (role !== "leader") continue;
    if (what === "stall") {
      pauses.push({ pid: Number(pid), start: Number(at), end: Number(to), stall: true });
    }
    if (what === "pause") {
      pauses.push({ pid: Number(pid), start: Number(at), end: Infinity, stall: false });
    }
    if (what === "resume") {
      const open = pauses.findLast((p) => p.pid === Number(pid) && p.end === Infinity);
      if (open) open.end = Number(at);
    }
  }
  return pauses;
}

/** The terms of a log of `start`/`valid`/`end` lines, in order of start. */
export function readTerms(text: string): Term[] {
  const lines = text.split("\n").filter((l) => l);
  const pauses = readPauses(lines.filter((l) => l.startsWith("#")));
  const terms = new Map<
    string,
    { pid: number; term: number; start: number; expires: number; end?: number }
  >();
  for (const line of lines.filter((l) => !l.startsWith("#"))) {
    const [event, pid, term, at, expiration] = line.split(" ").map((f, i) => i ? Number(f) : f);
    const key = `${pid} ${term}`;
    if (event === "start") {
      terms.set(key, {
        pid: pid as number,
        term: term as number,
        start: at as number,
        expires: expiration as number,
      });
    }
    const t = terms.get(key);
    if (!t) continue;
    if (event === "valid") t.expires = Math.max(t.expires, expiration as number);
    if (event === "end") t.end = at as number;
  }
  return [...terms.values()].map(({ pid, term, start, expires, end }) => {
    // A stall excuses a late abort only when it spans the instant the timer was due.
    const paused = pauses.some((p) =>
      p.pid === pid &&
      (p.stall
        ? p.start <= expires && expires <= p.end
        : p.start < (end ?? expires) && start < p.end)
    );
    const until = end === undefined ? expires : paused ? Math.min(end, expires) : end;
    return { pid, term, start, until };
  }).sort((a, b) => a.start - b.start);
}

/** Overlaps of valid terms, and terms that did not grow from leader to leader. */
export function checkTerms(terms: readonly Term[]): {
  overlaps: LeaderOverlap[];
  unordered: [Term, Term][];
} {
  const overlaps: LeaderOverlap[] = [];
  const unordered: [Term, Term][] = [];
  for (let i = 0; i < terms.length; i++) {
    const a = terms[i]!;
    if (i > 0 && a.term <= terms[i - 1]!.term) unordered.push([terms[i - 1]!, a]);
    for (let j = i + 1; j < terms.length && terms[j]!.start < a.until; j++) {
      const b = terms[j]!;
      overlaps.push({ first: a, second: b, ms: Math.min(a.until, b.until) - b.start });
    }
  }
  return { overlaps, unordered };
}

/** The faults the case injects. */
export type Fault = "server-stop" | "server-kill" | "leader-pause" | "leader-kill" | "leader-cut";
const FAULTS: readonly Fault[] = [
  "server-stop",
  "server-kill",
  "leader-pause",
  "leader-kill",
  "leader-cut",
];
const WEIGHTS: Readonly<Record<Fault, number>> = {
  "server-stop": 2,
  "server-kill": 1,
  "leader-pause": 2,
  "leader-kill": 1,
  "leader-cut": 2,
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The campaigner processes, each signalled only by its own PID, each
 * reaching the servers through proxies of its own (which a fault cuts).
 */
class Campaigners {
  readonly #children = new Map<number, Deno.ChildProcess>();
  readonly #proxies = new Map<number, FaultProxy[]>();
  readonly #timer = new PreciseTimer();
  constructor(
    readonly log: string,
    readonly lease: number,
    readonly wait: string,
    readonly ports: number[],
  ) {}

  async spawn(): Promise<void> {
    const timer = this.#timer;
    const proxies = await Promise.all(this.ports.map((port) => FaultProxy.start(port, { timer })));
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        WORKER,
        this.log,
        NAME,
        String(this.lease),
        this.wait,
        ...proxies.map((proxy) => String(proxy.port)),
      ],
      stdin: "null",
      stdout: "null",
      stderr: "inherit",
    }).spawn();
    this.#children.set(child.pid, child);
    this.#proxies.set(child.pid, proxies);
  }

  /** Stops (or resumes) forwarding between `pid` and every server. */
  cut(pid: number, cut: boolean): void {
    for (const proxy of this.#proxies.get(pid) ?? []) cut ? proxy.partition() : proxy.heal();
  }

  /** The pid of the latest term's leader, if it is one of the running ones. */
  async leader(): Promise<number | undefined> {
    const terms = readTerms(await Deno.readTextFile(this.log).catch(() => ""));
    const pid = terms.at(-1)?.pid;
    return pid !== undefined && this.#children.has(pid) ? pid : undefined;
  }

  signal(pid: number, signal: Deno.Signal): void {
    try {
      this.#children.get(pid)?.kill(signal);
    } catch {
      // exited already
    }
  }

  async kill(pid: number): Promise<void> {
    this.signal(pid, "SIGKILL");
    await this.#children.get(pid)?.status;
    this.#children.delete(pid);
    await this.#close(pid);
  }

  async #close(pid: number): Promise<void> {
    const proxies = this.#proxies.get(pid) ?? [];
    this.#proxies.delete(pid);
    for (const proxy of proxies) proxy.heal();
    await Promise.all(proxies.map((proxy) => proxy.close()));
  }

  async stop(): Promise<number[]> {
    for (const pid of this.#children.keys()) {
      this.signal(pid, "SIGCONT");
      this.signal(pid, "SIGTERM");
    }
    const codes = await Promise.all([...this.#children.values()].map((c) => c.status));
    for (const pid of [...this.#proxies.keys()]) await this.#close(pid);
    this.#timer.close();
    return codes.map((s) => s.code);
  }
}

/** Options of {@linkcode runLeadChaos}. */
export interface LeadChaosOptions {
  readonly seconds: number;
  readonly seed: number;
  readonly campaigners: number;
  /** The campaigners' lease, ms. */
  readonly lease: number;
  /** Which faults; all by default. */
  readonly faults?: readonly Fault[];
  /** The campaigners' wait mode. */
  readonly wait?: "notify" | "poll";
  /**
   * Persist with AOF (appendfsync always), so that restarts keep the fencing
   * counters and terms must grow; without, terms may go back after a
   * majority restarted empty, and only overlaps are checked. Default true.
   */
  readonly aof?: boolean;
  /** Keep the terms log and print where it is. */
  readonly keep?: boolean;
  readonly log?: (line: string) => void;
}

/** Runs the case; true when no two leaders were valid at once. */
export async function runLeadChaos(options: LeadChaosOptions): Promise<boolean> {
  const log = options.log ?? ((line: string) => console.log(line));
  const rng = new Rng(options.seed).fork("lead");
  const { lease } = options;
  const weights = Object.fromEntries(
    FAULTS.map((f) => [f, options.faults && !options.faults.includes(f) ? 0 : WEIGHTS[f]]),
  ) as Record<Fault, number>;
  const wait = options.wait ?? "notify";
  const aof = options.aof ?? true;
  log(
    `chaos:lead: seed ${options.seed}, ${options.seconds} s, ${options.campaigners} campaigners, ` +
      `lease ${lease} ms, wait ${wait}, 3 servers ${
        aof ? "with AOF" : "without persistence"
      }, faults ` +
      FAULTS.filter((f) => weights[f] > 0).join(","),
  );
  await using servers = await startServers(3, { aof });
  const dir = await Deno.makeTempDir({ prefix: "redlock-chaos-lead-" });
  const file = `${dir}/terms.log`;
  const campaigners = new Campaigners(file, lease, wait, servers.ports);
  const faults = new Map<Fault, number>();
  const restarts: Promise<void>[] = [];
  try {
    for (let i = 0; i < options.campaigners; i++) await campaigners.spawn();
    const end = performance.now() + options.seconds * 1000;
    while (performance.now() < end) {
      await sleep(rng.between(300, 1200));
      const fault = rng.weighted(weights);
      faults.set(fault, (faults.get(fault) ?? 0) + 1);
      const server: RedisServer = rng.pick(servers.servers);
      const note = (what: string) =>
        Deno.writeTextFile(file, `# ${Date.now()} ${what}\n`, { append: true });
      if (fault === "server-stop" && server.running) {
        await note(`pause server ${server.port}`);
        await server.pause();
        await sleep(rng.between(100, 1.5 * lease));
        await server.resume();
        await note(`resume server ${server.port}`);
      } else if (fault === "server-kill" && server.running) {
        await note(`kill server ${server.port}`);
        await server.kill();
        // Restarted empty only after every lock it held has expired.
        restarts.push(
          sleep(lease + 200).then(() => server.start()).then(() =>
            note(`restarted server ${server.port}`)
          ),
        );
      } else if (fault === "leader-pause") {
        const pid = await campaigners.leader();
        if (pid === undefined) continue;
        await note(`pause leader ${pid}`);
        campaigners.signal(pid, "SIGSTOP");
        await sleep(rng.between(0.5 * lease, 2 * lease));
        campaigners.signal(pid, "SIGCONT");
        await note(`resume leader ${pid}`);
      } else if (fault === "leader-kill") {
        const pid = await campaigners.leader();
        if (pid === undefined) continue;
        await note(`kill leader ${pid}`);
        await campaigners.kill(pid);
        await campaigners.spawn();
      } else if (fault === "leader-cut") {
        // The others reach the servers while the leader's requests hang.
        const pid = await campaigners.leader();
        if (pid === undefined) continue;
        await note(`cut leader ${pid}`);
        campaigners.cut(pid, true);
        await sleep(rng.between(lease, 2.5 * lease));
        campaigners.cut(pid, false);
        await note(`heal leader ${pid}`);
      }
    }
    await Promise.all(restarts);
    const codes = await campaigners.stop();
    const terms = readTerms(await Deno.readTextFile(file).catch(() => ""));
    const { overlaps, unordered } = checkTerms(terms);
    log(
      `  faults: ${[...faults].map(([f, n]) => `${f} ${n}`).join(", ")}; ` +
        `${terms.length} terms by ${new Set(terms.map((t) => t.pid)).size} processes; ` +
        `campaigners exited ${codes.join(",")}`,
    );
    for (const o of overlaps) {
      log(
        `  OVERLAP: term ${o.first.term} (pid ${o.first.pid}) and term ${o.second.term} ` +
          `(pid ${o.second.pid}) were both valid for ${o.ms} ms`,
      );
    }
    for (const [a, b] of unordered) {
      log(
        `  TERMS: ${b.term} began after ${a.term}${aof ? "" : " (expected without persistence)"}`,
      );
    }
    // Exit code 3: a campaigner left a rejection unhandled or an error uncaught.
    const uncaught = codes.filter((code) => code === 3).length;
    if (uncaught > 0) {
      log(`  UNCAUGHT: ${uncaught} campaigner(s) saw an unhandled rejection or error`);
    }
    const safe = overlaps.length === 0 && (unordered.length === 0 || !aof) && terms.length > 1 &&
      uncaught === 0;
    if (terms.length <= 1) log("  too few terms to tell: no failover happened");
    log(safe ? "SAFE: never two valid leaders at once, terms grew" : "UNSAFE");
    return safe;
  } finally {
    await campaigners.stop();
    if (options.keep) log(`kept ${dir}/terms.log`);
    else await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  let options: LeadChaosOptions;
  try {
    const { values } = parseArgs({
      args: Deno.args,
      options: {
        seconds: { type: "string", default: "30" },
        seed: { type: "string", default: String(Math.floor(Math.random() * 2 ** 31)) },
        campaigners: { type: "string", default: "4" },
        lease: { type: "string", default: "800" },
        faults: { type: "string", default: FAULTS.join(",") },
        wait: { type: "string", default: "notify" },
        forgetful: { type: "boolean", default: false },
        keep: { type: "boolean", default: false },
      },
    });
    const faults = values.faults.split(",") as Fault[];
    if (faults.some((f) => !FAULTS.includes(f))) {
      throw new RangeError(`--faults takes ${FAULTS.join(",")}, got ${values.faults}`);
    }
    if (values.wait !== "notify" && values.wait !== "poll") {
      throw new RangeError(`--wait takes notify or poll, got ${values.wait}`);
    }
    options = {
      seconds: Number(values.seconds),
      seed: Number(values.seed),
      campaigners: Number(values.campaigners),
      lease: Number(values.lease),
    };
    for (const [key, value] of Object.entries(options)) {
      if (!Number.isInteger(value) || value < 1) {
        throw new RangeError(`--${key} must be a positive integer, got ${value}`);
      }
    }
    options = { ...options, faults, wait: values.wait, aof: !values.forgetful, keep: values.keep };
  } catch (error) {
    console.error(`${(error as Error).message}
usage: deno task chaos:lead [--seconds N] [--seed N] [--campaigners N] [--lease ms]
                           [--faults ${
      FAULTS.join(",")
    }] [--wait notify|poll] [--forgetful] [--keep]`);
    Deno.exit(2);
  }
  Deno.exit(await runLeadChaos(options) ? 0 : 1);
}
