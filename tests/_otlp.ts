/**
 * A small OTLP/HTTP collector on loopback for tests and benchmarks: takes
 * what Deno's built-in OpenTelemetry exports as JSON
 * (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) and keeps spans and metric
 * data points, flattened.
 *
 * @module
 */

/** An OTLP/JSON attribute value. */
interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
}

interface KeyValue {
  key: string;
  value: AnyValue;
}

/** A span as received, attributes decoded. */
export interface ReceivedSpan {
  readonly name: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  /** 0 unset, 1 ok, 2 error. */
  readonly status: { code: number; message: string };
  readonly attributes: Record<string, unknown>;
  /** Names of the span's events (e.g. "exception") with their attributes. */
  readonly events: { name: string; attributes: Record<string, unknown> }[];
}

/** One data point of a metric in one export, attributes decoded. */
export interface ReceivedPoint {
  readonly metric: string;
  /** Which export (0, 1, …) it came in. */
  readonly export: number;
  readonly attributes: Record<string, unknown>;
  /** A sum's or gauge's value. */
  readonly value?: number;
  /** A histogram's count, sum and bucket counts. */
  readonly count?: number;
  readonly sum?: number;
  readonly bucketCounts?: number[];
  readonly explicitBounds?: number[];
  /** Whether a sum is monotonic (a counter). */
  readonly monotonic?: boolean;
}

function decode(value: AnyValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(decode);
  return undefined;
}

function attributes(list: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, decode(kv.value)]));
}

// deno-lint-ignore no-explicit-any
type Json = any;

/** A collector listening on 127.0.0.1; dispose it to stop it. */
export class Collector implements AsyncDisposable {
  /** Every span received. */
  readonly spans: ReceivedSpan[] = [];
  /** Every metric data point received, export by export. */
  readonly points: ReceivedPoint[] = [];
  /** Requests per path (`/v1/traces`, `/v1/metrics`, `/v1/logs`, or any other, answered `{}`). */
  readonly requests: Record<string, number> = {};
  /** Bytes received. */
  bytes = 0;
  #exports = 0;
  readonly #keep: boolean;
  readonly #server: Deno.HttpServer<Deno.NetAddr>;

  /**
   * Starts listening on a free port.
   *
   * @param keep Whether to decode and keep what arrives (false: only count it).
   */
  constructor(keep = true) {
    this.#keep = keep;
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      (request) => this.#receive(request),
    );
  }

  /** The endpoint for `OTEL_EXPORTER_OTLP_ENDPOINT`. */
  get endpoint(): string {
    return `http://127.0.0.1:${this.#server.addr.port}`;
  }

  /** How many metric exports came. */
  get exports(): number {
    return this.#exports;
  }

  /**
   * The environment of a process that exports here, metrics every
   * `intervalMs`; only OTLP/JSON is decoded (protobuf is only counted).
   */
  env(intervalMs: number, protocol = "http/json"): Record<string, string> {
    return {
      OTEL_DENO: "true",
      OTEL_EXPORTER_OTLP_ENDPOINT: this.endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
      OTEL_METRIC_EXPORT_INTERVAL: String(intervalMs),
      OTEL_SERVICE_NAME: "redlock-test",
    };
  }

  async #receive(request: Request): Promise<Response> {
    const path = new URL(request.url).pathname;
    this.requests[path] = (this.requests[path] ?? 0) + 1;
    const buffer = await request.arrayBuffer();
    this.bytes += buffer.byteLength;
    if (!this.#keep || !path.startsWith("/v1/")) return Response.json({});
    const body: Json = JSON.parse(new TextDecoder().decode(buffer));
    if (path === "/v1/traces") this.#spans(body);
    if (path === "/v1/metrics") this.#metrics(body, this.#exports++);
    return Response.json({});
  }

  #spans(body: Json): void {
    for (const resource of body.resourceSpans ?? []) {
      for (const scope of resource.scopeSpans ?? []) {
        for (const span of scope.spans ?? []) {
          this.spans.push({
            name: span.name,
            traceId: span.traceId,
            spanId: span.spanId,
            parentSpanId: span.parentSpanId ?? "",
            status: { code: span.status?.code ?? 0, message: span.status?.message ?? "" },
            attributes: attributes(span.attributes),
            events: (span.events ?? []).map((e: Json) => ({
              name: e.name,
              attributes: attributes(e.attributes),
            })),
          });
        }
      }
    }
  }

  #metrics(body: Json, n: number): void {
    for (const resource of body.resourceMetrics ?? []) {
      for (const scope of resource.scopeMetrics ?? []) {
        for (const metric of scope.metrics ?? []) {
          const sum = metric.sum;
          for (const p of sum?.dataPoints ?? metric.gauge?.dataPoints ?? []) {
            this.points.push({
              metric: metric.name,
              export: n,
              attributes: attributes(p.attributes),
              value: Number(p.asInt ?? p.asDouble ?? 0),
              ...(sum ? { monotonic: sum.isMonotonic === true } : {}),
            });
          }
          for (const p of metric.histogram?.dataPoints ?? []) {
            this.points.push({
              metric: metric.name,
              export: n,
              attributes: attributes(p.attributes),
              count: Number(p.count),
              sum: Number(p.sum),
              bucketCounts: (p.bucketCounts ?? []).map(Number),
              explicitBounds: (p.explicitBounds ?? []).map(Number),
            });
          }
        }
      }
    }
  }

  /** The points of `metric` in the last export that had it. */
  last(metric: string): ReceivedPoint[] {
    const points = this.points.filter((p) => p.metric === metric);
    const n = Math.max(-1, ...points.map((p) => p.export));
    return points.filter((p) => p.export === n);
  }

  /** Stops the server. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.#server.shutdown();
  }
}
