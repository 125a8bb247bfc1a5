/**
 * Reading the model's traces: the Informal Trace Format that
 * `quint run --out-itf` writes (integers as `{"#bigint": "…"}`, maps, sets
 * and tuples tagged alike), decoded to plain values, and the one variable
 * the replay needs, `event`: what the step did at a server.
 *
 * @module
 */

/** A decoded ITF value: numbers, strings, booleans, arrays, records. */
export type Plain = number | string | boolean | Plain[] | {
  [field: string]: Plain;
};

/**
 * Decodes an ITF value: `#bigint` to a number, `#set` and `#tup` to arrays,
 * `#map` to an array of `[key, value]` pairs, records field by field.
 *
 * @param value An ITF value as parsed from JSON.
 * @returns The plain value.
 * @throws {RangeError} When an integer is beyond `Number.MAX_SAFE_INTEGER`.
 */
export function decode(value: unknown): Plain {
  if (Array.isArray(value)) return value.map(decode);
  if (value === null || typeof value !== "object") return value as Plain;
  const record = value as Record<string, unknown>;
  if ("#bigint" in record) {
    const n = Number(record["#bigint"]);
    if (!Number.isSafeInteger(n)) {
      throw new RangeError(`integer out of range: ${record["#bigint"]}`);
    }
    return n;
  }
  if ("#set" in record) return (record["#set"] as unknown[]).map(decode);
  if ("#tup" in record) return (record["#tup"] as unknown[]).map(decode);
  if ("#map" in record) return (record["#map"] as unknown[]).map(decode);
  const out: { [field: string]: Plain } = {};
  for (const [field, v] of Object.entries(record)) out[field] = decode(v);
  return out;
}

/** A lock value of the model: client `c`'s `n`-th acquire, and its lease. */
export interface ModelValue {
  readonly c: number;
  readonly n: number;
  readonly lease: number;
}

/** A request of the model (spec/redlock.qnt's `Req`), the fields a server reads. */
export interface ModelRequest {
  readonly op: "setnx" | "acquire" | "release" | "extend" | "fence";
  readonly value: ModelValue;
  readonly lease: number;
  readonly fenced: boolean;
  readonly seat: "" | "q" | "*";
  readonly ticket: number;
  readonly queueLife: number;
  readonly mode: string;
  readonly reservation: number;
  readonly takeFree: boolean;
  readonly token: number;
  readonly eval: boolean;
}

/**
 * What a step did at a server: ran a request (`run`, with the model's
 * reply), or restarted it with its data (`restart`: the script cache is
 * gone) or empty (`restart-empty`).
 */
export interface ModelEvent {
  readonly kind: "none" | "run" | "restart" | "restart-empty";
  readonly s: number;
  readonly req: ModelRequest;
  readonly reply: number;
  /** Model time in ms. */
  readonly now: number;
}

/** One trace: its events in order (steps that did nothing at a server left out). */
export interface Trace {
  /** The scripts each server has cached at the start, by the model's names. */
  readonly cached: readonly (readonly string[])[];
  readonly events: readonly ModelEvent[];
  /** How many states the trace has. */
  readonly states: number;
  /** The last state's model time. */
  readonly end: number;
}

/**
 * Reads the events of an ITF trace of spec/redlock.qnt.
 *
 * @param text The trace file's JSON.
 * @returns The server events in order, and the trace's length and end.
 * @throws {TypeError} When the trace has no `event` or `t` variable.
 */
export function readTrace(text: string): Trace {
  const itf = JSON.parse(text) as {
    vars: string[];
    states: Record<string, unknown>[];
  };
  const event = itf.vars.find((v) => v === "event" || v.endsWith("::event"));
  const time = itf.vars.find((v) => v === "t" || v.endsWith("::t"));
  const servers = itf.vars.find((v) => v === "srv" || v.endsWith("::srv"));
  if (event === undefined || time === undefined || servers === undefined) {
    throw new TypeError(
      `not a trace of spec/redlock.qnt: vars ${itf.vars.join(", ")}`,
    );
  }
  const events = itf.states
    .map((state) => decode(state[event]) as unknown as ModelEvent)
    .filter((e) => e.kind !== "none");
  const last = itf.states[itf.states.length - 1];
  const initial = (itf.states[0] ? decode(itf.states[0][servers]) : []) as [number, Plain][];
  const cached = initial.sort(([a], [b]) => a - b).map(([, server]) =>
    (server as { loaded: string[] }).loaded
  );
  return {
    cached,
    events,
    states: itf.states.length,
    end: last ? decode(last[time]) as number : 0,
  };
}
