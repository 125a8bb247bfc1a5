import { MAX_DURATION } from "../protocol/encoding.ts";

/** A short description of a value for error messages. */
export function describeValue(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "function") return `function ${value.name || "(anonymous)"}`;
  if (typeof value === "bigint") return `${value}n`;
  if (typeof value !== "object" || value === null) return String(value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  const name: unknown = value.constructor?.name;
  if (name === "Object") return "a plain object";
  return typeof name === "string" && name !== "" ? `an instance of ${name}` : "an object";
}

/** Checks `resources` and returns them as a fresh array of unique, non-empty strings. */
export function checkResources(resources: unknown, name = "resources"): string[] {
  if (typeof resources === "string") {
    if (resources === "") throw new RangeError(`${name} must not be empty, got ""`);
    return [resources];
  }
  if (!Array.isArray(resources)) {
    throw new TypeError(
      `${name} must be a string or an array of strings, got ${describeValue(resources)}`,
    );
  }
  const n = resources.length;
  if (n === 0) throw new RangeError(`${name} must not be empty, got []`);
  // Few keys (the usual case) are compared pairwise; many go through a Set.
  const seen = n > 8 ? new Set<string>() : undefined;
  const list: string[] = [];
  for (let i = 0; i < n; i++) {
    const resource: unknown = resources[i];
    if (typeof resource !== "string") {
      throw new TypeError(`${name}[${i}] must be a string, got ${describeValue(resource)}`);
    }
    if (resource === "") throw new RangeError(`${name}[${i}] must not be empty, got ""`);
    if (seen ? seen.has(resource) : list.includes(resource)) {
      throw new RangeError(`${name}[${i}] is a duplicate: ${JSON.stringify(resource)}`);
    }
    seen?.add(resource);
    list.push(resource);
  }
  return list;
}

/** Checks one resource: a non-empty string. */
export function checkResource(resource: unknown, name: string): string {
  if (typeof resource !== "string") {
    throw new TypeError(`${name} must be a string, got ${describeValue(resource)}`);
  }
  if (resource === "") throw new RangeError(`${name} must not be empty, got ""`);
  return resource;
}

/** Checks a lease length in ms: an integer from 1 to 2^31 − 1. */
export function checkDuration(value: unknown, name = "duration"): number {
  if (typeof value !== "number") {
    throw new TypeError(`${name} must be a number of milliseconds, got ${describeValue(value)}`);
  }
  if (!Number.isInteger(value) || value < 1 || value > MAX_DURATION) {
    throw new RangeError(
      `${name} must be an integer of milliseconds from 1 to ${MAX_DURATION}, got ${value}`,
    );
  }
  return value;
}

/** Checks a finite number at least `min` (and below `below`, when given). */
export function checkNumber(
  value: unknown,
  name: string,
  { min = 0, below, integer = false }: { min?: number; below?: number; integer?: boolean } = {},
): number {
  if (typeof value !== "number") {
    throw new TypeError(`${name} must be a number, got ${describeValue(value)}`);
  }
  const bound = below === undefined
    ? `at least ${min}`
    : `from ${min} up to (not including) ${below}`;
  if (
    !Number.isFinite(value) || value < min || (below !== undefined && value >= below) ||
    (integer && !Number.isInteger(value))
  ) {
    throw new RangeError(
      `${name} must be ${integer ? "an integer" : "a number"} ${bound}, got ${value}`,
    );
  }
  return value;
}
