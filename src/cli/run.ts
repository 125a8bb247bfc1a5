/**
 * `redlock run`: a command under a lock, stopped as a whole when the lock
 * is lost or the CLI is signalled.
 *
 * @module
 */

import { ExecutionError, LockLostError, ResourceLockedError } from "../api/errors.ts";
import { onAbort } from "../util/abort.ts";
import type { CliArgs } from "./args.ts";
import { Child, SIGNAL_NUMBERS, SignalTrap, SpawnError, unrunnable } from "./child.ts";
import { CliRedis, type Log } from "./redis.ts";
import { EXIT } from "./usage.ts";

/** Extend when half the lease is left, as the lease may be short. */
export const threshold = (lease: number): number => Math.floor(lease / 2);

/** A `TimeoutError` of `options.timeout`. */
const isTimeout = (error: unknown): boolean =>
  error instanceof DOMException && error.name === "TimeoutError";

/** What happened to one run: the first signal the CLI got, whether the lock was lost. */
interface RunState {
  child: Child | undefined;
  received: Deno.Signal | undefined;
  stopping: Promise<void> | undefined;
  lost: boolean;
}

/** The first signal stops the command's group; each later one is passed on to it. */
function onSignal(state: RunState, early: AbortController, signal: Deno.Signal): void {
  state.received ??= signal;
  if (state.child === undefined) early.abort(signal);
  else if (state.stopping === undefined) state.stopping = state.child.stop(signal);
  else state.child.signal(signal);
}

/** Runs the command while the lock is held; its status, or why it was stopped. */
async function underLock(
  args: CliArgs,
  log: Log,
  state: RunState,
  signal: AbortSignal,
  token: string,
): Promise<number> {
  if (state.received !== undefined) return 128 + SIGNAL_NUMBERS[state.received]!;
  const env: Record<string, string> = args.fencing ? { REDLOCK_FENCING_TOKEN: token } : {};
  const child = state.child = new Child(args.command, env, args.grace);
  const lost = () => {
    state.lost = true;
    const why = signal.reason instanceof LockLostError ? "lost the lock" : "cannot keep the lock";
    log(`${why} "${args.name}": stopping the command`);
    state.stopping ??= child.stop();
  };
  const unlisten = onAbort(signal, lost);
  const status = await child.status;
  unlisten();
  if (state.stopping === undefined && child.running) {
    log("the command left processes running in its group: stopping them");
    state.stopping = child.stop();
  }
  await state.stopping;
  if (state.received !== undefined) return 128 + SIGNAL_NUMBERS[state.received]!;
  return state.lost ? EXIT.LOST : status;
}

/** The exit status and line for an acquire that failed. */
async function notLocked(args: CliArgs, log: Log, redis: CliRedis, error: unknown) {
  const unavailable = () => {
    log(
      `too few Redis servers answered to lock "${args.name}"; the command was not run: ${redis.failures()}`,
    );
    return EXIT.UNAVAILABLE;
  };
  if (error instanceof ResourceLockedError) {
    log(`the lock "${args.name}" is held by another; the command was not run`);
    return EXIT.NOT_LOCKED;
  }
  if (error instanceof ExecutionError) return unavailable();
  if (!isTimeout(error)) throw error;
  // The wait ran out: held by another, or too few servers answering?
  try {
    await redis.redlock.remainingTtlForResource(args.name);
  } catch (probe) {
    if (probe instanceof ExecutionError) return unavailable();
    throw probe;
  }
  log(`the lock "${args.name}" is held by another; not had within --wait; the command was not run`);
  return EXIT.NOT_LOCKED;
}

/**
 * `run`: the command under the lock; see `redlock run --help`.
 *
 * @param args The parsed command line.
 * @param log Where the CLI's lines go.
 * @returns The exit status.
 */
export async function run(args: CliArgs, log: Log): Promise<number> {
  const early = new AbortController();
  const state: RunState = {
    child: undefined,
    received: undefined,
    stopping: undefined,
    lost: false,
  };
  using _trap = new SignalTrap((signal) => onSignal(state, early, signal));
  const cannot = unrunnable(args.command[0]!, log);
  if (cannot !== undefined) return cannot;
  await using redis = await CliRedis.connect(args.redis, args.lease, args.tlsCa);
  redis.logErrors(log);
  const wait = args.wait === 0 ? { retryCount: 0 } : { retryCount: -1, timeout: args.wait };
  try {
    return await redis.redlock.using(args.name, args.lease, {
      ...wait,
      fencing: args.fencing,
      signal: early.signal,
      automaticExtensionThreshold: threshold(args.lease),
    }, (signal, { lock }) => underLock(args, log, state, signal, String(lock.fencingToken)));
  } catch (error) {
    if (early.signal.aborted && error === early.signal.reason) {
      return 128 + SIGNAL_NUMBERS[error as string]!;
    }
    if (error instanceof SpawnError) {
      log(error.message);
      return error.status;
    }
    return await notLocked(args, log, redis, error);
  }
}
