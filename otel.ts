/**
 * OpenTelemetry for a {@linkcode Redlock}: spans and metrics through
 * `npm:@opentelemetry/api`, which Deno's built-in OpenTelemetry serves when
 * the process runs with `OTEL_DENO=true` (and Deno Deploy always). Without
 * registered providers `instrument()` installs nothing and costs nothing.
 *
 * Spans `redlock.acquire`, `redlock.release` and `redlock.extend` nest under
 * the caller's active span. Metrics: `redlock.acquire.duration` (histogram,
 * seconds, attribute `outcome`), `redlock.locks.held` and
 * `redlock.acquire.waiting` (up-down counters), `redlock.lock.lost` and
 * `redlock.server.errors` (counters, the latter with the `server` index).
 *
 * ```ts no-eval
 * // OTEL_DENO=true deno run -A app.ts
 * import { Redis } from "npm:ioredis";
 * import { Redlock } from "jsr:@x/redlock";
 * import { instrument } from "jsr:@x/redlock/otel";
 *
 * const redlock = new Redlock([new Redis(6379), new Redis(6380), new Redis(6381)]);
 * const uninstrument = instrument(redlock);
 * await redlock.using("report", 5_000, async () => {});
 * uninstrument();
 * ```
 *
 * @module
 */

import {
  type Attributes,
  type Counter,
  createNoopMeter,
  type Histogram,
  metrics,
  type ObservableResult,
  type ObservableUpDownCounter,
  ProxyTracerProvider,
  type Span,
  SpanStatusCode,
  trace,
  type Tracer,
} from "@opentelemetry/api";
import { Redlock } from "./src/api/redlock.ts";
import { type ExecutionResult, ResourceLockedError } from "./src/api/errors.ts";
import type { Lock } from "./src/api/lock.ts";
import type { LockLostEvent } from "./src/api/events.ts";
import { wasHandedOver } from "./src/acquire/handover.ts";
import { HOOKS, type Hooks } from "./src/api/hooks.ts";
import { describeValue } from "./src/util/validate.ts";

/** Options of {@linkcode instrument}. */
export interface InstrumentOptions {
  /**
   * Whether spans carry the locked resources (`redlock.resources`). Metrics
   * never do: resource names would make a series each.
   *
   * @default {false}
   */
  readonly spanResources?: boolean;
}

/** How an acquire ended: the `outcome` attribute of `redlock.acquire.duration`. */
export type AcquireOutcome = "acquired" | "timeout" | "aborted" | "locked" | "failed";

/** The instrumentation scope: the tracer's and the meter's name. */
const SCOPE = "@x/redlock";
const OPTIONS: ReadonlySet<string> = new Set(["spanResources"]);
/** Bucket bounds of the acquire histogram, seconds: from a lone round to long waits. */
const BOUNDS = [
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
];
const OUTCOMES: { readonly [K in AcquireOutcome]: Attributes } = {
  acquired: { outcome: "acquired" },
  timeout: { outcome: "timeout" },
  aborted: { outcome: "aborted" },
  locked: { outcome: "locked" },
  failed: { outcome: "failed" },
};

/**
 * Records a Redlock's operations as OpenTelemetry spans and metrics (see
 * the module documentation for their names) with the global tracer and
 * meter providers: Deno's own with `OTEL_DENO=true`. While neither is
 * registered it installs nothing, so register an SDK's (Node, Bun) first.
 *
 * @param redlock The Redlock to instrument.
 * @param options Whether spans name the resources.
 * @returns A function that removes the instrumentation (hooks and listeners).
 * @throws {TypeError} When `redlock` is no Redlock or is instrumented already,
 * or an option is unknown or has the wrong type.
 *
 * @example Instrumenting a Redlock
 * ```ts no-eval
 * // OTEL_DENO=true OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 deno run -A app.ts
 * import { Redlock } from "jsr:@x/redlock";
 * import { instrument } from "jsr:@x/redlock/otel";
 * declare const redlock: Redlock;
 * const uninstrument = instrument(redlock, { spanResources: true });
 * await (await redlock.acquire("report:42", 5_000)).release();
 * uninstrument();
 * ```
 */
export function instrument(redlock: Redlock, options?: InstrumentOptions): () => void {
  if (!(redlock instanceof Redlock)) {
    throw new TypeError(`redlock must be a Redlock, got ${describeValue(redlock)}`);
  }
  const opts = checkOptions(options);
  if (HOOKS.has(redlock)) throw new TypeError(`redlock is instrumented already: ${redlock}`);
  if (noProviders()) return nothing;
  const shared = telemetry ??= new Telemetry();
  const instrumentation = new Instrumentation(shared, opts);
  HOOKS.set(redlock, instrumentation);
  shared.join(instrumentation);
  const offError = redlock.on("error", (error, event) => instrumentation.serverError(error, event));
  const offLost = redlock.on("lost", (event) => instrumentation.lost(event));
  return () => {
    if (HOOKS.get(redlock) === instrumentation) HOOKS.delete(redlock);
    shared.leave(instrumentation);
    offError();
    offLost();
  };
}

const nothing = (): void => {};

/** Whether the global providers are the API's no-ops: no `OTEL_DENO`, no SDK registered. */
function noProviders(): boolean {
  const tracing = trace.getTracerProvider();
  return tracing instanceof ProxyTracerProvider && tracing.getDelegateTracer(SCOPE) === undefined &&
    metrics.getMeter(SCOPE) === createNoopMeter();
}

function checkOptions(options: InstrumentOptions | undefined): InstrumentOptions {
  if (options === undefined) return {};
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`options must be an object, got ${describeValue(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!OPTIONS.has(key)) throw new TypeError(`options.${key} is no option of instrument()`);
  }
  const { spanResources } = options;
  if (spanResources !== undefined && typeof spanResources !== "boolean") {
    throw new TypeError(
      `options.spanResources must be a boolean, got ${describeValue(spanResources)}`,
    );
  }
  return options;
}

/** How an acquire that rejected with `error` ended; `signal` is the caller's. */
function outcomeOf(error: unknown, signal: AbortSignal | undefined): AcquireOutcome {
  if (error instanceof DOMException && error.name === "TimeoutError") return "timeout";
  if (signal?.aborted && error === signal.reason) return "aborted";
  if (error instanceof ResourceLockedError) return "locked";
  return "failed";
}

/**
 * The locks an instrumentation counts as held, by value (an extension
 * makes a new Lock with the same value), so that a lock lost and then
 * released counts once. A lock left to expire is dropped when counted.
 */
class HeldLocks {
  readonly #locks = new Map<string, Lock>();

  /** Counts `lock` (or its newer self). */
  add(lock: Lock): void {
    this.#locks.set(lock.value, lock);
  }

  /** Stops counting `lock`. */
  delete(lock: Lock): void {
    this.#locks.delete(lock.value);
  }

  /** How many are held: drops the expired ones first. */
  count(): number {
    for (const [value, lock] of this.#locks) {
      if (lock.remainingTime <= 0) this.#locks.delete(value);
    }
    return this.#locks.size;
  }
}

/**
 * The process's tracer and instruments, made by the first `instrument()`
 * (after the providers are registered) and shared by every Redlock.
 * `redlock.locks.held` and `redlock.acquire.waiting` sum over the live
 * instrumentations when metrics are collected, so that they cost an
 * operation nothing; their callbacks are registered while one lives.
 */
class Telemetry {
  readonly tracer: Tracer = trace.getTracer(SCOPE);
  readonly duration: Histogram;
  readonly lost: Counter;
  readonly serverErrors: Counter;
  readonly #held: ObservableUpDownCounter;
  readonly #waiting: ObservableUpDownCounter;
  /** Weakly: a Redlock dropped without uninstalling is not kept alive. */
  readonly #live = new Set<WeakRef<Instrumentation>>();
  readonly #observeHeld = (result: ObservableResult) =>
    result.observe(this.#sum((i) => i.locks.count()));
  readonly #observeWaiting = (result: ObservableResult) =>
    result.observe(this.#sum((i) => i.waiting));

  constructor() {
    const meter = metrics.getMeter(SCOPE);
    this.duration = meter.createHistogram("redlock.acquire.duration", {
      description: "Time from the call of an acquire until it had the lock or gave up",
      unit: "s",
      advice: { explicitBucketBoundaries: BOUNDS },
    });
    this.lost = meter.createCounter("redlock.lock.lost", {
      description: "Locks found lost by an extension (also using()'s automatic ones)",
      unit: "{lock}",
    });
    this.serverErrors = meter.createCounter("redlock.server.errors", {
      description: "Failed requests by server index (-1: an error of a whole operation)",
      unit: "{error}",
    });
    this.#held = meter.createObservableUpDownCounter("redlock.locks.held", {
      description: "Locks acquired and not yet released, lost or expired",
      unit: "{lock}",
    });
    this.#waiting = meter.createObservableUpDownCounter("redlock.acquire.waiting", {
      description: "Acquires in progress",
      unit: "{acquire}",
    });
  }

  /** Starts observing `instrumentation`. */
  join(instrumentation: Instrumentation): void {
    if (this.#live.size === 0) {
      this.#held.addCallback(this.#observeHeld);
      this.#waiting.addCallback(this.#observeWaiting);
    }
    this.#live.add(instrumentation.ref);
  }

  /** Stops observing `instrumentation`. */
  leave(instrumentation: Instrumentation): void {
    if (!this.#live.delete(instrumentation.ref) || this.#live.size > 0) return;
    this.#held.removeCallback(this.#observeHeld);
    this.#waiting.removeCallback(this.#observeWaiting);
  }

  /** Sums `of` over the live instrumentations, forgetting collected ones. */
  #sum(of: (instrumentation: Instrumentation) => number): number {
    let sum = 0;
    for (const ref of this.#live) {
      const instrumentation = ref.deref();
      if (instrumentation === undefined) this.#live.delete(ref);
      else sum += of(instrumentation);
    }
    return sum;
  }
}

let telemetry: Telemetry | undefined;

/** The hooks and listeners of one instrumented Redlock. */
class Instrumentation implements Hooks {
  /** How {@linkcode Telemetry} holds it. */
  readonly ref: WeakRef<Instrumentation> = new WeakRef(this);
  /** The locks it saw acquired and not yet released or lost. */
  readonly locks = new HeldLocks();
  /** Acquires in progress. */
  waiting = 0;
  readonly #telemetry: Telemetry;
  readonly #spanResources: boolean;

  constructor(telemetry: Telemetry, options: InstrumentOptions) {
    this.#telemetry = telemetry;
    this.#spanResources = options.spanResources ?? false;
  }

  acquire(
    resources: readonly string[],
    run: () => Promise<Lock>,
    signal: AbortSignal | undefined,
  ): Promise<Lock> {
    const span = this.#start("redlock.acquire", resources);
    const start = performance.now();
    this.waiting++;
    return settle(run).then((lock) => {
      this.waiting--;
      this.#telemetry.duration.record((performance.now() - start) / 1000, OUTCOMES.acquired);
      this.locks.add(lock);
      // Only what differs from the usual (one attempt, no handoff, no token): attributes cost.
      if (lock.attempts.length > 1) span.setAttribute("redlock.attempts", lock.attempts.length);
      if (wasHandedOver(lock)) span.setAttribute("redlock.handoff", true);
      if (lock.fencingToken !== undefined) {
        span.setAttribute("redlock.fencing_token", lock.fencingToken);
      }
      span.end();
      return lock;
    }, (error) => {
      const outcome = outcomeOf(error, signal);
      this.waiting--;
      this.#telemetry.duration.record((performance.now() - start) / 1000, OUTCOMES[outcome]);
      span.setAttribute("redlock.outcome", outcome);
      fail(span, error);
      throw error;
    });
  }

  release(lock: Lock, run: () => Promise<ExecutionResult>): Promise<ExecutionResult> {
    const span = this.#start("redlock.release", lock.resources);
    return settle(run).then((result) => {
      this.locks.delete(lock);
      span.end();
      return result;
    }, (error) => {
      fail(span, error);
      throw error;
    });
  }

  extend(lock: Lock, run: () => Promise<Lock>): Promise<Lock> {
    const span = this.#start("redlock.extend", lock.resources);
    return settle(run).then((extended) => {
      this.locks.add(extended);
      span.end();
      return extended;
    }, (error) => {
      fail(span, error);
      throw error;
    });
  }

  /** A `"lost"` event: counted, and the lock is no longer held. */
  lost(event: LockLostEvent): void {
    this.#telemetry.lost.add(1);
    this.locks.delete(event.lock);
  }

  /** An `"error"` event: counted by server index. */
  serverError(error: Error, event: { readonly server: number }): void {
    this.#telemetry.serverErrors.add(1, { server: event.server, "error.type": error.name });
  }

  #start(name: string, resources: readonly string[]): Span {
    return this.#spanResources
      ? this.#telemetry.tracer.startSpan(name, {
        attributes: { "redlock.resources": [...resources] },
      })
      : this.#telemetry.tracer.startSpan(name);
  }
}

/**
 * Runs `run`, a synchronous throw as a rejection. Not in the span's context,
 * which costs much under `OTEL_DENO` (docs/observability.md): spans the
 * client makes (e.g. Deno's fetch spans) are the span's siblings.
 */
function settle<T>(run: () => Promise<T>): Promise<T> {
  try {
    return run();
  } catch (error) {
    return Promise.reject(error);
  }
}

/** Ends `span` with the error status and the error recorded. */
function fail(span: Span, error: unknown): void {
  const e = error instanceof Error ? error : new Error(String(error));
  span.recordException(e);
  span.setStatus({ code: SpanStatusCode.ERROR, message: e.message });
  span.setAttribute("error.type", e.name);
  span.end();
}
