/**
 * The command line's Redis side: node-redis clients from `redis://` and
 * `rediss://` URLs (user and password included), and the Redlock over them.
 *
 * @module
 */

import { createClient } from "redis";
import { Redlock } from "../api/redlock.ts";

/** ms a server may take to accept the first connection before the CLI goes on without it. */
const CONNECT_MS = 1_000;
/** ms between reconnect attempts to a server that went away. */
const RECONNECT_MS = 100;

type Client = ReturnType<typeof newClient>;

/** A node-redis client for `url` that fails requests at once while disconnected. */
function newClient(url: string, ca: string | undefined) {
  const socket = { connectTimeout: CONNECT_MS, reconnectStrategy: () => RECONNECT_MS };
  return createClient({
    url,
    disableOfflineQueue: true,
    // A rediss:// URL turns TLS on; the CA then replaces the system's.
    socket: ca === undefined ? socket : { ...socket, ca },
  });
}

/** A Redlock over one node-redis client per URL; disposing closes the clients. */
export class CliRedis implements AsyncDisposable {
  readonly redlock: Redlock;
  readonly #clients: readonly Client[];

  private constructor(clients: readonly Client[], lease: number) {
    this.#clients = clients;
    // A request may take a quarter of a short lease, so that an extension can be retried.
    const requestTimeout = Math.max(10, Math.min(500, Math.floor(lease / 4)));
    this.redlock = new Redlock(clients, { requestTimeout });
  }

  /**
   * Connects to every URL at once; a server that does not accept within
   * {@linkcode CONNECT_MS} keeps reconnecting in the background and votes
   * against until it does.
   *
   * @param urls One URL per independent server.
   * @param lease The lease the CLI locks for, in ms: bounds the request timeout.
   * @param ca CA certificates (PEM) that `rediss://` servers are checked against instead of
   *   the system's.
   */
  static async connect(
    urls: readonly string[],
    lease: number,
    ca?: string | undefined,
  ): Promise<CliRedis> {
    const clients = urls.map((url) => {
      const client = newClient(url, ca);
      client.on("error", () => {}); // each failed request is a Redlock "error" event already
      return client;
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, CONNECT_MS)));
    await Promise.race([Promise.allSettled(clients.map((c) => c.connect())), late]);
    clearTimeout(timer);
    return new CliRedis(clients, lease);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.redlock[Symbol.asyncDispose]();
    for (const client of this.#clients) client.destroy();
  }
}
