/**
 * The semaphore part of the model (spec/semaphore.qnt): simulates it with
 * fixed seeds and checks its invariants, one line each (samples, steps,
 * result), then replays the traces of short runs against real servers
 * running the project's semaphore scripts (spec/semaphore_replay.ts); with
 * `--mutants`, runs its mutants (spec/semaphore_mutants.qnt), each of which
 * must break its invariant. Exits 1 when an invariant is violated, a reply
 * differs or a mutant is not caught.
 *
 * `deno run -A spec/semaphore.ts [--samples N] [--traces N] [--calm N] [--seed N]
 * [--keep DIR] [--replay DIR] [--mutants [NAME…]]`
 *
 * @module
 */

import { parseArgs } from "node:util";
import { replayDir } from "./replay_dir.ts";
import type { Mutant } from "./mutants.ts";
import { quintRun, type RunResult } from "./quint.ts";
import { readSemTrace, replaySemaphore } from "./semaphore_replay.ts";
import type { Scenario } from "./spec.ts";

/** The semaphore model's entry file: the modules `correct` and the mutants. */
export const SEMAPHORE_MODEL: string = new URL("semaphore_mutants.qnt", import.meta.url).pathname;

/** The semaphore's safety invariants, checked together. */
export const SEMAPHORE_SAFETY: readonly string[] = ["PermitBound", "NoForeignWrite"];

/** Steps per safety run. */
export const SEMAPHORE_STEPS = 100;
/** Steps per replayed run: shorter, so that many traces are replayed. */
export const SEMAPHORE_TRACE_STEPS = 40;
/** Steps per calm run (bounded progress). */
export const SEMAPHORE_CALM_STEPS = 300;

/**
 * A holder whose clock runs slow, near the end of its slot's lease, while
 * another client asks (spec/semaphore.qnt): the no-drift mutant starts from
 * it, and {@linkcode semaphoreSpec} runs `correct` from it with the same
 * budget.
 */
export const SLOW_HOLDER: Scenario = {
  init: "initSlowHolder",
  step: "stepGreedy",
  steps: 40,
  samples: 50,
};

/** How many runs of each kind {@linkcode semaphoreSpec} makes. */
export interface SemaphoreSpecOptions {
  /**
   * Safety runs with every fault (their traces replayed too), and as many
   * with greedy holders.
   *
   * @default {40}
   */
  readonly samples?: number;
  /** Short runs whose traces are replayed besides. @default {60} */
  readonly traces?: number;
  /** Calm runs (bounded progress). @default {16} */
  readonly calm?: number;
  /** @default {1} */
  readonly seed?: number;
  /** Keeps the traces in this directory (else a temporary one, removed). */
  readonly keep?: string;
}

/**
 * One line for a run: `invariant` when the line is about one of the run's
 * invariants, else the run as a whole.
 */
function line(
  label: string,
  samples: number,
  steps: number,
  result: RunResult,
  invariant?: string,
): string {
  const broken = result.violated &&
    (invariant === undefined || result.which.length === 0 || result.which.includes(invariant));
  return `${label.padEnd(20)} samples ${samples}, steps ${steps} each: ${
    broken ? "VIOLATED" : "ok"
  } (${result.seconds.toFixed(0)} s)`;
}

/**
 * Simulates the semaphore model and replays its traces: safety runs with
 * every fault, runs whose holders keep their permits to the end of their
 * validity, short runs, calm runs for bounded progress, then runs from the
 * scenario {@linkcode SLOW_HOLDER}; the traces of the safety and short runs
 * are replayed against real servers.
 * Prints one line per invariant and run.
 *
 * @param options The budget and seed.
 * @returns Whether every invariant held and every reply was equal.
 * @throws {Error} When quint or the servers cannot run.
 *
 * @example From another driver
 * ```ts no-eval
 * import { semaphoreSpec } from "./semaphore.ts";
 * const passed = await semaphoreSpec({ samples: 40, traces: 60 });
 * ```
 */
export async function semaphoreSpec(options: SemaphoreSpecOptions = {}): Promise<boolean> {
  const { samples = 40, traces = 60, calm = 16, seed = 1 } = options;
  const dir = options.keep ?? await Deno.makeTempDir({ prefix: "redlock-semaphore-" });
  const invariants = SEMAPHORE_SAFETY;
  const base = { model: SEMAPHORE_MODEL, main: "correct", invariants, seed };
  try {
    // the safety runs' traces are replayed too: theirs are long enough for restarts and leaves
    const safety = await quintRun({
      ...base,
      samples,
      steps: SEMAPHORE_STEPS,
      outItf: `${dir}/long_{seq}.itf.json`,
      traces: samples,
    });
    for (const name of invariants) {
      console.log(line(name, samples, SEMAPHORE_STEPS, safety, name));
    }
    const greedy = await quintRun({
      ...base,
      step: "stepGreedy",
      samples,
      steps: SEMAPHORE_STEPS,
    });
    console.log(line("Safety (greedy)", samples, SEMAPHORE_STEPS, greedy));
    const short = await quintRun({
      ...base,
      samples: traces,
      steps: SEMAPHORE_TRACE_STEPS,
      outItf: `${dir}/trace_{seq}.itf.json`,
      traces,
    });
    console.log(line("Safety (traces)", traces, SEMAPHORE_TRACE_STEPS, short));
    const progress = await quintRun({
      ...base,
      invariants: ["Progress"],
      init: "initCalm",
      step: "calmStep",
      samples: calm,
      steps: SEMAPHORE_CALM_STEPS,
    });
    console.log(line("Progress", calm, SEMAPHORE_CALM_STEPS, progress));
    const slow = await quintRun({ ...base, ...SLOW_HOLDER });
    console.log(line(SLOW_HOLDER.init, SLOW_HOLDER.samples, SLOW_HOLDER.steps, slow));
    const runs = [safety, greedy, short, progress, slow];
    for (const run of runs) if (run.violated) console.log(run.output);
    const replayed = await replayDir(
      dir,
      "semaphore replay    ",
      readSemTrace,
      replaySemaphore,
      traces + samples,
    );
    return runs.every((run) => !run.violated) && replayed;
  } finally {
    if (!options.keep) await Deno.remove(dir, { recursive: true });
  }
}

/**
 * The semaphore's mutants (modules of spec/semaphore_mutants.qnt, run on
 * {@linkcode SEMAPHORE_MODEL}), each with the budget that catches it.
 */
export const SEMAPHORE_MUTANTS: readonly Mutant[] = [
  {
    main: "sem_half_quorum",
    fault: "a quorum of N/2",
    invariant: "PermitBound",
    samples: 50,
    seed: 1,
  },
  {
    main: "sem_no_drift",
    fault: "no drift allowance in a permit's validity",
    invariant: "PermitBound",
    ...SLOW_HOLDER,
    seed: 1,
  },
  {
    main: "sem_per_server",
    fault: "servers that granted any slots count (redis-semaphore's split view)",
    invariant: "PermitBound",
    samples: 50,
    seed: 1,
  },
  {
    main: "sem_release_any",
    fault: "the undo's RELEASE frees slots whoever holds them",
    invariant: "NoForeignWrite",
    samples: 50,
    seed: 1,
  },
];

/**
 * Runs the semaphore's mutants; prints one line each (the length of its
 * counterexample, or that it was not caught).
 *
 * @param only The mutants to run, by module name (all when undefined).
 * @returns How many mutants were not caught.
 * @throws {Error} When quint cannot run.
 *
 * @example From another driver
 * ```ts no-eval
 * import { runSemaphoreMutants } from "./semaphore.ts";
 * const missed = await runSemaphoreMutants();
 * ```
 */
export async function runSemaphoreMutants(only?: ReadonlySet<string>): Promise<number> {
  let missed = 0;
  for (const mutant of SEMAPHORE_MUTANTS) {
    if (only && !only.has(mutant.main)) continue;
    const dir = await Deno.makeTempDir({ prefix: "redlock-semaphore-mutant-" });
    const steps = mutant.steps ?? SEMAPHORE_STEPS;
    try {
      const result = await quintRun({
        model: SEMAPHORE_MODEL,
        main: mutant.main,
        invariants: SEMAPHORE_SAFETY,
        ...(mutant.init ? { init: mutant.init } : {}),
        ...(mutant.step ? { step: mutant.step } : {}),
        samples: mutant.samples,
        steps,
        seed: mutant.seed,
        outItf: `${dir}/trace_{seq}.itf.json`,
      });
      const took = `${result.seconds.toFixed(0)} s`;
      const name = mutant.main.padEnd(16);
      if (result.violated && result.which.includes(mutant.invariant)) {
        const trace = readSemTrace(await Deno.readTextFile(`${dir}/trace_0.itf.json`));
        console.log(
          `${name} caught by ${mutant.invariant}: counterexample of ${trace.states - 1} steps, ` +
            `${trace.end} ms of model time (seed ${mutant.seed}, ${took}) — ${mutant.fault}`,
        );
      } else {
        missed++;
        const found = result.violated ? `only ${result.which.join(", ")}` : "nothing";
        console.log(
          `${name} NOT CAUGHT: ${found} in ${mutant.samples} samples of ${steps} ` +
            `steps (${took}) — ${mutant.fault}`,
        );
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
  return missed;
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: {
      samples: { type: "string" },
      traces: { type: "string" },
      calm: { type: "string" },
      seed: { type: "string" },
      keep: { type: "string" },
      replay: { type: "string" },
      mutants: { type: "boolean" },
    },
  });
  if (values.replay) {
    return await replayDir(values.replay, "semaphore replay    ", readSemTrace, replaySemaphore, 1)
      ? 0
      : 1;
  }
  if (values.mutants) {
    const only = positionals.length > 0 ? new Set(positionals) : undefined;
    const missed = await runSemaphoreMutants(only);
    console.log(missed === 0 ? "every semaphore mutant caught" : `${missed} mutant(s) not caught`);
    return missed === 0 ? 0 : 1;
  }
  const passed = await semaphoreSpec({
    samples: Number(values.samples ?? 40),
    traces: Number(values.traces ?? 60),
    calm: Number(values.calm ?? 16),
    seed: Number(values.seed ?? 1),
    ...(values.keep ? { keep: values.keep } : {}),
  });
  return passed ? 0 : 1;
}

if (import.meta.main) Deno.exit(await main());
