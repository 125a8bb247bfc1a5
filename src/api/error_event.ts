/**
 * The event a Redlock dispatches for every per-server failure.
 *
 * @module
 */

/**
 * Dispatched as `"error"` on a {@linkcode Redlock} whenever one server fails
 * a request (a client error, a Redis error reply, or a timeout). These are
 * never fatal by themselves: the operation goes on with the other servers.
 *
 * @example Logging server failures
 * ```ts no-eval
 * import { RedlockErrorEvent } from "@x/redlock";
 * // redlock.addEventListener("error", (event) => {
 * //   const { error, server } = event as RedlockErrorEvent;
 * //   console.warn(`redis #${server}: ${error.message}`);
 * // });
 * console.log(RedlockErrorEvent.name);
 * ```
 */
export class RedlockErrorEvent extends Event {
  /** What went wrong. */
  readonly error: Error;
  /**
   * The index of the failing server in the Redlock's client list; -1 for a
   * failure not tied to one server that no call could throw (see `reportError()`).
   */
  readonly server: number;
  readonly #client: object;

  /**
   * Makes an error event.
   *
   * @param error What went wrong.
   * @param server The index of the failing server.
   * @param client The client object of that server.
   */
  constructor(error: Error, server: number, client: object) {
    super("error");
    this.error = error;
    this.server = server;
    this.#client = client;
  }

  /**
   * The client object of that server, as given to `new Redlock()` (the
   * Redlock itself for an error of a whole operation). A getter, so that
   * logging the event does not print the client's options.
   *
   * @returns The client.
   */
  get client(): object {
    return this.#client;
  }
}
