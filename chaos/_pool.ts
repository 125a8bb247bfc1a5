/**
 * The chaos workers: separate Deno processes, started, stopped (SIGSTOP),
 * resumed, killed and always reaped by the parent. Their reports reach the
 * parent as JSON lines on their stdout.
 *
 * @module
 */

import { lines } from "./_lines.ts";
import { type Command, instant, type Report, type WorkerConfig } from "./_protocol.ts";

const WORKER = new URL("./_worker.ts", import.meta.url);
const ROOT = new URL("../", import.meta.url);
const encoder = new TextEncoder();

/** How well a worker's clock agrees with the parent's. */
export interface ClockOffset {
  /** The worker's instant minus the parent's, ms (best estimate). */
  readonly offset: number;
  /** ± ms of that estimate: half the shortest round trip. */
  readonly uncertainty: number;
}

/** One worker process. */
export class WorkerProcess {
  readonly id: number;
  readonly #child: Deno.ChildProcess;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  /** Settles when the process has exited. */
  readonly exited: Promise<Deno.CommandStatus>;
  /** Settles when its stdout has been read to the end. */
  readonly drained: Promise<void>;
  /** The last lines it wrote to stderr. */
  readonly stderr: string[] = [];
  #dead = false;
  #stopped = false;
  /** True while a fault owns it. */
  busy = false;
  /** True once it was told to stop. */
  stopping = false;

  constructor(config: WorkerConfig, onReport: (report: Report, worker: WorkerProcess) => void) {
    this.id = config.id;
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", WORKER.pathname, JSON.stringify(config)],
      cwd: ROOT.pathname,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#child = child;
    this.#writer = child.stdin.getWriter();
    this.exited = child.status.then((status) => {
      this.#dead = true;
      return status;
    });
    this.drained = (async () => {
      for await (const line of lines(child.stdout)) {
        if (!line.startsWith("{")) {
          this.#keep(line);
          continue;
        }
        try {
          onReport(JSON.parse(line) as Report, this);
        } catch (error) {
          this.#keep(`bad report ${line}: ${error}`);
        }
      }
    })();
    (async () => {
      for await (const line of lines(child.stderr)) this.#keep(line);
    })().catch(() => {});
  }

  #keep(line: string): void {
    this.stderr.push(line);
    if (this.stderr.length > 30) this.stderr.shift();
  }

  /** The process id. */
  get pid(): number {
    return this.#child.pid;
  }

  /** True once the process has exited. */
  get dead(): boolean {
    return this.#dead;
  }

  /** True while it is stopped by SIGSTOP. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Sends a command; false when the worker is gone. */
  async send(command: Command): Promise<boolean> {
    if (this.#dead) return false;
    try {
      await this.#writer.write(encoder.encode(JSON.stringify(command) + "\n"));
      return true;
    } catch {
      return false;
    }
  }

  #signal(signal: Deno.Signal): boolean {
    if (this.#dead) return false;
    try {
      this.#child.kill(signal);
      return true;
    } catch {
      return false;
    }
  }

  /** SIGSTOP: it runs nothing until {@linkcode WorkerProcess.resume}. */
  pause(): boolean {
    const done = this.#signal("SIGSTOP");
    if (done) this.#stopped = true;
    return done;
  }

  /** SIGCONT. */
  resume(): boolean {
    this.#stopped = false;
    return this.#signal("SIGCONT");
  }

  /** SIGKILL, and waits until it is gone. */
  async kill(): Promise<void> {
    if (this.#stopped) this.resume();
    this.#signal("SIGKILL");
    await this.exited;
    await this.#writer.close().catch(() => {});
  }
}

/** A waiter for a report that matches. */
interface Waiter {
  readonly match: (report: Report) => boolean;
  readonly resolve: (report: Report | undefined) => void;
}

/** The worker processes of one case; disposing it kills whatever still runs. */
export class WorkerPool implements AsyncDisposable {
  readonly #make: (id: number) => WorkerConfig;
  readonly #onReport: (report: Report, worker: WorkerProcess) => void;
  readonly #workers: WorkerProcess[] = [];
  readonly #waiters = new Set<Waiter>();
  readonly offsets = new Map<number, ClockOffset>();
  #nextId = 1;

  /**
   * @param make The settings of the worker with an id.
   * @param onReport Called with every report of every worker.
   */
  constructor(
    make: (id: number) => WorkerConfig,
    onReport: (report: Report, worker: WorkerProcess) => void,
  ) {
    this.#make = make;
    this.#onReport = onReport;
  }

  /** Every worker started, dead or alive. */
  get all(): readonly WorkerProcess[] {
    return this.#workers;
  }

  /** Workers that run and that no fault owns. */
  get idle(): WorkerProcess[] {
    return this.#workers.filter((w) => !w.dead && !w.busy && !w.stopping && !w.stopped);
  }

  #dispatch(report: Report, worker: WorkerProcess): void {
    this.#onReport(report, worker);
    for (const waiter of this.#waiters) {
      if (waiter.match(report)) {
        this.#waiters.delete(waiter);
        waiter.resolve(report);
      }
    }
  }

  /** The next report that matches, or undefined after `timeout` ms. */
  waitFor(match: (report: Report) => boolean, timeout: number): Promise<Report | undefined> {
    return new Promise((resolve) => {
      const waiter: Waiter = {
        match,
        resolve: (report) => {
          clearTimeout(timer);
          resolve(report);
        },
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(waiter);
        resolve(undefined);
      }, timeout);
      this.#waiters.add(waiter);
    });
  }

  /** Starts a worker and waits until it is ready and its clock is measured. */
  async spawn(): Promise<WorkerProcess> {
    const id = this.#nextId++;
    const ready = this.waitFor((r) => r.ev === "ready" && r.w === id, 30_000);
    const worker = new WorkerProcess(this.#make(id), (r, w) => this.#dispatch(r, w));
    this.#workers.push(worker);
    if (await Promise.race([ready, worker.exited.then(() => undefined)]) === undefined) {
      await worker.kill();
      throw new Error(`worker ${id} did not start:\n${worker.stderr.join("\n")}`);
    }
    this.offsets.set(id, await this.#measure(worker));
    return worker;
  }

  /** Pings a worker a few times: its clock's offset from the parent's. */
  async #measure(worker: WorkerProcess): Promise<ClockOffset> {
    let best: ClockOffset = { offset: 0, uncertainty: Infinity };
    for (let i = 0; i < 5; i++) {
      const t0 = instant();
      const pong = this.waitFor((r) => r.ev === "pong" && r.w === worker.id && r.t0 === t0, 2_000);
      await worker.send({ op: "ping", t0 });
      const report = await pong;
      const t1 = instant();
      if (report?.ev !== "pong") continue;
      const uncertainty = (t1 - t0) / 2;
      if (uncertainty < best.uncertainty) {
        best = { offset: report.t - (t0 + t1) / 2, uncertainty };
      }
    }
    return best;
  }

  /**
   * Tells every worker to stop after its current hold and waits up to
   * `timeout` ms; returns the ids of those that did not exit in time (they
   * are killed).
   */
  async stopAll(timeout: number): Promise<number[]> {
    const alive = this.#workers.filter((w) => !w.dead);
    for (const worker of alive) {
      worker.stopping = true;
      if (worker.stopped) worker.resume();
      await worker.send({ op: "stop" });
    }
    const late: number[] = [];
    await Promise.all(alive.map(async (worker) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timedOut = new Promise<true>((resolve) =>
        timer = setTimeout(() => resolve(true), timeout)
      );
      const exitedInTime = await Promise.race([worker.exited.then(() => false), timedOut]);
      clearTimeout(timer);
      if (exitedInTime) {
        late.push(worker.id);
        await worker.kill();
      }
      await worker.drained;
    }));
    return late;
  }

  /** Kills every worker still running. */
  async [Symbol.asyncDispose](): Promise<void> {
    await Promise.all(this.#workers.map((w) => w.dead ? w.exited : w.kill()));
    await Promise.all(this.#workers.map((w) => w.drained.catch(() => {})));
    for (const waiter of this.#waiters) waiter.resolve(undefined);
    this.#waiters.clear();
  }
}
