/**
 * The command line's texts: exit statuses, the one-line synopsis of each
 * subcommand (printed under a usage error) and the help of each (`--help`).
 *
 * @module
 */

import config from "../../deno.json" with { type: "json" };

/** The package's version, printed by `redlock --version`. */
export const VERSION: string = config.version;

/** Exit statuses of the command line besides the command's own. */
export const EXIT = {
  /** `status`: the name is free. */
  FREE: 0,
  /** `status`: the name is held. */
  HELD: 1,
  /** Bad arguments (EX_USAGE). */
  USAGE: 64,
  /** Too few Redis servers answered to tell or to lock (EX_UNAVAILABLE). */
  UNAVAILABLE: 69,
  /** An unexpected failure of the CLI itself (EX_SOFTWARE). */
  SOFTWARE: 70,
  /** `run`: the lock could not be had within `--wait` (EX_TEMPFAIL). */
  NOT_LOCKED: 75,
  /** `run`: the lock was lost, and the command was stopped. */
  LOST: 76,
  /** The command could not be started: not executable. */
  CANNOT_EXECUTE: 126,
  /** The command could not be started: not found. */
  NOT_FOUND: 127,
} as const;

/** The subcommands. */
export type Subcommand = "run" | "lead" | "status";

/** What `--help` and a usage error print for: a subcommand or the whole. */
export type Topic = Subcommand | "main";

/** The one-line synopsis of each topic, printed under a usage error. */
export const SYNOPSIS: Readonly<Record<Topic, string>> = {
  main: "Usage: redlock run|lead|status [options] NAME [-- COMMAND [ARGS...]] (--help, --version)",
  run: "Usage: redlock run [options] NAME -- COMMAND [ARGS...] (redlock run --help)",
  lead: "Usage: redlock lead [options] NAME -- COMMAND [ARGS...] (redlock lead --help)",
  status: "Usage: redlock status [options] NAME (redlock status --help)",
};

const COMMON_EXITS = `  ${EXIT.USAGE}       bad arguments
  ${EXIT.UNAVAILABLE}       too few Redis servers answered (each failing server is named on stderr)
  ${EXIT.SOFTWARE}       an unexpected failure of the CLI`;

const COMMAND_EXITS =
  `  ${EXIT.NOT_FOUND} / ${EXIT.CANNOT_EXECUTE} the command was not found / is not executable`;

const SIGNALS = `Signals: SIGHUP, SIGINT, SIGQUIT and SIGTERM are handled alike: the signal goes to
the command's process group (exactly once, also for a Ctrl-C), SIGKILL follows
after --grace, and the lock is released once the command has exited.`;

const REDIS_OPTION =
  `  --redis URL     a Redis server: redis://[user:password@]host:port[/db] or rediss://…;
                  repeat for each independent server (default: REDLOCK_REDIS=url,url,…)
  --tls-ca FILE   trust the CA certificates in FILE (PEM) for rediss:// servers,
                  instead of the system's (default: REDLOCK_TLS_CA=FILE)`;

const DURATIONS = "Durations: 500ms, 30s, 5m, 1h.";

const RUN_HELP = `Usage: redlock run [options] NAME -- COMMAND [ARGS...]

Runs COMMAND in a process group of its own while holding the lock NAME on a
majority of the Redis servers, extending it while the command runs, and
releases it when the command and whatever it left in its group have exited.
With --fencing the command's environment has REDLOCK_FENCING_TOKEN.

Options:
${REDIS_OPTION}
  --lease D       the lock's lease, extended while the command runs (default 30s)
  --wait D        how long to wait for the lock (default: one attempt)
  --grace D       time between SIGTERM and SIGKILL when the command must stop (default 10s)
  --fencing       take a fencing token and put it in REDLOCK_FENCING_TOKEN
  -h, --help      this text

${DURATIONS}

${SIGNALS}

Exit status:
  N        the command's own status (128 + N when signal N ended it)
  128 + N  signal N (SIGHUP 1, SIGINT 2, SIGQUIT 3, SIGTERM 15) stopped the CLI
  ${EXIT.NOT_LOCKED}       the lock is held by another (not had within --wait); the command did not run
  ${EXIT.LOST}       the lock was lost: the command was stopped (SIGTERM, SIGKILL after --grace)
${COMMAND_EXITS}
${COMMON_EXITS}`;

const LEAD_HELP = `Usage: redlock lead [options] NAME -- COMMAND [ARGS...]

Keeps COMMAND running on exactly one of the hosts that run \`lead\` for NAME:
campaigns for the lock NAME, runs the command (in a process group of its own)
while leading, restarts it when it exits (after a backoff when its status is
not 0), stops it (SIGTERM, SIGKILL after --grace) when leadership is lost, then
campaigns again. It says on stderr when it waits for another leader. When no
quorum of servers answers for 3 leases in a row, it gives up (status ${EXIT.UNAVAILABLE}).
The command's environment has REDLOCK_FENCING_TOKEN: the term, which grows from
leader to leader.

Options:
${REDIS_OPTION}
  --lease D       the lease; a crashed leader is replaced within about this (default 10s)
  --grace D       time between SIGTERM and SIGKILL when the command must stop (default 10s)
  -h, --help      this text

${DURATIONS}

${SIGNALS} Then \`lead\` ends.

Exit status:
  0        a signal stopped it (the command was stopped, the lock released)
${COMMAND_EXITS}
${COMMON_EXITS}`;

const STATUS_HELP = `Usage: redlock status [options] NAME

Tells whether the lock NAME is held on a majority of the Redis servers, and
for how long.

Options:
${REDIS_OPTION}
  -h, --help      this text

Exit status:
  ${EXIT.FREE}        free
  ${EXIT.HELD}        held
${COMMON_EXITS}`;

const MAIN_HELP = `Usage: redlock <command> [options] NAME [-- COMMAND [ARGS...]]

Commands:
  run     run a command while holding a lock
  lead    keep a command running on exactly one of the hosts that run it
  status  tell whether a lock is held

Options:
  -h, --help      this text; \`redlock <command> --help\` for a command's options
                  and exit statuses
  --version       the version

Exit status (each command's help lists its own):
${COMMON_EXITS}`;

/** The help of each topic (`--help`). */
export const HELP: Readonly<Record<Topic, string>> = {
  main: MAIN_HELP,
  run: RUN_HELP,
  lead: LEAD_HELP,
  status: STATUS_HELP,
};
