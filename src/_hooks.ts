/**
 * Where instrumentation (`otel.ts`) wraps a Redlock's operations: each hook
 * runs the operation (`run`) and resolves or rejects as it does. Called
 * synchronously in the caller's context, so a span it starts is the
 * caller's child. A Redlock without hooks pays one WeakMap look-up.
 */

import type { ExecutionResult } from "./errors.ts";
import type { Lock } from "./lock.ts";

/** The wrappers of one Redlock's operations. */
export interface Hooks {
  /** Every acquire: acquire(), tryAcquire(), using(), lead(). */
  acquire(resources: readonly string[], run: () => Promise<Lock>): Promise<Lock>;
  /** Every release, also at the end of using() and `await using`. */
  release(lock: Lock, run: () => Promise<ExecutionResult>): Promise<ExecutionResult>;
  /** Every extension, also using()'s automatic ones. */
  extend(lock: Lock, run: () => Promise<Lock>): Promise<Lock>;
}

/** The hooks installed on each Redlock. */
export const HOOKS: WeakMap<object, Hooks> = new WeakMap();
