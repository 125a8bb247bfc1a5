/**
 * Ctrl-C during a benchmark: stop what it started (Redis servers, proxy
 * processes are children that would outlive it), then exit.
 *
 * @module
 */

/** On SIGINT or SIGTERM, runs `stop` and exits with 130. */
export function stopOnSignal(stop: () => Promise<void>): void {
  const onSignal = () => {
    console.error("\ninterrupted: stopping the Redis servers");
    stop().finally(() => Deno.exit(130));
  };
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
}
