/**
 * Waits `ms` milliseconds; rejects at once with `signal.reason` when the
 * signal aborts, and leaves no timer or listener behind either way.
 */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal === undefined) return new Promise((resolve) => setTimeout(resolve, ms));
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

const noop = (): void => {};
const NONE: { signal: undefined; dispose: () => void } = Object.freeze({
  signal: undefined,
  dispose: noop,
});

/**
 * A signal that aborts when `signal` does or after `timeout` ms (with a
 * `TimeoutError` DOMException), and a `dispose()` that clears the timer.
 */
export function deadline(
  signal: AbortSignal | undefined,
  timeout: number | undefined,
): { signal: AbortSignal | undefined; dispose: () => void } {
  if (timeout === undefined) return signal === undefined ? NONE : { signal, dispose: noop };
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new DOMException(`timed out after ${timeout} ms`, "TimeoutError")),
    timeout,
  );
  const combined = signal === undefined
    ? controller.signal
    : AbortSignal.any([signal, controller.signal]);
  return { signal: combined, dispose: () => clearTimeout(timer) };
}

/** Bounds a promise by `ms`; resolves to undefined on time-out. Clears its timer. */
export function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms))),
  ]).finally(() => clearTimeout(timer));
}
