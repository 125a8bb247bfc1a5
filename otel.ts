/**
 * OpenTelemetry for a {@linkcode Redlock}: spans and metrics through
 * `npm:@opentelemetry/api`, which Deno's built-in OpenTelemetry serves when
 * the process runs with `OTEL_DENO=true` (and Deno Deploy always). Without
 * registered providers the API is a no-op, and so is the instrumentation.
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
  context,
  type Counter,
  type Histogram,
  metrics,
  type Span,
  SpanStatusCode,
  trace,
  type Tracer,
  type UpDownCounter,
} from "@opentelemetry/api";
import { Redlock } from "./src/redlock.ts";
import { type ExecutionResult, ResourceLockedError } from "./src/errors.ts";
import type { Lock } from "./src/lock.ts";
import type { LockLostEvent } from "./src/events.ts";
import { wasHandedOver } from "./src/_acquisition.ts";
import { HOOKS, type Hooks } from "./src/_hooks.ts";
import { describeValue } from "./src/_validate.ts";

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
 * meter providers: Deno's own with `OTEL_DENO=true`, no-ops otherwise.
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
  const instrumentation = new Instrumentation(opts);
  HOOKS.set(redlock, instrumentation);
  const offError = redlock.on("error", (error, event) => instrumentation.serverError(error, event));
  const offLost = redlock.on("lost", (event) => instrumentation.lost(event));
  return () => {
    if (HOOKS.get(redlock) === instrumentation) HOOKS.delete(redlock);
    offError();
    offLost();
  };
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
 * released leaves the count once. A lock left to expire leaves it when a
 * sweep, made as the set doubles, finds it expired.
 */
class HeldLocks {
  readonly #locks = new Map<string, Lock>();
  #sweepAt = 16;

  /** Counts `lock` (or its newer self); returns whether it was not counted yet. */
  add(lock: Lock): boolean {
    const known = this.#locks.has(lock.value);
    this.#locks.set(lock.value, lock);
    return !known;
  }

  /** Stops counting `lock`; returns whether it was counted. */
  delete(lock: Lock): boolean {
    return this.#locks.delete(lock.value);
  }

  /** Once the set doubled since the last sweep, drops expired locks; returns how many. */
  sweep(): number {
    if (this.#locks.size < this.#sweepAt) return 0;
    let dropped = 0;
    for (const [value, lock] of this.#locks) {
      if (lock.remainingTime > 0) continue;
      this.#locks.delete(value);
      dropped++;
    }
    this.#sweepAt = Math.max(16, this.#locks.size * 2);
    return dropped;
  }
}

/** The hooks and listeners of one instrumented Redlock. */
class Instrumentation implements Hooks {
  readonly #tracer: Tracer;
  readonly #duration: Histogram;
  readonly #held: UpDownCounter;
  readonly #waiting: UpDownCounter;
  readonly #lost: Counter;
  readonly #serverErrors: Counter;
  readonly #spanResources: boolean;
  readonly #locks = new HeldLocks();

  constructor(options: InstrumentOptions) {
    this.#tracer = trace.getTracer(SCOPE);
    const meter = metrics.getMeter(SCOPE);
    this.#duration = meter.createHistogram("redlock.acquire.duration", {
      description: "Time from the call of an acquire until it had the lock or gave up",
      unit: "s",
      advice: { explicitBucketBoundaries: BOUNDS },
    });
    this.#held = meter.createUpDownCounter("redlock.locks.held", {
      description: "Locks acquired and not yet released, lost or expired",
      unit: "{lock}",
    });
    this.#waiting = meter.createUpDownCounter("redlock.acquire.waiting", {
      description: "Acquires in progress",
      unit: "{acquire}",
    });
    this.#lost = meter.createCounter("redlock.lock.lost", {
      description: "Locks found lost by an extension (also using()'s automatic ones)",
      unit: "{lock}",
    });
    this.#serverErrors = meter.createCounter("redlock.server.errors", {
      description: "Failed requests by server index (-1: an error of a whole operation)",
      unit: "{error}",
    });
    this.#spanResources = options.spanResources ?? false;
  }

  acquire(
    resources: readonly string[],
    run: () => Promise<Lock>,
    signal: AbortSignal | undefined,
  ): Promise<Lock> {
    const span = this.#tracer.startSpan("redlock.acquire", { attributes: this.#on(resources) });
    const start = performance.now();
    this.#waiting.add(1);
    return within(span, run).then((lock) => {
      this.#acquired(start, lock);
      span.setAttributes({
        "redlock.outcome": "acquired",
        "redlock.attempts": lock.attempts.length,
        "redlock.handoff": wasHandedOver(lock),
      });
      if (lock.fencingToken !== undefined) {
        span.setAttribute("redlock.fencing_token", lock.fencingToken);
      }
      span.end();
      return lock;
    }, (error) => {
      const outcome = outcomeOf(error, signal);
      this.#waiting.add(-1);
      this.#duration.record((performance.now() - start) / 1000, OUTCOMES[outcome]);
      span.setAttribute("redlock.outcome", outcome);
      fail(span, error);
      throw error;
    });
  }

  release(lock: Lock, run: () => Promise<ExecutionResult>): Promise<ExecutionResult> {
    const span = this.#tracer.startSpan("redlock.release", {
      attributes: this.#on(lock.resources),
    });
    return within(span, run).then((result) => {
      if (this.#locks.delete(lock)) this.#held.add(-1);
      span.end();
      return result;
    }, (error) => {
      fail(span, error);
      throw error;
    });
  }

  extend(lock: Lock, run: () => Promise<Lock>): Promise<Lock> {
    const span = this.#tracer.startSpan("redlock.extend", { attributes: this.#on(lock.resources) });
    return within(span, run).then((extended) => {
      if (this.#locks.add(extended)) this.#held.add(1);
      span.end();
      return extended;
    }, (error) => {
      fail(span, error);
      throw error;
    });
  }

  /** A `"lost"` event: counted, and the lock is no longer held. */
  lost(event: LockLostEvent): void {
    this.#lost.add(1);
    if (this.#locks.delete(event.lock)) this.#held.add(-1);
  }

  /** An `"error"` event: counted by server index. */
  serverError(error: Error, event: { readonly server: number }): void {
    this.#serverErrors.add(1, { server: event.server, "error.type": error.name });
  }

  #acquired(start: number, lock: Lock): void {
    this.#waiting.add(-1);
    this.#duration.record((performance.now() - start) / 1000, OUTCOMES.acquired);
    this.#locks.add(lock);
    const expired = this.#locks.sweep();
    this.#held.add(1 - expired);
  }

  /** The attributes of a span on `resources`. */
  #on(resources: readonly string[]): Attributes {
    return this.#spanResources
      ? { "redlock.resources.count": resources.length, "redlock.resources": [...resources] }
      : { "redlock.resources.count": resources.length };
  }
}

/** Runs `run` with `span` active, so that what it starts nests under it. */
function within<T>(span: Span, run: () => Promise<T>): Promise<T> {
  try {
    return context.with(trace.setSpan(context.active(), span), run);
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
