/**
 * Runs one chaos case: starts its servers and workers, injects its faults,
 * stops everything, reads the guarded store and checks the history.
 *
 * @module
 */

import { Redis } from "ioredis";
import { PreciseTimer } from "../scripts/_precise_timer.ts";
import { FaultProxy } from "../scripts/fault_proxy.ts";
import {
  type RedisServers,
  type ServerClock,
  startClockedServers,
  startServers,
} from "../scripts/redis.ts";
import type { CaseSpec } from "./_cases.ts";
import { FaultInjector, type FaultRecord, sleep } from "./_faults.ts";
import {
  acquireBound,
  type AcquireCall,
  type AcquireStats,
  acquireStats,
  analyseStore,
  checkTokenOrder,
  findOverlaps,
  findStaleWrites,
  type Hold,
  type Overlap,
  type StaleWrite,
  type StoreAnalysis,
  type TokenViolation,
} from "./_history.ts";
import { planFaults } from "./_plan.ts";
import { WorkerPool } from "./_pool.ts";
import { type HoldTiming, instant, type LockSettings } from "./_protocol.ts";
import { Recorder } from "./_recorder.ts";
import type { Rng } from "./_rng.ts";
import { readStore } from "./_store.ts";

/** What every case of a run shares. */
export interface RunSettings extends HoldTiming {
  readonly workers: number;
  readonly resources: number;
  readonly settings: LockSettings;
}

/** What a case found. */
export interface CaseResult {
  readonly spec: CaseSpec;
  /** ms of faults, as asked. */
  readonly duration: number;
  readonly faults: readonly FaultRecord[];
  readonly holds: number;
  /** Holds that skipped their write because too little validity was left. */
  readonly skipped: number;
  readonly overlaps: readonly Overlap[];
  readonly stale: readonly StaleWrite[];
  readonly tokens: readonly TokenViolation[];
  readonly store: readonly StoreAnalysis[];
  readonly acquire: { healthy: AcquireStats; faulty: AcquireStats; all: AcquireStats };
  /** The longest an acquire may take with the run's settings, ms. */
  readonly bound: number;
  /** Workers whose acquire call did not return when they were told to stop. */
  readonly hung: readonly number[];
  /** Workers that did not finish their hold and exit in time when told to stop. */
  readonly late: readonly number[];
  /** Whether the locks came with fencing tokens. */
  readonly fencing: boolean;
  /** The largest clock offset between a worker and the parent, ± its uncertainty. */
  readonly clock: { readonly offset: number; readonly uncertainty: number };
  readonly failures: Readonly<Record<string, number>>;
  /** Successful extensions of `using()` holds, and failed ones by error name. */
  readonly extensions: number;
  /** Holds run by `using()`, and those whose routine's signal aborted. */
  readonly using: { readonly holds: number; readonly aborts: number };
  readonly extensionFailures: Readonly<Record<string, number>>;
  readonly serverErrors: Readonly<Record<string, number>>;
  readonly failedReleases: number;
  readonly errors: readonly string[];
  /** Rejections nobody handled and errors nobody caught in the workers: each fails the run. */
  readonly uncaught: readonly string[];
  /** The raw history, for `--out`. */
  readonly history: { readonly holds: readonly Hold[]; readonly calls: readonly AcquireCall[] };
  /** Safety promises the case broke: each fails the run. */
  readonly violations: readonly string[];
  /** What the case shows that is the known limit, not a bug. */
  readonly expected: readonly string[];
}

/** Fault proxies in front of a case's servers, sharing one precise timer. */
class Network implements AsyncDisposable {
  readonly proxies: readonly FaultProxy[];
  readonly #timer: PreciseTimer | undefined;

  private constructor(proxies: FaultProxy[], timer: PreciseTimer | undefined) {
    this.proxies = proxies;
    this.#timer = timer;
  }

  static async start(ports: readonly number[]): Promise<Network> {
    if (ports.length === 0) return new Network([], undefined);
    const timer = new PreciseTimer();
    const proxies = await Promise.all(ports.map((port) => FaultProxy.start(port, { timer })));
    return new Network(proxies, timer);
  }

  get ports(): number[] {
    return this.proxies.map((p) => p.port);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await Promise.all(this.proxies.map((p) => p.close()));
    this.#timer?.close();
  }
}

/** ms an acquire may take beyond its bound on a busy machine before it counts as a hang. */
export const boundSlack = (bound: number): number => Math.max(500, bound / 4);

function judge(
  result: Omit<CaseResult, "violations" | "expected" | "history">,
): { violations: string[]; expected: string[] } {
  const violations: string[] = [];
  const expected: string[] = [];
  const { spec } = result;
  const promise = (problem: string, known: string, promised = spec.promised) =>
    promised ? violations.push(problem) : expected.push(`${problem} (${known})`);
  const forgot = spec.clocked
    ? "a majority's clocks jumped past a valid lock"
    : "a restarted server forgot a valid lock";
  if (result.overlaps.length > 0) {
    promise(`${result.overlaps.length} overlap(s) of valid leases`, forgot);
  }
  const unexplained = result.store.flatMap((s) => s.interferences).filter((i) => !i.explained);
  if (unexplained.length > 0) {
    promise(`${unexplained.length} lost update(s) with no stale write involved`, forgot);
  }
  if (result.tokens.length > 0) {
    promise(`${result.tokens.length} fencing token(s) out of order`, forgot, spec.fenced);
  }
  const fencedLost = result.store.reduce((sum, s) => sum + s.fencedLost, 0);
  if (fencedLost !== 0) {
    promise(`${fencedLost} lost update(s) in the fenced store`, forgot, spec.fenced);
  }
  if (result.hung.length > 0) {
    violations.push(`acquire() did not return in workers ${result.hung.join(", ")}`);
  }
  if (result.uncaught.length > 0) {
    violations.push(
      `${result.uncaught.length} unhandled rejection(s) or uncaught error(s): ` +
        result.uncaught.slice(0, 3).join("; "),
    );
  }
  const stuck = result.late.filter((w) => !result.hung.includes(w));
  if (stuck.length > 0) {
    violations.push(`workers ${stuck.join(", ")} did not finish their hold (release) in time`);
  }
  if (result.acquire.all.longest > result.bound + boundSlack(result.bound)) {
    violations.push(
      `the longest acquire took ${Math.round(result.acquire.all.longest)} ms, ` +
        `beyond its bound of ${result.bound} ms`,
    );
  }
  const stale = result.stale.filter((s) => s.overlapping.length > 0);
  if (stale.length > 0) {
    expected.push(
      `${stale.length} write(s) by a holder working past its lease while another held the ` +
        `lock (the known limit of leases: the paused-holder case)`,
    );
  }
  return { violations, expected };
}

/** Options of {@linkcode runCase}. */
export interface CaseOptions {
  readonly signal: AbortSignal;
  /** Called with progress lines. */
  readonly log: (line: string) => void;
  /** Print every fault as it happens. */
  readonly verbose: boolean;
}

/** Runs one case for `duration` ms of faults. */
export async function runCase(
  spec: CaseSpec,
  duration: number,
  root: Rng,
  run: RunSettings,
  options: CaseOptions,
): Promise<CaseResult> {
  const { signal, log } = options;
  const rng = root.fork(spec.scheduleLabel);
  const bound = acquireBound(run.settings, { maxLease: run.leaseMax });
  const plan = planFaults(rng.fork("plan"), {
    duration,
    servers: spec.servers,
    restart: spec.restart,
    maxLease: run.leaseMax,
    requestTimeout: run.settings.requestTimeout,
    weights: spec.weights,
    rotate: spec.rotate ?? false,
  });
  const resources = Array.from({ length: run.resources }, (_, i) => `chaos:r${i}`);
  const prefix = `chaos:${spec.name}`;

  let servers: RedisServers;
  let clocks: ServerClock[] | undefined;
  if (spec.clocked) ({ servers, clocks } = await startClockedServers(spec.servers));
  else servers = await startServers(spec.servers, { aof: spec.aof });
  await using _servers = servers;
  await using network = await Network.start(spec.proxied ? servers.ports : []);
  await using storeServer = await startServers(1);
  const storePort = storeServer.ports[0]!;
  const recorder = new Recorder();
  await using pool = new WorkerPool(
    (id) => ({
      id,
      ports: spec.proxied ? network.ports : servers.ports,
      storePort,
      prefix,
      resources,
      leaseMin: run.leaseMin,
      leaseMax: run.leaseMax,
      thinkMin: run.thinkMin,
      thinkMax: run.thinkMax,
      longShare: run.longShare,
      longThinkMin: run.longThinkMin,
      longThinkMax: run.longThinkMax,
      idleMax: run.idleMax,
      lingerMs: run.lingerMs,
      seed: rng.fork(`worker:${id}`).seed,
      settings: run.settings,
    }),
    (report) => recorder.add(report),
  );
  await Promise.all(Array.from({ length: run.workers }, () => pool.spawn()));

  const t0 = instant();
  const injector = new FaultInjector({
    servers: servers.servers,
    proxies: spec.proxied ? network.proxies : undefined,
    clocks,
    maxLease: run.leaseMax,
    pool,
    recorder,
    lingerTimeout: 5_000,
    signal,
    log: options.verbose
      ? (r) =>
        log(
          `  +${((r.start - t0) / 1000).toFixed(1)}s ${r.kind} ${r.target}` +
            (r.skipped ? ` skipped: ${r.skipped}` : ` (${Math.round(r.end - r.start)} ms)`),
        )
      : undefined,
  });
  const running = new Set<Promise<void>>();
  let fatal: unknown;
  for (const fault of plan) {
    await sleep(t0 + fault.at - instant(), signal);
    if (signal.aborted || fatal !== undefined) break;
    const done: Promise<void> = injector.run(fault)
      .catch((error) => {
        fatal ??= error;
      })
      .finally(() => running.delete(done));
    running.add(done);
  }
  await sleep(t0 + duration - instant(), signal);
  await Promise.all(running);
  if (fatal !== undefined) throw fatal;
  const late = await pool.stopAll(bound + boundSlack(bound) + 2_000);
  const hung = late.filter((w) => recorder.inFlight.has(w));
  signal.throwIfAborted();

  const storeClient = new Redis({ host: "127.0.0.1", port: storePort, lazyConnect: true });
  storeClient.on("error", () => {});
  let states;
  try {
    await storeClient.connect();
    states = await readStore(storeClient, prefix, resources);
  } finally {
    storeClient.disconnect();
  }

  const holds = recorder.holds();
  const isStale = (id: string) => {
    const hold = recorder.hold(id);
    if (hold === undefined) return true;
    if (hold.write !== undefined) return hold.write.end > hold.expiration;
    return (hold.releasedAt ?? Infinity) > hold.expiration;
  };
  const spans = injector.records
    .filter((r) => r.skipped === undefined)
    .map((r) => ({ start: r.start, end: Math.max(r.end, r.start + 100) }));
  const offsets = [...pool.offsets.values()];
  const partial = {
    spec,
    duration,
    faults: injector.records,
    holds: holds.length,
    skipped: recorder.skipped,
    overlaps: findOverlaps(holds),
    stale: findStaleWrites(holds),
    tokens: checkTokenOrder(holds),
    store: states.map((s) => analyseStore(s, isStale)),
    acquire: acquireStats(recorder.calls, spans),
    bound,
    hung,
    late,
    fencing: recorder.fencing,
    clock: {
      offset: offsets.reduce((max, o) => Math.max(max, Math.abs(o.offset)), 0),
      uncertainty: offsets.reduce((max, o) => Math.max(max, o.uncertainty), 0),
    },
    failures: recorder.failures,
    extensions: recorder.extensions,
    using: { holds: recorder.usingHolds, aborts: recorder.aborts },
    extensionFailures: recorder.extensionFailures,
    serverErrors: recorder.serverErrors,
    failedReleases: recorder.failedReleases,
    errors: recorder.errors,
    uncaught: recorder.uncaught,
  };
  return { ...partial, history: { holds, calls: recorder.calls }, ...judge(partial) };
}
