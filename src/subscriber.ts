/**
 * Release notifications: the release script publishes on a channel per
 * resource, and waiting acquires listen on one subscriber connection per
 * server, so that they wake when the holder releases instead of polling.
 *
 * @module
 */

import type { RedisClient } from "./clients.ts";

/**
 * The channel a release of `resource` is published on when nobody queues
 * for it (the release frees the key for anyone).
 */
export function releaseChannel(resource: string): string {
  return `redlock:release:${resource}`;
}

/**
 * The channel of the waiting acquires of one Redlock, by its id (the part of
 * their lock values before the colon): a release that reserved a key for
 * one of them (the first of the key's wait queue) publishes its value there.
 */
export function wakeChannel(id: string): string {
  return `redlock:wake:${id}`;
}

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
type Duplicable = { duplicate: Fn };

interface IoredisSubscriber {
  subscribe: Fn;
  unsubscribe: Fn;
  disconnect: Fn;
  on: Fn;
  once: Fn;
  status: string;
}

interface NodeRedisSubscriber {
  connect: Fn;
  subscribe: Fn;
  unsubscribe: Fn;
  destroy: Fn;
  on: Fn;
}

/**
 * The default factory: `duplicate()` of an ioredis or node-redis client
 * (also their cluster clients); `null` for any other client.
 *
 * @param client The Redlock's client for that server.
 * @param _index Its index.
 * @param onMessage Called with the channel and payload of every message.
 * @returns A subscriber, or null when the client cannot be duplicated.
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
export async function duplicateSubscriber(
  client: RedisClient,
  _index: number,
  onMessage: (channel: string, message?: string) => void,
): Promise<ReleaseSubscriber | null> {
  const c = client as unknown as Partial<Duplicable> & { defineCommand?: Fn; evalSha?: Fn };
  if (typeof c.duplicate !== "function") return null;
  if (typeof c.defineCommand === "function") {
    const sub = c.duplicate() as IoredisSubscriber;
    sub.on("error", () => {});
    sub.on(
      "message",
      (channel: unknown, message: unknown) => onMessage(String(channel), String(message)),
    );
    return {
      subscribe: async (channels) => void await sub.subscribe(...channels),
      unsubscribe: async (channels) => void await sub.unsubscribe(...channels),
      close: async () => {
        const reconnecting = sub.status === "reconnecting" || sub.status === "wait";
        sub.disconnect();
        if (sub.status !== "end" && !reconnecting) {
          await new Promise((resolve) => sub.once("end", resolve));
        }
      },
    };
  }
  if (typeof c.evalSha === "function") {
    const sub = c.duplicate() as NodeRedisSubscriber;
    sub.on("error", () => {});
    await sub.connect();
    const listener = (message: unknown, channel: unknown) =>
      onMessage(String(channel), String(message));
    return {
      subscribe: async (channels) => void await sub.subscribe([...channels], listener),
      unsubscribe: async (channels) => void await sub.unsubscribe([...channels], listener),
      close: async () => {
        sub.destroy();
        await new Promise((resolve) => setTimeout(resolve, 0));
      },
    };
  }
  return null;
}
