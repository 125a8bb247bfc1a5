/**
 * The servers where an acquire let go of what a failed attempt of its took
 * (an undo), and whether each answered: what such a server hands the
 * acquire later may be gone, so a handoff does not count it.
 *
 * @module
 */

import { within } from "../util/delay.ts";

/** An acquire's undos, by server. */
export class UndoLog {
  /** The release sent to each server: true once it answered. */
  #sent: Map<number, Promise<boolean>> | undefined;

  /** An undo was sent to `server`; `reply` settles once it answered. */
  sent(server: number, reply: Promise<boolean>): void {
    (this.#sent ??= new Map()).set(server, reply);
  }

  /** Whether an undo may still take back a key `server` hands over. */
  has(server: number): boolean {
    return this.#sent?.has(server) === true;
  }

  /**
   * Waits (at most `ms`) for the undos sent so far: one that answered ran
   * before the acquire queues, so it cannot take back a key a server hands
   * it later, and its server counts again. (One that has not answered may
   * still land late, e.g. as an EVAL sent after NOSCRIPT.)
   */
  async settle(ms: number): Promise<void> {
    const sent = [...this.#sent ?? []];
    const answered = await Promise.all(sent.map(([, reply]) => within(reply, ms)));
    sent.forEach(([server, reply], i) => {
      if (answered[i] === true && this.#sent!.get(server) === reply) this.#sent!.delete(server);
    });
  }
}
