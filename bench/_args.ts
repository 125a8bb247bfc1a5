/**
 * Command-line options of the benchmark scripts: `--name=value`,
 * `--name value` and `--flag`.
 *
 * @module
 */

/** The options a script knows. */
export interface ArgSpec {
  /** Options without a value. */
  readonly flags: readonly string[];
  /** Options with a value. */
  readonly values: readonly string[];
  /** Where the options are described, for the error message. */
  readonly usage: string;
}

/**
 * The options in `argv`, by name (a flag's value is "true"). An option the
 * spec does not know, or a value option without a value, ends the process
 * with exit code 2.
 */
export function parseArgs(argv: readonly string[], spec: ArgSpec): Map<string, string> {
  const args = new Map<string, string>();
  const fail = (message: string): never => {
    console.error(`${message}; see ${spec.usage}`);
    Deno.exit(2);
  };
  for (let i = 0; i < argv.length; i++) {
    const [name, value] = argv[i]!.replace(/^--/, "").split("=", 2) as [string, string?];
    if (spec.flags.includes(name)) {
      args.set(name, "true");
    } else if (!spec.values.includes(name)) {
      fail(`unknown option --${name}`);
    } else if (value !== undefined) {
      args.set(name, value);
    } else if (argv[i + 1] !== undefined && !argv[i + 1]!.startsWith("--")) {
      args.set(name, argv[++i]!);
    } else {
      fail(`--${name} needs a value`);
    }
  }
  return args;
}

/** The integer option `name` (at least `min`), or `fallback` when it is absent. */
export function intArg(
  args: ReadonlyMap<string, string>,
  name: string,
  fallback: number,
  min = 1,
): number {
  const value = Number(args.get(name) ?? fallback);
  if (!Number.isInteger(value) || value < min) {
    throw new RangeError(`--${name} must be an integer ≥ ${min}, got ${args.get(name)}`);
  }
  return value;
}
