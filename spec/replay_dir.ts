/**
 * Reads a directory of ITF traces and replays them, for every model's
 * driver: one line with the traces, the server steps and the verdict, then
 * the first mismatches.
 *
 * @module
 */

import { showMismatch } from "./replay.ts";

/** What any model's replay reports. */
export interface DirReport {
  readonly traces: number;
  readonly steps: number;
  readonly mismatches: readonly Parameters<typeof showMismatch>[0][];
}

/**
 * The traces of `dir` by file name, in order: by name without its digits,
 * then by its number (`long_2` before `long_10`, then `trace_0`).
 *
 * @param dir The directory of `.itf.json` files.
 * @param read Parses one file's text.
 * @returns The traces by file name.
 */
export async function readTraceDir<T>(
  dir: string,
  read: (text: string) => T,
): Promise<Map<string, T>> {
  const names = [];
  for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  const order = (name: string) =>
    [name.replace(/\d/g, ""), Number(name.replace(/\D/g, ""))] as const;
  names.sort((a, b) => {
    const [x, y] = [order(a), order(b)];
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] - y[1];
  });
  const traces = new Map<string, T>();
  for (const name of names) traces.set(name, read(await Deno.readTextFile(`${dir}/${name}`)));
  return traces;
}

/**
 * Replays the traces in `dir` and prints the line `label` starts.
 *
 * @param dir The directory of traces.
 * @param label The line's first words, padded to its column.
 * @param read Parses one trace file.
 * @param replay Replays the traces against real servers.
 * @returns True when every reply was equal and at least `least` traces ran.
 */
export async function replayDir<T>(
  dir: string,
  label: string,
  read: (text: string) => T,
  replay: (traces: ReadonlyMap<string, T>) => Promise<DirReport>,
  least = 1,
): Promise<boolean> {
  const traces = await readTraceDir(dir, read);
  const started = performance.now();
  const report = await replay(traces);
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  const verdict = report.mismatches.length === 0
    ? "all replies equal"
    : `${report.mismatches.length} trace(s) with a different reply`;
  console.log(
    `${label} ${report.traces} traces, ${report.steps} server steps against ` +
      `redis-server: ${verdict} (${seconds} s)`,
  );
  report.mismatches.slice(0, 20).forEach((m) => console.log(`  ${showMismatch(m)}`));
  return report.mismatches.length === 0 && report.traces >= least;
}
