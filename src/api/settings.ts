/**
 * Settings in force for one call: the Redlock's, with a call's options laid
 * over them, each checked before any request is sent.
 */

import type { RedlockOptions } from "./options.ts";
import { checkNumber, describeValue } from "../util/validate.ts";
import { MAX_DURATION } from "../protocol/encoding.ts";

/** Every setting, filled in. */
export interface Settings extends Required<Omit<RedlockOptions, "retryDelay">> {
  readonly retryDelay: number | ((attempt: number) => number);
  /** Whether `automaticExtensionThreshold` was set by the user (else using() may lower it). */
  readonly thresholdSet: boolean;
}

export const DEFAULTS: Settings = Object.freeze({
  wait: "notify",
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
  requestTimeout: 500,
  thresholdSet: false,
});

/** An empty options object that stands for "none given". */
export const NO_OPTIONS: Readonly<Record<string, never>> = Object.freeze({});

const SETTINGS = [
  "driftFactor",
  "retryCount",
  "retryDelay",
  "retryJitter",
  "requestTimeout",
  "wait",
] as const;

/** Every field of `Settings`: those of the defaults, which must name them all. */
const FIELDS = Object.keys(DEFAULTS) as readonly (keyof Settings)[];

/** The option names each kind of call takes. */
export const KNOWN = {
  redlock: new Set([...SETTINGS, "automaticExtensionThreshold", "subscriber"]),
  acquire: new Set([...SETTINGS, "fencing", "signal", "timeout"]),
  using: new Set([...SETTINGS, "fencing", "signal", "timeout", "automaticExtensionThreshold"]),
  extend: new Set([...SETTINGS, "fencing", "signal", "timeout", "onlyIfLocked"]),
  release: new Set(["requestTimeout"]),
  inspect: new Set(["requestTimeout", "signal"]),
  /** Acquires of read-write locks and semaphores (no fencing). */
  handle: new Set([...SETTINGS, "signal", "timeout"]),
  handleUsing: new Set([...SETTINGS, "signal", "timeout", "automaticExtensionThreshold"]),
  handleExtend: new Set([...SETTINGS, "signal", "timeout", "onlyIfLocked"]),
  semaphore: new Set(["permits"]),
} as const;

/**
 * Checks that `options` is an object whose keys are all `known`; a TypeError
 * names the first that is not (a misspelt option would be ignored).
 */
export function checkKeys(options: unknown, known: ReadonlySet<string>, name: string): void {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`${name} must be an object, got ${describeValue(options)}`);
  }
  for (const key in options) {
    if (!known.has(key)) {
      throw new TypeError(
        `${name}.${key} is not an option; the options are ${[...known].join(", ")}`,
      );
    }
  }
}

/** `base` with the settings `options` overrides, each checked. */
export function checkSettings(options: RedlockOptions, base: Settings, name: string): Settings {
  if (options === NO_OPTIONS) return base;
  const o = options;
  const s = { ...base };
  if (o.driftFactor !== undefined) {
    s.driftFactor = checkNumber(o.driftFactor, `${name}.driftFactor`, { below: 1 });
  }
  if (o.retryCount !== undefined) {
    s.retryCount = checkNumber(o.retryCount, `${name}.retryCount`, { min: -1, integer: true });
  }
  if (o.retryDelay !== undefined) {
    s.retryDelay = typeof o.retryDelay === "function"
      ? o.retryDelay
      : checkNumber(o.retryDelay, `${name}.retryDelay`, { below: MAX_DURATION + 1 });
  }
  if (o.retryJitter !== undefined) {
    s.retryJitter = checkNumber(o.retryJitter, `${name}.retryJitter`, { below: MAX_DURATION + 1 });
  }
  if (o.automaticExtensionThreshold !== undefined) {
    s.automaticExtensionThreshold = checkNumber(
      o.automaticExtensionThreshold,
      `${name}.automaticExtensionThreshold`,
      { below: MAX_DURATION + 1 },
    );
    s.thresholdSet = true;
  }
  if (o.wait !== undefined) {
    if (o.wait !== "notify" && o.wait !== "poll") {
      throw new TypeError(`${name}.wait must be "notify" or "poll", got ${describeValue(o.wait)}`);
    }
    s.wait = o.wait;
  }
  if (o.requestTimeout !== undefined) {
    s.requestTimeout = checkNumber(o.requestTimeout, `${name}.requestTimeout`, {
      min: 1,
      below: MAX_DURATION + 1,
    });
  }
  // Options that change nothing share `base`: thousands of acquires may wait at once.
  return FIELDS.every((key) => s[key] === base[key]) ? base : s;
}

/** The settings of a release: `base`, or with the `requestTimeout` of `options`. */
export function releaseSettings(options: unknown, base: Settings): Settings {
  if (options === undefined) return base;
  checkKeys(options, KNOWN.release, "options");
  return checkSettings(options as RedlockOptions, base, "options");
}

/** What every call that waits takes besides settings. */
interface CallOptions {
  signal?: AbortSignal;
  timeout?: number;
  fencing?: boolean;
  onlyIfLocked?: boolean;
}

/**
 * Checks a call's `options` (its keys, `signal`, `timeout` and flags) and
 * returns them, or {@linkcode NO_OPTIONS} when none were given.
 */
export function checkCallOptions<T extends CallOptions>(
  options: T | undefined,
  known: ReadonlySet<string>,
): T {
  if (options === undefined) return NO_OPTIONS as T;
  checkKeys(options, known, "options");
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new TypeError(
      `options.signal must be an AbortSignal, got ${describeValue(options.signal)}`,
    );
  }
  if (options.timeout !== undefined) {
    if (options.timeout === 0) {
      throw new RangeError(
        "options.timeout must be at least 1 ms, got 0; for one attempt without waiting, " +
          "use tryAcquire()",
      );
    }
    checkNumber(options.timeout, "options.timeout", { min: 1, below: MAX_DURATION + 1 });
  }
  for (const flag of ["fencing", "onlyIfLocked"] as const) {
    const value = options[flag];
    if (value !== undefined && typeof value !== "boolean") {
      throw new TypeError(`options.${flag} must be a boolean, got ${describeValue(value)}`);
    }
  }
  return options;
}
