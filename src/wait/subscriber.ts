/**
 * Release notifications: the release script publishes on a channel per
 * resource, and waiting acquires listen on one subscriber connection per
 * server, so that they wake when the holder releases instead of polling.
 *
 * @module
 */

import type { RedisClient } from "../clients/clients.ts";
import { within } from "../util/delay.ts";

/** ms a subscriber connection is given to report that it closed. */
const CLOSE_MS = 1_000;

/**
 * A subscriber connection to one server, as the lock uses it. Build one for
 * a client that cannot be duplicated automatically (e.g. deno-redis) and pass
 * a {@linkcode SubscriberFactory} as the `subscriber` option.
 */
export interface ReleaseSubscriber {
  /** Subscribes to `channels`; resolves once the server confirmed. */
  subscribe(channels: readonly string[]): Promise<void>;
  /** Unsubscribes from `channels`. */
  unsubscribe(channels: readonly string[]): Promise<void>;
  /** Closes the connection. */
  close(): Promise<void>;
}

/**
 * Makes a subscriber connection for the server of `client` (the
 * `index`-th of the Redlock) that calls `onMessage(channel, message)` for
 * every message; `null` when it cannot, and the lock then polls. (A factory
 * that leaves out `message` still works, but then a release wakes every
 * waiting acquire of the Redlock instead of the first in line.)
 */
export type SubscriberFactory = (
  client: RedisClient,
  index: number,
  onMessage: (channel: string, message?: string) => void,
) => ReleaseSubscriber | null | Promise<ReleaseSubscriber | null>;

type Fn = (...args: unknown[]) => unknown;

interface IoredisSubscriber {
  connect: () => Promise<unknown>;
  subscribe: Fn;
  unsubscribe: Fn;
  disconnect: Fn;
  on: Fn;
  once: Fn;
  status: string;
}

interface NodeRedisSubscriber {
  connect: () => Promise<unknown>;
  subscribe: Fn;
  unsubscribe: Fn;
  destroy: Fn;
  on: Fn;
}

interface BunSubscriber {
  subscribe: (channels: string[], listener: (message: string, channel: string) => void) => unknown;
  unsubscribe: (channels: string[]) => unknown;
  close: Fn;
}

/** `@upstash/redis`'s `Subscriber`: one HTTP event stream per channel. */
interface UpstashSubscriber {
  on(type: string, listener: (data: never) => void): void;
  unsubscribe(channels?: string[]): Promise<void>;
}

/**
 * Options every subscriber connection of ioredis needs, whatever the
 * client's: the offline queue holds the first SUBSCRIBE until the connection
 * is up (a client made with `enableOfflineQueue: false` would fail it), and
 * the explicit connect() tells at once whether the server can be reached.
 * ioredis's own re-subscribe after a reconnect leaves its promise unhandled
 * (a close before the reply would end the process): ours handles it.
 */
const IOREDIS_SUBSCRIBER = {
  enableOfflineQueue: true,
  lazyConnect: true,
  autoResubscribe: false,
} as const;

/**
 * The default factory: a `duplicate()` of an ioredis, node-redis or Bun
 * `RedisClient` client (also ioredis and node-redis cluster clients), with
 * the options a subscriber needs whatever the client's; an `@upstash/redis`
 * client's `subscribe()` (Server-Sent Events over HTTP); `null` for any
 * other client (deno-redis, Valkey GLIDE: they poll unless you pass a
 * factory).
 *
 * @param client The Redlock's client for that server.
 * @param _index Its index.
 * @param onMessage Called with the channel and payload of every message.
 * @returns A subscriber, or null when the client cannot be duplicated.
 * @throws {Error} When the subscriber connection cannot connect.
 *
 * @example Wrapping the default for logging
 * ```ts no-eval
 * import { duplicateSubscriber, Redlock } from "@x/redlock";
 * declare const clients: Redlock["clients"];
 * const redlock = new Redlock(clients, {
 *   subscriber: (client, index, onMessage) => {
 *     console.log(`subscribing on server ${index}`);
 *     return duplicateSubscriber(client, index, onMessage);
 *   },
 * });
 * ```
 */
export function duplicateSubscriber(
  client: RedisClient,
  _index: number,
  onMessage: (channel: string, message?: string) => void,
): Promise<ReleaseSubscriber | null> {
  const c = client as unknown as Record<string, unknown>;
  const has = (name: string) => typeof c[name] === "function";
  if (has("duplicate") && has("defineCommand")) return ioredisSubscriber(c, onMessage);
  if (has("duplicate") && has("evalSha")) return nodeRedisSubscriber(c, onMessage);
  if (has("duplicate") && has("send") && !has("sendCommand")) return bunSubscriber(c, onMessage);
  if (has("subscribe") && has("createScript")) {
    return Promise.resolve(upstashSubscriber(c, onMessage));
  }
  return Promise.resolve(null);
}

async function ioredisSubscriber(
  c: Record<string, unknown>,
  onMessage: (channel: string, message?: string) => void,
): Promise<ReleaseSubscriber> {
  const duplicate = c.duplicate as Fn;
  // A Cluster's duplicate() takes its startup nodes first.
  const sub =
    (c.isCluster === true
      ? duplicate.call(c, [], IOREDIS_SUBSCRIBER)
      : duplicate.call(c, IOREDIS_SUBSCRIBER)) as IoredisSubscriber;
  sub.on("error", () => {});
  const close = async () => {
    const reconnecting = sub.status === "reconnecting" || sub.status === "wait";
    sub.disconnect();
    if (sub.status !== "end" && !reconnecting) {
      // (bounded: a connection to a dead server may never report its end)
      await within(new Promise((resolve) => sub.once("end", resolve)), CLOSE_MS);
    }
  };
  await connectOrClose(sub.connect(), close);
  sub.on(
    "message",
    (channel: unknown, message: unknown) => onMessage(String(channel), String(message)),
  );
  // The channels to subscribe again on every reconnect.
  const subscribed = new Set<string>();
  sub.on("ready", () => {
    if (subscribed.size > 0) (sub.subscribe(...subscribed) as Promise<unknown>).catch(() => {});
  });
  return {
    subscribe: async (channels) => {
      for (const channel of channels) subscribed.add(channel);
      await sub.subscribe(...channels);
    },
    unsubscribe: async (channels) => {
      for (const channel of channels) subscribed.delete(channel);
      await sub.unsubscribe(...channels);
    },
    close,
  };
}

async function nodeRedisSubscriber(
  c: Record<string, unknown>,
  onMessage: (channel: string, message?: string) => void,
): Promise<ReleaseSubscriber> {
  const sub = (c.duplicate as Fn).call(c, { disableOfflineQueue: false }) as NodeRedisSubscriber;
  // Its connect() retries for ever while the server is unreachable, and the
  // connection would never be closed: the first error while connecting ends it.
  let failed: (error: unknown) => void = () => {};
  const failing = new Promise<never>((_, reject) => (failed = reject));
  sub.on("error", (error: unknown) => failed(error));
  const close = async () => {
    sub.destroy();
    await new Promise((resolve) => setTimeout(resolve, 0));
  };
  await connectOrClose(Promise.race([sub.connect(), failing]), close);
  failed = () => {};
  const listener = (message: unknown, channel: unknown) =>
    onMessage(String(channel), String(message));
  return {
    subscribe: async (channels) => void await sub.subscribe([...channels], listener),
    unsubscribe: async (channels) => void await sub.unsubscribe([...channels], listener),
    close,
  };
}

async function bunSubscriber(
  c: Record<string, unknown>,
  onMessage: (channel: string, message?: string) => void,
): Promise<ReleaseSubscriber> {
  const sub = await ((c.duplicate as Fn).call(c) as Promise<BunSubscriber>);
  const listener = (message: string, channel: string) => onMessage(channel, message);
  return {
    subscribe: async (channels) => void await sub.subscribe([...channels], listener),
    unsubscribe: async (channels) => void await sub.unsubscribe([...channels]),
    close: async () => void await sub.close(),
  };
}

/**
 * Upstash: `subscribe()` opens one event stream per channel, and the
 * stream's first event confirms the subscription.
 */
function upstashSubscriber(
  c: Record<string, unknown>,
  onMessage: (channel: string, message?: string) => void,
): ReleaseSubscriber {
  const streams = new Map<string, UpstashSubscriber>();
  const open = (channel: string) =>
    new Promise<void>((resolve, reject) => {
      const stream = (c.subscribe as Fn).call(c, [channel]) as UpstashSubscriber;
      streams.set(channel, stream);
      stream.on("subscribe", () => resolve());
      stream.on("error", (error: Error) => reject(error));
      // Payloads come JSON-parsed when they parse; lock values never do.
      stream.on(
        "message",
        (data: { channel: string; message: unknown }) =>
          onMessage(String(data.channel), String(data.message)),
      );
    });
  const unsubscribe = async (channels: readonly string[]) => {
    await Promise.all(channels.map((channel) => {
      const stream = streams.get(channel);
      streams.delete(channel);
      return stream?.unsubscribe();
    }));
  };
  return {
    subscribe: async (channels) => void await Promise.all(channels.map(open)),
    unsubscribe,
    close: () => unsubscribe([...streams.keys()]),
  };
}

/** Waits for `connecting`; when it fails, closes the connection and says so. */
async function connectOrClose(connecting: Promise<unknown>, close: () => Promise<void>) {
  try {
    await connecting;
  } catch (error) {
    await close();
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`the subscriber connection could not connect: ${message}`, { cause: error });
  }
}
