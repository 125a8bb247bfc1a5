/**
 * Runs the Quint simulator on the model: installs the pinned
 * `@informalsystems/quint` (spec/npm/package.json and its lock) with npm into a
 * cache directory when it is missing, and runs `quint run` with the
 * TypeScript backend (the default backend and `quint verify` fetch binaries
 * from the internet).
 *
 * @module
 */

const SPEC = new URL(".", import.meta.url).pathname;

/** The model's entry file: the modules `correct` and the mutants. */
export const MODEL: string = `${SPEC}mutants.qnt`;

/**
 * The directory that holds `node_modules/.bin/quint`: `$REDLOCK_QUINT` when
 * set (CI installs it there), else a cache directory named after the lock
 * file's hash, installed with `npm ci` on first use.
 *
 * @returns The directory.
 * @throws {Error} When npm cannot install the packages.
 */
export async function quintHome(): Promise<string> {
  const given = Deno.env.get("REDLOCK_QUINT");
  if (given) return given;
  const lock = await Deno.readFile(`${SPEC}npm/package-lock.json`);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", lock));
  const tag = [...digest.slice(0, 6)].map((b) => b.toString(16).padStart(2, "0")).join("");
  const cache = Deno.env.get("XDG_CACHE_HOME") ??
    `${Deno.env.get("HOME") ?? "/tmp"}/.cache`;
  const home = `${cache}/redlock-spec/quint-${tag}`;
  if (await exists(`${home}/node_modules/.bin/quint`)) return home;
  // Installed beside it, then renamed: a run that starts meanwhile never sees half of it.
  await Deno.mkdir(`${cache}/redlock-spec`, { recursive: true });
  const fresh = await Deno.makeTempDir({ dir: `${cache}/redlock-spec`, prefix: "installing-" });
  for (const file of ["package.json", "package-lock.json"]) {
    await Deno.copyFile(`${SPEC}npm/${file}`, `${fresh}/${file}`);
  }
  console.log(`installing quint into ${home}`);
  const npm = new Deno.Command("npm", {
    args: ["ci", "--prefix", fresh, "--no-audit", "--no-fund", "--loglevel=error"],
    stdout: "inherit",
    stderr: "inherit",
  });
  if (!(await npm.output()).success) {
    await Deno.remove(fresh, { recursive: true });
    throw new Error(`npm ci of spec/npm/package.json into ${fresh} failed`);
  }
  if (!(await exists(`${home}/node_modules/.bin/quint`))) {
    await Deno.remove(home, { recursive: true }).catch(() => {});
    await Deno.rename(fresh, home).catch(() => {});
  }
  await Deno.remove(fresh, { recursive: true }).catch(() => {});
  return home;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

/** One `quint run` of the model. */
export interface RunOptions {
  /** The entry file. @default {MODEL} */
  readonly model?: string;
  /** The module: `correct` or a mutant's. */
  readonly main: string;
  /** The invariants, checked together. */
  readonly invariants: readonly string[];
  /** @default {"init"} */
  readonly init?: string;
  /** @default {"step"} */
  readonly step?: string;
  readonly samples: number;
  readonly steps: number;
  readonly seed: number;
  /** Writes the traces here (`{seq}` numbers them), with `--mbt`. */
  readonly outItf?: string;
  /** How many traces to write. @default {1} */
  readonly traces?: number;
}

/** What a run found. */
export interface RunResult {
  /** Whether an invariant was violated. */
  readonly violated: boolean;
  /** Which of the invariants were violated, when it says. */
  readonly which: readonly string[];
  /** The simulator's output. */
  readonly output: string;
  readonly seconds: number;
}

/**
 * Runs `quint run --backend=typescript` on the model.
 *
 * @param options The module, invariants, budget and seed.
 * @returns Whether an invariant was violated, and the output.
 * @throws {Error} When quint fails for another reason (e.g. the model does not parse).
 */
export async function quintRun(options: RunOptions): Promise<RunResult> {
  const home = await quintHome();
  const {
    model = MODEL,
    main,
    invariants,
    init = "init",
    step = "step",
    samples,
    steps,
    seed,
  } = options;
  const args = [
    "run",
    model,
    "--backend=typescript",
    `--main=${main}`,
    `--init=${init}`,
    `--step=${step}`,
    `--max-samples=${samples}`,
    `--max-steps=${steps}`,
    `--seed=${seed}`,
    "--verbosity=1",
    "--invariants",
    ...invariants,
  ];
  if (options.outItf) {
    args.push(
      `--out-itf=${options.outItf}`,
      `--n-traces=${options.traces ?? 1}`,
      "--mbt",
    );
  }
  const started = performance.now();
  const { code, stdout, stderr } = await new Deno.Command(
    `${home}/node_modules/.bin/quint`,
    {
      args,
      stdout: "piped",
      stderr: "piped",
    },
  ).output();
  const seconds = (performance.now() - started) / 1000;
  const output = new TextDecoder().decode(stdout) +
    new TextDecoder().decode(stderr);
  const violated = /\[violation\]/.test(output);
  if (code !== 0 && !violated) {
    throw new Error(`quint run failed (exit ${code}):\n${output}`);
  }
  // A violated invariant is listed as `❌ Name` (not always for a single one).
  const listed = [...output.matchAll(/❌\s+(\w+)/g)].map((m) => m[1]!);
  const which = violated && listed.length === 0 ? [...invariants] : listed;
  return { violated, which, output, seconds };
}
