/**
 * Runs planned faults against the servers and workers of a case, never
 * taking down more than a minority of servers at once, and records each
 * fault's span in the shared time base.
 *
 * @module
 */

import type { FaultProxy } from "../scripts/fault_proxy.ts";
import type { RedisServer, ServerClock } from "../scripts/redis.ts";
import type { FaultKind, PlannedFault } from "./_plan.ts";
import type { WorkerPool, WorkerProcess } from "./_pool.ts";
import { instant } from "./_protocol.ts";
import type { Recorder } from "./_recorder.ts";

/** ms the clients get to reconnect to a restarted server before it counts as healthy. */
const RECONNECT = 200;
/** ms a network fault waits for a healthy server to take before it is skipped. */
const WAIT_FOR_ROOM = 1_500;

/** A fault as it happened (or why it did not). */
export interface FaultRecord {
  readonly kind: FaultKind;
  /** ms after the case started, as planned. */
  readonly at: number;
  readonly start: number;
  readonly end: number;
  readonly target: string;
  /** Why the fault was not injected, when it was not. */
  readonly skipped?: string;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted || ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** `count` items of `items` picked by `pick` (consecutive from a rotating start). */
function choose<T>(items: readonly T[], count: number, pick: number): T[] {
  const chosen: T[] = [];
  for (let i = 0; i < Math.min(count, items.length); i++) {
    chosen.push(items[(pick + i) % items.length]!);
  }
  return chosen;
}

/** What faults act on. */
export interface FaultTargets {
  readonly servers: readonly RedisServer[];
  /** The servers' fault proxies, when the case has them (`net-*` faults). */
  readonly proxies?: readonly FaultProxy[] | undefined;
  /** The servers' wall clocks, when they run under libfaketime (`clock-jump*`). */
  readonly clocks?: readonly ServerClock[] | undefined;
  /** The longest lease, ms: how long a jumped server's forgetting matters. */
  readonly maxLease: number;
  readonly pool: WorkerPool;
  readonly recorder: Recorder;
  /** ms to wait for a worker asked to linger to reach its work. */
  readonly lingerTimeout: number;
  readonly signal: AbortSignal;
  /** Called with each record as it is made. */
  readonly log?: ((record: FaultRecord) => void) | undefined;
}

/** Injects faults; at most a minority of servers is unhealthy at any time. */
export class FaultInjector {
  readonly records: FaultRecord[] = [];
  readonly #t: FaultTargets;
  /** Servers that are down, stopped or paused (or reserved for a fault). */
  readonly #down = new Set<number>();
  readonly #maxDown: number;
  /** When the last fault that may have left a lock on a bare majority ended. */
  #lastUnreachable = -Infinity;
  /** A clock jump runs: nothing else may happen until it settled. */
  #jumping = false;

  constructor(targets: FaultTargets) {
    this.#t = targets;
    const n = targets.servers.length;
    this.#maxDown = n - (Math.floor(n / 2) + 1);
  }

  get #healthy(): number[] {
    return this.#t.servers.map((_, i) => i).filter((i) => !this.#down.has(i));
  }

  #record(fault: PlannedFault, start: number, target: string, skipped?: string): void {
    const record: FaultRecord = skipped === undefined
      ? { kind: fault.kind, at: fault.at, start, end: instant(), target }
      : { kind: fault.kind, at: fault.at, start, end: start, target, skipped };
    this.records.push(record);
    this.#t.log?.(record);
  }

  /** Injects one fault and resolves when it is over (servers back, worker resumed). */
  run(fault: PlannedFault): Promise<void> {
    switch (fault.kind) {
      case "server-kill":
        return this.#kill(fault);
      case "server-stop":
      case "client-pause":
        return this.#hang(fault);
      case "script-flush":
        return this.#flush(fault);
      case "worker-pause":
      case "worker-kill":
        return this.#worker(fault);
      case "kill-cascade":
        return this.#cascade(fault);
      case "net-partition":
      case "net-delay":
        return this.#network(fault);
      case "net-reset":
        return Promise.resolve(this.#reset(fault));
      case "clock-jump":
      case "clock-jump-majority":
        return this.#jump(fault);
    }
  }

  #proxies(): readonly FaultProxy[] {
    if (!this.#t.proxies) throw new Error("network faults need servers behind proxies");
    return this.#t.proxies;
  }

  /**
   * Cuts a minority off at its proxies, or slows it, for the fault's
   * duration; held bytes then pass, as TCP delivers them after a heal.
   */
  async #network(fault: PlannedFault): Promise<void> {
    // waits a little for a server to come back rather than skip at once
    for (let waited = 0; this.#down.size >= this.#maxDown && waited < WAIT_FOR_ROOM; waited += 50) {
      await sleep(50, this.#t.signal);
    }
    const capacity = this.#maxDown - this.#down.size;
    if (this.#jumping) return this.#record(fault, instant(), "-", "a clock jump settles");
    if (capacity <= 0) return this.#record(fault, instant(), "-", "a minority is already down");
    const proxies = this.#proxies();
    const targets = choose(this.#healthy, Math.min(fault.count, capacity), fault.pick);
    for (const i of targets) this.#down.add(i);
    const start = instant();
    let what: string;
    try {
      if (fault.kind === "net-partition") {
        const cut = fault.cut ?? "both";
        for (const i of targets) proxies[i]!.partition(cut);
        what = `cut (${cut})`;
      } else {
        const jitter = Math.round(fault.extra / 4);
        for (const i of targets) proxies[i]!.delay(fault.extra, { jitter });
        what = `delayed ${fault.extra} + 0..${jitter} ms each way`;
      }
      await sleep(fault.duration, this.#t.signal);
    } finally {
      for (const i of targets) {
        proxies[i]!.heal();
        proxies[i]!.delay(0);
      }
      await sleep(RECONNECT);
      for (const i of targets) this.#down.delete(i);
      this.#lastUnreachable = instant();
    }
    this.#record(fault, start, `servers ${targets.join(",")} ${what} for ${fault.duration} ms`);
  }

  #reset(fault: PlannedFault): void {
    const proxies = this.#proxies();
    const targets = choose(proxies.map((_, i) => i), fault.count, fault.pick);
    const start = instant();
    let closed = 0;
    for (const i of targets) {
      closed += proxies[i]!.connections;
      proxies[i]!.reset();
    }
    this.#record(fault, start, `servers ${targets.join(",")}, ${closed} connections`);
  }

  /**
   * Moves the wall clock of `fault.count` servers forward by more than the
   * longest lease while a worker lingers in a hold: they forget every lock.
   * A minority jump needs every server healthy and no lock that may sit on
   * a bare majority (no server unreachable within two leases), and lets no
   * other fault run until every lease from before the jump has ended.
   */
  async #jump(fault: PlannedFault): Promise<void> {
    const clocks = this.#t.clocks;
    if (!clocks) throw new Error("clock jumps need servers under libfaketime");
    // a lease (and its one extension, made within 200 ms) ends this long after it began
    const settle = this.#t.maxLease + 500;
    if (this.#jumping || this.#down.size > 0) {
      return this.#record(fault, instant(), "-", "needs every server healthy");
    }
    if (fault.kind === "clock-jump" && instant() - this.#lastUnreachable < settle) {
      return this.#record(fault, instant(), "-", "a lock may still sit on a bare majority");
    }
    const targets = choose(this.#healthy, fault.count, fault.pick);
    this.#jumping = true;
    for (const i of targets) this.#down.add(i);
    const worker = choose(this.#t.pool.idle, 1, fault.pick)[0];
    if (worker) worker.busy = true;
    let lingering = "";
    const start = instant();
    try {
      const report = worker ? await this.#holding(worker) : undefined;
      if (report) lingering = `, hold ${report.w}:${report.h} lingering`;
      const seconds = Math.ceil(fault.extra / 1000);
      await Promise.all(targets.map((i) => clocks[i]!.jump(seconds)));
      lingering = ` forward ${seconds} s${lingering}`;
      await sleep(fault.duration, this.#t.signal);
    } finally {
      for (const i of targets) this.#down.delete(i);
      if (worker) worker.busy = false;
      this.#jumping = false;
    }
    this.#record(fault, start, `clocks of servers ${targets.join(",")}${lingering}`);
  }

  /**
   * Restarts a killed server and gives the workers' clients time to reconnect
   * before the server counts as healthy again; a failure to come back is
   * fatal to the run.
   */
  async #restart(index: number): Promise<void> {
    const server = this.#t.servers[index]!;
    for (let attempt = 1;; attempt++) {
      try {
        await server.start();
        break;
      } catch (error) {
        if (attempt >= 3) throw error;
        await sleep(200);
      }
    }
    await sleep(RECONNECT);
  }

  async #kill(fault: PlannedFault): Promise<void> {
    if (this.#jumping) return this.#record(fault, instant(), "-", "a clock jump settles");
    const capacity = this.#maxDown - this.#down.size;
    if (capacity <= 0) return this.#record(fault, instant(), "-", "a minority is already down");
    const targets = choose(this.#healthy, Math.min(fault.count, capacity), fault.pick);
    for (const i of targets) this.#down.add(i);
    const start = instant();
    try {
      await Promise.all(targets.map((i) => this.#t.servers[i]!.kill()));
      await sleep(fault.duration, this.#t.signal);
      await Promise.all(targets.map((i) => this.#restart(i)));
    } finally {
      for (const i of targets) this.#down.delete(i);
      this.#lastUnreachable = instant();
    }
    this.#record(fault, start, `servers ${targets.join(",")} down ${fault.duration} ms`);
  }

  async #cascade(fault: PlannedFault): Promise<void> {
    if (this.#down.size > 0 || this.#maxDown === 0) {
      return this.#record(fault, instant(), "-", "needs every server healthy");
    }
    const first = choose(this.#healthy, this.#maxDown, fault.pick);
    for (const i of first) this.#down.add(i);
    const start = instant();
    let second: number | undefined;
    // A worker is asked to linger: it takes a lock on the bare majority while
    // the first wave is down, and still works under it when the second
    // server goes down, so that a forgetful restart can matter.
    const worker = choose(this.#t.pool.idle, 1, fault.pick)[0];
    if (worker) worker.busy = true;
    let lingering = "";
    try {
      await Promise.all(first.map((i) => this.#t.servers[i]!.kill()));
      const [report] = await Promise.all([
        worker ? this.#holding(worker) : undefined,
        sleep(fault.duration, this.#t.signal),
      ]);
      if (report) lingering = `, hold ${report.w}:${report.h} lingering`;
      await Promise.all(first.map((i) => this.#restart(i)));
      // at once, in the same tick: hand the reservation over to the second server
      const others = this.#healthy;
      for (const i of first) this.#down.delete(i);
      second = choose(others, 1, fault.pick + 1)[0]!;
      this.#down.add(second);
      await this.#t.servers[second]!.kill();
      await sleep(fault.extra, this.#t.signal);
      await this.#restart(second);
    } finally {
      for (const i of first) this.#down.delete(i);
      if (second !== undefined) this.#down.delete(second);
      if (worker) worker.busy = false;
      this.#lastUnreachable = instant();
    }
    this.#record(
      fault,
      start,
      `servers ${first.join(",")} down ${fault.duration} ms, then ${second} down ` +
        `${fault.extra} ms${lingering}`,
    );
  }

  async #hang(fault: PlannedFault): Promise<void> {
    if (this.#jumping) return this.#record(fault, instant(), "-", "a clock jump settles");
    if (this.#down.size >= this.#maxDown) {
      return this.#record(fault, instant(), "-", "a minority is already down");
    }
    const index = choose(this.#healthy, 1, fault.pick)[0]!;
    const server = this.#t.servers[index]!;
    this.#down.add(index);
    const start = instant();
    try {
      if (fault.kind === "server-stop") {
        await server.pause();
        await sleep(fault.duration, this.#t.signal);
        await server.resume();
      } else {
        const reply = await server.command("CLIENT", "PAUSE", String(fault.duration), "ALL");
        if (!reply.startsWith("+OK")) throw new Error(`CLIENT PAUSE failed: ${reply.trim()}`);
        await sleep(fault.duration, this.#t.signal);
        if (this.#t.signal.aborted) await server.command("CLIENT", "UNPAUSE");
      }
    } finally {
      this.#down.delete(index);
      this.#lastUnreachable = instant();
    }
    this.#record(fault, start, `server ${index} for ${fault.duration} ms`);
  }

  async #flush(fault: PlannedFault): Promise<void> {
    const targets = choose(this.#healthy, fault.count, fault.pick);
    const start = instant();
    await Promise.all(targets.map((i) => this.#t.servers[i]!.command("SCRIPT", "FLUSH")));
    this.#record(fault, start, `servers ${targets.join(",")}`);
  }

  /** Asks a worker to linger in its next hold and waits until it reports its work. */
  async #holding(worker: WorkerProcess) {
    const thinking = this.#t.pool.waitFor(
      (r) => r.ev === "thinking" && r.w === worker.id,
      this.#t.lingerTimeout,
    );
    await worker.send({ op: "linger" });
    const report = await thinking;
    return report?.ev === "thinking" ? report : undefined;
  }

  async #worker(fault: PlannedFault): Promise<void> {
    const idle = this.#t.pool.idle;
    if (idle.length === 0) return this.#record(fault, instant(), "-", "no idle worker");
    const worker = choose(idle, 1, fault.pick)[0]!;
    worker.busy = true;
    try {
      const report = await this.#holding(worker);
      if (report === undefined || worker.dead) {
        return this.#record(fault, instant(), `worker ${worker.id}`, "no hold reached its work");
      }
      const start = instant();
      const target = `worker ${worker.id}, hold ${report.w}:${report.h}`;
      if (fault.kind === "worker-pause") {
        worker.pause();
        this.#t.recorder.markPaused(report.w, report.h);
        await sleep(report.expiration + fault.extra - instant(), this.#t.signal);
        worker.resume();
        this.#record(fault, start, `${target}, ${fault.extra} ms past its lease`);
      } else {
        await worker.kill();
        this.#t.recorder.markDead(worker.id, start);
        if (!this.#t.signal.aborted) await this.#t.pool.spawn();
        this.#record(fault, start, target);
      }
    } finally {
      worker.busy = false;
    }
  }
}
