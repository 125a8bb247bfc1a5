/**
 * A TCP proxy on loopback in front of one Redis server, for the chaos run,
 * the benchmarks and the tests: it forwards bytes both ways and, while it
 * runs, can delay them (one-way latency with jitter, order kept), partition
 * (connections stay open, nothing passes; both ways or one), and reset
 * every connection. Bytes held by a partition pass when it heals, as TCP
 * would deliver them after retransmitting.
 *
 * ```ts ignore
 * await using proxy = await FaultProxy.start(6379);
 * proxy.delay(1, { jitter: 0.2 });   // +1..1.2 ms each way
 * proxy.partition(Direction.ToServer);
 * proxy.heal();
 * proxy.reset();
 * ```
 *
 * Run as a program, it serves proxies in a process of its own (so that its
 * work does not share a thread with what it measures), prints
 * `{"ports":[…]}` and takes commands as JSON lines on stdin
 * (`{"op":"delay","ms":1,"jitter":0}`, `{"op":"partition","direction":"both"}`,
 * `{"op":"heal"}`, `{"op":"reset"}`), answering each with `{"ok":true}`:
 *
 * ```sh
 * deno run -A scripts/fault_proxy.ts 6379 6380 6381
 * ```
 *
 * @module
 */

import { instant, PreciseTimer } from "./_precise_timer.ts";

/** Which way bytes go. */
export const Direction = {
  /** Client to server (requests). */
  ToServer: "to-server",
  /** Server to client (replies, pub/sub messages). */
  ToClient: "to-client",
  Both: "both",
} as const;
/** Which way bytes go. */
export type Direction = typeof Direction[keyof typeof Direction];

/** Delay of one direction, ms. */
export interface DelayOptions {
  /** Up to this many ms more, drawn per chunk (order is kept). @default 0 */
  readonly jitter?: number;
  /** @default Direction.Both */
  readonly direction?: Direction;
}

/** Options of {@linkcode FaultProxy.start}. */
export interface ProxyOptions {
  /** One-way delay in both directions from the start, ms. @default 0 */
  readonly delay?: number;
  /** @default 0 */
  readonly jitter?: number;
  /** Draws jitter; Math.random by default. */
  readonly random?: () => number;
  /** Shared precise timer; the proxy makes (and closes) its own otherwise. */
  readonly timer?: PreciseTimer;
}

/** What one direction of the proxy does now. */
class Lane {
  delay = 0;
  jitter = 0;
  #healed: PromiseWithResolvers<void> | undefined;

  get partitioned(): boolean {
    return this.#healed !== undefined;
  }

  /** Resolves when bytes may pass. */
  open(): Promise<void> | undefined {
    return this.#healed?.promise;
  }

  cut(): void {
    this.#healed ??= Promise.withResolvers();
  }

  heal(): void {
    this.#healed?.resolve();
    this.#healed = undefined;
  }
}

/** One proxied connection: the client's socket and the server's. */
class Link {
  readonly client: Deno.TcpConn;
  readonly server: Deno.TcpConn;
  readonly #done = Promise.withResolvers<void>();
  #closed = false;

  constructor(client: Deno.TcpConn, server: Deno.TcpConn) {
    this.client = client;
    this.server = server;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#done.resolve();
    for (const conn of [this.client, this.server]) {
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Resolves when the link closes. */
  get done(): Promise<void> {
    return this.#done.promise;
  }
}

/** A chunk waiting for its time to be written. */
interface Chunk {
  readonly due: number;
  readonly bytes: Uint8Array;
}

/** A controllable TCP proxy on 127.0.0.1 in front of a server port on 127.0.0.1. */
export class FaultProxy implements AsyncDisposable {
  /** The loopback port clients connect to. */
  readonly port: number;
  /** The server's port. */
  readonly target: number;
  readonly #listener: Deno.TcpListener;
  readonly #lanes: Record<"to-server" | "to-client", Lane> = {
    "to-server": new Lane(),
    "to-client": new Lane(),
  };
  readonly #links = new Set<Link>();
  readonly #pending = new Set<Promise<void>>();
  readonly #random: () => number;
  readonly #timer: PreciseTimer;
  readonly #ownTimer: boolean;
  readonly #accepting: Promise<void>;
  #closed = false;

  private constructor(listener: Deno.TcpListener, target: number, options: ProxyOptions) {
    this.#listener = listener;
    this.port = listener.addr.port;
    this.target = target;
    this.#random = options.random ?? Math.random;
    this.#ownTimer = options.timer === undefined;
    this.#timer = options.timer ?? new PreciseTimer();
    if (options.delay) this.delay(options.delay, { jitter: options.jitter ?? 0 });
    this.#accepting = this.#accept();
  }

  /**
   * Listens on a free loopback port and forwards to `target` on 127.0.0.1.
   *
   * @param target The server's port.
   * @param options Initial delay and jitter, the random source, a shared timer.
   * @returns The running proxy.
   */
  static async start(target: number, options: ProxyOptions = {}): Promise<FaultProxy> {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0, transport: "tcp" });
    const proxy = new FaultProxy(listener, target, options);
    await proxy.#timer.ready;
    return proxy;
  }

  /** Open proxied connections. */
  get connections(): number {
    return this.#links.size;
  }

  /** Whether `direction` (or either direction) is cut now. */
  partitioned(direction: Direction = Direction.Both): boolean {
    return this.#select(direction).some((lane) => lane.partitioned);
  }

  /** Sets the one-way delay of `direction` (ms, ≥ 0) with up to `jitter` ms more. */
  delay(ms: number, options: DelayOptions = {}): void {
    const jitter = options.jitter ?? 0;
    if (!(ms >= 0) || !(jitter >= 0)) {
      throw new RangeError(`delay and jitter must be ≥ 0 ms, got ${ms} and ${jitter}`);
    }
    for (const lane of this.#select(options.direction ?? Direction.Both)) {
      lane.delay = ms;
      lane.jitter = jitter;
    }
  }

  /** Stops bytes going `direction` (connections stay open) until {@linkcode heal}. */
  partition(direction: Direction = Direction.Both): void {
    for (const lane of this.#select(direction)) lane.cut();
  }

  /** Lets bytes pass again both ways; what a partition held goes on, in order. */
  heal(): void {
    for (const lane of this.#select(Direction.Both)) lane.heal();
  }

  /** Closes every proxied connection (both sockets); new ones are accepted. */
  reset(): void {
    for (const link of this.#links) link.close();
    this.#links.clear();
  }

  /** Stops listening, closes every connection and waits for their loops to end. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#listener.close();
    } catch {
      // already closed
    }
    this.heal();
    this.reset();
    await this.#accepting;
    await Promise.all(this.#pending);
    if (this.#ownTimer) this.#timer.close();
  }

  /** Closes the proxy; for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #select(direction: Direction): Lane[] {
    return direction === Direction.Both
      ? [this.#lanes["to-server"], this.#lanes["to-client"]]
      : [this.#lanes[direction]];
  }

  #track(promise: Promise<void>): void {
    const tracked = promise.catch(() => {}).finally(() => this.#pending.delete(tracked));
    this.#pending.add(tracked);
  }

  async #accept(): Promise<void> {
    for (;;) {
      let client: Deno.TcpConn;
      try {
        client = await this.#listener.accept();
      } catch {
        return; // closed
      }
      this.#track(this.#connect(client));
    }
  }

  async #connect(client: Deno.TcpConn): Promise<void> {
    let server: Deno.TcpConn;
    try {
      server = await Deno.connect({ hostname: "127.0.0.1", port: this.target });
    } catch {
      client.close(); // the server is down: the client sees its connection closed
      return;
    }
    const link = new Link(client, server);
    if (this.#closed) return link.close();
    client.setNoDelay(true);
    server.setNoDelay(true);
    this.#links.add(link);
    await Promise.all([
      this.#pipe(link, client, server, this.#lanes["to-server"]),
      this.#pipe(link, server, client, this.#lanes["to-client"]),
    ]);
    link.close();
    this.#links.delete(link);
  }

  /** Copies `from` to `to` through `lane` until either side closes. */
  async #pipe(link: Link, from: Deno.TcpConn, to: Deno.TcpConn, lane: Lane): Promise<void> {
    const outbox = new Outbox(to, link, this.#timer);
    let last = 0;
    const buffer = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await from.read(buffer);
        if (n === null) break;
        const bytes = buffer.slice(0, n);
        // a partition stops reading (the sender's buffers fill, as over TCP)
        const healed = lane.open();
        if (healed) await Promise.race([healed, link.done]);
        if (link.closed) break;
        const spread = lane.jitter > 0 ? this.#random() * lane.jitter : 0;
        last = Math.max(last, instant() + lane.delay + spread);
        outbox.push({ due: last, bytes });
      }
    } catch {
      // closed or reset
    }
    await outbox.flushed();
    link.close();
  }
}

/** One direction's chunks on their way: written in order, each at its due instant. */
class Outbox {
  readonly #queue: Chunk[] = [];
  readonly #to: Deno.TcpConn;
  readonly #link: Link;
  readonly #timer: PreciseTimer;
  /** Whether a drain loop runs; cleared in the same tick as it finds the queue empty. */
  #active = false;
  #drained: Promise<void> = Promise.resolve();

  constructor(to: Deno.TcpConn, link: Link, timer: PreciseTimer) {
    this.#to = to;
    this.#link = link;
    this.#timer = timer;
  }

  push(chunk: Chunk): void {
    this.#queue.push(chunk);
    if (this.#active) return;
    this.#active = true;
    this.#drained = this.#drain();
  }

  /** Resolves when what was pushed so far is written (or the link closed). */
  flushed(): Promise<void> {
    return this.#drained;
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0 && !this.#link.closed) {
        const chunk = this.#queue[0]!;
        if (chunk.due > instant()) await this.#timer.until(chunk.due);
        let written = 0;
        while (written < chunk.bytes.length) {
          written += await this.#to.write(chunk.bytes.subarray(written));
        }
        this.#queue.shift();
      }
    } catch {
      this.#link.close();
    }
    this.#active = false;
  }
}

/** A command of the proxy program (see the module documentation). */
export type ProxyCommand =
  | {
    readonly op: "delay";
    readonly ms: number;
    readonly jitter?: number;
    readonly direction?: Direction;
  }
  | { readonly op: "partition"; readonly direction?: Direction }
  | { readonly op: "heal" }
  | { readonly op: "reset" };

/** Applies `command` to every proxy. */
export function applyCommand(proxies: readonly FaultProxy[], command: ProxyCommand): void {
  for (const proxy of proxies) {
    switch (command.op) {
      case "delay":
        proxy.delay(command.ms, {
          jitter: command.jitter ?? 0,
          direction: command.direction ?? Direction.Both,
        });
        break;
      case "partition":
        proxy.partition(command.direction ?? Direction.Both);
        break;
      case "heal":
        proxy.heal();
        break;
      case "reset":
        proxy.reset();
        break;
    }
  }
}

/** Proxies served by a child process (the program form of this module). */
export class ProxyProcess implements AsyncDisposable {
  /** The proxies' ports, in the order of the targets. */
  readonly ports: readonly number[];
  readonly #child: Deno.ChildProcess;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #replies: ReadableStreamDefaultReader<string>;

  private constructor(
    child: Deno.ChildProcess,
    ports: number[],
    replies: ReadableStreamDefaultReader<string>,
  ) {
    this.#child = child;
    this.ports = ports;
    this.#writer = child.stdin.getWriter();
    this.#replies = replies;
  }

  /**
   * Starts `deno run scripts/fault_proxy.ts` with one proxy per target port.
   *
   * @param targets The servers' ports.
   * @returns The running process, once its proxies listen.
   */
  static async start(targets: readonly number[]): Promise<ProxyProcess> {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", new URL(import.meta.url).pathname, ...targets.map(String)],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const replies = child.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(lineSplitter())
      .getReader();
    const first = await replies.read();
    if (first.done) throw new Error("the proxy process exited before it listened");
    const { ports } = JSON.parse(first.value) as { ports: number[] };
    return new ProxyProcess(child, ports, replies);
  }

  /** Sends `command` to every proxy and waits until it is applied. */
  async send(command: ProxyCommand): Promise<void> {
    await this.#writer.write(new TextEncoder().encode(JSON.stringify(command) + "\n"));
    const reply = await this.#replies.read();
    if (reply.done || !JSON.parse(reply.value).ok) {
      throw new Error(`the proxy process did not apply ${JSON.stringify(command)}`);
    }
  }

  /** Stops the process and its proxies. */
  async close(): Promise<void> {
    await this.#writer.close().catch(() => {});
    await this.#child.status;
    await this.#replies.cancel().catch(() => {});
  }

  /** Stops the process; for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

function lineSplitter(): TransformStream<string, string> {
  let rest = "";
  return new TransformStream({
    transform(text, controller) {
      const parts = (rest + text).split("\n");
      rest = parts.pop()!;
      for (const line of parts) if (line.trim() !== "") controller.enqueue(line);
    },
  });
}

if (import.meta.main) {
  const timer = new PreciseTimer();
  const proxies = await Promise.all(
    Deno.args.map((port) => FaultProxy.start(Number(port), { timer })),
  );
  console.log(JSON.stringify({ ports: proxies.map((p) => p.port) }));
  const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream()).pipeThrough(
    lineSplitter(),
  );
  for await (const line of lines) {
    let ok = true;
    try {
      applyCommand(proxies, JSON.parse(line) as ProxyCommand);
    } catch {
      ok = false;
    }
    console.log(JSON.stringify({ ok }));
  }
  await Promise.all(proxies.map((p) => p.close()));
  timer.close();
}
