import { Alarm, type Member } from "./_quorum.ts";
import {
  releaseChannel,
  type ReleaseSubscriber,
  type SubscriberFactory,
  wakeChannel,
} from "./subscriber.ts";
import { now } from "./_time.ts";
import { within } from "./_delay.ts";

interface Channel {
  /** Acquires that hold an interest in the channel. */
  holders: number;
  /** Wakers of the acquires waiting now; called on every release message. */
  readonly wakers: Set<() => void>;
  /** When the subscription was confirmed by at least one server (monotonic). */
  subscribedAt: number;
  /** How many servers confirmed the subscription. */
  confirmed: number;
  /** When a release message last arrived from each server (monotonic). */
  readonly releasedAt: number[];
  /** Which servers named the acquire in a wake message (its own record only). */
  readonly handed: boolean[];
  /** Settles once the subscribe requests have answered or timed out. */
  ready: Promise<void>;
}

/**
 * ms a waiter, woken by the release message of one server, waits at least
 * for the messages of the others before it tries anyway (at most twice
 * that: the deadline rides on the shared sweeper, see `Alarm`).
 */
export const STRAGGLER_MS = 5;

function newChannel(servers: number): Channel {
  return {
    holders: 0,
    wakers: new Set(),
    subscribedAt: Infinity,
    confirmed: 0,
    releasedAt: new Array<number>(servers).fill(-Infinity),
    handed: new Array<boolean>(servers).fill(false),
    ready: Promise.resolve(),
  };
}

/**
 * ms the subscriber connections stay open after the last wait ended, so that
 * a Redlock whose acquires wait again and again (a hot resource) does not
 * open and close them for every wait, which costs more than the wait itself.
 */
export const LINGER_MS = 100;

/**
 * The shared release listener of a Redlock: one subscriber connection per
 * server, opened when the first acquire has to wait, subscribed to the
 * channels of the resources somebody waits for, and closed {@linkcode
 * LINGER_MS} after the last wait ended (at once by `close()`).
 */
export class Waiters {
  readonly #members: readonly Member[];
  readonly #factory: SubscriberFactory;
  readonly #onError: (error: Error, member: Member) => void;
  readonly #channels = new Map<string, Channel>();
  /** The Redlock's wake channel. */
  readonly #wake: string;
  /** The queued acquires, by lock value: what their wake messages tell. */
  readonly #named = new Map<string, Channel>();
  #subscribers: Promise<(ReleaseSubscriber | null)[]> | undefined;
  /** The closing of the connections, while it is under way. */
  #closing: Promise<void> | undefined;
  /** Unsubscribes and closes under way, which `close()` waits for. */
  readonly #tidying = new Set<Promise<void>>();
  /** Closes the connections once nobody waited for {@linkcode LINGER_MS}. */
  #linger: ReturnType<typeof setTimeout> | undefined;
  /** When the last wait ended (monotonic); Infinity since a wait started. */
  #idleSince = Infinity;
  /** Resources acquires queued for since the connections opened. */
  readonly #hot = new Set<string>();
  /**
   * Servers whose subscriber failed and was reported, until one of their
   * subscriptions succeeds: a broken subscriber makes one error event, not
   * one per wait.
   */
  readonly #reported = new Set<number>();

  constructor(
    id: string,
    members: readonly Member[],
    factory: SubscriberFactory,
    onError: (error: Error, member: Member) => void,
  ) {
    this.#wake = wakeChannel(id);
    this.#members = members;
    this.#factory = factory;
    this.#onError = onError;
  }

  /**
   * Registers an interest in the release of `keys` (or, with `value`, of
   * its one key, reserved for that queued acquire) until `done()` is
   * called, and returns a `wait` that sleeps until such a release, at most
   * `ms`. A release counts once a quorum of the servers that confirmed the
   * subscription announced it (the others release at about the same time,
   * and a retry before they have is bound to fail), or {@linkcode
   * STRAGGLER_MS} (up to twice that) after the first did. `wait` returns at
   * once when that happened (or the subscription started) after `since`, the
   * start of the attempt that failed.
   */
  async listen(
    keys: readonly string[],
    timeout: number,
    value?: string,
  ): Promise<Listening> {
    this.#idleSince = Infinity;
    // Connections closing from an earlier wait are given at most a request's
    // time: one to a dead server may never report that it closed.
    if (this.#closing !== undefined) await within(this.#closing, timeout);
    const names = value === undefined ? keys.map(releaseChannel) : [this.#wake];
    // Channels kept from earlier waits that nobody needs now.
    const stale: string[] = [];
    for (const [name, channel] of this.#channels) {
      if (channel.holders === 0 && !names.includes(name)) {
        this.#channels.delete(name);
        stale.push(name);
      }
    }
    this.#unsubscribe(stale);
    const fresh: string[] = [];
    const channels = names.map((name) => {
      let channel = this.#channels.get(name);
      if (channel === undefined) {
        channel = newChannel(this.#members.length);
        this.#channels.set(name, channel);
        fresh.push(name);
      }
      channel.holders++;
      return channel;
    });
    if (fresh.length > 0) {
      const ready = this.#subscribe(fresh, timeout);
      for (const name of fresh) this.#channels.get(name)!.ready = ready;
    }
    await Promise.all(channels.map((c) => c.ready));
    let waitOn = channels;
    if (value !== undefined) {
      // Wake messages name the acquire; it waits on its own record of them.
      const named = newChannel(this.#members.length);
      named.subscribedAt = -Infinity;
      named.confirmed = channels[0]!.confirmed;
      this.#named.set(value, named);
      waitOn = [named];
    }
    let done = false;
    return {
      subscribed: channels.some((c) => c.subscribedAt !== Infinity),
      heard: () => {
        const servers: number[] = [];
        waitOn[0]!.handed.forEach((handed, server) => handed && servers.push(server));
        return servers;
      },
      wait: (since, ms, signal) => this.#wait(waitOn, since, ms, signal),
      done: () => {
        if (done) return Promise.resolve();
        done = true;
        if (value !== undefined) this.#named.delete(value);
        return this.#forget(names, channels);
      },
    };
  }

  /**
   * Whether an acquire of this Redlock queued for `resource` since the
   * connections opened: then it is likely still contended.
   */
  isHot(resource: string): boolean {
    // (The size first: hashing a fresh key string costs more than the rest of the check.)
    return this.#hot.size !== 0 && this.#hot.has(resource);
  }

  /** Notes that an acquire queued for `resource`. */
  queued(resource: string): void {
    if (this.#hot.size >= 1_000) this.#hot.clear();
    this.#hot.add(resource);
  }

  /** Closes every subscriber connection. */
  close(): Promise<void> {
    this.#hot.clear();
    this.#named.clear();
    clearTimeout(this.#linger);
    this.#linger = undefined;
    const subscribers = this.#subscribers;
    this.#subscribers = undefined;
    this.#channels.clear();
    if (subscribers !== undefined) {
      const closing = this.#track(
        subscribers.then((list) => Promise.all(list.map((s) => s?.close().catch(() => {})))),
      );
      this.#closing = closing;
      closing.then(() => {
        if (this.#closing === closing) this.#closing = undefined;
      });
    }
    return Promise.all(this.#tidying).then(() => {});
  }

  #track(work: Promise<unknown>): Promise<void> {
    const tracked = work.then(() => {}, () => {});
    this.#tidying.add(tracked);
    tracked.then(() => this.#tidying.delete(tracked));
    return tracked;
  }

  #open(timeout: number): Promise<(ReleaseSubscriber | null)[]> {
    const mark = (entry: Channel, server: number) => {
      entry.releasedAt[server] = now();
      for (const wake of entry.wakers) wake();
    };
    const onMessage = (channel: string, server: number, message: string | undefined) => {
      if (channel !== this.#wake) {
        const entry = this.#channels.get(channel);
        if (entry !== undefined) mark(entry, server);
      } else if (message === undefined) {
        // A subscriber that does not tell the message: wake them all to try.
        for (const entry of this.#named.values()) mark(entry, server);
      } else {
        const entry = this.#named.get(message);
        if (entry === undefined) return;
        entry.handed[server] = true;
        mark(entry, server);
      }
    };
    this.#subscribers ??= Promise.all(this.#members.map(async (member, i) => {
      try {
        const made = Promise.resolve(
          this.#factory(
            member.client,
            member.index,
            (channel, message) => onMessage(channel, i, message),
          ),
        );
        const subscriber = await within(made, timeout);
        if (subscriber === undefined) {
          made.then((late) => late?.close()).catch(() => {});
          return null;
        }
        return subscriber;
      } catch (error) {
        this.#failed(i, error);
        return null;
      }
    }));
    return this.#subscribers;
  }

  async #subscribe(names: string[], timeout: number): Promise<void> {
    const subscribers = await this.#open(timeout);
    await Promise.all(subscribers.map(async (subscriber, i) => {
      if (subscriber === null) return;
      try {
        const ok = await within(subscriber.subscribe(names).then(() => true), timeout);
        if (!ok) return;
        this.#reported.delete(i);
        const at = now();
        for (const name of names) {
          const channel = this.#channels.get(name);
          if (channel === undefined) continue;
          channel.confirmed++;
          if (channel.subscribedAt === Infinity) channel.subscribedAt = at;
        }
      } catch (error) {
        this.#failed(i, error);
      }
    }));
  }

  /** Reports a subscriber failure of server `i`, once until it works again. */
  #failed(i: number, error: unknown): void {
    if (this.#reported.has(i)) return;
    this.#reported.add(i);
    const cause = error instanceof Error ? error.message : String(error);
    this.#onError(
      new Error(
        `release notifications from server ${this.#members[i]!.index} are off, waits poll it: ` +
          `its subscriber failed: ${cause}`,
        { cause: error },
      ),
      this.#members[i]!,
    );
  }

  #wait(
    channels: Channel[],
    since: number,
    ms: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    const quorum = Math.floor(this.#members.length / 2) + 1;
    /** 2: a quorum announced a release (or the subscription is new), 1: a server did, 0: none. */
    const released = (): number => {
      let state = 0;
      for (const channel of channels) {
        if (channel.subscribedAt > since) return 2;
        let count = 0;
        for (const at of channel.releasedAt) if (at > since) count++;
        if (count >= Math.min(quorum, Math.max(1, channel.confirmed))) return 2;
        if (count > 0) state = 1;
      }
      return state;
    };
    const initial = released();
    if (initial === 2) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const finish = () => {
        alarm.cancel();
        signal?.removeEventListener("abort", onAbort);
        for (const channel of channels) channel.wakers.delete(check);
      };
      const wake = () => {
        finish();
        resolve();
      };
      // One alarm (no timer of its own, see `Alarm`) for the fallback, moved
      // closer once a server announced a release; a straggler may wake it
      // up to STRAGGLER_MS late.
      const alarm = new Alarm(wake);
      const straggle = (t: number) => {
        if (alarm.deadline > t + STRAGGLER_MS) alarm.at(t + STRAGGLER_MS, STRAGGLER_MS, t);
      };
      const check = () => {
        const state = released();
        if (state === 2) wake();
        else if (state === 1) straggle(now());
      };
      const onAbort = () => {
        finish();
        reject(signal!.reason);
      };
      const t = now();
      alarm.at(t + ms, 0, t);
      signal?.addEventListener("abort", onAbort, { once: true });
      for (const channel of channels) channel.wakers.add(check);
      if (initial === 1) straggle(t);
    });
  }

  #forget(names: readonly string[], channels: Channel[]): Promise<void> {
    for (const channel of channels) channel.holders--;
    let waiting = false;
    for (const channel of this.#channels.values()) waiting ||= channel.holders > 0;
    // Channels nobody listens to now are unsubscribed, unless nobody waits at
    // all: then they are kept a little, for the next wait.
    const idle = names.filter((name, i) => {
      const channel = channels[i]!;
      if (channel.holders > 0 || this.#channels.get(name) !== channel) return false;
      if (!waiting) return false;
      this.#channels.delete(name);
      return true;
    });
    if (!waiting) {
      this.#idleSince = now();
      this.#linger ??= setTimeout(this.#lingered, LINGER_MS);
    }
    return this.#unsubscribe(idle);
  }

  /**
   * The linger timer: closes the connections once nobody waited for
   * {@linkcode LINGER_MS}, else sets itself again for what is left of that.
   * (One timer outlives many waits: making one per wait cost more than the
   * rest of the wait's bookkeeping.)
   */
  readonly #lingered = (): void => {
    this.#linger = undefined;
    if (this.#idleSince === Infinity) return; // a wait is on; its end sets the timer again
    for (const channel of this.#channels.values()) if (channel.holders > 0) return;
    const left = this.#idleSince + LINGER_MS - now();
    if (left >= 1) this.#linger = setTimeout(this.#lingered, left);
    else this.close();
  };

  #unsubscribe(names: string[]): Promise<void> {
    const subscribers = this.#subscribers;
    if (names.length === 0 || subscribers === undefined) return Promise.resolve();
    return this.#track(
      subscribers.then((list) =>
        Promise.all(list.map((s) => s?.unsubscribe(names).catch(() => {})))
      ),
    );
  }
}

/** An acquire's interest in some releases. */
export interface Listening {
  /** Whether at least one server confirmed the subscription. */
  readonly subscribed: boolean;
  /**
   * The servers whose releases named this acquire (handed it the key or
   * reserved it), when it listens with a value.
   */
  heard(): number[];
  /** Sleeps until a release after `since` or `ms` passed; rejects on abort. */
  wait(since: number, ms: number, signal: AbortSignal | undefined): Promise<void>;
  /**
   * Ends the interest, and unsubscribes (or, when nobody else waits, keeps
   * the connections {@linkcode LINGER_MS} for the next wait); the promise
   * settles when the unsubscribe is done.
   */
  done(): Promise<void>;
}
