/**
 * `redlock status`: for each name, a quorum's verdict and each server's
 * view (TTL, waiters, fencing counter; a read-write lock's writer or
 * readers; a semaphore's permits in use), as text or JSON. Never a value.
 *
 * @module
 */

import { type NameStatus, readStatus, type ServerStatus } from "../operations/status.ts";
import type { CliArgs } from "./args.ts";
import { CliRedis, type Log } from "./redis.ts";
import { EXIT } from "./usage.ts";

/** How a TTL reads: `9712 ms left`, or `without expiry`. */
const left = (ms: number): string => ms === Infinity ? "without expiry" : `${ms} ms left`;

/** A count with its noun, e.g. `2 waiting`. */
const waiting = (n: number): string => `${n} waiting`;

/** The verdict line of a name. */
export function summary(status: NameStatus): string {
  const parts: string[] = [];
  const { lock, readWrite, semaphore } = status;
  if (lock.verdict === "held") parts.push(`held, ${left(lock.ttl ?? 0)}`);
  if (readWrite.writer) parts.push("write-locked by a writer");
  if (readWrite.readers > 0) {
    parts.push(`read-locked by ${readWrite.readers} reader${readWrite.readers === 1 ? "" : "s"}`);
  }
  if (readWrite.writerWaiting) parts.push("a writer waiting");
  if (semaphore !== null) {
    parts.push(`${semaphore.inUse} of ${semaphore.permits} permits in use`);
    if (semaphore.waiters > 0) parts.push(waiting(semaphore.waiters));
  }
  if (parts.length === 0) parts.push(status.verdict === "unknown" ? "unknown" : "free");
  if (lock.waiters > 0) parts.push(waiting(lock.waiters));
  else if (lock.watched) parts.push("waiters watching");
  if (lock.fencing !== null) parts.push(`fencing counter ${lock.fencing}`);
  const answered = status.servers.filter((s) => s.error === undefined).length;
  if (status.verdict === "unknown") {
    parts.push(`too few servers agree (${answered} of ${status.servers.length} answered)`);
  }
  return `${status.name}: ${parts.join(", ")}`;
}

/** The line of one server, labelled `label` (its host and port). */
export function serverLine(view: ServerStatus, label: string): string {
  const head = `  server ${view.server} ${label}: `;
  if (view.error !== undefined) return `${head}unreachable (${view.error})`;
  const parts = view.ttl === null ? [] : [`held, ${left(view.ttl)}`];
  if (view.waiters > 0) parts.push(waiting(view.waiters));
  else if (view.watched) parts.push("waiters watching");
  if (view.fencing !== null) parts.push(`fencing ${view.fencing}`);
  if (view.writer !== null) parts.push(`writer, ${left(view.writer)}`);
  if (view.readers > 0) parts.push(`${view.readers} reader${view.readers === 1 ? "" : "s"}`);
  if (view.writerWaiting) parts.push("a writer waiting");
  if (view.permits !== null) {
    parts.push(`slots ${view.slots.length ? view.slots.join(",") : "none"} of ${view.permits}`);
    if (view.semaphoreWaiters > 0) parts.push(`${view.semaphoreWaiters} waiting for permits`);
  }
  return head + (parts.length === 0 ? "free" : parts.join(", "));
}

/** A server's host and port, without user or password. */
function label(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return "?";
  }
}

/** The JSON form: what the text says, with Infinity as null and `ttl` in ms. */
function toJson(status: NameStatus, urls: readonly string[]): string {
  const finite = (ms: number | null) => (ms === Infinity ? null : ms);
  return JSON.stringify({
    name: status.name,
    verdict: status.verdict,
    quorum: status.quorum,
    lock: { ...status.lock, ttl: finite(status.lock.ttl), expires: status.lock.ttl !== Infinity },
    readWrite: status.readWrite,
    semaphore: status.semaphore,
    servers: status.servers.map((view) => ({
      ...view,
      host: label(urls[view.server] ?? ""),
      ttl: finite(view.ttl),
      writer: finite(view.writer),
    })),
  });
}

/**
 * `status`: each name's verdict and each server's view; see
 * `redlock status --help`. A name the servers could not tell is named on
 * stderr with the servers that failed.
 *
 * @param args The parsed command line.
 * @param log Where the CLI's lines go.
 * @returns {@linkcode EXIT.HELD} when a name is held, else
 * {@linkcode EXIT.UNAVAILABLE} when one could not be told, else
 * {@linkcode EXIT.FREE}.
 */
export async function status(args: CliArgs, log: Log): Promise<number> {
  await using redis = await CliRedis.connect(args.redis, args.lease, args.tlsCa);
  const read = await Promise.all(args.names.map((name) => readStatus(redis.redlock, name)));
  // A server that failed is named by its cause, not by the client's message.
  const statuses = read.map((status) => ({
    ...status,
    servers: status.servers.map((view) =>
      view.error === undefined ? view : { ...view, error: redis.causeOf(view.server) ?? view.error }
    ),
  }));
  for (const status of statuses) {
    if (args.json) {
      console.log(toJson(status, args.redis));
      continue;
    }
    console.log(summary(status));
    for (const view of status.servers) {
      console.log(serverLine(view, label(args.redis[view.server]!)));
    }
  }
  for (const { name, verdict } of statuses) {
    if (verdict !== "unknown") continue;
    log(`too few Redis servers answered to tell whether "${name}" is held: ${redis.failures()}`);
  }
  const verdicts = statuses.map((s) => s.verdict);
  if (verdicts.includes("held")) return EXIT.HELD;
  return verdicts.includes("unknown") ? EXIT.UNAVAILABLE : EXIT.FREE;
}
