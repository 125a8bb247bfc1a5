/**
 * The command line's subcommands by name: `run`, `lead` and `status`.
 *
 * @module
 */

import type { CliArgs } from "./args.ts";
import { lead } from "./lead.ts";
import type { Log } from "./redis.ts";
import { run } from "./run.ts";
import { status } from "./status.ts";
import type { Subcommand } from "./usage.ts";

export type { Log };

/** Each subcommand's implementation. */
export const COMMANDS: Readonly<Record<Subcommand, (args: CliArgs, log: Log) => Promise<number>>> =
  { run, lead, status };
