/**
 * The command line of @x/redlock: run a program under a Redlock, keep one
 * running on exactly one host (leader election), or tell whether a lock is
 * held.
 *
 * ```sh
 * deno run -A jsr:@x/redlock/cli run --redis redis://h1:6379 --redis redis://h2:6379 \
 *     --redis redis://h3:6379 --lease 30s --wait 10s nightly-backup -- ./backup.sh --full
 * deno run -A jsr:@x/redlock/cli lead --lease 10s scheduler -- ./scheduler  # REDLOCK_REDIS=url,url,url
 * deno run -A jsr:@x/redlock/cli status nightly-backup
 * ```
 *
 * `deno run -A jsr:@x/redlock/cli --help` lists the commands; `run --help`,
 * `lead --help` and `status --help` each list its options and exit statuses.
 *
 * @module
 */

import { parseArgs, UsageError } from "./src/cli/args.ts";
import { COMMANDS } from "./src/cli/commands.ts";
import { EXIT, HELP, SYNOPSIS, VERSION } from "./src/cli/usage.ts";

const log = (line: string): void => console.error(`redlock: ${line}`);

/**
 * Runs the command line and returns its exit status.
 *
 * @param args The arguments, without the program name.
 * @returns The exit status: see `--help` of each command.
 *
 * @example Running `status` from code
 * ```ts no-eval
 * import { main } from "jsr:@x/redlock/cli";
 * Deno.exitCode = await main(["status", "--redis", "redis://127.0.0.1:6379", "nightly"]);
 * ```
 */
export async function main(args: readonly string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs(args, (name) => Deno.env.get(name));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    log(error.message);
    console.error(SYNOPSIS[error.topic]);
    return EXIT.USAGE;
  }
  if ("help" in parsed) {
    console.log(HELP[parsed.help]);
    return 0;
  }
  if ("version" in parsed) {
    console.log(`redlock ${VERSION}`);
    return 0;
  }
  try {
    return await COMMANDS[parsed.subcommand](parsed, log);
  } catch (error) {
    log(error instanceof Error ? error.message : String(error));
    return EXIT.SOFTWARE;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
