/**
 * The conformance replay of the read-write model (spec/read_write.qnt):
 * every server step of its traces is sent, in order, to real
 * `redis-server`s running the project's own read-write scripts (imported
 * from src/protocol/read_write_scripts.ts, never copied), each server's
 * wall clock frozen at the step's model time, and every reply must equal
 * the model's.
 *
 * @module
 */

import type { Redis } from "ioredis";
import {
  GATE,
  RW_READ,
  RW_RELEASE,
  RW_WRITE,
  rwCall,
  type RwHow,
  rwKeys,
  rwModeCall,
  type RwReleaseMode,
} from "../src/protocol/read_write_scripts.ts";
import type { LuaScript, ScriptCall } from "../src/protocol/scripts.ts";
import { decode } from "./itf.ts";
import { type Mismatch, replayEach, type ReplayReport, type Rig } from "./replay.ts";

/** The read-write lock every trace takes. */
export const RW_NAME = "R";

const KEYS = rwKeys(RW_NAME);

/** A value of the read-write model: client `c`'s `n`-th acquire. */
export interface RwValue {
  readonly c: number;
  readonly n: number;
}

/** A request of the read-write model (spec/read_write.qnt's `Req`), the fields a server reads. */
export interface RwRequest {
  readonly op: "setnx" | "rw_read" | "rw_write" | "rw_release";
  readonly value: RwValue;
  /** The lock's mode, or RW_RELEASE's release mode. */
  readonly mode: string;
  readonly lease: number;
  readonly how: string;
  readonly markLife: number;
  readonly marked: boolean;
}

/** What a step did at a server: ran a request with the model's reply, or restarted it. */
export interface RwEvent {
  readonly kind: "none" | "run" | "restart" | "restart-empty";
  readonly s: number;
  readonly req: RwRequest;
  readonly reply: number;
  /** Model time in ms. */
  readonly now: number;
}

/** One trace of the read-write model: its server events in order. */
export interface RwTrace {
  readonly events: readonly RwEvent[];
  /** How many states the trace has. */
  readonly states: number;
  /** The last state's model time. */
  readonly end: number;
}

/**
 * Reads the server events of an ITF trace of spec/read_write.qnt.
 *
 * @param text The trace file's JSON.
 * @returns The server events in order, and the trace's length and end.
 * @throws {TypeError} When the trace has no `event` or `t` variable.
 */
export function readRwTrace(text: string): RwTrace {
  const itf = JSON.parse(text) as { vars: string[]; states: Record<string, unknown>[] };
  const event = itf.vars.find((v) => v === "event" || v.endsWith("::event"));
  const time = itf.vars.find((v) => v === "t" || v.endsWith("::t"));
  if (event === undefined || time === undefined) {
    throw new TypeError(`not a trace of spec/read_write.qnt: vars ${itf.vars.join(", ")}`);
  }
  const events = itf.states
    .map((state) => decode(state[event]) as unknown as RwEvent)
    .filter((e) => e.kind !== "none");
  const last = itf.states[itf.states.length - 1];
  return { events, states: itf.states.length, end: last ? decode(last[time]) as number : 0 };
}

/**
 * The wire form of a model value, `c<c>:<nn>`: never `r`, `?` or a value
 * starting with `r:`, as the gate's own values are.
 *
 * @param value The model's value.
 * @returns The value as the scripts get it.
 */
export function rwWireValue(value: RwValue): string {
  return `c${value.c}:${String(value.n).padStart(2, "0")}`;
}

/**
 * The script and KEYS/ARGV of a model request, built by the project's own call builders.
 *
 * @param req A script request of the model (not `setnx`).
 * @returns The script and its call.
 * @throws {TypeError} For `setnx`, which is no script.
 */
export function rwScriptCall(req: RwRequest): { script: LuaScript; call: ScriptCall } {
  const value = rwWireValue(req.value);
  if (req.op === "rw_release") {
    return { script: RW_RELEASE, call: rwModeCall(KEYS, value, req.mode as RwReleaseMode) };
  }
  if (req.op !== "rw_read" && req.op !== "rw_write") {
    throw new TypeError(`no script for the model's op ${JSON.stringify(req.op)}`);
  }
  const terms = {
    duration: req.lease,
    how: req.how as RwHow,
    watchLife: 0,
    markLife: req.markLife,
    marked: req.marked,
  };
  return { script: req.op === "rw_read" ? RW_READ : RW_WRITE, call: rwCall(KEYS, value, terms) };
}

/** Runs one model request on a real server; the reply as the model writes it. */
async function send(
  redis: Redis,
  req: RwRequest,
): Promise<{ reply: number | string; command: string }> {
  if (req.op === "setnx") {
    const gate = req.mode === "read" ? GATE.lone + rwWireValue(req.value) : rwWireValue(req.value);
    const args = [KEYS[0]!, gate, "PX", String(req.lease), "NX"];
    const reply = await redis.call("SET", ...args);
    return {
      reply: reply === "OK" ? 1 : reply === null ? 0 : String(reply),
      command: `SET ${args.join(" ")}`,
    };
  }
  const { script, call } = rwScriptCall(req);
  const command = `EVAL ${script.name} KEYS ${call.keys.join(" ")} ARGV ${call.args.join(" ")}`;
  try {
    const reply = await redis.call(
      "EVAL",
      script.source,
      call.keys.length,
      ...call.keys,
      ...call.args,
    );
    return { reply: typeof reply === "number" ? reply : String(reply), command };
  } catch (error) {
    return { reply: error instanceof Error ? error.message : String(error), command };
  }
}

/** Replays one trace from `base` ms of server time; the first mismatch ends it. */
async function replayOne(
  r: Rig,
  name: string,
  trace: RwTrace,
  base: number,
): Promise<{ steps: number; mismatch?: Mismatch }> {
  for (const [s, redis] of r.clients.entries()) {
    await r.freeze(s, base);
    await redis.call("FLUSHALL");
  }
  let steps = 0;
  for (const [i, event] of trace.events.entries()) {
    const redis = r.clients[event.s]!;
    steps++;
    if (event.kind === "restart-empty") await redis.call("FLUSHALL");
    if (event.kind !== "run") continue;
    await r.freeze(event.s, base + event.now);
    const { reply, command } = await send(redis, event.req);
    if (reply !== event.reply) {
      return {
        steps,
        mismatch: { trace: name, step: i, command, model: event.reply, real: reply },
      };
    }
  }
  return { steps };
}

/**
 * Replays `traces` against three fresh servers (loopback, libfaketime),
 * each trace from empty servers and a later frozen time than the last.
 *
 * @param traces The traces by name (e.g. their file names).
 * @param servers How many servers the model has.
 * @returns How many traces and steps were replayed, and the mismatches.
 * @throws {Error} When the servers cannot start (libfaketime missing).
 */
export function replayRw(
  traces: ReadonlyMap<string, RwTrace>,
  servers = 3,
): Promise<ReplayReport> {
  return replayEach(traces, replayOne, servers);
}
