/**
 * The conformance replay: every server step of the model's traces is sent,
 * in order, to real `redis-server`s running the project's own scripts
 * (imported from src/protocol/, never copied), with each server's wall
 * clock frozen at the step's model time (libfaketime, `+s x0`), and every
 * reply must equal the model's. A script that does something the model's
 * server action does not shows up as the first step whose reply differs.
 *
 * @module
 */

import { Redis } from "ioredis";
import { startClockedServers } from "../scripts/redis.ts";
import { ioredisClient } from "../src/clients/clients.ts";
import {
  ACQUIRE,
  acquireCall,
  EXTEND,
  extendCall,
  FENCE,
  fenceCall,
  type LuaScript,
  NO_SEAT,
  RELEASE,
  RELEASE_MODE,
  releaseCall,
  type ReleaseMode,
  type ScriptCall,
  type Seat,
} from "../src/protocol/scripts.ts";
import type { ModelRequest, ModelValue, Trace } from "./itf.ts";

/** The resource every trace locks. */
export const RESOURCE = "R";

/** The model's reply for a `NOSCRIPT` error (spec/redlock.qnt's `NOSCRIPT`). */
export const NOSCRIPT = -1000000;

/** The scripts by the model's names for them. */
const SCRIPTS: Readonly<Record<string, LuaScript>> = {
  acquire: ACQUIRE,
  release: RELEASE,
  extend: EXTEND,
  fence: FENCE,
};

/** A step whose real reply differed from the model's. */
export interface Mismatch {
  /** Which trace (its file name). */
  readonly trace: string;
  /** The index of the step among the trace's server events. */
  readonly step: number;
  /** The command sent, for the reader. */
  readonly command: string;
  readonly model: number;
  readonly real: number | string;
}

/** What a replay did. */
export interface ReplayReport {
  readonly traces: number;
  /** Server steps replayed (commands, restarts). */
  readonly steps: number;
  readonly mismatches: readonly Mismatch[];
}

/**
 * The wire form of a model value, `<id>:<n>:<lease>` as the library writes
 * it: the id names the wake channel, the lease ends it; `n` has two digits
 * so that values sort in a queue as the model sorts them.
 *
 * @param value The model's value.
 * @returns The value as stored in Redis.
 */
export function wireValue(value: ModelValue): string {
  return `c${value.c}:${String(value.n).padStart(2, "0")}:${value.lease}`;
}

/** The script and KEYS/ARGV of a model request, built by the project's own call builders. */
export function scriptCall(
  req: ModelRequest,
): { script: LuaScript; call: ScriptCall } {
  const value = wireValue(req.value);
  switch (req.op) {
    case "acquire": {
      const seat: Seat = req.seat === ""
        ? NO_SEAT
        : req.seat === "*"
        ? { kind: "watcher" }
        : { kind: "queued", ticket: String(req.ticket) };
      const terms = {
        duration: req.lease,
        fencing: req.fenced,
        seat,
        queueLife: req.queueLife,
      };
      return { script: ACQUIRE, call: acquireCall([RESOURCE], value, terms) };
    }
    case "release": {
      const mode = req.mode as ReleaseMode;
      const ticket = mode === RELEASE_MODE.giveWay ? String(req.ticket) : undefined;
      const terms = { reservation: req.reservation, mode, ticket };
      return { script: RELEASE, call: releaseCall([RESOURCE], value, terms) };
    }
    case "extend":
      return {
        script: EXTEND,
        call: extendCall([RESOURCE], value, req.lease, !req.takeFree),
      };
    case "fence":
      return { script: FENCE, call: fenceCall([RESOURCE], req.token) };
    default:
      throw new TypeError(
        `no script for the model's op ${JSON.stringify(req.op)}`,
      );
  }
}

/** Runs one model request on a real server; the reply as the model writes it. */
async function send(
  redis: Redis,
  req: ModelRequest,
): Promise<{ reply: number | string; command: string }> {
  if (req.op === "setnx") {
    // The lean path's own command: the ioredis adapter's setIfAbsent.
    const value = wireValue(req.value);
    const command = `setIfAbsent ${RESOURCE} ${value} ${req.lease} (SET PX NX)`;
    try {
      const set = await ioredisClient(redis).setIfAbsent!(RESOURCE, value, req.lease);
      return { reply: set ? 1 : 0, command };
    } catch (error) {
      return { reply: error instanceof Error ? error.message : String(error), command };
    }
  }
  const { script, call } = scriptCall(req);
  const how = req.eval ? "EVAL" : "EVALSHA";
  const command = `${how} ${script.name} KEYS ${call.keys.join(" ")} ARGV ${call.args.join(" ")}`;
  try {
    const head = req.eval ? script.source : script.sha1;
    const reply = await redis.call(
      how,
      head,
      call.keys.length,
      ...call.keys,
      ...call.args,
    );
    return {
      reply: typeof reply === "number" ? reply : String(reply),
      command,
    };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return { reply: /^-?NOSCRIPT/.test(message) ? NOSCRIPT : message, command };
  }
}

/** Servers with frozen clocks, and a connection to each. */
export interface Rig extends AsyncDisposable {
  readonly clients: Redis[];
  /** Freezes server `s`'s wall clock at `ms` past its start. */
  freeze(s: number, ms: number): Promise<void>;
}

/**
 * Starts `count` servers on loopback with frozen clocks, and connects to each.
 *
 * @param count How many servers.
 * @returns The servers' connections and clocks; disposing stops them.
 * @throws {Error} When the servers cannot start (libfaketime missing).
 */
export async function rig(count: number): Promise<Rig> {
  const { servers, clocks } = await startClockedServers(count);
  const clients = servers.servers.map((server) =>
    new Redis({ host: "127.0.0.1", port: server.port, maxRetriesPerRequest: 1 })
  );
  return {
    clients,
    freeze: (s, ms) => Deno.writeTextFile(clocks[s]!.file, `+${(ms / 1000).toFixed(3)} x0\n`),
    async [Symbol.asyncDispose]() {
      clients.forEach((c) => c.disconnect());
      await servers[Symbol.asyncDispose]();
    },
  };
}

/** Replays one trace from `base` ms of server time; the first mismatch ends it. */
async function replayOne(
  r: Rig,
  name: string,
  trace: Trace,
  base: number,
): Promise<{ steps: number; mismatch?: Mismatch }> {
  for (const [s, redis] of r.clients.entries()) {
    await r.freeze(s, base);
    await redis.call("FLUSHALL");
    await redis.call("SCRIPT", "FLUSH");
    for (const name of trace.cached[s] ?? []) {
      await redis.call("SCRIPT", "LOAD", SCRIPTS[name]!.source);
    }
  }
  let steps = 0;
  for (const [i, event] of trace.events.entries()) {
    const redis = r.clients[event.s]!;
    steps++;
    if (event.kind === "restart-empty") await redis.call("FLUSHALL");
    if (event.kind !== "run") {
      await redis.call("SCRIPT", "FLUSH");
      continue;
    }
    await r.freeze(event.s, base + event.now);
    const { reply, command } = await send(redis, event.req);
    if (reply !== event.reply) {
      return {
        steps,
        mismatch: {
          trace: name,
          step: i,
          command,
          model: event.reply,
          real: reply,
        },
      };
    }
  }
  return { steps };
}

/** One trace replayed: its server steps, and the first that differed. */
export interface TraceResult<M> {
  readonly steps: number;
  readonly mismatch?: M;
}

/**
 * Replays `traces` one after another with `one` against fresh servers
 * (loopback, libfaketime), each trace from empty servers and a later
 * frozen time than the last.
 *
 * @param traces The traces by name (e.g. their file names).
 * @param one Replays one trace on the rig from the frozen time `base`.
 * @param servers How many servers the model has.
 * @returns How many traces and steps were replayed, and the mismatches.
 * @throws {Error} When the servers cannot start (libfaketime missing).
 */
export async function replayEach<T extends { readonly end: number }, M>(
  traces: ReadonlyMap<string, T>,
  one: (r: Rig, name: string, trace: T, base: number) => Promise<TraceResult<M>>,
  servers = 3,
): Promise<{ traces: number; steps: number; mismatches: M[] }> {
  await using r = await rig(servers);
  let steps = 0;
  let base = 1000;
  const mismatches: M[] = [];
  for (const [name, trace] of traces) {
    const result = await one(r, name, trace, base);
    steps += result.steps;
    if (result.mismatch) mismatches.push(result.mismatch);
    base += trace.end + 1000;
  }
  return { traces: traces.size, steps, mismatches };
}

/**
 * Replays the plain lock's `traces` (see {@linkcode replayEach}).
 *
 * @param traces The traces by name (e.g. their file names).
 * @param servers How many servers the model has.
 * @returns How many traces and steps were replayed, and the mismatches.
 * @throws {Error} When the servers cannot start (libfaketime missing).
 */
export function replay(
  traces: ReadonlyMap<string, Trace>,
  servers = 3,
): Promise<ReplayReport> {
  return replayEach(traces, replayOne, servers);
}

/** One line for a mismatch (of any model's replay). */
export function showMismatch(
  m: { trace: string; step: number; command: string; model: unknown; real: unknown },
): string {
  return `${m.trace} step ${m.step}: ${m.command}: model ${m.model}, redis ${m.real}`;
}
