/**
 * The checks of the client list a Redlock is made with, before any client
 * is adapted (`clients.ts` tells each client's kind).
 *
 * @module
 */

import { describeValue } from "../util/validate.ts";

/** Checks that `clients` is a non-empty array with each client once. */
export function checkClients(clients: unknown): asserts clients is readonly unknown[] {
  if (!Array.isArray(clients)) {
    throw new TypeError(`clients must be an array of clients, got ${describeValue(clients)}`);
  }
  if (clients.length === 0) throw new TypeError("clients must not be empty, got []");
  if (new Set(clients).size !== clients.length) {
    const i = clients.findIndex((c, j) => clients.indexOf(c) !== j);
    throw new TypeError(
      `clients[${i}] is the same client as clients[${clients.indexOf(clients[i]!)}]: ` +
        "each server must appear once",
    );
  }
}
