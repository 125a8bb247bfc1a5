/**
 * `redlock lead`: a command on exactly one of the hosts that run it, with
 * word of the wait and a limit on how long it waits without a quorum.
 *
 * @module
 */

import { ExecutionError, LockLostError } from "../api/errors.ts";
import { onAbort } from "../util/abort.ts";
import { delay } from "../util/delay.ts";
import type { CliArgs } from "./args.ts";
import { Child, SignalTrap, unrunnable } from "./child.ts";
import { CliRedis, type Log } from "./redis.ts";
import { threshold } from "./run.ts";
import { EXIT } from "./usage.ts";

/** A command that exits 0 at once is restarted by `lead` at most this often, in ms. */
const MIN_RUN_MS = 1_000;

/** Leases in a row without a quorum after which `lead` gives up. */
export const NO_QUORUM_LEASES = 3;

/** What one `lead` process is doing. */
interface LeadState {
  /** The command of the current term, while it runs. */
  child: Child | undefined;
  /** Set when a signal stopped it; later signals go to the command's group. */
  received: Deno.Signal | undefined;
  /** Set when it gave up for want of a quorum. */
  gaveUp: boolean;
}

/** One term: start the command, stop it when the term ends, restart it when it exits. */
async function term(
  args: CliArgs,
  log: Log,
  state: LeadState,
  signal: AbortSignal,
  fencing: number,
): Promise<void> {
  log(`leading "${args.name}" (term ${fencing}): starting the command`);
  const start = performance.now();
  const child = state.child = new Child(
    args.command,
    { REDLOCK_FENCING_TOKEN: String(fencing) },
    args.grace,
  );
  let stopping: Promise<void> | undefined;
  const stop = () => {
    const reason = signal.reason;
    log(
      reason instanceof LockLostError
        ? `lost the leadership of "${args.name}": stopping the command`
        : "stopping the command",
    );
    stopping = child.stop(typeof reason === "string" ? reason as Deno.Signal : "SIGTERM");
  };
  const unlisten = onAbort(signal, stop);
  const status = await child.status;
  unlisten();
  if (stopping === undefined && child.running) stopping = child.stop();
  await stopping;
  state.child = undefined;
  if (signal.aborted) return;
  if (status !== 0) throw new Error(`the command exited with status ${status}`);
  log("the command exited with status 0: restarting it");
  const ran = performance.now() - start;
  if (ran < MIN_RUN_MS) await delay(MIN_RUN_MS - ran, signal).catch(() => {});
}

/**
 * While not leading: says once per wait who holds the lock or which
 * servers fail, and gives up (aborting `shutdown`) after
 * {@linkcode NO_QUORUM_LEASES} leases in a row without a quorum.
 */
async function watch(
  args: CliArgs,
  log: Log,
  redis: CliRedis,
  state: LeadState,
  shutdown: AbortController,
): Promise<void> {
  const every = Math.max(100, Math.min(1_000, Math.floor(args.lease / 2)));
  const limit = NO_QUORUM_LEASES * args.lease;
  let since: number | undefined;
  let said: "held" | "unavailable" | undefined;
  while (!shutdown.signal.aborted) {
    await delay(every, shutdown.signal).catch(() => {});
    if (shutdown.signal.aborted) return;
    if (state.child !== undefined) {
      [since, said] = [undefined, undefined];
      continue;
    }
    try {
      const ttl = await redis.redlock.remainingTtlForResource(args.name);
      since = undefined;
      if (ttl !== null && said !== "held" && state.child === undefined) {
        log(`waiting: "${args.name}" is led by another process`);
        said = "held";
      }
    } catch (error) {
      if (!(error instanceof ExecutionError)) throw error;
      since ??= performance.now();
      if (said !== "unavailable") {
        log(
          `waiting: too few Redis servers answered: ${redis.failures()}; giving up after ${
            limit / 1000
          } s without a quorum`,
        );
        said = "unavailable";
      }
      if (performance.now() - since >= limit) {
        log(`no quorum of Redis servers for ${limit / 1000} s: giving up`);
        state.gaveUp = true;
        shutdown.abort(new Error("no quorum"));
      }
    }
  }
}

/**
 * `lead`: the command on exactly one host at a time; see `redlock lead --help`.
 *
 * @param args The parsed command line.
 * @param log Where the CLI's lines go.
 * @returns The exit status.
 */
export async function lead(args: CliArgs, log: Log): Promise<number> {
  const shutdown = new AbortController();
  const state: LeadState = { child: undefined, received: undefined, gaveUp: false };
  using _trap = new SignalTrap((signal) => {
    if (state.received !== undefined) return state.child?.signal(signal);
    state.received = signal;
    shutdown.abort(signal);
  });
  const cannot = unrunnable(args.command[0]!, log);
  if (cannot !== undefined) return cannot;
  await using redis = await CliRedis.connect(args.redis, args.lease, args.tlsCa);
  redis.logErrors(log);
  let failure: unknown;
  const watching = watch(args, log, redis, state, shutdown).catch((error) => {
    failure = error;
    shutdown.abort(error);
  });
  await redis.redlock.lead(
    args.name,
    args.lease,
    (signal, { term: fencing }) => term(args, log, state, signal, fencing),
    { signal: shutdown.signal, automaticExtensionThreshold: threshold(args.lease) },
  );
  await watching;
  if (failure !== undefined) throw failure;
  return state.gaveUp ? EXIT.UNAVAILABLE : 0;
}
