/**
 * Listening for an abort without missing one that already happened: an
 * `abort` event fires once, so a listener added after it never runs.
 *
 * @module
 */

/**
 * Calls `listener` once `signal` aborts, at once when it aborted already.
 *
 * @param signal The signal.
 * @param listener Called once, with no argument.
 * @returns A function that removes the listener (a no-op once it ran).
 */
export function onAbort(signal: AbortSignal, listener: () => void): () => void {
  if (signal.aborted) {
    listener();
    return () => {};
  }
  signal.addEventListener("abort", listener, { once: true });
  return () => signal.removeEventListener("abort", listener);
}
