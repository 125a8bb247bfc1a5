/**
 * Collects the workers' reports of one case into holds and acquire calls
 * for the history checker.
 *
 * @module
 */

import type { AcquireCall, Hold, HoldWrite } from "./_history.ts";
import type { Report } from "./_protocol.ts";
import { holdTag } from "./_store.ts";

interface MutableHold {
  id: string;
  worker: number;
  resource: string;
  acquiredAt: number;
  expiration: number;
  releasedAt: number | undefined;
  token: number | null;
  write: HoldWrite | undefined;
  paused: boolean;
  using: boolean;
  abortedAt: number | undefined;
}

/** The reports of one case, gathered. */
export class Recorder {
  readonly #holds = new Map<string, MutableHold>();
  /** Every finished acquire call. */
  readonly calls: AcquireCall[] = [];
  /** Failed acquire calls by error name. */
  readonly failures: Record<string, number> = {};
  /** Per-server errors the workers' Redlocks dispatched, by error name. */
  readonly serverErrors: Record<string, number> = {};
  /** Errors the workers reported outside of acquire (store, release). */
  readonly errors: string[] = [];
  /** Successful extensions, and failed ones by error name. */
  extensions = 0;
  readonly extensionFailures: Record<string, number> = {};
  /** Releases that did not reach a quorum. */
  failedReleases = 0;
  /** Holds that skipped their write because too little validity was left. */
  skipped = 0;
  /** Holds run by `using()`, and those whose routine's signal aborted. */
  usingHolds = 0;
  aborts = 0;
  /** Whether any lock came with a fencing token. */
  fencing = false;
  /** Rejections nobody handled and errors nobody caught in the workers. */
  readonly uncaught: string[] = [];
  /** Acquire calls in flight, by worker: their start. */
  readonly #open = new Map<number, number>();
  /** The hold each worker has, until it starts releasing it. */
  readonly #holding = new Map<number, string>();

  /** Takes one report in. */
  add(report: Report): void {
    switch (report.ev) {
      case "acquiring":
        this.#open.set(report.w, report.t);
        break;
      case "acquired": {
        this.#open.delete(report.w);
        this.calls.push({
          start: report.start,
          end: report.t,
          ok: true,
          attempts: report.attempts,
        });
        const id = holdTag(report.w, report.h);
        this.#holds.set(id, {
          id,
          worker: report.w,
          resource: report.r,
          acquiredAt: report.t,
          expiration: report.expiration,
          releasedAt: undefined,
          token: report.token,
          write: undefined,
          paused: false,
          using: report.using === true,
          abortedAt: undefined,
        });
        if (report.using === true) this.usingHolds++;
        this.#holding.set(report.w, id);
        if (report.token !== null) this.fencing = true;
        break;
      }
      case "failed":
        this.#open.delete(report.w);
        if (report.error !== "ResourceLockedError" && this.errors.length < 20) {
          this.errors.push(`worker ${report.w} acquire: ${report.message}`);
        }
        this.calls.push({ start: report.start, end: report.t, ok: false });
        this.failures[report.error] = (this.failures[report.error] ?? 0) + 1;
        break;
      case "extended": {
        const hold = this.#holds.get(holdTag(report.w, report.h));
        if (report.expiration === null) {
          this.extensionFailures[report.error ?? "Error"] =
            (this.extensionFailures[report.error ?? "Error"] ?? 0) + 1;
        } else {
          this.extensions++;
          if (hold) hold.expiration = Math.max(hold.expiration, report.expiration);
        }
        break;
      }
      case "aborted": {
        const hold = this.#holds.get(holdTag(report.w, report.h));
        if (hold) hold.abortedAt ??= report.t;
        this.aborts++;
        break;
      }
      case "skipped":
        this.skipped++;
        break;
      case "wrote": {
        const hold = this.#holds.get(holdTag(report.w, report.h));
        if (hold) hold.write = { start: report.start, end: report.t, fenced: report.fenced };
        break;
      }
      case "released": {
        const hold = this.#holds.get(holdTag(report.w, report.h));
        if (hold) hold.releasedAt ??= report.start;
        this.#holding.delete(report.w);
        if (report.error !== null) {
          this.failedReleases++;
          if (this.errors.length < 20) {
            this.errors.push(`worker ${report.w} release: ${report.message ?? report.error}`);
          }
        }
        break;
      }
      case "error":
        this.errors.push(`worker ${report.w}: ${report.message}`);
        break;
      case "uncaught":
        this.uncaught.push(`worker ${report.w}: ${report.message}`);
        break;
      case "bye":
        for (const [name, count] of Object.entries(report.serverErrors)) {
          this.serverErrors[name] = (this.serverErrors[name] ?? 0) + count;
        }
        break;
      default:
        break;
    }
  }

  /** Marks a hold whose process a fault stopped. */
  markPaused(worker: number, hold: number): void {
    const h = this.#holds.get(holdTag(worker, hold));
    if (h) h.paused = true;
  }

  /**
   * A worker died at `t` (killed): its hold ends there, and its acquire call
   * in flight, if any, is dropped (it did not hang, it was killed).
   */
  markDead(worker: number, t: number): void {
    const id = this.#holding.get(worker);
    const hold = id === undefined ? undefined : this.#holds.get(id);
    if (hold) hold.releasedAt ??= t;
    this.#holding.delete(worker);
    this.#open.delete(worker);
  }

  /** Acquire calls still in flight, by worker: their start. */
  get inFlight(): ReadonlyMap<number, number> {
    return this.#open;
  }

  /** Every hold. */
  holds(): Hold[] {
    return [...this.#holds.values()].map((h) => ({ ...h }));
  }

  /** The hold with this id (`worker:hold`). */
  hold(id: string): Hold | undefined {
    return this.#holds.get(id);
  }
}
