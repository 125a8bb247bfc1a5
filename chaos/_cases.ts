/**
 * The cases a chaos run goes through: which servers, which persistence,
 * how killed servers come back, which faults, and whether the Redlock
 * algorithm promises safety there.
 *
 * @module
 */

import type { FaultKind, RestartPolicy } from "./_plan.ts";

/** A case's name, as `--cases` takes it. */
export type CaseName = "five" | "three" | "aof" | "forgetful";

/** One case of a run. */
export interface CaseSpec {
  readonly name: CaseName;
  /** What it shows, in a few words. */
  readonly title: string;
  readonly servers: number;
  /** Persist with AOF and `appendfsync always`. */
  readonly aof: boolean;
  readonly restart: RestartPolicy;
  /**
   * True when the algorithm promises that valid leases never overlap here
   * (a majority healthy, restarts that cannot forget a valid lock): any
   * overlap or unexplained lost update then fails the run.
   */
  readonly promised: boolean;
  /** The share of the run's seconds it gets. */
  readonly share: number;
  /** Cases with the same label get the same fault schedule and worker choices. */
  readonly scheduleLabel: string;
  readonly weights: Readonly<Record<FaultKind, number>>;
}

const MIXED: Readonly<Record<FaultKind, number>> = {
  "server-kill": 3,
  "server-stop": 2,
  "client-pause": 2,
  "script-flush": 1.5,
  "worker-pause": 2,
  "worker-kill": 1,
  "kill-cascade": 1,
};

const RESTARTS: Readonly<Record<FaultKind, number>> = {
  "server-kill": 2,
  "server-stop": 1,
  "client-pause": 1,
  "script-flush": 1,
  "worker-pause": 1,
  "worker-kill": 0.5,
  "kill-cascade": 4,
};

/** Every case, in the order a run goes through them. */
export const CASES: readonly CaseSpec[] = [
  {
    name: "five",
    title: "5 servers, no persistence, restart after the longest lease",
    servers: 5,
    aof: false,
    restart: "delayed",
    promised: true,
    share: 0.35,
    scheduleLabel: "five",
    weights: MIXED,
  },
  {
    name: "three",
    title: "3 servers, no persistence, restart after the longest lease",
    servers: 3,
    aof: false,
    restart: "delayed",
    promised: true,
    share: 0.25,
    scheduleLabel: "three",
    weights: MIXED,
  },
  {
    name: "aof",
    title: "5 servers, AOF appendfsync always, immediate restart",
    servers: 5,
    aof: true,
    restart: "immediate",
    promised: true,
    share: 0.2,
    scheduleLabel: "immediate",
    weights: RESTARTS,
  },
  {
    name: "forgetful",
    title: "5 servers, no persistence, immediate restart (unsafe on purpose)",
    servers: 5,
    aof: false,
    restart: "immediate",
    promised: false,
    share: 0.2,
    scheduleLabel: "immediate",
    weights: RESTARTS,
  },
];
