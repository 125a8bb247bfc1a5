/**
 * The command line's arguments: subcommand, options, NAME, `--` and the
 * command, parsed strictly (anything unknown or misplaced is a usage
 * error). No Redis here.
 *
 * @module
 */

import type { Subcommand, Topic } from "./usage.ts";

/** A bad command line: one line for the user, then the synopsis of `topic`. */
export class UsageError extends Error {
  /** Whose synopsis to print: the subcommand's when known. */
  readonly topic: Topic;

  /**
   * @param message What is wrong, naming the argument.
   * @param topic Whose synopsis to print.
   */
  constructor(message: string, topic: Topic = "main") {
    super(message);
    this.name = "UsageError";
    this.topic = topic;
  }
}

/** `--help`: print the help of `help`, nothing else. */
export interface HelpArgs {
  readonly help: Topic;
}

/** `--version`: print the version, nothing else. */
export interface VersionArgs {
  readonly version: true;
}

/** A parsed command line of a subcommand. */
export interface CliArgs {
  readonly subcommand: Subcommand;
  /** Redis URLs, from `--redis` or `REDLOCK_REDIS`. */
  readonly redis: readonly string[];
  /** The lock's name (a Redis key); the first of `names`. */
  readonly name: string;
  /** Every name given (`status` takes several). */
  readonly names: readonly string[];
  /** `status`: print one JSON object per name, for scripts. */
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

const SUBCOMMANDS: readonly Subcommand[] = ["run", "lead", "status"];

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

const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
const MAX_MS = 2 ** 31 - 1;

/**
 * Parses a duration such as `500ms`, `30s`, `1.5m` or `1h` into whole ms.
 *
 * @param text The duration as given.
 * @param option The option's name, for the message.
 * @param min The least ms accepted.
 * @returns The duration in ms.
 * @throws {UsageError} When it is not a duration from `min` to 2^31 - 1 ms.
 */
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

/**
 * A URL with its password (if any) replaced by `***`, for messages.
 *
 * @param url A URL as the user gave it.
 * @returns The URL without its password.
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.href;
  } catch {
    return url.replace(/\/\/[^@/]*@/, "//***@");
  }
}

/** Checks that `url` is one the CLI can connect to; the message names what is wrong. */
function checkUrl(url: string): void {
  const port = /^rediss?:\/\/(?:[^@/]*@)?(?:\[[^\]]*\]|[^:/]*):(\d+)(?:[/?#]|$)/.exec(url)?.[1];
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65_535)) {
    throw new UsageError(`--redis ${redactUrl(url)}: the port must be from 1 to 65535`);
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--redis must be a redis:// or rediss:// URL, got "${redactUrl(url)}"`);
  }
  if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
    throw new UsageError(
      `--redis must be a redis:// or rediss:// URL, got the scheme "${parsed.protocol}" in ` +
        `"${redactUrl(url)}"`,
    );
  }
  if (!parsed.hostname) throw new UsageError(`--redis ${redactUrl(url)} has no host`);
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

/** The arguments of a subcommand, sorted but not yet checked. */
interface Scanned {
  /** Each option's values, in order. */
  readonly values: Map<string, string[]>;
  /** Arguments that are not options, before `--`. */
  readonly positional: string[];
  /** What follows `--`, or undefined without `--`. */
  readonly command: string[] | undefined;
}

/** The option name and inline value of `--name[=value]` or `-h`. */
function splitOption(arg: string): [string, string | undefined] {
  if (arg === "-h") return ["help", undefined];
  if (!arg.startsWith("--")) throw new UsageError(`unknown option ${arg}`);
  const eq = arg.indexOf("=");
  return eq === -1 ? [arg.slice(2), undefined] : [arg.slice(2, eq), arg.slice(eq + 1)];
}

/** Sorts `rest` into options, positionals and the command after `--`. */
function scan(subcommand: Subcommand, rest: readonly string[]): Scanned {
  const takes = OPTIONS[subcommand];
  const scanned: Scanned = { values: new Map(), positional: [], command: undefined };
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === "--") return { ...scanned, command: rest.slice(i + 1) };
    if (!arg.startsWith("-") || arg === "-") {
      scanned.positional.push(arg);
      continue;
    }
    const [name, inline] = splitOption(arg);
    if (!(name in takes)) throw new UsageError(`unknown option ${arg.split("=")[0]}`);
    let value = inline ?? "";
    if (takes[name] && inline === undefined) {
      const next = rest[i + 1];
      if (next === undefined || next === "--") throw new UsageError(`--${name} needs a value`);
      value = next;
      i++;
    } else if (!takes[name] && inline !== undefined) {
      throw new UsageError(`--${name} takes no value`);
    }
    scanned.values.set(name, [...(scanned.values.get(name) ?? []), value]);
  }
  return scanned;
}

/** The Redis URLs: `--redis` options, else `REDLOCK_REDIS`; each checked, none twice. */
function redisUrls(
  values: Map<string, string[]>,
  env: (name: string) => string | undefined,
): string[] {
  const fromEnv = env("REDLOCK_REDIS");
  const redis = values.get("redis") ??
    (fromEnv ? fromEnv.split(",").map((u) => u.trim()).filter(Boolean) : []);
  if (redis.length === 0) {
    throw new UsageError("no Redis server: give --redis URL or REDLOCK_REDIS=url,url");
  }
  redis.forEach(checkUrl);
  if (new Set(redis).size !== redis.length) {
    throw new UsageError("a --redis URL is given twice; each server must appear once");
  }
  return redis;
}

/** NAME and the command, checked against what `subcommand` takes. */
function nameAndCommand(subcommand: Subcommand, scanned: Scanned): [string, string[]] {
  const [name, ...extra] = scanned.positional;
  if (name === undefined || name === "") throw new UsageError("NAME is missing");
  if (subcommand === "status") {
    if (extra.includes("")) throw new UsageError("NAME must not be empty");
    if (scanned.command !== undefined) throw new UsageError("status takes no command (--)");
    return [name, []];
  }
  if (extra.length > 0) {
    throw new UsageError(
      `unexpected argument "${extra[0]}": exactly one NAME comes before --, the command after`,
    );
  }
  if (scanned.command === undefined) throw new UsageError("-- and the command are missing");
  if (scanned.command.length === 0) throw new UsageError("COMMAND is missing after --");
  return [name, scanned.command];
}

/** The arguments of `subcommand`, checked and with their defaults. */
function resolve(
  subcommand: Subcommand,
  scanned: Scanned,
  env: (name: string) => string | undefined,
): CliArgs {
  const once = (name: string): string | undefined => {
    const list = scanned.values.get(name);
    if (list && list.length > 1) throw new UsageError(`--${name} given twice`);
    return list?.[0];
  };
  const redis = redisUrls(scanned.values, env);
  const [name, command] = nameAndCommand(subcommand, scanned);
  const lease = parseDuration(once("lease") ?? DEFAULT_LEASE[subcommand], "--lease", 10);
  const waitText = once("wait");
  const wait = waitText === undefined ? 0 : parseDuration(waitText, "--wait", 0);
  const grace = parseDuration(once("grace") ?? "10s", "--grace", 0);
  const fencing = scanned.values.has("fencing");
  const tlsCa = readCa(once("tls-ca") ?? env("REDLOCK_TLS_CA"));
  const names = subcommand === "status" ? scanned.positional : [name];
  const json = scanned.values.has("json");
  return { subcommand, redis, name, names, json, command, lease, wait, grace, fencing, tlsCa };
}

/**
 * Parses the command line (without the program name).
 *
 * @param args The arguments.
 * @param env Reads `REDLOCK_REDIS` and `REDLOCK_TLS_CA`.
 * @returns The subcommand's arguments, or a request for help or the version.
 * @throws {UsageError} On anything it cannot use: an unknown option (one dash
 * or two), no NAME (or more than one before `--` in `run` and `lead`), a
 * missing `--` before the command.
 */
export function parseArgs(
  args: readonly string[],
  env: (name: string) => string | undefined,
): CliArgs | HelpArgs | VersionArgs {
  const [first, ...rest] = args;
  if (first === undefined) throw new UsageError("a command is missing (run, lead or status)");
  if (first === "-h" || first === "--help" || first === "help") return { help: "main" };
  if (first === "--version") return { version: true };
  if (first.startsWith("-")) throw new UsageError(`unknown option ${first.split("=")[0]}`);
  if (!SUBCOMMANDS.includes(first as Subcommand)) {
    throw new UsageError(`unknown command "${first}" (run, lead or status)`);
  }
  const subcommand = first as Subcommand;
  try {
    const scanned = scan(subcommand, rest);
    if (scanned.values.has("help")) return { help: subcommand };
    return resolve(subcommand, scanned, env);
  } catch (error) {
    if (error instanceof UsageError && error.topic === "main") {
      throw new UsageError(error.message, subcommand);
    }
    throw error;
  }
}
