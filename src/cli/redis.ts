/**
 * The command line's Redis side: node-redis clients from `redis://` and
 * `rediss://` URLs (user and password included), the Redlock over them,
 * and each server's failures named by its URL (without the password) and
 * cause.
 *
 * @module
 */

import { createClient } from "redis";
import { Redlock } from "../api/redlock.ts";
import { redactUrl } from "./args.ts";
import { answersPlain, describeCause, isConnectTimeout, isOffline } from "./diagnose.ts";

/**
 * ms a connection (and its TLS handshake) may take before the client tries
 * again. The CLI waits at most its request timeout for it; a slower
 * server votes against until connected.
 */
const CONNECT_MS = 2_000;
/** ms between reconnect attempts to a server that failed or went away. */
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

/** Where the CLI's own messages go (stderr, one line each). */
export type Log = (line: string) => void;

/** One server: its client, its URL for messages, and why its connection fails. */
interface Server {
  readonly client: Client;
  readonly url: URL;
  readonly name: string;
  /** The cause of the last connection error; cleared when the client is ready. */
  cause: string | undefined;
  /** Resolves on the first "ready" or "error". */
  readonly settled: Promise<void>;
}

/** The request timeout for a lease: a quarter of a short lease, so an extension can be retried. */
export const requestTimeoutFor = (lease: number): number =>
  Math.max(10, Math.min(500, Math.floor(lease / 4)));

/** A Redlock over one node-redis client per URL; disposing closes the clients. */
export class CliRedis implements AsyncDisposable {
  readonly redlock: Redlock;
  /** ms each request may take, and the most a server that does not answer costs. */
  readonly requestTimeout: number;
  /**
   * ms from the first connection attempt until every server had connected
   * or failed, or the request timeout passed (creating the clients, which
   * takes a while of its own, is not counted).
   */
  readonly connectMs: number;
  readonly #servers: readonly Server[];
  /** The latest cause of each server's failed request. */
  readonly #failed = new Map<number, string>();
  #quiet = false;

  private constructor(servers: readonly Server[], requestTimeout: number, connectMs: number) {
    this.#servers = servers;
    this.requestTimeout = requestTimeout;
    this.connectMs = connectMs;
    this.redlock = new Redlock(servers.map((s) => s.client), { requestTimeout });
    this.redlock.on("error", (error, event) => {
      if (event.server >= 0) this.#failed.set(event.server, this.#cause(event.server, error));
    });
  }

  /**
   * Connects to every URL at once and waits until each is connected or has
   * failed, at most `requestTimeout`: a refused connection costs nothing
   * more, an unreachable server at most that. A server not connected by
   * then keeps reconnecting in the background and votes against until it is.
   *
   * @param urls One URL per independent server.
   * @param lease The lease the CLI locks for, in ms: bounds the request timeout.
   * @param ca CA certificates (PEM) that `rediss://` servers are checked against instead of
   *   the system's.
   * @returns The connected Redlock.
   */
  static async connect(
    urls: readonly string[],
    lease: number,
    ca?: string | undefined,
  ): Promise<CliRedis> {
    const requestTimeout = requestTimeoutFor(lease);
    const servers = urls.map((url) => server(url, ca));
    const start = performance.now();
    for (const s of servers) s.client.connect().catch(() => {}); // failures come as "error" events
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, requestTimeout)));
    await Promise.race([Promise.all(servers.map((s) => s.settled)), late]);
    clearTimeout(timer);
    const connectMs = performance.now() - start;
    // A rediss:// server that did not finish TLS in time: does it speak plain text?
    await Promise.all(servers.map(async (s) => {
      if (s.url.protocol !== "rediss:" || s.client.isReady) return;
      if (await answersPlain(s.url, requestTimeout)) {
        s.cause =
          "TLS expected, but the server answers in plain text (use redis:// or its TLS port)";
      }
    }));
    return new CliRedis(servers, requestTimeout, connectMs);
  }

  /** The cause of server `index`'s failed request, its connection's when it is offline. */
  #cause(index: number, error: Error): string {
    const s = this.#servers[index]!;
    if (isOffline(error)) return s.cause ?? "not connected";
    return describeCause(error, s.url, CONNECT_MS);
  }

  /**
   * Logs each distinct failure of a server once, named by its URL, and
   * every error of a whole operation; nothing once the CLI is closing.
   *
   * @param log Where the lines go.
   */
  logErrors(log: Log): void {
    const seen = new Set<string>();
    this.redlock.on("error", (error, event) => {
      if (this.#quiet) return;
      if (event.server < 0) return log(error.message);
      const line = `server ${this.#servers[event.server]!.name}: ${
        this.#cause(event.server, error)
      }`;
      if (seen.has(line)) return;
      seen.add(line);
      log(line);
    });
  }

  /**
   * Why server `index` failed its latest request, as an operator reads it
   * (refused, authentication failed, unknown host, TLS expected, …).
   *
   * @param index The server's index, in the order of the URLs.
   * @returns The cause, or undefined when it has not failed.
   */
  causeOf(index: number): string | undefined {
    const s = this.#servers[index];
    if (s === undefined) return undefined;
    return s.client.isReady ? this.#failed.get(index) : s.cause ?? this.#failed.get(index);
  }

  /**
   * The servers that failed, each with its cause, for a "too few servers" line.
   *
   * @returns e.g. `redis://h1:6379: connection refused; redis://h2:6379: …`.
   */
  failures(): string {
    const list = this.#servers.flatMap((s, i) => {
      const cause = this.causeOf(i);
      return cause === undefined ? [] : [`${s.name}: ${cause}`];
    });
    return list.length > 0 ? list.join("; ") : "no server failed a request";
  }

  /**
   * Stops logging (the outcome is decided), lets requests still in flight
   * finish (at most `requestTimeout`), then closes the clients.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    this.#quiet = true;
    await this.redlock[Symbol.asyncDispose]();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.requestTimeout)));
    const closing = this.#servers.map((s) => s.client.isReady ? s.client.close() : undefined);
    await Promise.race([Promise.allSettled(closing), late]);
    clearTimeout(timer);
    for (const s of this.#servers) {
      try {
        s.client.destroy();
      } catch {
        // closed already
      }
    }
  }
}

/** A client for `url` (not yet connecting, `ca` for TLS) that notes why its connection fails. */
function server(url: string, ca: string | undefined): Server {
  const client = newClient(url, ca);
  const parsed = new URL(url);
  const s: { -readonly [K in keyof Server]: Server[K] } = {
    client,
    url: parsed,
    name: redactUrl(url).replace(/\/$/, ""),
    cause: undefined,
    settled: Promise.resolve(),
  };
  s.settled = new Promise<void>((resolve) => {
    client.on("ready", () => {
      s.cause = undefined;
      resolve();
    });
    client.on("error", (error: unknown) => {
      // A timeout says less than the error it may follow (refused, TLS…).
      if (!isConnectTimeout(error) || s.cause === undefined) {
        s.cause = describeCause(error, parsed, CONNECT_MS);
      }
      resolve();
    });
  });
  return s;
}
