/**
 * The command line's subcommands: `run`, `lead` and `status`.
 *
 * @module
 */

import { ExecutionError, LockLostError, ResourceLockedError } from "../api/errors.ts";
import type { Redlock } from "../api/redlock.ts";
import { onAbort } from "../util/abort.ts";
import { delay } from "../util/delay.ts";
import { type CliArgs, EXIT, type Subcommand } from "./args.ts";
import { Child, SignalTrap, SpawnError } from "./child.ts";
import { CliRedis } from "./redis.ts";
import { printStatus } from "./status.ts";

/** Where the CLI's own messages go (stderr, one line each). */
export type Log = (line: string) => void;

/** A command that exits 0 at once is restarted by `lead` at most this often, in ms. */
const MIN_RUN_MS = 1_000;

/** Extend when half the lease is left, as the lease may be short. */
const threshold = (lease: number): number => Math.floor(lease / 2);

/** Logs each distinct server error once, and every whole-operation error. */
function logErrors(redlock: Redlock, log: Log): void {
  const seen = new Set<string>();
  redlock.on("error", (error, event) => {
    const line = event.server === -1 ? error.message : `server ${event.server}: ${error.message}`;
    if (event.server !== -1 && seen.has(line)) return;
    seen.add(line);
    log(line);
  });
}

/** A `TimeoutError` of `options.timeout`. */
const isTimeout = (error: unknown): boolean =>
  error instanceof DOMException && error.name === "TimeoutError";

const SIGNAL_NUMBERS: Readonly<Partial<Record<Deno.Signal, number>>> = { SIGINT: 2, SIGTERM: 15 };

/** `run`: the command under the lock; see the usage text. */
export async function run(args: CliArgs, log: Log): Promise<number> {
  await using redis = await CliRedis.connect(args.redis, args.lease, args.tlsCa);
  const { redlock } = redis;
  logErrors(redlock, log);
  const interrupt = new AbortController();
  let child: Child | undefined;
  using _trap = new SignalTrap((signal) => {
    // Before the command starts a signal ends the wait; after, it goes to the command.
    if (child) child.kill(signal);
    else interrupt.abort(signal);
  });
  const wait = args.wait === 0 ? { retryCount: 0 } : { retryCount: -1, timeout: args.wait };
  try {
    return await redlock.using(args.name, args.lease, {
      ...wait,
      fencing: args.fencing,
      signal: interrupt.signal,
      automaticExtensionThreshold: threshold(args.lease),
    }, async (signal, { lock }) => {
      const env: Record<string, string> = args.fencing
        ? { REDLOCK_FENCING_TOKEN: String(lock.fencingToken) }
        : {};
      const started = new Child(args.command, env, args.grace);
      child = started;
      let stopping: Promise<void> | undefined;
      const lost = () => {
        log(`lost the lock "${args.name}": stopping the command`);
        stopping = started.stop();
      };
      const unlisten = onAbort(signal, lost);
      const status = await started.status;
      unlisten();
      await stopping;
      return signal.aborted ? EXIT.LOST : status;
    });
  } catch (error) {
    if (interrupt.signal.aborted && error === interrupt.signal.reason) {
      return 128 + (SIGNAL_NUMBERS[error as Deno.Signal] ?? 0);
    }
    if (error instanceof ResourceLockedError || isTimeout(error)) {
      log(`the lock "${args.name}" is held by another; the command was not run`);
      return EXIT.NOT_LOCKED;
    }
    if (error instanceof SpawnError) {
      log(error.message);
      return error.status;
    }
    if (error instanceof ExecutionError) {
      log(`too few Redis servers answered to lock "${args.name}"; the command was not run`);
      return EXIT.UNAVAILABLE;
    }
    throw error;
  }
}

/** `lead`: the command on exactly one host at a time; see the usage text. */
export async function lead(args: CliArgs, log: Log): Promise<number> {
  await using redis = await CliRedis.connect(args.redis, args.lease, args.tlsCa);
  const { redlock } = redis;
  logErrors(redlock, log);
  const shutdown = new AbortController();
  using _trap = new SignalTrap((signal) => shutdown.abort(signal));
  let fatal: SpawnError | undefined;
  await redlock.lead(args.name, args.lease, async (signal, { term }) => {
    log(`leading "${args.name}" (term ${term}): starting the command`);
    const start = performance.now();
    let child: Child;
    try {
      child = new Child(args.command, { REDLOCK_FENCING_TOKEN: String(term) }, args.grace);
    } catch (error) {
      fatal = error as SpawnError;
      shutdown.abort(error);
      return;
    }
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
    await stopping;
    if (signal.aborted) return;
    if (status !== 0) throw new Error(`the command exited with status ${status}`);
    log("the command exited with status 0: restarting it");
    const ran = performance.now() - start;
    if (ran < MIN_RUN_MS) await delay(MIN_RUN_MS - ran, signal).catch(() => {});
  }, { signal: shutdown.signal, automaticExtensionThreshold: threshold(args.lease) });
  if (fatal) {
    log(fatal.message);
    return fatal.status;
  }
  return 0;
}

/** `status`: each name's verdict and each server's view; see src/cli/status.ts. */
export async function status(args: CliArgs, log: Log): Promise<number> {
  await using redis = await CliRedis.connect(args.redis, args.lease, args.tlsCa);
  const code = await printStatus(redis.redlock, args.redis, args.names, args.json);
  if (code === EXIT.UNAVAILABLE) log("too few Redis servers answered to tell whether it is held");
  return code;
}

/** Each subcommand's implementation. */
export const COMMANDS: Readonly<Record<Subcommand, (args: CliArgs, log: Log) => Promise<number>>> =
  { run, lead, status };
