/**
 * The command line's arguments: subcommands, options, durations, usage
 * texts and exit statuses. No Redis here.
 *
 * @module
 */

/** Exit statuses of the command line besides the command's own. */
export const EXIT = {
  /** `status`: the name is free. */
  FREE: 0,
  /** `status`: the name is held. */
  HELD: 1,
  /** Bad arguments (EX_USAGE). */
  USAGE: 64,
  /** An unexpected failure of the CLI itself (EX_SOFTWARE). */
  SOFTWARE: 70,
  /** Too few Redis servers answered to tell or to lock (EX_UNAVAILABLE). */
  UNAVAILABLE: 69,
  /** `run`: the lock could not be had within `--wait` (EX_TEMPFAIL). */
  NOT_LOCKED: 75,
  /** `run`: the lock was lost, and the command was stopped. */
  LOST: 76,
  /** The command could not be started: not executable. */
  CANNOT_EXECUTE: 126,
  /** The command could not be started: not found. */
  NOT_FOUND: 127,
} as const;

/** A bad command line: one line for the user, then the usage. */
export class UsageError extends Error {
  /** The subcommand whose usage to print, if known. */
  readonly subcommand: Subcommand | undefined;

  constructor(message: string, subcommand?: Subcommand) {
    super(message);
    this.name = "UsageError";
    this.subcommand = subcommand;
  }
}

/** `--help`: print this usage, nothing else. */
export interface HelpArgs {
  readonly help: Subcommand | "main";
}

/** The subcommands. */
export type Subcommand = "run" | "lead" | "status";
const SUBCOMMANDS: readonly Subcommand[] = ["run", "lead", "status"];

/** A parsed command line. */
export interface CliArgs {
  readonly subcommand: Subcommand;
  /** Redis URLs, from `--redis` or `REDLOCK_REDIS`. */
  readonly redis: readonly string[];
  /** The lock's name (a Redis key). */
  readonly name: string;
  /** Every name given (`status` takes several). */
  readonly names: readonly string[];
  /** `status`: print JSON for scripts. */
  readonly json: boolean;
  /** The command and its arguments (`run` and `lead`). */
  readonly command: readonly string[];
  /** ms of the lease, extended while the command runs. */
  readonly lease: number;
  /** ms `run` waits for the lock; 0 = one attempt. */
  readonly wait: number;
  /** ms between SIGTERM and SIGKILL when the command must stop. */
  readonly grace: number;
  /** Take a fencing token (`run`; `lead` always does). */
  readonly fencing: boolean;
  /** The CA certificates (PEM) `rediss://` servers are checked against, from `--tls-ca`. */
  readonly tlsCa?: string | undefined;
}

const EXIT_STATUSES = `Exit status:
  run     the command's own status (128 + N when signal N ended it);
          ${EXIT.NOT_LOCKED} the lock could not be had within --wait;
          ${EXIT.LOST} the lock was lost, and the command was stopped (SIGTERM, SIGKILL after --grace)
  lead    0 after SIGINT/SIGTERM stopped it (the command is stopped and the lock released)
  status  ${EXIT.FREE} every name free, ${EXIT.HELD} one held
  all     ${EXIT.USAGE} bad arguments; ${EXIT.UNAVAILABLE} too few Redis servers answered;
          ${EXIT.NOT_FOUND} / ${EXIT.CANNOT_EXECUTE} the command was not found / not executable;
          ${EXIT.SOFTWARE} an unexpected failure of the CLI`;

const REDIS_OPTION =
  `  --redis URL     a Redis server: redis://[user:password@]host:port[/db] or rediss://…;
                  repeat for each independent server (default: REDLOCK_REDIS=url,url,…)
  --tls-ca FILE   trust the CA certificates in FILE (PEM) for rediss:// servers,
                  instead of the system's (default: REDLOCK_TLS_CA=FILE)`;

/** The usage of each subcommand, and of the whole. */
export const USAGE: Readonly<Record<Subcommand | "main", string>> = {
  main: `Usage: redlock <command> [options]

Commands:
  run     run a command while holding a lock
  lead    keep a command running on exactly one of the hosts that run it
  status  tell whether a lock is held

Run \`redlock <command> --help\` for its options.

${EXIT_STATUSES}`,
  run: `Usage: redlock run [options] NAME -- COMMAND [ARGS...]

Runs COMMAND while holding the lock NAME on a majority of the Redis servers,
extending it while the command runs, and releases it when the command exits.
SIGINT and SIGTERM are passed to the command. The command's environment has
REDLOCK_FENCING_TOKEN with --fencing.

Options:
${REDIS_OPTION}
  --lease D       the lock's lease, extended while the command runs (default 30s)
  --wait D        how long to wait for the lock (default: one attempt)
  --grace D       time between SIGTERM and SIGKILL when the lock is lost (default 10s)
  --fencing       take a fencing token and put it in REDLOCK_FENCING_TOKEN
  -h, --help      this text

Durations: 500ms, 30s, 5m, 1h.

${EXIT_STATUSES}`,
  lead: `Usage: redlock lead [options] NAME -- COMMAND [ARGS...]

Keeps COMMAND running on exactly one of the hosts that run \`lead\` for NAME:
campaigns for the lock NAME, runs the command while leading (extending the
lock), restarts it when it exits, and stops it (SIGTERM, then SIGKILL after
--grace) when leadership is lost, then campaigns again. A command that exits
with a non-zero status is restarted after a backoff. SIGINT or SIGTERM stop
the command, release the lock and end \`lead\`. The command's environment has
REDLOCK_FENCING_TOKEN: the term, which grows from leader to leader.

Options:
${REDIS_OPTION}
  --lease D       the lease; a crashed leader is replaced within about this (default 10s)
  --grace D       time between SIGTERM and SIGKILL when the command must stop (default 10s)
  -h, --help      this text

Durations: 500ms, 30s, 5m, 1h.

${EXIT_STATUSES}`,
  status: `Usage: redlock status [options] NAME...

Tells whether each lock NAME is held on a majority of the Redis servers and
for how long, then per server: its TTL (never the value), the waiters and
the fencing counter; a read-write lock's writer or readers; a semaphore's
permits in use. Exit status ${EXIT.FREE} when every name is free, ${EXIT.HELD} when one is held.

Options:
${REDIS_OPTION}
      --json      one JSON object per name, one line each
  -h, --help      this text

${EXIT_STATUSES}`,
};

const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
const MAX_MS = 2 ** 31 - 1;

/** Parses a duration such as `500ms`, `30s`, `1.5m` or `1h` into whole ms. */
export function parseDuration(text: string, option: string, min: number): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(text);
  if (!match) {
    throw new UsageError(`${option} must be a duration such as 500ms, 30s or 5m, got "${text}"`);
  }
  const ms = Math.round(Number(match[1]) * UNITS[match[2]!]!);
  if (ms < min || ms > MAX_MS) {
    throw new UsageError(`${option} must be from ${min}ms to ${MAX_MS}ms, got "${text}"`);
  }
  return ms;
}

/** Options each subcommand takes; true when it takes a value. */
const OPTIONS: Readonly<Record<Subcommand, Readonly<Record<string, boolean>>>> = {
  run: {
    redis: true,
    "tls-ca": true,
    lease: true,
    wait: true,
    grace: true,
    fencing: false,
    help: false,
  },
  lead: { redis: true, "tls-ca": true, lease: true, grace: true, help: false },
  status: { redis: true, "tls-ca": true, json: false, help: false },
};

const DEFAULT_LEASE: Readonly<Record<Subcommand, string>> = {
  run: "30s",
  lead: "10s",
  status: "30s",
};

/** The option name and inline value of `--name[=value]`, or undefined for a positional. */
function splitOption(arg: string): [string, string | undefined] | undefined {
  if (arg === "-h") return ["help", undefined];
  if (!arg.startsWith("--") || arg === "--") return undefined;
  const eq = arg.indexOf("=");
  return eq === -1 ? [arg.slice(2), undefined] : [arg.slice(2, eq), arg.slice(eq + 1)];
}

/** Whether a URL is one the CLI can connect to. */
function checkUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--redis must be a redis:// or rediss:// URL, got "${redactUrl(url)}"`);
  }
  if ((parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") || !parsed.hostname) {
    throw new UsageError(
      `--redis must be a redis:// or rediss:// URL with a host, got "${redactUrl(url)}"`,
    );
  }
  return url;
}

/** A URL with its password (if any) replaced by `***`, for messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.href;
  } catch {
    return url.replace(/\/\/[^@/]*@/, "//***@");
  }
}

/** The PEM text of `--tls-ca FILE` (or `REDLOCK_TLS_CA`), or undefined when not given. */
function readCa(file: string | undefined): string | undefined {
  if (file === undefined || file === "") return undefined;
  let pem: string;
  try {
    pem = Deno.readTextFileSync(file);
  } catch (error) {
    throw new UsageError(`--tls-ca cannot read "${file}": ${(error as Error).message}`);
  }
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new UsageError(`--tls-ca must be a file of PEM certificates, got "${file}"`);
  }
  return pem;
}

/**
 * Parses the command line (without the program name).
 *
 * @param args The arguments.
 * @param env Reads `REDLOCK_REDIS` and `REDLOCK_TLS_CA`.
 * @throws {UsageError} On anything it cannot use.
 */
export function parseArgs(
  args: readonly string[],
  env: (name: string) => string | undefined,
): CliArgs | HelpArgs {
  const [first, ...rest] = args;
  if (first === undefined) throw new UsageError("a command is missing (run, lead or status)");
  if (first === "-h" || first === "--help" || first === "help") {
    return { help: "main" };
  }
  if (!SUBCOMMANDS.includes(first as Subcommand)) {
    throw new UsageError(`unknown command "${first}" (run, lead or status)`);
  }
  const subcommand = first as Subcommand;
  const takes = OPTIONS[subcommand];
  const values = new Map<string, string[]>();
  const positional: string[] = [];
  let command: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === "--") {
      command = rest.slice(i + 1);
      break;
    }
    const option = splitOption(arg);
    if (option === undefined) {
      positional.push(arg);
      // In run and lead, what follows the name is the command, options and all.
      if (subcommand !== "status" && positional.length === 1 && i + 1 < rest.length) {
        const next = rest[i + 1]!;
        if (next !== "--" && splitOption(next) === undefined) {
          command = rest.slice(i + 1);
          break;
        }
      }
      continue;
    }
    const [name, inline] = option;
    if (!(name in takes)) throw new UsageError(`unknown option --${name}`, subcommand);
    let value = inline ?? "";
    if (takes[name]) {
      if (inline === undefined) {
        if (i + 1 >= rest.length) throw new UsageError(`--${name} needs a value`, subcommand);
        value = rest[++i]!;
      }
    } else if (inline !== undefined) {
      throw new UsageError(`--${name} takes no value`, subcommand);
    }
    values.set(name, [...(values.get(name) ?? []), value]);
  }
  if (values.has("help")) return { help: subcommand };

  const once = (name: string): string | undefined => {
    const list = values.get(name);
    if (list && list.length > 1) throw new UsageError(`--${name} given twice`, subcommand);
    return list?.[0];
  };
  const fromEnv = env("REDLOCK_REDIS");
  const redis = values.get("redis") ??
    (fromEnv ? fromEnv.split(",").map((u) => u.trim()).filter(Boolean) : []);
  if (redis.length === 0) {
    throw new UsageError("no Redis server: give --redis URL or REDLOCK_REDIS=url,url", subcommand);
  }
  try {
    redis.forEach(checkUrl);
    if (new Set(redis).size !== redis.length) {
      throw new UsageError("a --redis URL is given twice; each server must appear once");
    }
    const [name, ...extra] = positional;
    if (name === undefined || name === "") throw new UsageError("NAME is missing");
    if (extra.length > 0 && subcommand !== "status") {
      throw new UsageError(`unexpected argument "${extra[0]}": put the command after --`);
    }
    if (extra.includes("")) throw new UsageError("NAME must not be empty");
    if (subcommand !== "status" && command.length === 0) {
      throw new UsageError("COMMAND is missing (after --)");
    }
    const lease = parseDuration(once("lease") ?? DEFAULT_LEASE[subcommand], "--lease", 10);
    const waitText = once("wait");
    const wait = waitText === undefined ? 0 : parseDuration(waitText, "--wait", 0);
    const grace = parseDuration(once("grace") ?? "10s", "--grace", 0);
    const tlsCa = readCa(once("tls-ca") ?? env("REDLOCK_TLS_CA"));
    return {
      subcommand,
      redis,
      name,
      names: positional,
      json: values.has("json"),
      command,
      lease,
      wait,
      grace,
      fencing: values.has("fencing"),
      tlsCa,
    };
  } catch (error) {
    if (error instanceof UsageError && error.subcommand === undefined) {
      throw new UsageError(error.message, subcommand);
    }
    throw error;
  }
}
