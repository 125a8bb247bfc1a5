/**
 * How a Redlock shows in `Deno.inspect`, Node's `util.inspect` and
 * `console.log`: its name and its `toJSON()` summary, never its clients
 * (their options may hold passwords).
 *
 * @module
 */

type Inspect = (value: unknown, options: unknown) => string;

/** Makes the inspectors of both runtimes show instances of `type` as `name` and their summary. */
export function showSummary(
  type: { readonly prototype: { toJSON(): unknown } },
  name: string,
): void {
  Object.defineProperties(type.prototype, {
    [Symbol.for("Deno.customInspect")]: {
      value(this: { toJSON(): unknown }, inspect: Inspect, options: unknown): string {
        return `${name} ${inspect(this.toJSON(), options)}`;
      },
    },
    [Symbol.for("nodejs.util.inspect.custom")]: {
      value(this: { toJSON(): unknown }, _depth: number, options: unknown, inspect: Inspect) {
        return `${name} ${inspect(this.toJSON(), options)}`;
      },
    },
  });
}
