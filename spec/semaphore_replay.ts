/**
 * The conformance replay of the semaphore model (spec/semaphore.qnt):
 * every server step of its traces is sent, in order, to real
 * `redis-server`s running the project's own semaphore scripts (imported
 * from src/protocol/semaphore_script.ts and scripts.ts, never copied), with
 * each server's wall clock frozen at the step's model time (libfaketime),
 * and every reply must equal the model's. A script that does something the
 * model's server action does not shows up as the first step whose reply
 * differs.
 *
 * @module
 */

import type { Redis } from "ioredis";
import { type LuaScript, RELEASE, releaseCall, type ScriptCall } from "../src/protocol/scripts.ts";
import {
  SEM_ACQUIRE,
  SEM_EXTEND,
  SEM_LEAVE,
  semAcquireCall,
  semExtendCall,
  semLeaveCall,
  slotKey,
} from "../src/protocol/semaphore_script.ts";
import { decode, type ModelValue, type Plain } from "./itf.ts";
import { NOSCRIPT, replayEach, type Rig, wireValue } from "./replay.ts";

/** The semaphore every trace takes permits of. */
export const SEMAPHORE = "S";

/** Its number of permits (spec/semaphore_scripts.qnt's `PERMITS`). */
export const PERMITS = 2;

/** The model's reply for a script that fails (spec/semaphore_scripts.qnt's `ERROR`). */
export const SCRIPT_ERROR = -2000000;

/** The lease of every permit in the model (spec/semaphore.qnt's `LEASE`). */
const LEASE = 40;

/** The scripts by the model's names for them. */
const SCRIPTS: Readonly<Record<string, LuaScript>> = {
  "sem-acquire": SEM_ACQUIRE,
  "sem-leave": SEM_LEAVE,
  "sem-extend": SEM_EXTEND,
  release: RELEASE,
};

/** A request of the semaphore model (its `Req`), the fields a server reads. */
export interface SemRequest {
  readonly op: "setnx" | "sem-acquire" | "sem-leave" | "sem-extend" | "release";
  readonly value: ModelValue;
  readonly k: number;
  readonly want: readonly number[];
  readonly fresh: boolean;
  readonly ticket: number;
  readonly aliveFor: number;
  readonly slots: readonly number[];
  readonly eval: boolean;
}

/** A reply as the model writes it: integers, and whether Redis sends them as an array. */
export interface SemReply {
  readonly reply: readonly number[];
  readonly array: boolean;
}

/** What a step did at a server (the model's `event`). */
export interface SemEvent extends SemReply {
  readonly kind: "none" | "run" | "restart" | "restart-empty";
  readonly s: number;
  readonly req: SemRequest;
  /** Model time in ms. */
  readonly now: number;
}

/** One trace of the semaphore model. */
export interface SemTrace {
  /** The scripts each server has cached at the start, by the model's names. */
  readonly cached: readonly (readonly string[])[];
  readonly events: readonly SemEvent[];
  readonly states: number;
  /** The last state's model time. */
  readonly end: number;
}

/** The ITF variable named `name` (modules prefix it, e.g. `correct::semaphore::t`). */
function variable(vars: readonly string[], name: string): string {
  const found = vars.find((v) => v === name || v.endsWith(`::${name}`));
  if (found === undefined) {
    throw new TypeError(`not a trace of spec/semaphore.qnt: no ${name} in ${vars.join(", ")}`);
  }
  return found;
}

/**
 * Reads the server events of an ITF trace of spec/semaphore.qnt.
 *
 * @param text The trace file's JSON.
 * @returns The server events in order, the initial script caches, length and end.
 * @throws {TypeError} When the trace lacks the model's `event`, `t` or `srv`.
 */
export function readSemTrace(text: string): SemTrace {
  const itf = JSON.parse(text) as { vars: string[]; states: Record<string, unknown>[] };
  const [event, time, servers] = ["event", "t", "srv"].map((n) => variable(itf.vars, n));
  const events = itf.states
    .map((state) => decode(state[event!]) as unknown as SemEvent)
    .filter((e) => e.kind !== "none");
  const first = itf.states[0];
  const initial = (first ? decode(first[servers!]) : []) as [number, Plain][];
  const cached = initial.sort(([a], [b]) => a - b).map(([, server]) =>
    (server as { loaded: string[] }).loaded
  );
  const last = itf.states[itf.states.length - 1];
  return {
    cached,
    events,
    states: itf.states.length,
    end: last ? decode(last[time!]) as number : 0,
  };
}

/**
 * The script and KEYS/ARGV of a model request, built by the project's own
 * call builders.
 *
 * @param req The model's request.
 * @returns The script and its call.
 * @throws {TypeError} When the request's op has no script.
 */
export function semScriptCall(req: SemRequest): { script: LuaScript; call: ScriptCall } {
  const value = wireValue(req.value);
  const keys = (slots: readonly number[]) => slots.map((i) => slotKey(SEMAPHORE, i));
  switch (req.op) {
    case "sem-acquire": {
      const terms = {
        want: req.want,
        count: req.k,
        fresh: req.fresh,
        ticket: String(req.ticket),
        aliveFor: req.aliveFor,
      };
      const call = semAcquireCall(SEMAPHORE, PERMITS, value, LEASE, terms);
      return { script: SEM_ACQUIRE, call };
    }
    case "sem-leave":
      return { script: SEM_LEAVE, call: semLeaveCall(SEMAPHORE, value) };
    case "sem-extend": {
      const terms = { name: SEMAPHORE, permits: PERMITS };
      return {
        script: SEM_EXTEND,
        call: semExtendCall(keys(req.slots), terms, value, LEASE, true),
      };
    }
    case "release":
      return { script: RELEASE, call: releaseCall(keys(req.slots), value, { reservation: 0 }) };
    default:
      throw new TypeError(`no script for the model's op ${JSON.stringify(req.op)}`);
  }
}

/** A real reply in the model's terms; an error other than the two the model knows stays text. */
function asModel(reply: unknown): SemReply | string {
  if (typeof reply === "number") return { reply: [reply], array: false };
  if (Array.isArray(reply) && reply.every((r) => typeof r === "number")) {
    return { reply: reply as number[], array: true };
  }
  return String(reply);
}

/** Runs one model request on a real server. */
async function send(
  redis: Redis,
  req: SemRequest,
): Promise<{ reply: SemReply | string; command: string }> {
  if (req.op === "setnx") {
    const args = [
      slotKey(SEMAPHORE, req.slots[0]!),
      wireValue(req.value),
      "PX",
      String(LEASE),
      "NX",
    ];
    const set = await redis.call("SET", ...args);
    const reply = set === "OK" ? 1 : set === null ? 0 : undefined;
    return {
      reply: reply === undefined ? String(set) : { reply: [reply], array: false },
      command: `SET ${args.join(" ")}`,
    };
  }
  const { script, call } = semScriptCall(req);
  const how = req.eval ? "EVAL" : "EVALSHA";
  const command = `${how} ${script.name} KEYS ${call.keys.join(" ")} ARGV ${call.args.join(" ")}`;
  try {
    const head = req.eval ? script.source : script.sha1;
    const reply = await redis.call(how, head, call.keys.length, ...call.keys, ...call.args);
    return { reply: asModel(reply), command };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (/^-?NOSCRIPT/.test(message)) return { reply: { reply: [NOSCRIPT], array: false }, command };
    // RELEASE of no key at all: `EXISTS` without a key fails the script
    if (/Wrong number of args calling Redis command from script/i.test(message)) {
      return { reply: { reply: [SCRIPT_ERROR], array: false }, command };
    }
    return { reply: message, command };
  }
}

/** Whether a real reply equals the model's. */
function same(real: SemReply | string, model: SemReply): boolean {
  return typeof real !== "string" && real.array === model.array &&
    real.reply.length === model.reply.length && real.reply.every((r, i) => r === model.reply[i]);
}

/** The model's or a real reply, for the reader. */
export function showReply(reply: SemReply | string): string {
  if (typeof reply === "string") return reply;
  return reply.array ? `[${reply.reply.join(", ")}]` : String(reply.reply[0]);
}

/** A step whose real reply differed from the model's. */
export interface SemMismatch {
  /** Which trace (its file name). */
  readonly trace: string;
  /** The index of the step among the trace's server events. */
  readonly step: number;
  readonly command: string;
  readonly model: string;
  readonly real: string;
}

/** What a replay did. */
export interface SemReplayReport {
  readonly traces: number;
  /** Server steps replayed (commands, restarts). */
  readonly steps: number;
  readonly mismatches: readonly SemMismatch[];
}

/** Replays one trace from `base` ms of server time; the first mismatch ends it. */
async function replayOne(
  r: Rig,
  name: string,
  trace: SemTrace,
  base: number,
): Promise<{ steps: number; mismatch?: SemMismatch }> {
  for (const [s, redis] of r.clients.entries()) {
    await r.freeze(s, base);
    await redis.call("FLUSHALL");
    await redis.call("SCRIPT", "FLUSH");
    for (const script of trace.cached[s] ?? []) {
      await redis.call("SCRIPT", "LOAD", SCRIPTS[script]!.source);
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
    if (!same(reply, event)) {
      const mismatch = {
        trace: name,
        step: i,
        command,
        model: showReply(event),
        real: showReply(reply),
      };
      return { steps, mismatch };
    }
  }
  return { steps };
}

/**
 * Replays `traces` against fresh servers (loopback, libfaketime), each
 * trace from empty servers and a later frozen time than the last.
 *
 * @param traces The traces by name (e.g. their file names).
 * @param servers How many servers the model has.
 * @returns How many traces and steps were replayed, and the mismatches.
 * @throws {Error} When the servers cannot start (libfaketime missing).
 */
export function replaySemaphore(
  traces: ReadonlyMap<string, SemTrace>,
  servers = 3,
): Promise<SemReplayReport> {
  return replayEach(traces, replayOne, servers);
}
