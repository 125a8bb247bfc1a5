/**
 * The test run's watchdog: reads what `deno test` prints and tells when one
 * test has run past a limit, so that a test that hangs ends the run naming
 * itself instead of stalling it. (Deno has no per-test timeout; its runner
 * prints `'<name>' has been running for over (1m0s)` each minute.)
 */

/** A test that ran past the limit. */
export interface Overrun {
  /** The test's name. */
  readonly test: string;
  /** The file it is in, as the runner named it (e.g. `./tests/lead_test.ts`). */
  readonly file: string | undefined;
  /** How long it had run, in seconds, by the runner's last report. */
  readonly seconds: number;
}

// deno-lint-ignore no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;
const FILE = /running \d+ tests? from (\S+)/;
const SLOW = /'(.*)' has been running for over \((?:(\d+)m)?(\d+)s\)/;

/** Scans the runner's output, chunk by chunk, for a test running past `limit` seconds. */
export class Watchdog {
  readonly #limit: number;
  #line = "";
  #file: string | undefined;

  /** @param limit Seconds a test may run. */
  constructor(limit: number) {
    this.#limit = limit;
  }

  /** Reads `text`; returns the test that ran past the limit, if it did. */
  read(text: string): Overrun | undefined {
    const lines = (this.#line + text).split("\n");
    this.#line = lines.pop()!.slice(-4_096);
    for (const line of [...lines, this.#line]) {
      const found = this.#scan(line.replace(ANSI, ""));
      if (found !== undefined) return found;
    }
    return undefined;
  }

  #scan(line: string): Overrun | undefined {
    const file = FILE.exec(line);
    if (file) this.#file = file[1];
    const slow = SLOW.exec(line);
    if (!slow) return undefined;
    const seconds = Number(slow[2] ?? 0) * 60 + Number(slow[3]);
    return seconds >= this.#limit ? { test: slow[1]!, file: this.#file, seconds } : undefined;
  }
}
