/**
 * Where instrumentation (`otel.ts`) wraps a Redlock's operations: each hook
 * runs the operation (`run`) and resolves or rejects as it does. Called
 * synchronously in the caller's context, so a span it starts is the
 * caller's child. Until hooks are installed on some Redlock, no operation
 * pays even a WeakMap look-up.
 */

import type { ExecutionResult } from "./errors.ts";
import type { Lock } from "./lock.ts";

/** The wrappers of one Redlock's operations. */
export interface Hooks {
  /**
   * Every acquire: acquire(), tryAcquire(), using(), lead(). `signal` is the
   * caller's (not `timeout`'s), to tell an abort from a failure.
   */
  acquire(
    resources: readonly string[],
    run: () => Promise<Lock>,
    signal: AbortSignal | undefined,
  ): Promise<Lock>;
  /** Every release, also at the end of using() and `await using`. */
  release(lock: Lock, run: () => Promise<ExecutionResult>): Promise<ExecutionResult>;
  /** Every extension, also using()'s automatic ones. */
  extend(lock: Lock, run: () => Promise<Lock>): Promise<Lock>;
}

/** The hooks installed on Redlocks; a look-up costs nothing while none ever was. */
class HookTable {
  readonly #hooks = new WeakMap<object, Hooks>();
  #installed = false;
  /** The hooks of `target`, if any. */
  get(target: object): Hooks | undefined {
    return this.#installed ? this.#hooks.get(target) : undefined;
  }
  /** Whether `target` has hooks. */
  has(target: object): boolean {
    return this.#hooks.has(target);
  }
  /** Installs `hooks` on `target`. */
  set(target: object, hooks: Hooks): void {
    this.#installed = true;
    this.#hooks.set(target, hooks);
  }
  /** Removes the hooks of `target`. */
  delete(target: object): void {
    this.#hooks.delete(target);
  }
}

/** The hooks installed on each Redlock. */
export const HOOKS: HookTable = new HookTable();
