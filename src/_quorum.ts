import type { ScriptClient } from "./clients.ts";
import { RequestTimeoutError } from "./errors.ts";

/** One server (or cluster) of a Redlock. */
export interface Member {
  readonly index: number;
  /** The client as the user gave it. */
  readonly client: object;
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
  readonly done: (tally: Tally<T>, pending: number) => boolean;
  /** Called for every failure of a request, also after the round settled. */
  readonly onError: (error: Error, member: Member) => void;
}

const toError = (error: unknown): Error =>
  error instanceof Error ? error : new Error(String(error), { cause: error });

/**
 * Sends one request to every member at once and resolves as soon as `done`
 * says so, or when every request has answered, failed or timed out. When the
 * round settles its timers are cleared; a request still in flight is left to
 * its client, and a later failure of it still reaches `onError`. An abort
 * rejects at once with `signal.reason`.
 */
export function round<T>(
  members: readonly Member[],
  send: (member: Member) => Promise<T>,
  options: RoundOptions<T>,
): Promise<Tally<T>> {
  const { timeout, signal, done, onError } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  if (members.length === 0) return Promise.resolve({ answers: new Map(), errors: new Map() });
  return new Promise((resolve, reject) => {
    const answers = new Map<number, T>();
    const errors = new Map<number, Error>();
    const timers = new Set<ReturnType<typeof setTimeout>>();
    let pending = members.length;
    let settled = false;
    const stop = () => {
      settled = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      signal?.removeEventListener("abort", onAbort);
    };
    const onAbort = () => {
      if (settled) return;
      stop();
      reject(signal!.reason);
    };
    const check = () => {
      const tally = { answers, errors };
      if (pending === 0 || done(tally, pending)) {
        stop();
        resolve({ answers: new Map(answers), errors: new Map(errors) });
      }
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    for (const member of members) {
      let answered = false;
      const fail = (error: Error) => {
        onError(error, member);
        if (settled) return;
        errors.set(member.index, error);
        pending--;
        check();
      };
      const timer = setTimeout(() => {
        timers.delete(timer);
        if (answered) return;
        answered = true;
        fail(new RequestTimeoutError(member.index, timeout));
      }, timeout);
      timers.add(timer);
      let request: Promise<T>;
      try {
        request = send(member);
      } catch (error) {
        request = Promise.reject(error);
      }
      request.then(
        (value) => {
          if (answered) return;
          answered = true;
          clearTimeout(timer);
          timers.delete(timer);
          if (settled) return;
          answers.set(member.index, value);
          pending--;
          check();
        },
        (error) => {
          if (answered) return;
          answered = true;
          clearTimeout(timer);
          timers.delete(timer);
          fail(toError(error));
        },
      );
    }
  });
}
