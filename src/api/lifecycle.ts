/**
 * How an operation goes through the hooks installed on its Redlock (see
 * `hooks.ts`) and dispatches its lifecycle event, written once for the
 * Redlock and the handles it makes (read-write locks, semaphores).
 *
 * @module
 */

import type { ExecutionResult } from "./errors.ts";
import { LockLostError } from "./errors.ts";
import {
  LockAcquiredEvent,
  LockExtendedEvent,
  LockLostEvent,
  LockReleasedEvent,
} from "./events.ts";
import { HOOKS } from "./hooks.ts";
import type { Lock } from "./lock.ts";
import type { Listeners } from "./listeners.ts";
import { wasHandedOver } from "../acquire/handover.ts";
import { now } from "../util/time.ts";

/** The hooks and events of one Redlock's operations. */
export class Lifecycle {
  readonly #target: EventTarget;
  /** Who listens for the target's events. */
  readonly #listeners: Listeners;

  /**
   * @param target The Redlock: it dispatches the events, and hooks are installed on it.
   * @param listeners Who listens for its events.
   */
  constructor(target: EventTarget, listeners: Listeners) {
    this.#target = target;
    this.#listeners = listeners;
  }

  /**
   * Acquires by `run`, through the hooks and with the `"acquired"` event;
   * `signal` is the caller's (the hooks tell an abort from a failure).
   */
  acquire(
    resources: readonly string[],
    signal: AbortSignal | undefined,
    run: () => Promise<Lock>,
  ): Promise<Lock> {
    const hooks = HOOKS.get(this.#target);
    if (hooks === undefined) return this.#acquired(run);
    return hooks.acquire(resources, () => this.#acquired(run), signal);
  }

  #acquired(run: () => Promise<Lock>): Promise<Lock> {
    if (!this.#listeners.has("acquired")) return run();
    const start = now();
    return run().then((lock) => {
      const waited = now() - start;
      this.#target.dispatchEvent(
        new LockAcquiredEvent({ lock, waited, handoff: wasHandedOver(lock) }),
      );
      return lock;
    });
  }

  /** Extends `lock` by `run`, through the hooks and with the `"extended"` or `"lost"` event. */
  extend(lock: Lock, run: () => Promise<Lock>): Promise<Lock> {
    const hooks = HOOKS.get(this.#target);
    const observed = () =>
      run().then((next) => {
        if (this.#listeners.has("extended")) {
          this.#target.dispatchEvent(new LockExtendedEvent(next, lock));
        }
        return next;
      }, (error) => {
        if (error instanceof LockLostError && this.#listeners.has("lost")) {
          this.#target.dispatchEvent(new LockLostEvent(lock, error));
        }
        throw error;
      });
    return hooks === undefined ? observed() : hooks.extend(lock, observed);
  }

  /** Releases `lock` by `run`, through the hooks and with the `"released"` event. */
  release(lock: Lock, run: () => Promise<ExecutionResult>): Promise<ExecutionResult> {
    const hooks = HOOKS.get(this.#target);
    const observed = () => {
      const releasing = run();
      if (!this.#listeners.has("released")) return releasing;
      return releasing.then((result) => {
        this.#target.dispatchEvent(new LockReleasedEvent(lock));
        return result;
      });
    };
    return hooks === undefined ? observed() : hooks.release(lock, observed);
  }
}
