/**
 * The narrow interface that acquires, extensions and the primitives
 * (read-write locks, semaphores) are built on: what they need of a Redlock.
 * `RedlockContext` (`redlock_context.ts`) is its implementation.
 *
 * @module
 */

import type { Lifecycle } from "./lifecycle.ts";
import type { LockOwner } from "./lock.ts";
import type { Settings } from "./settings.ts";
import type { Servers } from "../quorum/servers.ts";
import type { Waiters } from "../wait/waiters.ts";

/** What an operation needs of the Redlock it runs for. */
export interface LockContext {
  /** The servers, the quorum, and how a question goes to all of them. */
  readonly servers: Servers;
  /** Release-notified waiting: the subscriptions and the queued acquires. */
  readonly waiters: Waiters;
  /** The Redlock's settings, defaults filled in. */
  readonly settings: Settings;
  /** What the plain locks (and permits) delegate release, extension and error reports to. */
  readonly owner: LockOwner;
  /** The hooks and lifecycle events of the operations. */
  readonly lifecycle: Lifecycle;
  /** A fresh lock value for a lease of `lease` ms (0: a release only reserves the key). */
  nextValue(lease: number): string;
}
