/**
 * Introspection: how long keys are still held, on a quorum, as the servers'
 * TTLs say.
 */

import { ExecutionError } from "../api/errors.ts";
import { INSPECT, inspectCall } from "../protocol/scripts.ts";
import { type Servers, toNumber } from "../quorum/servers.ts";
import { round } from "../quorum/round.ts";
import { checkCallOptions, checkSettings, KNOWN, type Settings } from "../api/settings.ts";
import type { LockContext } from "../api/lock_context.ts";
import type { InspectOptions } from "../api/options.ts";
import { drift, now } from "../util/time.ts";

/** One question to the servers about some keys. */
export interface InspectRequest {
  readonly keys: readonly string[];
  /** The lock's value, or "" for any holder. */
  readonly value: string;
  readonly settings: Settings;
  readonly signal: AbortSignal | undefined;
  /** What is asked, for the error message. */
  readonly what: string;
  /** Hear every server out (bounded by requestTimeout) for the best TTL estimate. */
  readonly everyServer: boolean;
}

/** {@linkcode inspect} of `question`, its options checked before any request. */
export function inspectFor(
  context: LockContext,
  question: Pick<InspectRequest, "keys" | "value" | "what" | "everyServer">,
  options: InspectOptions | undefined,
): Promise<number | null> {
  return inspect(context.servers, checkInspect(context, options, question));
}

/**
 * Checks the options of an inspection of `question.keys` before any
 * request, and makes its request.
 */
export function checkInspect(
  context: LockContext,
  options: InspectOptions | undefined,
  question: Pick<InspectRequest, "keys" | "value" | "what" | "everyServer">,
): InspectRequest {
  const opts = checkCallOptions(options, KNOWN.inspect);
  const settings = checkSettings(opts, context.settings, "options");
  context.servers.checkSlots(question.keys);
  return { ...question, settings, signal: opts.signal };
}

/**
 * One round of INSPECT: the quorum-th largest TTL among servers that hold
 * the keys (for the value, or for anyone), less the round's time and drift;
 * `null` when a quorum does not hold them. Unless `everyServer`, it settles
 * as soon as the yes/no answer is known.
 */
export async function inspect(servers: Servers, request: InspectRequest): Promise<number | null> {
  const { keys, value, settings, signal, what, everyServer } = request;
  const q = servers.quorum;
  const call = inspectCall(keys, value);
  const start = now();
  const tally = await round<number>(
    servers.members,
    (m) => servers.run(m, INSPECT, call, toNumber),
    {
      timeout: settings.requestTimeout,
      signal,
      onError: servers.emit,
      done: ({ answers }) => {
        if (everyServer) return false;
        let held = 0;
        for (const ttl of answers.values()) if (ttl !== -2) held++;
        return held >= q || answers.size - held >= q;
      },
    },
  );
  const elapsed = now() - start;
  const held = [...tally.answers.values()]
    .filter((ttl) => ttl !== -2)
    .map((ttl) => (ttl === -1 ? Infinity : ttl))
    .sort((a, b) => b - a);
  if (held.length >= q) {
    const ttl = held[q - 1]!;
    if (ttl === Infinity) return Infinity;
    const left = Math.floor(ttl - elapsed - drift(ttl, settings.driftFactor));
    return left > 0 ? left : null;
  }
  if (tally.answers.size - held.length >= q) return null;
  // every server that answered counts as "for": it could tell, one way or the other
  const answered = new Map([...tally.answers].map(([i]) => [i, 0]));
  const { stats } = servers.ballot({ answers: answered, errors: tally.errors }, start);
  throw new ExecutionError(`${what} did not get answers from a quorum`, [stats]);
}
