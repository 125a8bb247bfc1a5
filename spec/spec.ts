/**
 * `deno task spec`: simulates the model (spec/redlock.qnt) with fixed seeds
 * and checks every invariant, one line each (samples, steps, result), then
 * replays the safety run's traces against real servers running the
 * project's scripts (spec/replay.ts); then the read-write and semaphore
 * models the same way (spec/read_write.ts, spec/semaphore.ts). Exits 1
 * when an invariant is violated or a reply differs.
 *
 * Options: `--samples N` (safety runs, default 100), `--traces N` (shorter
 * runs of TRACE_STEPS steps whose traces are replayed, default 200),
 * `--calm N` (progress runs, default 40), `--seed N`, `--keep DIR` (keep the
 * traces there), `--replay DIR` (only replay the traces in DIR).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { replayDir } from "./replay_dir.ts";
import { readTrace } from "./itf.ts";
import { quintRun, type RunResult } from "./quint.ts";
import { replay } from "./replay.ts";
import { runReadWrite } from "./read_write.ts";
import { semaphoreSpec } from "./semaphore.ts";

/** The safety invariants, checked together on runs with every fault. */
export const SAFETY = [
  "MutualExclusion",
  "FencingOrder",
  "NoForeignWrite",
  "NoOrphanAfterEnd",
  "OneLeader",
  "TermsIncrease",
];

/** A scenario of a model: a set-up world and the steps that go on from it. */
export interface Scenario {
  /** Its init action. */
  readonly init: string;
  /** Its step relation. */
  readonly step: string;
  readonly steps: number;
  /** Runs of `correct`: those of the mutant that starts from it. */
  readonly samples: number;
}

/**
 * The scenarios the mutants start from (spec/mutants.ts); `correct` must
 * find no violation from them within the same budget.
 */
export const SCENARIOS: readonly Scenario[] = [
  { init: "initLateAnswer", step: "stepNoFaults", steps: 40, samples: 50 },
  { init: "initLateRound", step: "stepNoFaults", steps: 40, samples: 50 },
  { init: "initSlowHolder", step: "stepNoFaults", steps: 40, samples: 50 },
  { init: "initBareMajority", step: "stepRestarts", steps: 40, samples: 100 },
];

/** Steps per safety run. */
export const SAFETY_STEPS = 150;
/** Steps per replayed run: shorter, so that many traces are replayed. */
export const TRACE_STEPS = 40;
/** Steps per calm run (bounded progress). */
export const CALM_STEPS = 400;

function line(
  name: string,
  samples: number,
  steps: number,
  result: RunResult,
): string {
  const verdict = !result.violated
    ? "ok"
    : result.which.includes(name) || result.which.length === 0 ||
        ![...SAFETY, "Progress"].includes(name)
    ? "VIOLATED"
    : "ok";
  const pad = name.padEnd(17);
  return `${pad} samples ${samples}, steps ${steps} each: ${verdict} (${
    result.seconds.toFixed(0)
  } s)`;
}

/**
 * Simulates the model: the safety runs, the shorter runs whose traces are
 * written to `dir` (safety checked on them too), the calm runs, then the
 * scenarios (safety again).
 */
async function simulate(
  dir: string,
  samples: number,
  traces: number,
  calm: number,
  seed: number,
): Promise<boolean> {
  const safety = await quintRun({
    main: "correct",
    invariants: SAFETY,
    samples,
    steps: SAFETY_STEPS,
    seed,
  });
  for (const name of SAFETY) console.log(line(name, samples, SAFETY_STEPS, safety));
  const short = await quintRun({
    main: "correct",
    invariants: SAFETY,
    samples: traces,
    steps: TRACE_STEPS,
    seed,
    outItf: `${dir}/trace_{seq}.itf.json`,
    traces,
  });
  console.log(line("Safety (traces)", traces, TRACE_STEPS, short));
  const progress = await quintRun({
    main: "correct",
    invariants: ["Progress"],
    init: "initCalm",
    step: "calmStep",
    samples: calm,
    steps: CALM_STEPS,
    seed,
  });
  console.log(line("Progress", calm, CALM_STEPS, progress));
  const runs = [safety, short, progress];
  for (const scenario of SCENARIOS) {
    const run = await quintRun({ main: "correct", invariants: SAFETY, ...scenario, seed });
    console.log(line(scenario.init, scenario.samples, scenario.steps, run));
    runs.push(run);
  }
  for (const run of runs) if (run.violated) console.log(run.output);
  return runs.every((run) => !run.violated);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      samples: { type: "string" },
      traces: { type: "string" },
      calm: { type: "string" },
      seed: { type: "string" },
      keep: { type: "string" },
      replay: { type: "string" },
    },
  });
  if (values.replay) {
    return await replayDir(values.replay, "replay           ", readTrace, replay, 1) ? 0 : 1;
  }
  const samples = Number(values.samples ?? 100);
  const traces = Number(values.traces ?? 200);
  const calm = Number(values.calm ?? 40);
  const seed = Number(values.seed ?? 1);
  const dir = values.keep ?? await Deno.makeTempDir({ prefix: "redlock-spec-" });
  try {
    const simulated = await simulate(dir, samples, traces, calm, seed);
    const replayed = await replayDir(dir, "replay           ", readTrace, replay, traces);
    // Read-write locks and semaphores: models of their own, replayed the same way.
    const readWrite = await runReadWrite({ seed });
    const semaphore = await semaphoreSpec({ seed });
    return simulated && replayed && readWrite && semaphore ? 0 : 1;
  } finally {
    if (!values.keep) await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) Deno.exit(await main());
