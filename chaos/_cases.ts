/**
 * The cases a chaos run goes through: which servers, which persistence,
 * how killed servers come back, which faults, and whether the Redlock
 * algorithm promises safety there.
 *
 * @module
 */

import type { FaultKind, RestartPolicy } from "./_plan.ts";

/** A case's name, as `--cases` takes it. */
export type CaseName =
  | "five"
  | "three"
  | "aof"
  | "forgetful"
  | "network"
  | "clock"
  | "clock-majority";

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
  /**
   * True when fenced writes must lose no update and tokens stay in order even
   * where overlaps are not promised away (the fencing counters survive).
   */
  readonly fenced: boolean;
  /** Every server behind a fault proxy (`net-*` faults). */
  readonly proxied: boolean;
  /** Every server under libfaketime (`clock-jump*` faults). */
  readonly clocked: boolean;
  /** The share of the run's seconds it gets. */
  readonly share: number;
  /** Cases with the same label get the same fault schedule and worker choices. */
  readonly scheduleLabel: string;
  readonly weights: Readonly<Record<FaultKind, number>>;
  /** Every kind once per round of faults (see `PlanOptions.rotate`). */
  readonly rotate?: boolean;
}

const MIXED: Readonly<Record<FaultKind, number>> = {
  "server-kill": 3,
  "server-stop": 2,
  "client-pause": 2,
  "script-flush": 1.5,
  "worker-pause": 2,
  "worker-kill": 1,
  "kill-cascade": 1,
  "net-partition": 0,
  "net-delay": 0,
  "net-reset": 0,
  "clock-jump": 0,
  "clock-jump-majority": 0,
};

const RESTARTS: Readonly<Record<FaultKind, number>> = {
  "server-kill": 2,
  "server-stop": 1,
  "client-pause": 1,
  "script-flush": 1,
  "worker-pause": 1,
  "worker-kill": 0.5,
  "kill-cascade": 4,
  "net-partition": 0,
  "net-delay": 0,
  "net-reset": 0,
  "clock-jump": 0,
  "clock-jump-majority": 0,
};

const NONE: Readonly<Record<FaultKind, number>> = {
  "server-kill": 0,
  "server-stop": 0,
  "client-pause": 0,
  "script-flush": 0,
  "worker-pause": 0,
  "worker-kill": 0,
  "kill-cascade": 0,
  "net-partition": 0,
  "net-delay": 0,
  "net-reset": 0,
  "clock-jump": 0,
  "clock-jump-majority": 0,
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
    fenced: true,
    proxied: false,
    clocked: false,
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
    fenced: true,
    proxied: false,
    clocked: false,
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
    fenced: true,
    proxied: false,
    clocked: false,
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
    fenced: false,
    proxied: false,
    clocked: false,
    share: 0.2,
    scheduleLabel: "immediate",
    weights: RESTARTS,
  },
  {
    name: "network",
    title: "5 servers behind fault proxies: partitions, latency spikes, resets",
    servers: 5,
    aof: false,
    restart: "delayed",
    promised: true,
    fenced: true,
    proxied: true,
    clocked: false,
    share: 0.25,
    scheduleLabel: "network",
    weights: { ...NONE, "net-partition": 2, "net-delay": 2, "net-reset": 1.5 },
    rotate: true,
  },
  {
    name: "clock",
    title: "5 servers under libfaketime, one server's clock jumps past the longest lease",
    servers: 5,
    aof: false,
    restart: "delayed",
    promised: true,
    fenced: true,
    proxied: false,
    clocked: true,
    share: 0.15,
    scheduleLabel: "clock",
    weights: { ...NONE, "clock-jump": 1 },
  },
  {
    name: "clock-majority",
    title: "5 servers under libfaketime, a majority's clocks jump (unsafe on purpose)",
    servers: 5,
    aof: false,
    restart: "delayed",
    promised: false,
    fenced: true,
    proxied: false,
    clocked: true,
    share: 0.15,
    scheduleLabel: "clock-majority",
    weights: { ...NONE, "clock-jump-majority": 1 },
  },
];
