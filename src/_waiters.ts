import type { Member } from "./_quorum.ts";
import { releaseChannel, type ReleaseSubscriber, type SubscriberFactory } from "./subscriber.ts";
import { now } from "./_time.ts";

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
  /** Settles once the subscribe requests have answered or timed out. */
  ready: Promise<void>;
}

/**
 * ms a waiter, woken by the release message of one server, waits for the
 * messages of the others before it tries anyway.
 */
export const STRAGGLER_MS = 5;

/** Bounds a promise by `ms`; resolves to undefined on time-out. Clears its timer. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms))),
  ]).finally(() => clearTimeout(timer));
}

/**
 * The shared release listener of a Redlock: one subscriber connection per
 * server, opened when the first acquire has to wait, subscribed to the
 * channels of the resources somebody waits for, and closed as soon as nobody
 * waits (a Redlock whose acquires wait again and again keeps one open only
 * while one of them waits).
 */
export class Waiters {
  readonly #members: readonly Member[];
  readonly #factory: SubscriberFactory;
  readonly #onError: (error: Error, member: Member) => void;
  readonly #channels = new Map<string, Channel>();
  #subscribers: Promise<(ReleaseSubscriber | null)[]> | undefined;
  #closing: Promise<void> = Promise.resolve();

  constructor(
    members: readonly Member[],
    factory: SubscriberFactory,
    onError: (error: Error, member: Member) => void,
  ) {
    this.#members = members;
    this.#factory = factory;
    this.#onError = onError;
  }

  /**
   * Registers an interest in the release of `keys` until `done()` is called,
   * and returns a `wait` that sleeps until a release of one of them, at most
   * `ms`. A release counts once a quorum of the servers that confirmed the
   * subscription announced it (the others release at about the same time,
   * and a retry before they have is bound to fail), or {@linkcode
   * STRAGGLER_MS} after the first did. `wait` returns at once when that
   * happened (or the subscription started) after `since`, the start of the
   * attempt that failed.
   */
  async listen(keys: readonly string[], timeout: number): Promise<Listening> {
    await this.#closing;
    const names = keys.map(releaseChannel);
    const fresh: string[] = [];
    const channels = names.map((name) => {
      let channel = this.#channels.get(name);
      if (channel === undefined) {
        channel = {
          holders: 0,
          wakers: new Set(),
          subscribedAt: Infinity,
          confirmed: 0,
          releasedAt: this.#members.map(() => -Infinity),
          ready: Promise.resolve(),
        };
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
    let done = false;
    return {
      subscribed: channels.some((c) => c.subscribedAt !== Infinity),
      wait: (since, ms, signal) => this.#wait(channels, since, ms, signal),
      done: () => {
        if (done) return Promise.resolve();
        done = true;
        return this.#forget(names, channels);
      },
    };
  }

  /** Closes every subscriber connection. */
  close(): Promise<void> {
    const subscribers = this.#subscribers;
    this.#subscribers = undefined;
    this.#channels.clear();
    if (subscribers === undefined) return this.#closing;
    this.#closing = subscribers.then((list) =>
      Promise.all(list.map((s) => s?.close().catch(() => {})))
    ).then(() => {}, () => {});
    return this.#closing;
  }

  #open(timeout: number): Promise<(ReleaseSubscriber | null)[]> {
    const onMessage = (channel: string, server: number) => {
      const entry = this.#channels.get(channel);
      if (entry === undefined) return;
      entry.releasedAt[server] = now();
      for (const wake of entry.wakers) wake();
    };
    this.#subscribers ??= Promise.all(this.#members.map(async (member, i) => {
      try {
        const made = Promise.resolve(
          this.#factory(member.client, member.index, (channel) => onMessage(channel, i)),
        );
        const subscriber = await within(made, timeout);
        if (subscriber === undefined) {
          made.then((late) => late?.close()).catch(() => {});
          return null;
        }
        return subscriber;
      } catch (error) {
        this.#onError(error instanceof Error ? error : new Error(String(error)), member);
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
        const at = now();
        for (const name of names) {
          const channel = this.#channels.get(name);
          if (channel === undefined) continue;
          channel.confirmed++;
          if (channel.subscribedAt === Infinity) channel.subscribedAt = at;
        }
      } catch (error) {
        this.#onError(error instanceof Error ? error : new Error(String(error)), this.#members[i]!);
      }
    }));
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
      let straggler: ReturnType<typeof setTimeout> | undefined;
      const finish = () => {
        clearTimeout(timer);
        clearTimeout(straggler);
        signal?.removeEventListener("abort", onAbort);
        for (const channel of channels) channel.wakers.delete(check);
      };
      const wake = () => {
        finish();
        resolve();
      };
      const check = () => {
        const state = released();
        if (state === 2) wake();
        else if (state === 1) straggler ??= setTimeout(wake, STRAGGLER_MS);
      };
      const onAbort = () => {
        finish();
        reject(signal!.reason);
      };
      const timer = setTimeout(wake, ms);
      signal?.addEventListener("abort", onAbort, { once: true });
      for (const channel of channels) channel.wakers.add(check);
      if (initial === 1) straggler = setTimeout(wake, STRAGGLER_MS);
    });
  }

  async #forget(names: string[], channels: Channel[]): Promise<void> {
    const idle: string[] = [];
    channels.forEach((channel, i) => {
      if (--channel.holders === 0) {
        this.#channels.delete(names[i]!);
        idle.push(names[i]!);
      }
    });
    if (this.#channels.size === 0) {
      // Nobody waits: close now, so no connection or timer outlives the calls.
      await this.close();
      return;
    }
    if (idle.length === 0 || this.#subscribers === undefined) return;
    const subscribers = await this.#subscribers;
    await Promise.all(subscribers.map((s) => s?.unsubscribe(idle).catch(() => {})));
  }
}

/** An acquire's interest in some releases. */
export interface Listening {
  /** Whether at least one server confirmed the subscription. */
  readonly subscribed: boolean;
  /** Sleeps until a release after `since` or `ms` passed; rejects on abort. */
  wait(since: number, ms: number, signal: AbortSignal | undefined): Promise<void>;
  /** Ends the interest; closes the connections when nobody else waits. */
  done(): Promise<void>;
}
