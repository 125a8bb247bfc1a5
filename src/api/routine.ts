/**
 * The routine that `using()` runs while it holds a lock, and what it is told.
 *
 * @module
 */

import type { Lock } from "./lock.ts";

/** What `using()` tells its routine besides the signal. */
export interface UsingContext {
  /** The current lock: replaced after each automatic extension. */
  readonly lock: Lock;
  /** How many automatic extensions succeeded so far. */
  readonly extensions: number;
}

/** The routine `using()` runs while it holds the lock. */
export type UsingRoutine<T> = (signal: AbortSignal, context: UsingContext) => Promise<T> | T;
