/**
 * The thread behind {@linkcode PreciseTimer}: sleeps in `Atomics.wait`
 * (sub-millisecond, no spinning) until the deadline the owner wrote, posts
 * one message when it passes, then waits for the next deadline.
 *
 * Shared memory: Int32 [0] generation (bumped by the owner on every change),
 * [1] 1 when told to stop; Float64 [1] the deadline, ms since the epoch on
 * the monotonic clock (Infinity: none).
 *
 * @module
 */

/// <reference lib="deno.worker" />

self.onmessage = (event: MessageEvent<SharedArrayBuffer>) => {
  self.onmessage = null;
  const control = new Int32Array(event.data, 0, 2);
  const deadline = new Float64Array(event.data, 8, 1);
  const now = () => performance.timeOrigin + performance.now();
  self.postMessage("started");
  while (Atomics.load(control, 1) === 0) {
    const generation = Atomics.load(control, 0);
    const wait = deadline[0]! - now();
    if (wait > 0) {
      Atomics.wait(control, 0, generation, wait === Infinity ? undefined : wait);
      continue;
    }
    self.postMessage(generation);
    // fired: sleep until the owner writes a new deadline (or stops us)
    Atomics.wait(control, 0, generation);
  }
  self.close();
};
