/**
 * Error classes and the per-attempt statistics they carry.
 *
 * @module
 */

/**
 * What happened in one attempt of one operation (acquire, extend, release, …)
 * across the Redlock's servers.
 *
 * Servers are named by their index in the array given to `new Redlock()`.
 */
export interface ExecutionStats {
  /** How many servers (or clusters) the Redlock has. */
  readonly membershipSize: number;
  /** How many of them must agree: `⌊membershipSize / 2⌋ + 1`. */
  readonly quorumSize: number;
  /** Indices of the servers that agreed, in the order they answered. */
  readonly votesFor: readonly number[];
  /**
   * Servers that disagreed or failed, each with its reason: a
   * {@linkcode LockConflictError} when another value holds a key, a
   * {@linkcode RequestTimeoutError}, or the client's own error. Not
   * necessarily a `Map`: it may make its conflict errors when first read
   * (so `structuredClone` or `postMessage` it as `new Map(votesAgainst)`).
   */
  readonly votesAgainst: ReadonlyMap<number, Error>;
  /** Milliseconds from the start of the attempt until it settled (monotonic clock). */
  readonly elapsed: number;
}

/** What a successful operation reports: the stats of each attempt it made. */
export interface ExecutionResult {
  /** One entry per attempt, oldest first. */
  readonly attempts: readonly ExecutionStats[];
}

function describe(attempts: readonly ExecutionStats[]): string {
  const last = attempts.at(-1);
  if (last === undefined) return "no attempt was made";
  const against = [...last.votesAgainst]
    .map(([server, error]) => `server ${server}: ${error.name}: ${error.message}`)
    .join("; ");
  // Enough votes for, yet failed: the lease was used up before the round settled.
  const late = last.votesFor.length >= last.quorumSize
    ? ", but too little of the lease was left once it did (a lease must outlast the round and " +
      "the drift allowance)"
    : "";
  return `${attempts.length} attempt(s); the last had ${last.votesFor.length} of ` +
    `${last.membershipSize} servers for, quorum ${last.quorumSize}${late}` +
    (against ? ` (${against})` : "");
}

/**
 * An operation could not reach a quorum of servers.
 *
 * @example Inspecting the attempts
 * ```ts no-eval
 * import { ExecutionError } from "@x/redlock";
 * try {
 *   // await redlock.acquire("resource", 1_000);
 * } catch (error) {
 *   if (error instanceof ExecutionError) console.log(error.attempts.length);
 * }
 * ```
 */
export class ExecutionError extends Error {
  /** The stats of every attempt made, oldest first. */
  readonly attempts: readonly ExecutionStats[];

  /**
   * Makes an execution error.
   *
   * @param message What failed; the attempts' summary is appended.
   * @param attempts The stats of every attempt made.
   * @param options The standard error options (`cause`).
   */
  constructor(message: string, attempts: readonly ExecutionStats[], options?: ErrorOptions) {
    super(`${message}: ${describe(attempts)}`, options);
    this.name = "ExecutionError";
    this.attempts = attempts;
  }
}

/**
 * `acquire()` gave up because another holder kept the resource: enough
 * servers answered to form a quorum, but some of them held another value.
 *
 * @example Telling a busy resource from a server fault
 * ```ts no-eval
 * import { ResourceLockedError } from "@x/redlock";
 * try {
 *   // await redlock.acquire("resource", 1_000, { retryCount: 0 });
 * } catch (error) {
 *   if (error instanceof ResourceLockedError) console.log("busy, try later");
 * }
 * ```
 */
export class ResourceLockedError extends ExecutionError {
  /**
   * Makes a resource-locked error.
   *
   * @param message What failed.
   * @param attempts The stats of every attempt made.
   * @param options The standard error options (`cause`).
   */
  constructor(message: string, attempts: readonly ExecutionStats[], options?: ErrorOptions) {
    super(message, attempts, options);
    this.name = "ResourceLockedError";
  }
}

/**
 * The lock expired or is no longer held by this value on a quorum, so it
 * cannot be extended; `using()` aborts its signal with this error.
 *
 * @example Reacting to a lost lock inside `using()`
 * ```ts no-eval
 * import { LockLostError } from "@x/redlock";
 * // await redlock.using("resource", 5_000, async (signal) => {
 * //   const onAbort = () => {
 * //     if (signal.reason instanceof LockLostError) console.log("lost it");
 * //   };
 * //   // (an abort that fired already never fires again: check it first)
 * //   if (signal.aborted) onAbort();
 * //   else signal.addEventListener("abort", onAbort, { once: true });
 * // });
 * console.log(LockLostError.name);
 * ```
 */
export class LockLostError extends ExecutionError {
  /**
   * Makes a lock-lost error.
   *
   * @param message What failed.
   * @param attempts The stats of every attempt made.
   * @param options The standard error options (`cause`).
   */
  constructor(message: string, attempts: readonly ExecutionStats[], options?: ErrorOptions) {
    super(message, attempts, options);
    this.name = "LockLostError";
  }
}

/**
 * The Redis user may not run what the operation needs (a `NOPERM` reply):
 * a command, a key or a channel outside its ACL rules. It fails the call as
 * soon as the refusals make a quorum impossible, without retrying until the
 * timeout; docs/production.md lists the rules a lock user needs.
 *
 * @example Telling a missing ACL rule from a busy resource
 * ```ts no-eval
 * import { PermissionError } from "@x/redlock";
 * try {
 *   // await redlock.acquire("resource", 1_000);
 * } catch (error) {
 *   if (error instanceof PermissionError) console.error(error.permission, error.server);
 * }
 * ```
 */
export class PermissionError extends ExecutionError {
  /** The index of the first server that refused. */
  readonly server: number;
  /**
   * What that server said is missing, its reply after `NOPERM`, e.g.
   * "this user has no permissions to run the 'evalsha' command".
   */
  readonly permission: string;

  /**
   * Makes a permission error.
   *
   * @param server The index of the first server that refused.
   * @param refusal That server's error (kept as `cause`).
   * @param attempts The stats of every attempt made.
   */
  constructor(server: number, refusal: Error, attempts: readonly ExecutionStats[]) {
    const permission = missingPermission(refusal) ?? refusal.message;
    super(`NOPERM: ${permission}`, attempts, { cause: refusal });
    this.name = "PermissionError";
    this.server = server;
    this.permission = permission;
  }
}

const NOPERM = /\bNOPERM\b:?\s*([^\r\n]*)/;
/**
 * A script's own command, key or channel outside the user's rules, as
 * Redis 7.0 words it, and as later versions do ("ACL failure in script").
 */
const SCRIPT_DENIED =
  /\bThe user executing the script can't (?:run|access|publish)[^\r\n]*|\bACL failure in script:[^\r\n]*/;

/**
 * What a server's `NOPERM` error says is missing (the text after `NOPERM`,
 * also inside a script's error, or the script's refusal as Redis 7.0 puts
 * it), or undefined for any other error.
 *
 * @param error A client's error.
 * @returns The missing permission as the server put it, or undefined.
 */
export function missingPermission(error: Error): string | undefined {
  const match = NOPERM.exec(error.message);
  if (match !== null) return match[1]!.trim() || "NOPERM";
  return SCRIPT_DENIED.exec(error.message)?.[0].trim();
}

/**
 * One server's vote against: a key of the lock is held by another value
 * (or, for extend, no longer by ours).
 *
 * @example Counting conflicts in an attempt
 * ```ts no-eval
 * import { type ExecutionStats, LockConflictError } from "@x/redlock";
 * const conflicts = (stats: ExecutionStats) =>
 *   [...stats.votesAgainst.values()].filter((e) => e instanceof LockConflictError).length;
 * console.log(conflicts);
 * ```
 */
export class LockConflictError extends Error {
  /** The index of the server that answered. */
  readonly server: number;
  /**
   * The remaining time to live of the conflicting key in ms as that server
   * reported it; `-1` for a key without expiry, `-2` for a missing key.
   */
  readonly ttl: number;

  /**
   * Makes a conflict vote.
   *
   * @param server The index of the server that answered.
   * @param ttl The conflicting key's remaining time to live in ms.
   */
  constructor(server: number, ttl: number) {
    super(
      ttl === -2
        ? `server ${server} no longer holds the lock's value`
        : `server ${server} holds the resource for another value` +
          (ttl >= 0 ? ` for ${ttl} ms more` : ""),
    );
    this.name = "LockConflictError";
    this.server = server;
    this.ttl = ttl;
  }
}

/**
 * One server did not answer within `requestTimeout`; it counts as a vote against.
 *
 * @example Spotting slow servers
 * ```ts no-eval
 * import { RequestTimeoutError } from "@x/redlock";
 * // redlock.on("error", (error) => {
 * //   if (error instanceof RequestTimeoutError) console.log(error.server, error.timeout);
 * // });
 * console.log(RequestTimeoutError.name);
 * ```
 */
export class RequestTimeoutError extends Error {
  /** The index of the server that did not answer. */
  readonly server: number;
  /** The time waited, in ms. */
  readonly timeout: number;

  /**
   * Makes a request timeout error.
   *
   * @param server The index of the server that did not answer.
   * @param timeout The time waited, in ms.
   */
  constructor(server: number, timeout: number) {
    super(`server ${server} did not answer within ${timeout} ms`);
    this.name = "RequestTimeoutError";
    this.server = server;
    this.timeout = timeout;
  }
}
