/**
 * `deno task bench:http`: a web service under load while a lock server dies.
 *
 * An HTTP app on `Deno.serve` (loopback) answers `GET /inc/<r>/<id>`: it
 * locks resource `r` (one of 16), reads the counter of `r` from a separate
 * store, writes it back plus one with the lock's fencing token, releases,
 * and answers 200. A lock not had within about 2 s is a 503. The store (a
 * Redis server of its own) refuses a token older than the last it saw and
 * records every request's id, so that afterwards each 2xx response's
 * increment can be found there exactly once and lost updates counted.
 *
 * autocannon (npm, pinned in deno.json) drives it with 100 connections for
 * 20 s; at half time the second of the three lock servers is killed, and
 * restarted (empty) once the longest lease has passed. The same app then
 * runs with node-redlock (its defaults; no fencing tokens), on fresh servers.
 *
 * ```sh
 * deno task bench:http                              # 100 connections, 20 s, each library
 * deno task bench:http --connections 20 --seconds 5 --no-kill
 * deno task bench:http --no-fencing --wait poll     # @x/redlock without fencing, polling
 * ```
 *
 * Writes docs/http.json and docs/http.svg (`--json`, `--svg`), prints a
 * table, and exits 1 when @x/redlock lost an update, answered a 2xx the
 * store does not have, or failed a request other than by a lock timeout.
 *
 * @module
 */

import { parseArgs } from "./_args.ts";
import { renderChart } from "./_chart.ts";
import { type HttpImpl, type HttpResult, runHttp } from "./_http_service.ts";
import { describeMachine, machineLine } from "./_machine.ts";
import { table } from "./_report.ts";

const args = parseArgs(Deno.args, {
  flags: ["no-kill", "no-fencing"],
  values: ["connections", "seconds", "lease", "wait", "json", "svg"],
  usage: "bench/http.ts",
});
const connections = Number(args.get("connections") ?? 100);
const seconds = Number(args.get("seconds") ?? 20);
const lease = Number(args.get("lease") ?? 1_000);
const jsonPath = args.get("json") ?? "docs/http.json";
const svgPath = args.get("svg") ?? "docs/http.svg";
const kill = !args.has("no-kill");
const fencing = !args.has("no-fencing");
const wait = args.get("wait") ?? "notify";
if (wait !== "notify" && wait !== "poll") {
  throw new RangeError(`--wait must be notify or poll, got ${wait}`);
}

const LABELS: Record<HttpImpl, string> = {
  "x-redlock": "@x/redlock",
  "node-redlock": "node-redlock",
  none: "no lock",
};

/** Requests that failed other than by a lock timeout (a 503). */
function otherFailures(result: HttpResult): number {
  let n = result.clientErrors + result.clientTimeouts;
  for (const [key, count] of Object.entries(result.outcomes)) {
    if (!key.startsWith("200") && !key.startsWith("503")) n += count;
  }
  return n;
}

const kinds = (r: HttpResult): string =>
  Object.entries(r.outcomes).filter(([k]) => !k.startsWith("200"))
    .map(([k, n]) => `${k}: ${n}`).join(", ") || "none";

const machine = await describeMachine();
console.log(machineLine(machine));
console.log(
  `${connections} connections, ${seconds} s, 16 resources, lease ${lease} ms` +
    (kill ? "; lock server 2 of 3 killed at half time, restarted after the lease" : "") +
    (fencing ? "" : "; no fencing tokens") + `; @x/redlock waits by ${wait}`,
);
const results: HttpResult[] = [];
for (const impl of ["x-redlock", "node-redlock"] as const) {
  const result = await runHttp({
    impl,
    connections,
    seconds,
    resources: 16,
    lease,
    lockTimeout: 2_000,
    kill,
    fencing,
    wait,
  });
  results.push(result);
  console.log(`${LABELS[impl]}: done (${result.responses2xx} 2xx)`);
}

console.log(table(
  [
    "library",
    "req/s",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "2xx",
    "errors by kind",
    "lost updates",
    "2xx not in store",
  ],
  results.map((r) => [
    LABELS[r.impl],
    r.requestsPerSecond.toFixed(0),
    String(r.latency.p50),
    String(r.latency.p99),
    String(r.latency.p999),
    String(r.responses2xx),
    kinds(r) +
    (r.clientErrors + r.clientTimeouts > 0
      ? `, client errors ${r.clientErrors}, timeouts ${r.clientTimeouts}`
      : ""),
    String(r.lostUpdates),
    String(r.unmatched),
  ]),
));

const [ours, theirs] = results as [HttpResult, HttpResult];
await Deno.writeTextFile(
  jsonPath,
  JSON.stringify({ machine, connections, seconds, lease, kill, results }, null, 2) + "\n",
);
const ratio = (a: number, b: number) => (b > 0 ? a / b : null);
await Deno.writeTextFile(
  svgPath,
  renderChart({
    title: "A web service under load, a lock server killed midway",
    subtitle: `${connections} connections for ${seconds} s (autocannon), 16 resources, ` +
      `fencing tokens checked by the store; relative to @x/redlock`,
    footer: [
      machineLine(machine),
      `@x/redlock: ${ours.requestsPerSecond.toFixed(0)} req/s, p99 ${ours.latency.p99} ms, ` +
      `lost updates ${ours.lostUpdates}; node-redlock: ${theirs.requestsPerSecond.toFixed(0)} ` +
      `req/s, p99 ${theirs.latency.p99} ms, lost updates ${theirs.lostUpdates}`,
    ],
    series: [
      { id: "x-redlock", label: "@x/redlock", color: "#2a6fdb" },
      { id: "node-redlock", label: "node-redlock (defaults)", color: "#e07b39" },
    ],
    groups: [
      {
        label: "requests/s",
        bars: results.map((r) => ({
          series: r.impl,
          value: ratio(r.requestsPerSecond, ours.requestsPerSecond),
        })),
      },
      {
        label: "p99 latency",
        bars: results.map((r) => ({
          series: r.impl,
          value: ratio(r.latency.p99, ours.latency.p99),
        })),
      },
      {
        label: "2xx responses",
        bars: results.map((r) => ({
          series: r.impl,
          value: ratio(r.responses2xx, ours.responses2xx),
        })),
      },
    ],
    reference: { value: 1, label: "@x/redlock" },
  }),
);
console.log(`wrote ${jsonPath} and ${svgPath}`);

const failed = ours.lostUpdates > 0 || ours.unmatched > 0 || otherFailures(ours) > 0;
if (failed) {
  console.error("@x/redlock lost an update or failed a request other than by a lock timeout");
}
Deno.exit(failed ? 1 : 0);
