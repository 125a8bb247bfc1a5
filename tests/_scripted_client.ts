/**
 * A scripted gate between a Redlock and real Redis servers, for tests of the
 * acquire state machine. Every request is sent to a real server at once (so
 * the server's order of execution is the lock's order of sending, as on one
 * connection); the gate only decides WHEN the reply reaches the lock: at
 * once, held until the test delivers it, replaced by an error, or never sent
 * at all (a connection that refused it). Replies of one server reach the lock
 * in the order the requests were sent, as on one connection: a held reply
 * holds back the later ones of its server. Release messages (pub/sub) can be
 * held and delivered the same way. Nothing about Redis is imitated.
 *
 * ```ts ignore
 * await using gate = await Gate.start(3);
 * await using redlock = new Redlock(gate.clients, { subscriber: gate.subscriber });
 * gate.hold({ script: "acquire", server: 2 }); // its replies wait for the test
 * const acquiring = redlock.acquire("a", 5_000);
 * const [late] = await gate.sent({ script: "acquire", server: 2 });
 * const lock = await acquiring; // servers 0 and 1 made the quorum
 * await gate.deliver(late!); // now the lock hears server 2
 * ```
 */

import { Redis } from "ioredis";
import {
  duplicateSubscriber,
  type LuaScript,
  type ScriptClient,
  type SubscriberFactory,
} from "../mod.ts";
import { type RedisServers, startServers } from "./_redis.ts";

/** Which calls a rule applies to; what is left out matches any. */
export interface Match {
  /** The script's name ("acquire", "release", "extend", "fence", "inspect"), or "set" or "pttl". */
  readonly script?: string;
  /** The server's index. */
  readonly server?: number;
  /** Only the nth call (from 1) of this script to this server. */
  readonly nth?: number;
  /** Only calls sent after this one. */
  readonly after?: Call | undefined;
}

/** One request of the lock, as the gate saw it. */
export interface Call {
  /** The order the lock sent it in, over all servers (from 0). */
  readonly id: number;
  readonly server: number;
  readonly script: string;
  readonly keys: readonly string[];
  readonly args: readonly string[];
  /** Its place (from 1) among the calls of this script to this server. */
  readonly nth: number;
  /** "passed" (answered as it came), "held", "delivered", "failed" or "refused" (never sent). */
  readonly state: "passed" | "held" | "delivered" | "failed" | "refused";
  /** Settles once the server's reply reached the gate (the server ran it), held or not. */
  readonly ran: Promise<void>;
  /** Settles once the lock got the reply (or the error). */
  readonly answered: Promise<void>;
}

/** A pub/sub message from one server. */
export interface Message {
  readonly server: number;
  readonly channel: string;
  readonly message: string | undefined;
  readonly state: "passed" | "held" | "delivered";
}

type Rule =
  | { readonly match: Match; readonly action: "hold" }
  | { readonly match: Match; readonly action: "refuse" | "fail"; readonly error: Error };

interface Entry {
  call: Mutable<Call>;
  /** Lets the reply (or `error`) through once the earlier replies of its server went. */
  open: (error?: Error) => void;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

const WAIT_MS = 3_000;

const matches = (m: Match, script: string, server: number, nth: number, id: number): boolean =>
  (m.after === undefined || id > m.after.id) &&
  (m.script === undefined || m.script === script) &&
  (m.server === undefined || m.server === server) &&
  (m.nth === undefined || m.nth === nth);

/** Resolves on the next macrotask: every reaction to what was delivered has run. */
export const tick = (): Promise<void> => new Promise((r) => setTimeout(r, 0));

/** Real servers, real clients, and the gate between them and a Redlock. */
export class Gate implements AsyncDisposable {
  /** The servers, to read their state with separate connections. */
  readonly servers: RedisServers;
  /** One gated client per server, for `new Redlock(gate.clients)`. */
  readonly clients: ScriptClient[];
  /** Subscriber connections (duplicates of the real clients) whose messages pass the gate. */
  readonly subscriber: SubscriberFactory;
  /** Every request, in the order sent. */
  readonly calls: Call[] = [];
  /** Every release message, in the order received. */
  readonly messages: Message[] = [];
  readonly #real: Redis[];
  readonly #rules: Rule[] = [];
  readonly #held = new Map<number, Entry>();
  /** The last reply of each server handed (or to be handed) to the lock. */
  readonly #tails: Promise<void>[];
  readonly #counts = new Map<string, number>();
  readonly #waits = new Set<() => void>();
  readonly #holdMessages = new Set<number>();
  readonly #heldMessages: { message: Mutable<Message>; deliver: () => void }[] = [];

  private constructor(servers: RedisServers, real: Redis[], plain: boolean) {
    this.servers = servers;
    this.#real = real;
    this.#tails = real.map(() => Promise.resolve());
    this.clients = real.map((client, server): ScriptClient => {
      const evalScript = (script: LuaScript, keys: readonly string[], args: readonly string[]) =>
        this.#send(
          server,
          script.name,
          keys,
          args,
          () => client.eval(script.source, keys.length, ...keys, ...args),
        );
      if (!plain) return { evalScript };
      return {
        evalScript,
        setIfAbsent: (key, value, ms) =>
          this.#send(
            server,
            "set",
            [key],
            [value, String(ms)],
            () => client.set(key, value, "PX", ms, "NX").then((reply) => reply === "OK"),
          ) as Promise<boolean>,
        pttl: (key) =>
          this.#send(server, "pttl", [key], [], () => client.pttl(key)) as Promise<number>,
      };
    });
    this.subscriber = (_client, server, onMessage) =>
      duplicateSubscriber(this.#real[server]!, server, (channel, message) => {
        const record: Mutable<Message> = { server, channel, message, state: "passed" };
        this.messages.push(record);
        this.#changed();
        const deliver = () => onMessage(channel, message);
        if (!this.#holdMessages.has(server)) return deliver();
        record.state = "held";
        this.#heldMessages.push({ message: record, deliver });
      });
  }

  /**
   * Starts `count` servers and connects one real client to each. With
   * `plain`, the gated clients also have `setIfAbsent` and `pttl` (calls
   * named "set" and "pttl"), so that the lock takes one resource by SET NX.
   */
  static async start(count: number, { plain = false } = {}): Promise<Gate> {
    const servers = await startServers(count);
    const real: Redis[] = [];
    try {
      for (const server of servers.servers) {
        const client = new Redis({ host: "127.0.0.1", port: server.port, lazyConnect: true });
        client.on("error", () => {});
        real.push(client);
        await client.connect();
      }
    } catch (error) {
      for (const client of real) client.disconnect();
      await servers.stop();
      throw error;
    }
    return new Gate(servers, real, plain);
  }

  /** Holds the replies of the matching calls sent from now on, until delivered. */
  hold(match: Match = {}): void {
    this.#rules.push({ match, action: "hold" });
  }

  /** Rejects the matching calls from now on with `error`, without sending them. */
  refuse(match: Match, error: Error): void {
    this.#rules.push({ match, action: "refuse", error });
  }

  /** Sends the matching calls from now on, and answers them with `error` instead of the reply. */
  failReplies(match: Match, error: Error): void {
    this.#rules.push({ match, action: "fail", error });
  }

  /** Drops every rule: later calls pass. */
  clear(): void {
    this.#rules.length = 0;
  }

  /** The calls sent so far that match. */
  find(match: Match = {}): Call[] {
    return this.calls.filter((c) => matches(match, c.script, c.server, c.nth, c.id));
  }

  /** Waits until `count` matching calls were sent (at most 3 s); returns them. */
  async sent(match: Match, count = 1): Promise<Call[]> {
    await this.#until(() => this.find(match).length >= count, () => `${count} × ${show(match)}`);
    return this.find(match);
  }

  /** The held calls, in the order sent. */
  held(match: Match = {}): Call[] {
    return this.find(match).filter((c) => c.state === "held");
  }

  /**
   * Lets the reply of a held call go, or `error` instead (the server ran it),
   * without waiting: it reaches the lock a few microtasks later, once the
   * earlier replies of its server went.
   */
  open(call: Call, error?: Error): void {
    const entry = this.#held.get(call.id);
    if (entry === undefined) throw new Error(`call ${call.id} (${call.script}) is not held`);
    this.#held.delete(call.id);
    entry.call.state = error === undefined ? "delivered" : "failed";
    entry.open(error);
  }

  /**
   * Hands the replies of held calls to the lock, in the given order (a reply
   * still waits for the earlier ones of its server), and waits until the
   * lock got them and reacted.
   */
  async deliver(...calls: Call[]): Promise<void> {
    for (const call of calls) this.open(call);
    await Promise.all(calls.map((c) => c.answered));
    await tick();
  }

  /** Answers held calls with `error` instead of their reply (the server ran them). */
  async fail(error: Error, ...calls: Call[]): Promise<void> {
    for (const call of calls) this.open(call, error);
    await Promise.all(calls.map((c) => c.answered));
    await tick();
  }

  /** Holds release messages from these servers from now on. */
  holdMessages(...servers: number[]): void {
    for (const server of servers) this.#holdMessages.add(server);
  }

  /** Waits until `count` messages came from `server` (at most 3 s). */
  async heard(server: number, count = 1): Promise<void> {
    const from = () => this.messages.filter((m) => m.server === server).length;
    await this.#until(() => from() >= count, () => `${count} message(s) from server ${server}`);
  }

  /** Hands the held messages of these servers to the lock, server by server. */
  async deliverMessages(...servers: number[]): Promise<void> {
    for (const server of servers) {
      this.#holdMessages.delete(server);
      for (const held of this.#heldMessages.filter((h) => h.message.server === server)) {
        this.#heldMessages.splice(this.#heldMessages.indexOf(held), 1);
        held.message.state = "delivered";
        held.deliver();
      }
    }
    await tick();
  }

  /** Delivers whatever is held, waits for every reply, then closes the clients and servers. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.clear();
    this.#holdMessages.clear();
    this.#heldMessages.length = 0;
    // A delivered reply may make the lock send more (a release behind a late answer).
    for (let i = 0; i < 10 && this.calls.some((c) => c.state === "held"); i++) {
      await this.deliver(...this.held());
    }
    await Promise.all(this.calls.map((c) => c.answered));
    for (const client of this.#real) client.disconnect();
    await this.servers.stop();
  }

  #send(
    server: number,
    name: string,
    keys: readonly string[],
    args: readonly string[],
    run: () => Promise<unknown>,
  ): Promise<unknown> {
    const counted = `${name}@${server}`;
    const nth = (this.#counts.get(counted) ?? 0) + 1;
    this.#counts.set(counted, nth);
    const rule = this.#rules.find((r) => matches(r.match, name, server, nth, this.calls.length));
    let answered!: () => void;
    let ran!: () => void;
    const call: Mutable<Call> = {
      id: this.calls.length,
      server,
      script: name,
      keys: [...keys],
      args: [...args],
      nth,
      state: "passed",
      ran: new Promise((resolve) => ran = resolve),
      answered: new Promise((resolve) => answered = resolve),
    };
    this.calls.push(call);
    this.#changed();
    if (rule?.action === "refuse") {
      call.state = "refused";
      ran();
      answered();
      return Promise.reject(rule.error);
    }
    const reply = run();
    // Settled with the reply's outcome, never rejected: the chain of a server goes on.
    const outcome = reply.then((value) => ({ value }), (error: Error) => ({ error }));
    outcome.then(() => ran());
    let open!: (error?: Error) => void;
    const opened = new Promise<Error | undefined>((resolve) => open = resolve);
    if (rule?.action === "hold") {
      call.state = "held";
      this.#held.set(call.id, { call, open });
    } else if (rule?.action === "fail") {
      call.state = "failed";
      open(rule.error);
    } else open();
    const prior = this.#tails[server]!;
    const handed = Promise.all([prior, opened, outcome]).then(([, error, result]) => {
      if (error !== undefined) return Promise.reject(error);
      if ("error" in result) return Promise.reject(result.error);
      return result.value;
    });
    const done = handed.then(() => {}, () => {});
    this.#tails[server] = done;
    done.then(() => queueMicrotask(answered));
    return handed;
  }

  #changed(): void {
    for (const wake of this.#waits) wake();
  }

  async #until(ready: () => boolean, what: () => string): Promise<void> {
    if (ready()) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let wake!: () => void;
    try {
      await new Promise<void>((resolve, reject) => {
        wake = () => ready() && resolve();
        this.#waits.add(wake);
        timer = setTimeout(
          () => reject(new Error(`gate: no ${what()} within ${WAIT_MS} ms`)),
          WAIT_MS,
        );
      });
    } finally {
      clearTimeout(timer);
      this.#waits.delete(wake);
    }
  }
}

function show(match: Match): string {
  return JSON.stringify({ ...match, after: match.after?.id });
}
