/**
 * `deno task spec:mutants`: the model's teeth. Each mutant (a module of
 * spec/mutants.qnt, then those of the read-write and semaphore models)
 * puts back a fault, a historical one or a rule taken
 * away, and must break its invariant within the budget; the run prints the
 * length of each counterexample and exits 1 unless every mutant is caught.
 *
 * @module
 */

import { readTrace } from "./itf.ts";
import { quintRun } from "./quint.ts";
import { runReadWriteMutants } from "./read_write.ts";
import { runSemaphoreMutants } from "./semaphore.ts";
import { CALM_STEPS, SAFETY, SAFETY_STEPS } from "./spec.ts";

/** A mutant and where its counterexample is looked for. */
export interface Mutant {
  /** Its module in spec/mutants.qnt. */
  readonly main: string;
  /** What it puts back. */
  readonly fault: string;
  /** The invariant that must catch it. */
  readonly invariant: string;
  /** Calm runs (bounded progress) instead of runs with every fault. */
  readonly calm?: boolean;
  /** The scenario's init (in the mutant's model), when not `init` or the calm one. */
  readonly init?: string;
  /** The step relation, when not the calm one or `step`. */
  readonly step?: string;
  /** Steps per run, when not the safety or calm runs' count. */
  readonly steps?: number;
  readonly samples: number;
  readonly seed: number;
}

/**
 * Every mutant, with a budget that catches it on this model. Random runs
 * from `init` seldom draw the interleavings of four of them: those start
 * from a scenario of spec/redlock.qnt, a world set up a few steps before
 * (an ACQUIRE sent again after NOSCRIPT behind an abort's release, landing
 * on a free key with a queue; a late answer crossing a later round that
 * then wins with that server; a holder whose clock runs slow; a lock on a
 * bare majority whose server restarts). `deno task spec` runs the same scenarios on `correct`
 * (SCENARIOS in spec/spec.ts).
 */
export const MUTANTS: readonly Mutant[] = [
  {
    main: "livelock",
    fault: "no give-way: queued waiters swap the servers they were handed (c00604e)",
    invariant: "Progress",
    calm: true,
    samples: 200,
    seed: 1,
  },
  {
    main: "cut_off",
    fault: "give-way always: a waiter cut off from a majority keeps its key (ceb8f3e)",
    invariant: "Progress",
    calm: true,
    samples: 200,
    seed: 1,
  },
  {
    main: "late_give_way",
    fault: "a late answer after the acquire ended gives way (ceb8f3e)",
    invariant: "NoOrphanAfterEnd",
    init: "initLateAnswer",
    step: "stepNoFaults",
    steps: 40,
    samples: 50,
    seed: 1,
  },
  {
    main: "double_grant",
    fault: "a late answer is let go of after a later round was sent (4b3ea35, chaos:lead)",
    invariant: "MutualExclusion",
    init: "initLateRound",
    step: "stepNoFaults",
    steps: 40,
    samples: 50,
    seed: 1,
  },
  {
    main: "half_quorum",
    fault: "a quorum of N/2",
    invariant: "MutualExclusion",
    samples: 100,
    seed: 1,
  },
  {
    main: "no_drift",
    fault: "no drift allowance in the validity",
    invariant: "MutualExclusion",
    init: "initSlowHolder",
    step: "stepNoFaults",
    steps: 40,
    samples: 50,
    seed: 1,
  },
  {
    main: "release_any",
    fault: "RELEASE does not compare the value",
    invariant: "NoForeignWrite",
    samples: 100,
    seed: 1,
  },
  {
    main: "early_empty_restart",
    fault: "a server restarts empty before the longest lease (docs/safety.md)",
    invariant: "MutualExclusion",
    init: "initBareMajority",
    step: "stepRestarts",
    steps: 40,
    samples: 100,
    seed: 1,
  },
];

async function main(): Promise<number> {
  const only = Deno.args.length > 0 ? new Set(Deno.args) : undefined;
  let missed = 0;
  for (const mutant of MUTANTS) {
    if (only && !only.has(mutant.main)) continue;
    const dir = await Deno.makeTempDir({ prefix: "redlock-mutant-" });
    try {
      const steps = mutant.steps ?? (mutant.calm ? CALM_STEPS : SAFETY_STEPS);
      const result = await quintRun({
        main: mutant.main,
        invariants: mutant.calm ? ["Progress"] : SAFETY,
        ...(mutant.calm ? { init: "initCalm", step: "calmStep" } : {}),
        ...(mutant.init ? { init: mutant.init } : {}),
        ...(mutant.step ? { step: mutant.step } : {}),
        samples: mutant.samples,
        steps,
        seed: mutant.seed,
        outItf: `${dir}/trace_{seq}.itf.json`,
      });
      const caught = result.violated && result.which.includes(mutant.invariant);
      const took = `${result.seconds.toFixed(0)} s`;
      if (caught) {
        const trace = readTrace(
          await Deno.readTextFile(`${dir}/trace_0.itf.json`),
        );
        console.log(
          `${mutant.main.padEnd(20)} caught by ${mutant.invariant}: counterexample of ` +
            `${
              trace.states - 1
            } steps, ${trace.end} ms of model time (seed ${mutant.seed}, ${took})` +
            ` — ${mutant.fault}`,
        );
      } else {
        missed++;
        const found = result.violated ? `only ${result.which.join(", ")}` : "nothing";
        console.log(
          `${
            mutant.main.padEnd(20)
          } NOT CAUGHT: ${found} in ${mutant.samples} samples of ${steps} steps` +
            ` (${took}) — ${mutant.fault}`,
        );
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
  missed += await runReadWriteMutants(only);
  missed += await runSemaphoreMutants(only);
  console.log(
    missed === 0 ? "every mutant caught" : `${missed} mutant(s) not caught`,
  );
  return missed === 0 ? 0 : 1;
}

if (import.meta.main) Deno.exit(await main());
