import { Alarm, type Member } from "../quorum/round.ts";
import type { ReleaseSubscriber, SubscriberFactory } from "./subscriber.ts";
import { releaseChannel, wakeChannel } from "../protocol/encoding.ts";
import { now } from "../util/time.ts";
import { within } from "../util/delay.ts";

/** A subscribed channel, shared by every acquire that listens to it. */
interface Channel {
  /** Acquires that hold an interest in the channel. */
  holders: number;
  /** When the last holder let go (monotonic): it stays subscribed {@linkcode LINGER_MS}. */
  idleSince: number;
  /** The acquires sleeping now; checked on every release message. */
  readonly wakers: Set<Interest>;
  /** When the subscription was confirmed by at least one server (monotonic). */
  subscribedAt: number;
  /** How many servers confirmed the subscription. */
  confirmed: number;
  /** When a release message (a notice) last arrived from each server (monotonic). */
  readonly noticedAt: number[];
  /** Settles once the subscribe requests have answered or timed out. */
  ready: Promise<void>;
}

const READY: Promise<void> = Promise.resolve();

/**
 * ms a waiter, woken by the release message of one server, waits at least
 * for the messages of the others before it tries anyway (at most twice
 * that: the deadline rides on the shared sweeper, see `Alarm`).
 */
export const STRAGGLER_MS = 5;

function newChannel(servers: number): Channel {
  return {
    holders: 0,
    idleSince: Infinity,
    wakers: new Set(),
    subscribedAt: Infinity,
    confirmed: 0,
    noticedAt: new Array<number>(servers).fill(-Infinity),
    ready: READY,
  };
}

/**
 * ms the subscriber connections stay open after the last wait ended, so that
 * a Redlock whose acquires wait again and again (a hot resource) does not
 * open and close them for every wait, which costs more than the wait itself.
 */
export const LINGER_MS = 100;

/**
 * ms an unsubscribe or a close is waited for: a subscriber reconnecting to
 * a server that is down may keep the command queued, and never answer it.
 */
const TIDY_MS = 1_000;

/**
 * The shared release listener of a Redlock: one subscriber connection per
 * server, opened when the first acquire has to wait, subscribed to the
 * channels of the resources somebody waits for, and closed {@linkcode
 * LINGER_MS} after the last wait ended (at once by `close()`).
 */
export class Waiters {
  readonly #members: readonly Member[];
  readonly #quorum: number;
  readonly #factory: SubscriberFactory;
  readonly #onError: (error: Error, member: Member) => void;
  readonly #channels = new Map<string, Channel>();
  /** The Redlock's wake channel. */
  readonly #wake: string;
  /** `[#wake]`, and `[its channel]` once made: one pair for every queued acquire. */
  readonly #wakeNames: readonly string[];
  #wakeChannels: Channel[] = [];
  /** The queued acquires, by lock value: what their wake messages tell. */
  readonly #named = new Map<string, Interest>();
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
    this.#wakeNames = [this.#wake];
    this.#members = members;
    this.#quorum = Math.floor(members.length / 2) + 1;
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
    const names = value === undefined ? keys.map(releaseChannel) : this.#wakeNames;
    // Channels kept from earlier waits that nobody needed for LINGER_MS.
    const stale: string[] = [];
    const t = now();
    for (const [name, channel] of this.#channels) {
      if (channel.holders === 0 && channel.idleSince + LINGER_MS <= t && !names.includes(name)) {
        this.#channels.delete(name);
        stale.push(name);
      }
    }
    this.#unsubscribe(stale);
    const fresh: string[] = [];
    let channels = names.map((name) => {
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
    if (value !== undefined) {
      if (this.#wakeChannels[0] !== channels[0]) this.#wakeChannels = channels;
      channels = this.#wakeChannels;
    }
    await Promise.all(channels.map((c) => c.ready));
    const subscribed = channels.some((c) => c.subscribedAt !== Infinity);
    const interest = new Interest(this, { channels, value, subscribed });
    if (value !== undefined) this.#named.set(value, interest);
    return interest;
  }

  /** How many servers there are. */
  get servers(): number {
    return this.#members.length;
  }

  /** How many servers' release messages make a release. */
  get quorum(): number {
    return this.#quorum;
  }

  /** Ends `interest`, which listens to `channels` (see `Listening.done()`). */
  forget(interest: Interest, { channels, value }: Omit<InterestOf, "subscribed">): void {
    if (value !== undefined && this.#named.get(value) === interest) this.#named.delete(value);
    this.#forget(channels);
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
        subscribers.then((list) =>
          Promise.all(list.map((s) => s && within(closeQuietly(s), TIDY_MS)))
        ),
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
    const onMessage = (channel: string, server: number, message: string | undefined) => {
      if (channel !== this.#wake) {
        const entry = this.#channels.get(channel);
        if (entry === undefined) return;
        entry.noticedAt[server] = now();
        for (const interest of entry.wakers) interest.check();
      } else if (message === undefined) {
        // A subscriber that does not tell the message: wake them all to try.
        for (const interest of this.#named.values()) interest.heardFrom(server, false);
      } else {
        this.#named.get(message)?.heardFrom(server, true);
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

  #forget(channels: readonly Channel[]): void {
    const t = now();
    for (const channel of channels) if (--channel.holders === 0) channel.idleSince = t;
    let waiting = false;
    for (const channel of this.#channels.values()) waiting ||= channel.holders > 0;
    if (!waiting) this.#idleSince = t;
    // Channels nobody listens to now stay subscribed a little, for the next
    // wait (a writer that waits again and again need not subscribe each time).
    this.#linger ??= setTimeout(this.#lingered, LINGER_MS);
  }

  /**
   * The linger timer: unsubscribes channels nobody listened to for
   * {@linkcode LINGER_MS} while others wait, and closes the connections once
   * nobody waited for that long; sets itself again for the next of these.
   * (One timer outlives many waits: making one per wait cost more than the
   * rest of the wait's bookkeeping.)
   */
  readonly #lingered = (): void => {
    this.#linger = undefined;
    const t = now();
    let waiting = false;
    let next = Infinity;
    const stale: string[] = [];
    for (const [name, channel] of this.#channels) {
      if (channel.holders > 0) waiting = true;
      else if (channel.idleSince + LINGER_MS <= t) stale.push(name);
      else next = Math.min(next, channel.idleSince + LINGER_MS);
    }
    if (waiting) {
      for (const name of stale) this.#channels.delete(name);
      this.#unsubscribe(stale);
    } else if (this.#idleSince !== Infinity) {
      // Nobody waits: the connections close (their channels with them).
      if (this.#idleSince + LINGER_MS - t < 1) return void this.close();
      next = Math.min(next, this.#idleSince + LINGER_MS);
    }
    if (next < Infinity) this.#linger = setTimeout(this.#lingered, Math.max(1, next - t));
  };

  #unsubscribe(names: string[]): Promise<void> {
    const subscribers = this.#subscribers;
    if (names.length === 0 || subscribers === undefined) return Promise.resolve();
    return this.#track(
      subscribers.then((list) =>
        Promise.all(list.map((s) => s && within(s.unsubscribe(names).catch(() => {}), TIDY_MS)))
      ),
    );
  }
}

/** Closes `subscriber`, whatever its `close()` throws or rejects with. */
function closeQuietly(subscriber: ReleaseSubscriber): Promise<void> {
  return Promise.resolve().then(() => subscriber.close()).catch(() => {});
}

/** What the release messages (notices) since a wait's `since` tell. */
const NOTICED = Object.freeze({
  /** No server announced a release. */
  none: 0,
  /** Some server did. */
  some: 1,
  /** A quorum of the servers that confirmed the subscription did, or it is new. */
  quorum: 2,
});

/** What `count` release messages tell when `confirmed` servers subscribed (see `NOTICED`). */
function noticed(count: number, confirmed: number, quorum: number): number {
  if (count >= Math.min(quorum, Math.max(1, confirmed))) return NOTICED.quorum;
  return count > 0 ? NOTICED.some : NOTICED.none;
}

/** How many of `times` are after `since`. */
function countAfter(times: readonly number[], since: number): number {
  let count = 0;
  for (const at of times) if (at > since) count++;
  return count;
}

/** What `Waiters.listen()` registers for one acquire. */
interface InterestOf {
  readonly channels: Channel[];
  /** The queued acquire's value, whose wake messages it keeps its own record of. */
  readonly value: string | undefined;
  readonly subscribed: boolean;
}

/**
 * A {@linkcode Listening} and its sleeps: one object per acquire (also the
 * alarm of its sleep), as thousands of acquires may wait at once.
 */
class Interest extends Alarm implements Listening {
  readonly subscribed: boolean;
  readonly #waiters: Waiters;
  readonly #channels: Channel[];
  readonly #value: string | undefined;
  /**
   * A queued acquire's own record of the wake messages (each made with the
   * first: most waiters in a long queue have none yet): when each server's
   * last came, which servers named it (handed it the key or reserved it),
   * and how many servers had subscribed.
   */
  #noticedAt: number[] | undefined;
  #handed: number[] | undefined;
  readonly #confirmed: number;
  #done = false;
  /** The sleep under way: since when releases count, who is told, what aborts it. */
  #since = 0;
  #sleeper: Sleeper | undefined;
  #signal: AbortSignal | undefined;

  constructor(waiters: Waiters, of: InterestOf) {
    super();
    this.#waiters = waiters;
    this.#channels = of.channels;
    this.#value = of.value;
    this.subscribed = of.subscribed;
    this.#confirmed = of.channels[0]?.confirmed ?? 0;
  }

  heard(): number[] {
    return this.#handed?.slice().sort((a, b) => a - b) ?? [];
  }

  sleep(since: number, ms: number, signal: AbortSignal | undefined, sleeper: Sleeper): boolean {
    signal?.throwIfAborted();
    this.#since = since;
    const state = this.#noticed();
    if (state === NOTICED.quorum) return false;
    const t = now();
    this.at(t + ms, 0, t);
    this.#sleeper = sleeper;
    this.#signal = signal;
    signal?.addEventListener("abort", this, { once: true });
    if (this.#value === undefined) {
      for (const channel of this.#channels) channel.wakers.add(this);
    }
    if (state === NOTICED.some) this.#straggle(t);
    return true;
  }

  wait(since: number, ms: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((woken, aborted) => {
      if (!this.sleep(since, ms, signal, { woken, aborted })) woken();
    });
  }

  /** A wake message from `server` that named this acquire (`handed`) or did not tell whom. */
  heardFrom(server: number, handed: boolean): void {
    this.#noticedAt ??= new Array<number>(this.#waiters.servers).fill(-Infinity);
    this.#noticedAt[server] = now();
    if (handed && !this.#handed?.includes(server)) (this.#handed ??= []).push(server);
    this.check();
  }

  /** A release message came: wakes at a quorum, else waits a little for the others. */
  check(): void {
    if (this.#sleeper === undefined) return;
    const state = this.#noticed();
    if (state === NOTICED.quorum) this.#wake();
    else if (state === NOTICED.some) this.#straggle(now());
  }

  /** The signal aborted. */
  handleEvent(): void {
    const reason = this.#signal?.reason;
    this.#finish()?.aborted(reason);
  }

  done(): void {
    if (this.#done) return;
    this.#done = true;
    this.#waiters.forget(this, { channels: this.#channels, value: this.#value });
  }

  protected override ring(): void {
    this.#wake();
  }

  #noticed(): number {
    const quorum = this.#waiters.quorum;
    const since = this.#since;
    if (this.#value !== undefined) {
      const count = this.#noticedAt === undefined ? 0 : countAfter(this.#noticedAt, since);
      return noticed(count, this.#confirmed, quorum);
    }
    let state: number = NOTICED.none;
    for (const channel of this.#channels) {
      if (channel.subscribedAt > since) return NOTICED.quorum;
      const of = noticed(countAfter(channel.noticedAt, since), channel.confirmed, quorum);
      if (of === NOTICED.quorum) return of;
      if (of === NOTICED.some) state = of;
    }
    return state;
  }

  /** A straggler may wake it up to STRAGGLER_MS late (the sweeper's slack). */
  #straggle(t: number): void {
    if (this.deadline > t + STRAGGLER_MS) this.at(t + STRAGGLER_MS, STRAGGLER_MS, t);
  }

  #wake(): void {
    this.#finish()?.woken();
  }

  /** Ends the sleep under way; returns whom to tell. */
  #finish(): Sleeper | undefined {
    const sleeper = this.#sleeper;
    this.cancel();
    this.#signal?.removeEventListener("abort", this);
    for (const channel of this.#channels) channel.wakers.delete(this);
    this.#sleeper = this.#signal = undefined;
    return sleeper;
  }
}

/** Who a sleep of a {@linkcode Listening} tells how it ended. */
export interface Sleeper {
  /** A release came, or the sleep's time ran out. */
  woken(): void;
  /** The sleep's signal aborted with `reason`. */
  aborted(reason: unknown): void;
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
  /**
   * Sleeps until a release after `since` or `ms` passed, then tells
   * `sleeper`; false, without sleeping, when such a release came already.
   * Throws `signal.reason` when it aborted, and tells `sleeper` when it
   * aborts later.
   */
  sleep(since: number, ms: number, signal: AbortSignal | undefined, sleeper: Sleeper): boolean;
  /** Sleeps as `sleep()` does; rejects on abort. */
  wait(since: number, ms: number, signal: AbortSignal | undefined): Promise<void>;
  /**
   * Ends the interest. Its channels stay subscribed {@linkcode LINGER_MS}
   * for the next wait; then they are unsubscribed or, when nobody waits,
   * the connections closed.
   */
  done(): void;
}
