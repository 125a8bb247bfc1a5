/**
 * What the chaos parent and its worker processes tell each other: the
 * worker's settings (one JSON argument), the parent's commands (JSON lines on
 * the worker's stdin) and the worker's reports (JSON lines on its stdout).
 *
 * Every instant is `performance.timeOrigin + performance.now()` of the
 * process that measured it: ms since the epoch on the monotonic clock, the
 * time base `lock.expiration` is in, shared by all processes on one machine.
 *
 * @module
 */

/** The Redlock settings every worker uses. */
export interface LockSettings {
  readonly retryCount: number;
  readonly retryDelay: number;
  readonly retryJitter: number;
  readonly requestTimeout: number;
  readonly driftFactor: number;
}

/** How long workers hold, think and idle, in ms. */
export interface HoldTiming {
  readonly leaseMin: number;
  readonly leaseMax: number;
  /** ms between the read and the write of the guarded store, for most holds. */
  readonly thinkMin: number;
  readonly thinkMax: number;
  /** The share of holds that work longer (under `using()`, which extends), and how long. */
  readonly longShare: number;
  readonly longThinkMin: number;
  readonly longThinkMax: number;
  /** ms a worker may idle between holds. */
  readonly idleMax: number;
  /** ms the think phase lasts when the parent asked the worker to linger. */
  readonly lingerMs: number;
}

/** A worker's settings. */
export interface WorkerConfig extends HoldTiming {
  /** Unique within a case; a replacement for a killed worker gets a new one. */
  readonly id: number;
  /** The Redlock servers. */
  readonly ports: readonly number[];
  /** The guarded store: a Redis server that is not part of the Redlock. */
  readonly storePort: number;
  /** Prefix of every key, so that cases never share one. */
  readonly prefix: string;
  /** The resources the workers contend for. */
  readonly resources: readonly string[];
  readonly seed: number;
  readonly settings: LockSettings;
}

/** The parent's commands. */
export type Command =
  | { readonly op: "ping"; readonly t0: number }
  /** Make the next hold think for `lingerMs` and report `thinking`. */
  | { readonly op: "linger" }
  /** Finish the current hold, then exit. */
  | { readonly op: "stop" };

/** What the guarded store said to a fenced read or write. */
export type FencedOutcome = "accepted" | "rejected" | "n/a";

/** The worker's reports; `w` is the worker id, `h` its hold number. */
export type Report =
  | { readonly ev: "ready"; readonly w: number; readonly t: number }
  | { readonly ev: "pong"; readonly w: number; readonly t0: number; readonly t: number }
  | {
    readonly ev: "acquiring";
    readonly w: number;
    readonly h: number;
    readonly r: string;
    readonly lease: number;
    readonly t: number;
  }
  | {
    readonly ev: "acquired";
    readonly w: number;
    readonly h: number;
    readonly r: string;
    readonly lease: number;
    /** When the acquire call started. */
    readonly start: number;
    /** When it returned: the hold starts here. */
    readonly t: number;
    readonly expiration: number;
    /** `lock.fencingToken`, null when the library gave none. */
    readonly token: number | null;
    readonly attempts: number;
    /** True when the hold is a `using()` routine. */
    readonly using?: boolean;
  }
  | {
    readonly ev: "failed";
    readonly w: number;
    readonly h: number;
    readonly r: string;
    readonly start: number;
    readonly t: number;
    readonly error: string;
    readonly message: string;
  }
  | {
    readonly ev: "read";
    readonly w: number;
    readonly h: number;
    readonly t: number;
    readonly value: number;
    readonly fenced: FencedOutcome;
  }
  | {
    readonly ev: "thinking";
    readonly w: number;
    readonly h: number;
    readonly t: number;
    /** The lock's expiration: the parent keeps the worker stopped past it. */
    readonly expiration: number;
  }
  | {
    readonly ev: "extended";
    readonly w: number;
    readonly h: number;
    readonly start: number;
    readonly t: number;
    /** The extended lock's expiration, or null when the extension failed. */
    readonly expiration: number | null;
    readonly error: string | null;
  }
  | {
    /** A `using()` routine's signal aborted. */
    readonly ev: "aborted";
    readonly w: number;
    readonly h: number;
    readonly t: number;
    /** The reason's name. */
    readonly error: string;
  }
  | {
    readonly ev: "skipped";
    readonly w: number;
    readonly h: number;
    readonly t: number;
    readonly remaining: number;
  }
  | {
    readonly ev: "wrote";
    readonly w: number;
    readonly h: number;
    readonly start: number;
    readonly t: number;
    readonly value: number;
    readonly previous: number;
    readonly fenced: FencedOutcome;
  }
  | {
    readonly ev: "released";
    readonly w: number;
    readonly h: number;
    readonly start: number;
    readonly t: number;
    readonly error: string | null;
    readonly message?: string;
  }
  | { readonly ev: "error"; readonly w: number; readonly t: number; readonly message: string }
  /** A rejection nobody handled or an error nobody caught, in the worker. */
  | { readonly ev: "uncaught"; readonly w: number; readonly t: number; readonly message: string }
  | {
    readonly ev: "bye";
    readonly w: number;
    readonly t: number;
    /** Per-server errors the Redlock dispatched, by error name and message (digits elided). */
    readonly serverErrors: Readonly<Record<string, number>>;
  };

/** The shared time base: ms since the epoch, on this process's monotonic clock. */
export const instant = (): number => performance.timeOrigin + performance.now();
