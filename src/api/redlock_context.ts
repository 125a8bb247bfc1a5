/**
 * The {@linkcode LockContext} of a Redlock: its servers, waiters, settings,
 * hooks and events, and the values of its locks, made from the
 * constructor's arguments once they are checked.
 *
 * @module
 */

import type { LockContext } from "./lock_context.ts";
import { Lifecycle } from "./lifecycle.ts";
import { listenersOf, type RedlockEvents } from "./redlock_events.ts";
import type { LockOwner } from "./lock.ts";
import type { RedlockInit } from "./options.ts";
import {
  checkKeys,
  checkSettings,
  DEFAULTS,
  KNOWN,
  NO_OPTIONS,
  type Settings,
} from "./settings.ts";
import { checkClients } from "../clients/check_clients.ts";
import type { RedisClient } from "../clients/clients.ts";
import { lockValue } from "../protocol/encoding.ts";
import { Servers } from "../quorum/servers.ts";
import { duplicateSubscriber } from "../wait/subscriber.ts";
import { Waiters } from "../wait/waiters.ts";
import { describeValue } from "../util/validate.ts";

/** A Redlock's context; `redlock` dispatches its events and owns its locks. */
export class RedlockContext implements LockContext {
  readonly servers: Servers;
  readonly waiters: Waiters;
  readonly settings: Settings;
  readonly owner: LockOwner;
  readonly lifecycle: Lifecycle;
  /** A random id: the first part of the values of this Redlock's locks. */
  readonly #id: string = crypto.randomUUID();
  /** How many values were made: the second part. */
  #values = 0;

  /** Checks the constructor's arguments (in this order) and makes the context. */
  constructor(
    clients: readonly RedisClient[],
    options: RedlockInit | undefined,
    redlock: RedlockEvents & LockOwner,
  ) {
    checkClients(clients);
    if (options !== undefined) checkKeys(options, KNOWN.redlock, "options");
    this.servers = new Servers(clients, redlock);
    this.settings = checkSettings(options ?? NO_OPTIONS, DEFAULTS, "options");
    const factory = options?.subscriber ?? duplicateSubscriber;
    if (typeof factory !== "function") {
      throw new TypeError(
        `options.subscriber must be a function, got ${describeValue(factory)}`,
      );
    }
    this.waiters = new Waiters(this.#id, this.servers.members, factory, this.servers.emit);
    this.owner = redlock;
    this.lifecycle = new Lifecycle(redlock, listenersOf(redlock));
  }

  nextValue(lease: number): string {
    return lockValue(this.#id, ++this.#values, lease);
  }
}
