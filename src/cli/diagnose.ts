/**
 * What an operator can act on when a Redis server fails: the cause of a
 * client's error in a few words (authentication failed, connection
 * refused, unknown host, TLS expected, …).
 *
 * @module
 */

import { RequestTimeoutError } from "../api/errors.ts";

/** The error's `code` (Node's system errors), if any. */
const codeOf = (error: unknown): unknown => (error as { code?: unknown } | null)?.code;

/** Whether node-redis gave up on the connection or TLS handshake in time. */
export function isConnectTimeout(error: unknown): boolean {
  return error instanceof Error &&
    (error.constructor.name === "ConnectionTimeoutError" || error.message === "Connection timeout");
}

/** Whether a request failed because the client was not connected. */
export function isOffline(error: unknown): boolean {
  return error instanceof Error &&
    /^Client(Offline|Closed)Error$/.test(error.constructor.name || error.name);
}

/**
 * The cause of `error` in a few words.
 *
 * @param error A client's connection error or a failed request's.
 * @param url The server's URL (its host names the unknown host).
 * @param connectMs The connect timeout, in ms.
 * @returns The cause, such as `connection refused`.
 */
export function describeCause(error: unknown, url: URL, connectMs: number): string {
  const code = codeOf(error);
  const message = error instanceof Error ? error.message : String(error);
  if (code === "ECONNREFUSED") return "connection refused";
  if (
    code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_NONAME" || code === "EAI_FAIL"
  ) {
    return `unknown host ${url.hostname} (${code})`;
  }
  if (/WRONGPASS|NOAUTH|AUTH .* without any password|invalid password/i.test(message)) {
    return `authentication failed: ${message.split(".")[0]}`;
  }
  if (isConnectTimeout(error)) {
    return url.protocol === "rediss:"
      ? `no TLS connection within ${connectMs} ms`
      : `no connection within ${connectMs} ms`;
  }
  if (error instanceof RequestTimeoutError) return `no answer within ${error.timeout} ms`;
  if (code === "ECONNRESET" || code === "EPIPE") return `connection reset (${code})`;
  return message;
}

/**
 * Whether the server at `url`'s host and port answers a plain-text PING:
 * when a `rediss://` connection timed out, that tells "TLS expected" (the
 * server does not speak TLS) from a server that cannot be reached.
 *
 * @param url The server's URL.
 * @param ms How long to try, in ms.
 * @returns true when it answered in plain text.
 */
export async function answersPlain(url: URL, ms: number): Promise<boolean> {
  const hostname = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port || 6379);
  let conn: Deno.Conn | undefined;
  const timer = setTimeout(() => conn?.close(), ms);
  try {
    conn = await Deno.connect({ hostname, port, signal: AbortSignal.timeout(ms) });
    await conn.write(new TextEncoder().encode("PING\r\n"));
    const buffer = new Uint8Array(64);
    const n = await conn.read(buffer);
    const reply = new TextDecoder().decode(buffer.subarray(0, n ?? 0));
    return /^(\+PONG|-NOAUTH|-ERR)/.test(reply);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
    try {
      conn?.close();
    } catch {
      // closed by the timer
    }
  }
}
