/**
 * W1 on the wire: loops of acquire + release on fresh keys by several
 * implementations with ioredis clients, taking turns lock by lock (ABBA
 * order), while every request an ioredis client is given and every reply it
 * resolves are time-stamped (`Redis.prototype.sendCommand`, wrapped for the
 * run). Per lock and step (acquire, release) it tells the requests sent by
 * command, the time from the call to the first request, from the first
 * request to the reply that made the quorum, and from that reply to the
 * caller holding the result: what is the network's and what is the
 * process's.
 *
 * @module
 */

import { Redis } from "ioredis";
import type { Impl, Instance, Settings } from "./_impls.ts";
import type { Outcome } from "./_workloads.ts";
import { median } from "./_stats.ts";

/** Fresh keys: one attempt, no retries. */
const ONCE: Settings = { retryCount: 0, retryDelay: 10, retryJitter: 0, threshold: 100 };

/** One request of a step. */
interface Request {
  readonly command: string;
  readonly sent: number;
  answered: number;
}

/** What one step (an acquire or a release call) did. */
interface Step {
  readonly call: number;
  done: number;
  readonly requests: Request[];
}

const now = (): number => performance.now();

/** The step stamps go to while one runs (requests of none are not kept). */
let current: Step | undefined;

/** Time-stamps every request of every ioredis client until the returned function is called. */
function stampRequests(): () => void {
  const proto = Redis.prototype as unknown as {
    sendCommand(command: { name: string; promise: Promise<unknown> }, stream?: unknown): unknown;
  };
  const original = proto.sendCommand;
  proto.sendCommand = function (command, stream) {
    const step = current;
    if (step !== undefined) {
      const request: Request = { command: command.name, sent: now(), answered: NaN };
      step.requests.push(request);
      command.promise.then(() => request.answered = now(), () => {});
    }
    return original.call(this, command, stream);
  };
  return () => {
    proto.sendCommand = original;
  };
}

async function timed<T>(run: () => Promise<T>): Promise<[T, Step]> {
  const step: Step = { call: now(), done: NaN, requests: [] };
  current = step;
  try {
    const result = await run();
    step.done = now();
    return [result, step];
  } finally {
    current = undefined;
  }
}

/** One step's times, ms: call → first request, → quorum reply, → result. */
function phases(step: Step, quorum: number): [number, number, number] {
  const first = Math.min(...step.requests.map((r) => r.sent));
  const answers = step.requests.map((r) => r.answered).filter((t) => t <= step.done)
    .sort((a, b) => a - b);
  const decisive = answers[quorum - 1] ?? NaN;
  return [first - step.call, decisive - first, step.done - decisive];
}

/**
 * Runs `locks` locks (after `warm` unmeasured ones) of each of `impls` on
 * `ports`, taking turns lock by lock; one outcome per implementation, in
 * order, with the medians of each phase (µs for the process's, ms for the
 * network's), ms per lock (median and mean) and requests per lock by command.
 */
export async function wireTrace(
  impls: readonly Impl[],
  ports: readonly number[],
  locks: number,
  warm = 30,
): Promise<Outcome[]> {
  const quorum = Math.floor(ports.length / 2) + 1;
  const opened: Instance[] = [];
  const restore = stampRequests();
  try {
    for (const impl of impls) opened.push(await impl.open(ports, ONCE));
    const steps = impls.map(() => ({ acquire: [] as Step[], release: [] as Step[] }));
    const base = `bench:wire:${Date.now().toString(36)}`;
    for (let i = 0; i < warm + locks; i++) {
      for (let k = 0; k < impls.length; k++) {
        // ABBA: who goes first alternates, so that neither always follows the other.
        const j = i % 2 === 0 ? k : impls.length - 1 - k;
        const instance = opened[j]!;
        const key = `${base}:${j}:${i}`;
        const [held, acquire] = await timed(() => instance.acquire([key], 10_000));
        const [, release] = await timed(() => held.release());
        if (i < warm) continue;
        steps[j]!.acquire.push(acquire);
        steps[j]!.release.push(release);
      }
    }
    return impls.map((_, j) => {
      const metrics: Record<string, number> = {};
      for (const name of ["acquire", "release"] as const) {
        const all = steps[j]![name].map((s) => phases(s, quorum));
        metrics[`${name}ToFirstUs`] = median(all.map((p) => p[0])) * 1000;
        metrics[`${name}WireMs`] = median(all.map((p) => p[1]));
        metrics[`${name}ToResultUs`] = median(all.map((p) => p[2])) * 1000;
      }
      const perLock = steps[j]!.acquire.map((a, i) => steps[j]!.release[i]!.done - a.call);
      metrics.lockMsP50 = median(perLock);
      metrics.lockMsMean = perLock.reduce((sum, t) => sum + t, 0) / perLock.length;
      for (const step of [...steps[j]!.acquire, ...steps[j]!.release]) {
        for (const r of step.requests) {
          const key = `requests.${r.command}`;
          metrics[key] = (metrics[key] ?? 0) + 1 / locks;
        }
      }
      return { metrics, errors: 0, violations: 0 };
    });
  } finally {
    restore();
    for (const instance of opened) await instance.close();
  }
}
