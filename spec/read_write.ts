/**
 * The read-write model's runs (spec/read_write.qnt): safety simulations
 * with fixed seeds, one line per invariant, then shorter runs whose traces
 * are replayed against real servers running the project's read-write
 * scripts (spec/read_write_replay.ts); and its mutants, each of which must
 * break its invariant.
 *
 * Alone: `deno run -A spec/read_write.ts [--samples N] [--traces N]
 * [--seed N] [--keep DIR]`, `--replay DIR` to replay the traces kept in
 * DIR only, or `--mutants [name…]` for the mutants. Exits 1 when an
 * invariant is violated, a reply differs or a mutant is not caught.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { replayDir } from "./replay_dir.ts";
import type { Mutant } from "./mutants.ts";
import { quintRun, type RunResult } from "./quint.ts";
import { readRwTrace, replayRw } from "./read_write_replay.ts";

/** The entry file of the read-write model: `rw_correct` and its mutants. */
export const RW_MODEL: string = new URL("read_write_mutants.qnt", import.meta.url).pathname;

/** The read-write model's safety invariants, checked together. */
export const RW_SAFETY: readonly string[] = ["WriterAlone", "NoForeignWrite"];

/** Steps per safety run. */
export const RW_SAFETY_STEPS = 150;
/** Steps per replayed run: shorter, so that many traces are replayed. */
export const RW_TRACE_STEPS = 40;

/** What {@linkcode runReadWrite} runs. */
export interface ReadWriteOptions {
  /** Safety runs of {@linkcode RW_SAFETY_STEPS} steps. @default {60} */
  readonly samples?: number;
  /** Runs of {@linkcode RW_TRACE_STEPS} steps whose traces are replayed. @default {120} */
  readonly traces?: number;
  /** @default {1} */
  readonly seed?: number;
  /** Keeps the traces in this directory (else a temporary one, removed). */
  readonly keep?: string;
}

function line(name: string, samples: number, steps: number, result: RunResult): string {
  // An invariant's line says whether it was violated; the traces' line, whether any was.
  const mine = result.which.includes(name) || !RW_SAFETY.includes(name);
  const verdict = result.violated && mine ? "VIOLATED" : "ok";
  return `${name.padEnd(17)} samples ${samples}, steps ${steps} each: ${verdict} (${
    result.seconds.toFixed(0)
  } s)`;
}

/**
 * Simulates the read-write model with fixed seeds (the safety runs, then
 * the shorter runs whose traces are written), printing one line per
 * invariant, and replays the traces against real servers.
 *
 * @param options The budget, seed, and where to keep the traces.
 * @returns Whether no invariant was violated and every replayed reply was equal.
 * @throws {Error} When quint cannot run or the servers cannot start.
 *
 * @example From spec/spec.ts
 * ```ts no-eval
 * import { runReadWrite } from "./read_write.ts";
 * const ok = await runReadWrite({ samples: 60, traces: 120 });
 * ```
 */
export async function runReadWrite(options: ReadWriteOptions = {}): Promise<boolean> {
  const { samples = 60, traces = 120, seed = 1 } = options;
  const dir = options.keep ?? await Deno.makeTempDir({ prefix: "redlock-rw-spec-" });
  if (options.keep) await Deno.mkdir(dir, { recursive: true });
  try {
    const common = { model: RW_MODEL, main: "rw_correct", invariants: RW_SAFETY, seed };
    const safety = await quintRun({ ...common, samples, steps: RW_SAFETY_STEPS });
    for (const name of RW_SAFETY) console.log(line(name, samples, RW_SAFETY_STEPS, safety));
    const short = await quintRun({
      ...common,
      samples: traces,
      steps: RW_TRACE_STEPS,
      outItf: `${dir}/trace_{seq}.itf.json`,
      traces,
    });
    console.log(line("rw (traces)", traces, RW_TRACE_STEPS, short));
    for (const run of [safety, short]) if (run.violated) console.log(run.output);
    const replayed = await replayDir(dir, "rw replay        ", readRwTrace, replayRw, traces);
    return !safety.violated && !short.violated && replayed;
  } finally {
    if (!options.keep) await Deno.remove(dir, { recursive: true });
  }
}

/** Steps per mutant run. */
export const RW_MUTANT_STEPS = 120;

/** A read-write mutant: a {@linkcode Mutant} whose runs may start from their own init. */
export interface RwMutant extends Mutant {
  /** The init action, when not `init`. */
  readonly init?: string;
}

/**
 * The read-write model's mutants (modules of spec/read_write_mutants.qnt),
 * each a rule taken away, with the invariant that must catch it and a
 * budget that does on this model ({@linkcode RW_MUTANT_STEPS} steps a run).
 */
export const RW_MUTANTS: readonly RwMutant[] = [
  {
    main: "rw_read_ignores_writer",
    fault: "RW_READ lets a reader join while a writer holds the lock",
    invariant: "WriterAlone",
    samples: 60,
    seed: 1,
  },
  {
    main: "rw_write_ignores_readers",
    fault: "RW_WRITE takes the lock under `r` without looking at the readers",
    invariant: "WriterAlone",
    samples: 60,
    seed: 1,
  },
  {
    main: "rw_half_quorum",
    fault: "a read-write quorum of N/2",
    invariant: "WriterAlone",
    samples: 60,
    seed: 1,
  },
  {
    main: "rw_release_any",
    fault: "RW_RELEASE of a writer does not compare the value",
    invariant: "NoForeignWrite",
    samples: 60,
    seed: 1,
  },
  {
    main: "rw_no_drift",
    fault: "no drift allowance in a read-write lock's validity",
    invariant: "WriterAlone",
    // every clock slow: where a validity without the allowance outlasts the keys
    init: "initSlow",
    samples: 60,
    seed: 1,
  },
];

/** Runs one mutant; prints its line and returns whether its invariant caught it. */
async function runMutant(mutant: RwMutant): Promise<boolean> {
  const dir = await Deno.makeTempDir({ prefix: "redlock-rw-mutant-" });
  try {
    const result = await quintRun({
      model: RW_MODEL,
      main: mutant.main,
      invariants: [mutant.invariant],
      ...(mutant.init ? { init: mutant.init } : {}),
      ...(mutant.step ? { step: mutant.step } : {}),
      samples: mutant.samples,
      steps: RW_MUTANT_STEPS,
      seed: mutant.seed,
      outItf: `${dir}/trace_{seq}.itf.json`,
    });
    const took = `${result.seconds.toFixed(0)} s`;
    const caught = result.violated && result.which.includes(mutant.invariant);
    if (!caught) {
      console.log(
        `${mutant.main.padEnd(24)} NOT CAUGHT in ${mutant.samples} samples of ` +
          `${RW_MUTANT_STEPS} steps (${took}) — ${mutant.fault}`,
      );
      return false;
    }
    const trace = readRwTrace(await Deno.readTextFile(`${dir}/trace_0.itf.json`));
    console.log(
      `${mutant.main.padEnd(24)} caught by ${mutant.invariant}: counterexample of ` +
        `${trace.states - 1} steps, ${trace.end} ms of model time (seed ${mutant.seed}, ` +
        `${took}) — ${mutant.fault}`,
    );
    return true;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Runs the read-write mutants (all, or those named in `only`), one line each.
 *
 * @param only The mutants' module names to run; all when undefined.
 * @returns How many of those run were not caught.
 * @throws {Error} When quint cannot run.
 *
 * @example From spec/mutants.ts
 * ```ts no-eval
 * import { runReadWriteMutants } from "./read_write.ts";
 * const missed = await runReadWriteMutants();
 * ```
 */
export async function runReadWriteMutants(only?: ReadonlySet<string>): Promise<number> {
  let missed = 0;
  for (const mutant of RW_MUTANTS) {
    if (only && !only.has(mutant.main)) continue;
    if (!(await runMutant(mutant))) missed++;
  }
  return missed;
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: {
      mutants: { type: "boolean" },
      samples: { type: "string" },
      traces: { type: "string" },
      seed: { type: "string" },
      keep: { type: "string" },
      replay: { type: "string" },
    },
  });
  if (values.replay) {
    return await replayDir(values.replay, "rw replay        ", readRwTrace, replayRw, 1) ? 0 : 1;
  }
  if (values.mutants) {
    const only = positionals.length > 0 ? new Set(positionals) : undefined;
    const missed = await runReadWriteMutants(only);
    console.log(missed === 0 ? "every rw mutant caught" : `${missed} rw mutant(s) not caught`);
    return missed === 0 ? 0 : 1;
  }
  const ok = await runReadWrite({
    ...(values.samples ? { samples: Number(values.samples) } : {}),
    ...(values.traces ? { traces: Number(values.traces) } : {}),
    ...(values.seed ? { seed: Number(values.seed) } : {}),
    ...(values.keep ? { keep: values.keep } : {}),
  });
  return ok ? 0 : 1;
}

if (import.meta.main) Deno.exit(await main());
