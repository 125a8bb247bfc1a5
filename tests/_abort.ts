/**
 * Waiting for an abort in tests, fixtures and benchmarks: checks
 * `signal.aborted` first, as an abort that already fired never fires again.
 */

/**
 * Resolves with `signal.reason` once `signal` aborts (at once when it has);
 * with `ms`, rejects when it has not aborted within `ms`.
 */
export function untilAborted(signal: AbortSignal, ms?: number): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((resolve, reject) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const onAbort = () => {
      clearTimeout(timer);
      resolve(signal.reason);
    };
    if (ms !== undefined) {
      timer = setTimeout(() => {
        signal.removeEventListener("abort", onAbort);
        reject(new Error(`not aborted within ${ms} ms`));
      }, ms);
    }
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
