/**
 * Timers with sub-millisecond precision: Deno's `setTimeout` fires about a
 * millisecond late at best, too coarse for a 0.25 ms network delay. One
 * helper thread sleeps in `Atomics.wait` until the earliest deadline and
 * posts a message; the callbacks then run on this thread, in deadline order.
 * A plain timer a few ms after the earliest deadline backs it up, so that a
 * helper thread that starts late (a loaded machine) delays, never stalls.
 *
 * @module
 */

/** ms since the epoch on the monotonic clock. */
export const instant = (): number => performance.timeOrigin + performance.now();

/** ms after a deadline that the backup timer fires. */
const BACKUP_MS = 3;

interface Entry {
  readonly at: number;
  readonly run: () => void;
}

/** Runs callbacks at instants (see {@linkcode instant}), sub-millisecond precise. */
export class PreciseTimer {
  readonly #worker: Worker;
  readonly #control: Int32Array;
  readonly #deadline: Float64Array;
  /** Pending callbacks, earliest last (popped from the end). */
  #queue: Entry[] = [];
  #closed = false;
  /** The backup for the earliest deadline, and that deadline. */
  #backup: ReturnType<typeof setTimeout> | undefined;
  #backupAt = Infinity;
  readonly #ready = Promise.withResolvers<void>();

  constructor() {
    const shared = new SharedArrayBuffer(16);
    this.#control = new Int32Array(shared, 0, 2);
    this.#deadline = new Float64Array(shared, 8, 1);
    this.#deadline[0] = Infinity;
    this.#worker = new Worker(new URL("./_precise_timer_worker.ts", import.meta.url), {
      type: "module",
    });
    this.#worker.onmessage = (event: MessageEvent<number | "started">) => {
      if (event.data === "started") this.#ready.resolve();
      else this.#fire();
    };
    this.#worker.postMessage(shared);
  }

  /** Resolves once the helper thread runs. */
  get ready(): Promise<void> {
    return this.#ready.promise;
  }

  /** Runs `run` at `at` (or at once when that has passed, still asynchronously). */
  at(at: number, run: () => void): void {
    if (this.#closed) return;
    const queue = this.#queue;
    let i = queue.length;
    while (i > 0 && queue[i - 1]!.at < at) i--;
    queue.splice(i, 0, { at, run });
    if (i === queue.length - 1) this.#arm();
  }

  /** Resolves at `at`. */
  until(at: number): Promise<void> {
    return new Promise((resolve) => this.at(at, resolve));
  }

  #arm(): void {
    const next = this.#queue.at(-1)?.at ?? Infinity;
    this.#deadline[0] = next;
    Atomics.add(this.#control, 0, 1);
    Atomics.notify(this.#control, 0);
    if (next !== this.#backupAt) {
      clearTimeout(this.#backup);
      this.#backup = undefined;
      this.#backupAt = next;
      if (next !== Infinity) {
        this.#backup = setTimeout(() => {
          this.#backupAt = Infinity;
          this.#fire();
        }, Math.max(0, next - instant()) + BACKUP_MS);
      }
    }
  }

  #fire(): void {
    const now = instant();
    const due: Entry[] = [];
    while (this.#queue.length > 0 && this.#queue.at(-1)!.at <= now) due.push(this.#queue.pop()!);
    this.#arm();
    for (const entry of due) entry.run();
  }

  /** Stops the helper thread; pending callbacks never run. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#queue = [];
    clearTimeout(this.#backup);
    this.#ready.resolve();
    Atomics.store(this.#control, 1, 1);
    Atomics.add(this.#control, 0, 1);
    Atomics.notify(this.#control, 0);
    this.#worker.terminate();
  }
}
