/**
 * The schedule of faults of one chaos case, drawn from the seed before the
 * case starts (pure). Targets are picked when a fault runs, among the servers
 * or workers it may hit then, from the numbers drawn here; so `--seed`
 * replays the schedule, while the interleaving is up to the machine.
 *
 * @module
 */

import type { Rng } from "./_rng.ts";

/** The kinds of fault a case injects. */
export const FAULT_KINDS = [
  "server-kill",
  "server-stop",
  "client-pause",
  "script-flush",
  "worker-pause",
  "worker-kill",
  "kill-cascade",
  "net-partition",
  "net-delay",
  "net-reset",
  "clock-jump",
  "clock-jump-majority",
] as const;

/**
 * - `server-kill`: kill -9 a minority of servers, restart them (same port)
 * - `server-stop`: SIGSTOP a server for longer than `requestTimeout`, then SIGCONT
 * - `client-pause`: `CLIENT PAUSE ms ALL` on a server, longer than `requestTimeout`
 * - `script-flush`: `SCRIPT FLUSH` on some servers (the next EVALSHA gets NOSCRIPT)
 * - `worker-pause`: SIGSTOP a worker between its read and its write until its
 *   lease ran out, then SIGCONT (the paused-holder case)
 * - `worker-kill`: SIGKILL a worker while it holds a lock (a replacement starts)
 * - `kill-cascade`: kill -9 a minority, restart it, then at once kill -9 and
 *   restart another server: without persistence and with immediate restarts,
 *   a lock taken on a bare majority meanwhile can be forgotten
 * - `net-partition`: cut a minority off at its proxies (both ways, or only
 *   requests, or only replies) for longer than `requestTimeout`, then heal
 * - `net-delay`: a latency spike at the proxies of a minority, around and
 *   above `requestTimeout`, with jitter
 * - `net-reset`: close every connection through some servers' proxies
 * - `clock-jump`: move the wall clock of a minority (libfaketime) forward by
 *   more than the longest lease, while a worker lingers in a hold: those
 *   servers forget every lock at once
 * - `clock-jump-majority`: the same on a majority (unsafe on purpose)
 */
export type FaultKind = typeof FAULT_KINDS[number];

/** Which way a partition cuts: both, requests only, replies only. */
export type Cut = "both" | "to-server" | "to-client";

/** How killed servers come back. */
export type RestartPolicy = "delayed" | "immediate";

/** One planned fault. */
export interface PlannedFault {
  /** ms after the case started. */
  readonly at: number;
  readonly kind: FaultKind;
  /** How many servers (kill, flush, the first wave of a cascade). */
  readonly count: number;
  /** ms the fault lasts (down time, stop, pause; the first wave of a cascade). */
  readonly duration: number;
  /**
   * ms the second server of a cascade stays down; for a worker pause, ms past
   * the lease; the one-way delay of `net-delay`; the jump of a clock.
   */
  readonly extra: number;
  /** Which way a `net-partition` cuts. */
  readonly cut?: Cut;
  /** A random number that picks the targets among those eligible when the fault runs. */
  readonly pick: number;
}

/** What a plan depends on. */
export interface PlanOptions {
  /** ms the case injects faults for. */
  readonly duration: number;
  readonly servers: number;
  readonly restart: RestartPolicy;
  /** The longest lease a worker takes, ms. */
  readonly maxLease: number;
  readonly requestTimeout: number;
  /** Relative frequency of each kind. */
  readonly weights: Readonly<Record<FaultKind, number>>;
  /**
   * Draw kinds in rounds, each kind of non-zero weight once per round in a
   * drawn order, so that a short run still has every kind. @default false
   */
  readonly rotate?: boolean;
}

/** ms a killed server stays down: past every lease it held (delayed) or hardly at all. */
export function downTime(rng: Rng, restart: RestartPolicy, maxLease: number): number {
  return restart === "delayed" ? maxLease + rng.int(300, 900) : rng.int(0, 250);
}

/** The faults of one case, in order of start. */
export function planFaults(rng: Rng, options: PlanOptions): PlannedFault[] {
  const { duration, servers, restart, maxLease, requestTimeout, weights } = options;
  const minority = servers - (Math.floor(servers / 2) + 1);
  const hang = () => rng.int(requestTimeout * 2, Math.max(requestTimeout * 2, 1_500));
  const faults: PlannedFault[] = [];
  const round: FaultKind[] = [];
  const next = (): FaultKind => {
    if (!options.rotate) return rng.weighted(weights);
    if (round.length === 0) {
      const kinds = FAULT_KINDS.filter((k) => weights[k] > 0);
      while (kinds.length > 0) round.push(kinds.splice(rng.int(0, kinds.length - 1), 1)[0]!);
    }
    return round.shift()!;
  };
  for (let at = rng.int(500, 1_000); at < duration - 500; at += rng.int(300, 1_200)) {
    const kind = next();
    const pick = rng.int(0, 1_000_000);
    switch (kind) {
      case "server-kill":
        faults.push({
          at,
          kind,
          count: rng.int(1, minority),
          duration: downTime(rng, restart, maxLease),
          extra: 0,
          pick,
        });
        break;
      case "server-stop":
      case "client-pause":
        faults.push({ at, kind, count: 1, duration: hang(), extra: 0, pick });
        break;
      case "script-flush":
        faults.push({ at, kind, count: rng.int(1, servers), duration: 0, extra: 0, pick });
        break;
      case "worker-pause":
        faults.push({ at, kind, count: 1, duration: 0, extra: rng.int(200, 1_000), pick });
        break;
      case "worker-kill":
        faults.push({ at, kind, count: 1, duration: 0, extra: 0, pick });
        break;
      case "net-partition":
        faults.push({
          at,
          kind,
          count: rng.int(1, minority),
          duration: hang(),
          extra: 0,
          pick,
          cut: rng.pick(["both", "both", "to-server", "to-client"] as const),
        });
        break;
      case "net-delay":
        faults.push({
          at,
          kind,
          count: rng.int(1, minority),
          duration: rng.int(300, 1_500),
          extra: rng.int(Math.round(requestTimeout / 2), Math.round(requestTimeout * 1.5)),
          pick,
        });
        break;
      case "net-reset":
        faults.push({ at, kind, count: rng.int(1, servers), duration: 0, extra: 0, pick });
        break;
      case "clock-jump":
      case "clock-jump-majority":
        faults.push({
          at,
          kind,
          // one server: two at once are safe only if every lock is on all five,
          // which a loaded machine does not promise (see docs/safety.md)
          count: kind === "clock-jump" ? Math.min(1, minority) : servers - minority,
          // every lock the jumped servers held is gone: no other fault until
          // every lease taken before the jump (and its one extension) ended;
          // a majority's jump shows its overlaps within the lingering hold
          duration: kind === "clock-jump" ? maxLease + 500 : Math.round(maxLease / 2),
          extra: Math.ceil(maxLease / 1000) * 1000 + rng.int(1, 3) * 1000,
          pick,
        });
        break;
      case "kill-cascade":
        faults.push({
          at,
          kind,
          count: minority,
          // the first wave stays down at least this long, and until a lingering
          // hold took its lock on the bare majority: past every lease when
          // restarts are delayed, hardly longer otherwise
          duration: downTime(rng, restart, maxLease),
          extra: downTime(rng, restart, maxLease),
          pick,
        });
        break;
    }
  }
  return faults;
}
