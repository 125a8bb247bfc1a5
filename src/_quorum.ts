import type { RedisClient, ScriptClient } from "./clients.ts";
import { RequestTimeoutError } from "./errors.ts";

/** One server (or cluster) of a Redlock. */
export interface Member {
  readonly index: number;
  /** The client as the user gave it. */
  readonly client: RedisClient;
  readonly runner: ScriptClient;
}

/** What a round collected by the time it settled. */
export interface Tally<T> {
  /** Answers by server index, in the order they arrived. */
  readonly answers: ReadonlyMap<number, T>;
  /** Failures (client errors, error replies, timeouts) by server index. */
  readonly errors: ReadonlyMap<number, Error>;
}

export interface RoundOptions<T> {
  /** ms each request may take before it counts as a {@linkcode RequestTimeoutError}. */
  readonly timeout: number;
  readonly signal?: AbortSignal | undefined;
  /** Whether the round can settle with what it has (called after each answer or error). */
  readonly done: (tally: Tally<T>) => boolean;
  /** Called for every failure of a request, also after the round settled. */
  readonly onError: (error: Error, member: Member) => void;
}

const toError = (error: unknown): Error =>
  error instanceof Error ? error : new Error(String(error), { cause: error });

/**
 * Sends one request to every member at once and resolves as soon as `done`
 * says so, or when every request has answered, failed or timed out. All
 * requests start together, so one timer bounds them all; it is cleared when
 * the round settles. A request still in flight then is left to its client,
 * and a later failure of it still reaches `onError`. An abort rejects at once
 * with `signal.reason`.
 */
export function round<T>(
  members: readonly Member[],
  send: (member: Member) => Promise<T>,
  options: RoundOptions<T>,
): Promise<Tally<T>> {
  const { timeout, signal, done, onError } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  const answers = new Map<number, T>();
  const errors = new Map<number, Error>();
  const tally: Tally<T> = { answers, errors };
  if (members.length === 0) return Promise.resolve(tally);
  return new Promise((resolve, reject) => {
    let pending = members.length;
    let settled = false;
    const finish = () => {
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    };
    const onAbort = () => {
      if (settled) return;
      finish();
      reject(signal!.reason);
    };
    const check = () => {
      if (--pending === 0 || done(tally)) {
        finish();
        resolve(tally);
      }
    };
    const timer = setTimeout(() => {
      if (settled) return;
      for (const member of members) {
        if (answers.has(member.index) || errors.has(member.index)) continue;
        const error = new RequestTimeoutError(member.index, timeout);
        onError(error, member);
        errors.set(member.index, error);
      }
      finish();
      resolve(tally);
    }, timeout);
    signal?.addEventListener("abort", onAbort, { once: true });
    for (const member of members) {
      let request: Promise<T>;
      try {
        request = send(member);
      } catch (error) {
        request = Promise.reject(error);
      }
      request.then(
        (value) => {
          if (settled) return;
          answers.set(member.index, value);
          check();
        },
        (error) => {
          const e = toError(error);
          onError(e, member);
          if (settled) return;
          errors.set(member.index, e);
          check();
        },
      );
    }
  });
}
