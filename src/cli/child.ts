/**
 * The command the command line runs under a lock: started in a process
 * group of its own with the lock's fencing token in its environment, sent
 * the signals the CLI gets, and stopped as a whole (SIGTERM, then SIGKILL
 * after a grace period) when it must.
 *
 * @module
 */

import { groupEmptied, groupRunning, signalGroup } from "./process_group.ts";
import { EXIT } from "./usage.ts";

/** Signals the CLI handles alike: the command is stopped and the lock released. */
export const HANDLED: readonly Deno.Signal[] = ["SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM"];

/** The number of each handled signal, for the 128 + N exit status. */
export const SIGNAL_NUMBERS: Readonly<Record<string, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGTERM: 15,
};

/** ms to wait for SIGKILLed processes to be gone. */
const KILLED_MS = 1_000;

/** The command could not be started; `status` is the shell's for that case. */
export class SpawnError extends Error {
  /** 127 when not found, 126 when not executable. */
  readonly status: number;

  /**
   * @param command The program.
   * @param status 127 or 126.
   * @param cause Why, when known.
   */
  constructor(command: string, status: number, cause?: unknown) {
    const why = status === EXIT.NOT_FOUND
      ? "not found"
      : `not executable${
        cause === undefined ? "" : ` (${cause instanceof Error ? cause.message : String(cause)})`
      }`;
    super(`cannot run ${JSON.stringify(command)}: ${why}`, { cause });
    this.name = "SpawnError";
    this.status = status;
  }
}

/** Whether `path` is a file, and whether it is executable; undefined when missing. */
function executable(path: string): boolean | undefined {
  try {
    const info = Deno.statSync(path);
    return info.isFile && (info.mode === null || (info.mode & 0o111) !== 0);
  } catch {
    return undefined;
  }
}

/**
 * The exit status when `program` cannot be run (logged in one line), before
 * any lock is taken; undefined when it can.
 *
 * @param program A path (with a slash) or a name to look up.
 * @param log Where the line goes.
 * @returns 127 or 126, or undefined.
 */
export function unrunnable(program: string, log: (line: string) => void): number | undefined {
  try {
    checkProgram(program);
    return undefined;
  } catch (error) {
    if (!(error instanceof SpawnError)) throw error;
    log(error.message);
    return error.status;
  }
}

/**
 * Checks that `program` can be run, as a shell looks it up in `PATH`.
 *
 * @param program A path (with a slash) or a name to look up.
 * @throws {SpawnError} 127 when not found, 126 when found but not executable.
 */
export function checkProgram(program: string): void {
  const candidates = program.includes("/")
    ? [program]
    : (Deno.env.get("PATH") ?? "").split(":").map((dir) => `${dir || "."}/${program}`);
  let found = false;
  for (const path of candidates) {
    const runnable = executable(path);
    if (runnable) return;
    found ||= runnable === false;
  }
  throw new SpawnError(program, found ? EXIT.CANNOT_EXECUTE : EXIT.NOT_FOUND);
}

/** One run of the command, in a process group of its own. */
export class Child {
  readonly #process: Deno.ChildProcess;
  readonly #grace: number;
  #stopping: Promise<void> | undefined;

  /**
   * Starts `command` with the CLI's stdio and environment plus `env`.
   *
   * `detached` makes the command call setsid() before it runs: it leads a
   * session and a process group of its own, so that a signal to the group
   * reaches everything it starts, and a terminal's Ctrl-C (sent to the
   * CLI's foreground group) reaches it only through the CLI, once. It also
   * keeps reading an inherited terminal (not its controlling one), which a
   * background group of the same session (setpgid) could not without
   * SIGTTIN.
   *
   * @param command The program and its arguments.
   * @param env Variables added to the CLI's environment.
   * @param grace ms between SIGTERM and SIGKILL in {@linkcode Child.stop}.
   * @throws {SpawnError} When it cannot be started.
   */
  constructor(command: readonly string[], env: Record<string, string>, grace: number) {
    const [program, ...args] = command;
    checkProgram(program!);
    try {
      this.#process = new Deno.Command(program!, { args, env, stdin: "inherit", detached: true })
        .spawn();
    } catch (error) {
      const status = error instanceof Deno.errors.NotFound ? EXIT.NOT_FOUND : EXIT.CANNOT_EXECUTE;
      throw new SpawnError(program!, status, error);
    }
    this.#grace = grace;
  }

  /** The process group's id: the command's pid. */
  get pgid(): number {
    return this.#process.pid;
  }

  /** The command's exit status, the shell's way: 128 + N when signal N ended it. */
  get status(): Promise<number> {
    return this.#process.status.then((s) => s.code);
  }

  /** Whether a process of the command's group still runs. */
  get running(): boolean {
    return groupRunning(this.pgid);
  }

  /**
   * Sends `signal` to the command's process group, then SIGCONT so that a
   * stopped process gets it (as coreutils `timeout` does).
   *
   * @param signal The signal.
   */
  signal(signal: Deno.Signal): void {
    if (signalGroup(this.pgid, signal) && signal !== "SIGKILL" && signal !== "SIGCONT") {
      signalGroup(this.pgid, "SIGCONT");
    }
  }

  /**
   * Sends `signal` (SIGTERM by default) to the group, then SIGKILL when the
   * command or anything in its group still runs after the grace period;
   * resolves once the command has exited and its group has emptied.
   *
   * @param signal The first signal.
   * @returns A promise of the group's end; the same one on each call.
   */
  stop(signal: Deno.Signal = "SIGTERM"): Promise<void> {
    this.#stopping ??= (async () => {
      this.signal(signal);
      const deadline = performance.now() + this.#grace;
      const exited = await Promise.race([
        this.#process.status.then(() => true),
        new Promise<false>((resolve) => {
          const timer = setTimeout(resolve, this.#grace, false);
          this.#process.status.finally(() => clearTimeout(timer));
        }),
      ]);
      const left = Math.max(0, deadline - performance.now());
      if (!exited || !await groupEmptied(this.pgid, left)) this.signal("SIGKILL");
      await this.#process.status;
      await groupEmptied(this.pgid, KILLED_MS);
    })();
    return this.#stopping;
  }
}

/** Calls `handler` with each SIGHUP, SIGINT, SIGQUIT and SIGTERM the CLI gets until disposed. */
export class SignalTrap implements Disposable {
  readonly #handlers: [Deno.Signal, () => void][];

  /** @param handler Called with each signal's name. */
  constructor(handler: (signal: Deno.Signal) => void) {
    this.#handlers = HANDLED.map((signal) => [signal, () => handler(signal)]);
    for (const [signal, listener] of this.#handlers) Deno.addSignalListener(signal, listener);
  }

  [Symbol.dispose](): void {
    for (const [signal, listener] of this.#handlers) Deno.removeSignalListener(signal, listener);
  }
}
