import assert from "node:assert/strict";
import { LockLostError, Redlock } from "../mod.ts";
import { instrument } from "../otel.ts";
import { HOOKS } from "../src/api/hooks.ts";
import { Collector, type ReceivedPoint, type ReceivedSpan } from "./_otlp.ts";
import type { ChildReport } from "./fixtures/otel_child.ts";
import { setup, startServers } from "./_redis.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const FIXTURE = new URL("./fixtures/otel_child.ts", import.meta.url).pathname;
/** ms between metric exports of the child. */
const INTERVAL_MS = 100;
/** The attributes a metric point may have: none names a resource. */
const METRIC_ATTRIBUTES = new Set(["outcome", "server", "error.type"]);

interface Telemetry {
  readonly report: ChildReport;
  readonly spans: ReceivedSpan[];
  readonly collector: Collector;
}

/** Runs the fixture with Deno's OpenTelemetry exporting to a collector of ours. */
async function runChild(collector: Collector, ports: readonly number[]): Promise<ChildReport> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", `${ROOT}deno.json`, FIXTURE, ...ports.map(String)],
    cwd: ROOT,
    env: collector.env(INTERVAL_MS),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  });
  const { code, stdout, stderr } = await child.output();
  const out = new TextDecoder().decode(stdout);
  assert.equal(code, 0, `the fixture failed:\n${out}\n${new TextDecoder().decode(stderr)}`);
  return JSON.parse(out.trim().split("\n").at(-1)!);
}

let shared: Promise<Telemetry> | undefined;
/** The fixture's telemetry, made once for the tests that read it. */
function telemetry(): Promise<Telemetry> {
  return shared ??= (async () => {
    await using servers = await startServers(3);
    await using collector = new Collector();
    const report = await runChild(collector, servers.ports);
    // Spans are exported when the child exits; give the last request time to land.
    for (let i = 0; i < 50 && !collector.spans.some((s) => s.name === "fixture"); i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return { report, spans: collector.spans, collector };
  })();
}

/** The spans of the fixture's trace named `name`. */
function named(t: Telemetry, name: string): ReceivedSpan[] {
  return t.spans.filter((s) => s.name === name && s.traceId === t.report.traceId);
}

/** The values of `metric` export by export (attributes ignored: summed). */
function series(points: readonly ReceivedPoint[], metric: string): number[] {
  const byExport = new Map<number, number>();
  for (const p of points) {
    if (p.metric === metric) byExport.set(p.export, (byExport.get(p.export) ?? 0) + p.value!);
  }
  return [...byExport.entries()].sort(([a], [b]) => a - b).map(([, v]) => v);
}

Deno.test({
  name:
    "instrument() under OTEL_DENO records acquire, extend and release spans under the caller's span",
  async fn() {
    const t = await telemetry();
    const acquires = named(t, "redlock.acquire");
    const extends_ = named(t, "redlock.extend");
    const releases = named(t, "redlock.release");
    // acquired ×4 (otel:a, otel:b after waiting, otel:named, otel:d) + locked, timeout, aborted, failed
    assert.equal(acquires.length, 8, JSON.stringify(acquires.map((s) => s.attributes)));
    assert.ok(extends_.length >= 2, `${extends_.length} extend spans`); // otel:a, using()'s lost one
    assert.equal(releases.length, 4); // otel:a, otel:b, otel:named, using()'s of otel:d
    for (const span of [...acquires, ...extends_, ...releases]) {
      assert.equal(span.parentSpanId, t.report.spanId, `${span.name} under the fixture's span`);
    }
    const byOutcome = Object.groupBy(
      acquires,
      (s) => String(s.attributes["redlock.outcome"] ?? "acquired"),
    );
    assert.deepEqual(
      Object.fromEntries(Object.entries(byOutcome).map(([k, v]) => [k, v!.length])),
      { acquired: 4, locked: 1, timeout: 1, aborted: 1, failed: 1 },
    );
    for (const span of byOutcome.acquired!) assert.equal(span.status.code, 0);
    // Attempts and handoff are set only when they differ from one attempt and none.
    const waited = byOutcome.acquired!.filter((s) =>
      (s.attributes["redlock.attempts"] as number) > 1 || s.attributes["redlock.handoff"] === true
    );
    assert.equal(waited.length, 1, JSON.stringify(byOutcome.acquired!.map((s) => s.attributes)));
    const locked = byOutcome.locked![0]!;
    assert.equal(locked.status.code, 2);
    assert.match(locked.status.message, /held by another lock/);
    assert.equal(locked.attributes["error.type"], "ResourceLockedError");
    const exception = locked.events.find((e) => e.name === "exception");
    assert.equal(exception?.attributes["exception.type"], "ResourceLockedError");
    assert.equal(byOutcome.timeout![0]!.attributes["error.type"], "TimeoutError");
    assert.match(byOutcome.aborted![0]!.status.message, /shutting down/);
    assert.equal(byOutcome.failed![0]!.attributes["error.type"], "ExecutionError");
    // The operation does not run in its span's context: the failing server's fetch is a sibling.
    const probes = t.spans.filter((s) => s.attributes["url.path"] === "/probe");
    assert.ok(probes.length >= 1, "Deno's fetch span of the probe");
    for (const probe of probes) assert.equal(probe.parentSpanId, t.report.spanId);
    const lost = extends_.find((s) => s.status.code === 2);
    assert.ok(t.report.secondRejected, "a second instrument() of a Redlock is a TypeError");
    assert.equal(lost?.attributes["error.type"], "LockLostError");
  },
});

Deno.test({
  name: "instrument() puts resource names on spans only with spanResources",
  async fn() {
    const t = await telemetry();
    const spans = t.spans.filter((s) => s.name.startsWith("redlock."));
    const withNames = spans.filter((s) => s.attributes["redlock.resources"] !== undefined);
    assert.deepEqual(withNames.map((s) => s.name).sort(), ["redlock.acquire", "redlock.release"]);
    for (const span of withNames) {
      assert.deepEqual(span.attributes["redlock.resources"], ["otel:named"]);
    }
    assert.ok(spans.length > withNames.length);
  },
});

Deno.test({
  name:
    "instrument() under OTEL_DENO records the acquire histogram by outcome, held up and down, lost locks and server errors",
  async fn() {
    const t = await telemetry();
    const { collector } = t;
    const histogram = collector.last("redlock.acquire.duration");
    const counts = Object.fromEntries(histogram.map((p) => [p.attributes.outcome, p.count]));
    assert.deepEqual(counts, { acquired: 4, locked: 1, timeout: 1, aborted: 1, failed: 1 });
    for (const p of histogram) {
      assert.equal(p.bucketCounts!.reduce((a, b) => a + b, 0), p.count);
      assert.ok(p.sum! > 0 && p.sum! < 5, `${p.attributes.outcome}: ${p.sum} s`);
    }
    const timeout = histogram.find((p) => p.attributes.outcome === "timeout")!;
    assert.ok(timeout.sum! >= 0.09, `a 100 ms timeout took ${timeout.sum} s`);
    const held = series(collector.points, "redlock.locks.held");
    assert.ok(Math.max(...held) >= 1, `held over exports: ${held}`);
    assert.equal(held.at(-1), 0, `held over exports: ${held}`);
    const waiting = series(collector.points, "redlock.acquire.waiting");
    assert.ok(Math.max(...waiting) >= 1, `waiting over exports: ${waiting}`); // timeout, aborted
    assert.equal(waiting.at(-1), 0);
    const lost = series(collector.points, "redlock.lock.lost");
    assert.ok(lost.at(-1)! >= 1, `lost: ${lost}`);
    const errors = collector.last("redlock.server.errors");
    assert.deepEqual(errors.map((p) => p.attributes), [{ server: 0, "error.type": "Error" }]);
    assert.ok(errors[0]!.value! >= 1); // the acquire, and the release that cleans up after it
    for (const p of collector.points.filter((p) => p.metric.startsWith("redlock."))) {
      for (const [key, value] of Object.entries(p.attributes)) {
        assert.ok(METRIC_ATTRIBUTES.has(key), `${p.metric} has attribute ${key}`);
        assert.doesNotMatch(String(value), /otel:/);
      }
    }
  },
});

Deno.test("instrument() without OTEL_DENO installs nothing: no hook, no listener, locks as before", async () => {
  assert.notEqual(Deno.env.get("OTEL_DENO"), "true", "this test runs without OpenTelemetry");
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients);
  const dispatched: string[] = [];
  const dispatch = redlock.dispatchEvent.bind(redlock);
  redlock.dispatchEvent = (event: Event) => (dispatched.push(event.type), dispatch(event));
  const uninstall = instrument(redlock, { spanResources: true });
  assert.ok(!HOOKS.has(redlock));
  const lock = await redlock.acquire("plain", 5_000);
  const longer = await lock.extend(5_000);
  await longer.release();
  assert.equal(await redlock.using("plain", 1_000, () => 42), 42);
  const tried = await redlock.tryAcquire("plain", 1_000);
  assert.ok(tried !== null);
  await tried.release();
  const gone = await redlock.acquire("gone", 5_000);
  for (const server of env.servers.servers) await server.command("DEL", "gone");
  await assert.rejects(gone.extend(5_000), LockLostError);
  assert.deepEqual(dispatched, [], "no listener, so no lifecycle event");
  uninstall();
  uninstall();
  assert.ok(!HOOKS.has(redlock));
  instrument(redlock)(); // again: nothing to be instrumented already
});

Deno.test("instrument() rejects what is no Redlock and bad options", () => {
  const redlock = new Redlock([{ evalScript: () => Promise.resolve(0) }]);
  assert.throws(() => instrument({} as Redlock), {
    name: "TypeError",
    message: "redlock must be a Redlock, got a plain object",
  });
  assert.throws(() => instrument(redlock, { spanResource: true } as never), {
    name: "TypeError",
    message: "options.spanResource is no option of instrument()",
  });
  assert.throws(() => instrument(redlock, { spanResources: "yes" } as never), {
    name: "TypeError",
    message: 'options.spanResources must be a boolean, got "yes"',
  });
});
