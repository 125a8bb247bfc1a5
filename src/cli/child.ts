/**
 * The command the command line runs under a lock: started with the lock's
 * fencing token in its environment, sent the CLI's SIGINT/SIGTERM, and
 * stopped (SIGTERM, then SIGKILL after a grace period) when it must.
 *
 * @module
 */

import { EXIT } from "./args.ts";

/** Signals the CLI passes on to the command. */
export const FORWARDED: readonly Deno.Signal[] = ["SIGINT", "SIGTERM"];

/** The command could not be started; `status` is the shell's for that case. */
export class SpawnError extends Error {
  /** 127 when not found, 126 when not executable. */
  readonly status: number;

  constructor(command: string, cause: unknown) {
    const notFound = cause instanceof Deno.errors.NotFound;
    super(`cannot run ${JSON.stringify(command)}: ${notFound ? "not found" : String(cause)}`, {
      cause,
    });
    this.name = "SpawnError";
    this.status = notFound ? EXIT.NOT_FOUND : EXIT.CANNOT_EXECUTE;
  }
}

/** One run of the command. */
export class Child {
  readonly #process: Deno.ChildProcess;
  readonly #grace: number;
  #stopping: Promise<void> | undefined;

  /**
   * Starts `command` with the CLI's stdio and environment plus `env`.
   *
   * @throws {SpawnError} When it cannot be started.
   */
  constructor(command: readonly string[], env: Record<string, string>, grace: number) {
    const [program, ...args] = command;
    try {
      this.#process = new Deno.Command(program!, { args, env, stdin: "inherit" }).spawn();
    } catch (error) {
      throw new SpawnError(program!, error);
    }
    this.#grace = grace;
  }

  /** The exit status, the shell's way: 128 + N when signal N ended it. */
  get status(): Promise<number> {
    return this.#process.status.then((s) => s.code);
  }

  /** Sends `signal`, unless the command has exited. */
  kill(signal: Deno.Signal): void {
    try {
      this.#process.kill(signal);
    } catch {
      // exited already
    }
  }

  /**
   * Sends `signal` (SIGTERM by default), then SIGKILL when the command has
   * not exited within the grace period; resolves once it has exited.
   */
  stop(signal: Deno.Signal = "SIGTERM"): Promise<void> {
    this.#stopping ??= (async () => {
      this.kill(signal);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const exited = this.#process.status.then(() => true);
      const late = new Promise<false>((
        resolve,
      ) => (timer = setTimeout(resolve, this.#grace, false)));
      if (!(await Promise.race([exited, late]))) this.kill("SIGKILL");
      clearTimeout(timer);
      await this.#process.status;
    })();
    return this.#stopping;
  }
}

/**
 * Calls `handler` with each SIGINT/SIGTERM the CLI gets until disposed.
 */
export class SignalTrap implements Disposable {
  readonly #handlers: [Deno.Signal, () => void][];

  constructor(handler: (signal: Deno.Signal) => void) {
    this.#handlers = FORWARDED.map((signal) => [signal, () => handler(signal)]);
    for (const [signal, listener] of this.#handlers) Deno.addSignalListener(signal, listener);
  }

  [Symbol.dispose](): void {
    for (const [signal, listener] of this.#handlers) Deno.removeSignalListener(signal, listener);
  }
}
