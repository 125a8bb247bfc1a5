/**
 * The implementations the benchmark compares, behind one small interface:
 * open on a set of servers, acquire, release, `using()`, close.
 *
 * Each peer is used the way its README shows, with its documented client:
 * node-redlock and `@sesamecare-oss/redlock` with ioredis, redlock-universal
 * with its `IoredisAdapter` (its Redlock, `createRedlock`, is made per key, as
 * its API requires).
 *
 * @module
 */

import { type AcquireOptions, Redlock as XRedlock } from "../mod.ts";
import NodeRedlock, {
  ExecutionError as NodeExecutionError,
  ResourceLockedError as NodeLockedError,
} from "redlock";
import {
  Redlock as SesameRedlock,
  ResourceLockedError as SesameLockedError,
} from "@sesamecare-oss/redlock";
import { createRedlock, IoredisAdapter } from "redlock-universal";
import { RedlockMutex, TimeoutError as SemaphoreTimeoutError } from "redis-semaphore";
import {
  type ClientKind,
  closeAll,
  connectAll,
  type Connection,
  type IoredisClient,
  type NodeRedisClient,
} from "./_connect.ts";
import { Floor, ioredisFloor, nodeRedisFloor } from "./_floor.ts";

/** Settings every implementation gets, mapped onto its own option names. */
export interface Settings {
  /** Retries after the first attempt; -1 for until it succeeds. */
  readonly retryCount: number;
  /** ms between attempts. */
  readonly retryDelay: number;
  /** Random ms added to each delay (0 for none: not every peer has jitter). */
  readonly retryJitter: number;
  /** ms before the end of the lease that `using()` extends. */
  readonly threshold: number;
  /** @x/redlock only: how acquire waits for a held lock. */
  readonly wait?: "poll" | "notify";
}

/** A held lock. */
export interface Held {
  release(): Promise<void>;
}

/** What one `using()` hold saw. */
export interface UsingResult {
  /** Successful automatic extensions. */
  extensions: number;
  /** ms each extension took. */
  latencies: number[];
}

/** The routine a `using()` cell runs: it calls `poll` now and then. */
export type Routine = (poll: () => void, signal: AbortSignal) => Promise<void>;

/** One implementation opened on a set of servers. */
export interface Instance {
  acquire(keys: readonly string[], ttl: number): Promise<Held>;
  using(keys: readonly string[], ttl: number, routine: Routine): Promise<UsingResult>;
  /** Errors the implementation reported by events (not lock conflicts). */
  readonly errors: { count: number; first?: string };
  close(): Promise<void>;
}

/** An implementation. */
export interface Impl {
  /** Short id used in JSON and options. */
  readonly id: string;
  /** Name in tables and the chart. */
  readonly label: string;
  readonly client: ClientKind;
  readonly role: "x" | "peer" | "floor";
  /** Whether it takes one lock on several resources (W4). */
  readonly multiResource: boolean;
  /** Whether it has `using()` with automatic extension (W5). */
  readonly hasUsing: boolean;
  /**
   * Whether an error of `acquire` is this implementation giving up after the
   * retries of its own settings (a result, not a failure); absent: never.
   */
  readonly gaveUp?: (error: unknown) => boolean;
  open(ports: readonly number[], settings: Settings): Promise<Instance>;
}

const now = (): number => performance.now();

class ErrorCount {
  count = 0;
  first?: string;
  add(error: unknown): void {
    this.count++;
    this.first ??= error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  }
}

function unsupported(what: string): never {
  throw new Error(`${what} is not supported`);
}

/** A build of @x/redlock loaded from a module: its Redlock class and how its rows are named. */
export interface Library {
  /** Appended to the ids of its rows, e.g. `base`. */
  readonly id: string;
  /** Shown in its rows' labels, e.g. `0.2.0 @5c9962a`. */
  readonly label: string;
  /** The module's Redlock: its constructor, acquire, using and on must be this one's. */
  readonly Redlock: typeof XRedlock;
}

/** Options of {@linkcode xImpl}. */
export interface XImplOptions {
  /** How every acquire waits, whatever the settings say (its id and label then name it). */
  readonly wait?: "poll" | "notify";
  /** Another build of the library than this checkout's `mod.ts` (its id and label name it). */
  readonly library?: Library;
}

/** @x/redlock with clients of `kind`. */
export function xImpl(kind: ClientKind, options: XImplOptions = {}): Impl {
  const { wait, library } = options;
  const tags = [kind, ...(wait ? [wait] : [])].join(", ");
  const Redlock = library?.Redlock ?? XRedlock;
  return {
    id: `x-${kind}${wait ? `-${wait}` : ""}${library ? `@${library.id}` : ""}`,
    label: `@x/redlock${library ? ` ${library.label}` : ""} (${tags})`,
    client: kind,
    role: "x",
    multiResource: true,
    hasUsing: true,
    async open(ports, settings) {
      const connections: Connection<unknown>[] = await connectAll(kind, ports);
      const errors = new ErrorCount();
      const redlock = new Redlock(
        connections.map((c) => c.client as IoredisClient | NodeRedisClient),
        {
          retryCount: settings.retryCount,
          retryDelay: settings.retryDelay,
          retryJitter: settings.retryJitter,
          automaticExtensionThreshold: settings.threshold,
        },
      );
      redlock.on("error", (error) => errors.add(error));
      // `wait` is passed as it is: an option the library does not know is ignored.
      const waitOptions = (wait ?? settings.wait)
        ? { wait: wait ?? settings.wait } as unknown as AcquireOptions
        : undefined;
      return {
        errors,
        async acquire(keys, ttl) {
          const lock = await redlock.acquire(keys, ttl, waitOptions);
          return { release: async () => void await lock.release() };
        },
        async using(keys, ttl, routine) {
          const latencies: number[] = [];
          let extensions = 0;
          await redlock.using(keys, ttl, waitOptions ?? {}, async (signal, context) => {
            let last = context.lock;
            const poll = () => {
              if (context.lock === last) return;
              last = context.lock;
              latencies.push(last.attempts.reduce((sum, a) => sum + a.elapsed, 0));
            };
            await routine(poll, signal);
            poll();
            extensions = context.extensions;
          });
          return { extensions, latencies };
        },
        async close() {
          // A Redlock that holds resources of its own (e.g. for notified waiting) may be disposable.
          const dispose = (redlock as { [Symbol.asyncDispose]?: () => Promise<void> })[
            Symbol.asyncDispose
          ];
          await dispose?.call(redlock);
          await closeAll(connections);
        },
      };
    },
  };
}

/** Times every call of `object[name]` (own property, restored by the returned function). */
function timeCalls<T extends object>(
  object: T,
  name: keyof T & string,
  record: (ms: number, result: unknown) => void,
): () => void {
  const original = object[name] as unknown as (...args: unknown[]) => Promise<unknown>;
  (object as Record<string, unknown>)[name] = async (...args: unknown[]) => {
    const start = now();
    const result = await original.apply(object, args);
    record(now() - start, result);
    return result;
  };
  return () => {
    delete (object as Record<string, unknown>)[name];
  };
}

/**
 * node-redlock 5.0.0-beta.2 and its fork @sesamecare-oss/redlock: one API.
 * With `defaults`, node-redlock is made with no settings at all (its own
 * retry count, delay, jitter and drift factor; the given ones are ignored).
 */
function nodeRedlockImpl(fork: boolean, defaults = false): Impl {
  return {
    id: fork ? "sesamecare" : defaults ? "node-redlock-defaults" : "node-redlock",
    label: fork ? "@sesamecare-oss/redlock" : defaults ? "node-redlock (defaults)" : "node-redlock",
    client: "ioredis",
    role: "peer",
    multiResource: true,
    hasUsing: true,
    ...(defaults ? { gaveUp: (error: unknown) => error instanceof NodeExecutionError } : {}),
    async open(ports, settings) {
      const connections = await connectAll("ioredis", ports);
      const clients = connections.map((c) => c.client);
      const errors = new ErrorCount();
      const options = {
        driftFactor: 0.01,
        retryCount: settings.retryCount,
        retryDelay: settings.retryDelay,
        retryJitter: settings.retryJitter,
        automaticExtensionThreshold: settings.threshold,
      };
      type Api = {
        acquire(keys: string[], ttl: number): Promise<{ release(): Promise<unknown> }>;
        extend(...args: unknown[]): Promise<unknown>;
        using(
          keys: string[],
          ttl: number,
          routine: (signal: AbortSignal) => Promise<void>,
        ): Promise<void>;
        on(event: "error", listener: (error: unknown) => void): unknown;
      };
      const redlock =
        (fork
          ? new SesameRedlock(clients as never, options)
          : defaults
          ? new NodeRedlock(clients as never)
          : new NodeRedlock(clients as never, options)) as unknown as Api;
      const Locked = fork ? SesameLockedError : NodeLockedError;
      // Both emit every vote against as an "error" event; a held resource is not an error here.
      redlock.on("error", (error) => {
        if (!(error instanceof Locked)) errors.add(error);
      });
      return {
        errors,
        async acquire(keys, ttl) {
          const lock = await redlock.acquire([...keys], ttl);
          return { release: async () => void await lock.release() };
        },
        async using(keys, ttl, routine) {
          const latencies: number[] = [];
          const restore = timeCalls(redlock, "extend", (ms) => latencies.push(ms));
          try {
            await redlock.using([...keys], ttl, (signal) => routine(() => {}, signal));
          } finally {
            restore();
          }
          return { extensions: latencies.length, latencies };
        },
        close: () => closeAll(connections),
      };
    },
  };
}

/** redlock-universal's Redlock (`createRedlock`) over `IoredisAdapter`s. */
const universal: Impl = {
  id: "universal",
  label: "redlock-universal",
  client: "ioredis",
  role: "peer",
  // Its multi-key API (LockManager.acquireBatch) locks on one server only.
  multiResource: false,
  hasUsing: true,
  async open(ports, settings) {
    const connections = await connectAll("ioredis", ports);
    const adapters = connections.map((c) => new IoredisAdapter(c.client));
    const errors = new ErrorCount();
    const make = (key: string, ttl: number) =>
      createRedlock({
        adapters,
        key,
        ttl,
        retryAttempts: settings.retryCount === -1 ? 1_000_000_000 : settings.retryCount,
        retryDelay: settings.retryDelay,
      });
    return {
      errors,
      async acquire(keys, ttl) {
        if (keys.length !== 1) unsupported("a lock on several resources");
        const redlock = make(keys[0]!, ttl);
        const handle = await redlock.acquire();
        return {
          async release() {
            if (!(await redlock.release(handle))) {
              throw new Error("redlock-universal: release did not reach a quorum");
            }
          },
        };
      },
      async using(keys, ttl, routine) {
        if (keys.length !== 1) unsupported("a lock on several resources");
        const redlock = make(keys[0]!, ttl);
        const latencies: number[] = [];
        let extensions = 0;
        timeCalls(redlock, "extend", (ms, ok) => {
          latencies.push(ms);
          if (ok === true) extensions++;
        });
        await redlock.using((signal) => routine(() => {}, signal));
        return { extensions, latencies };
      },
      close: () => closeAll(connections),
    };
  },
};

/**
 * redis-semaphore's `RedlockMutex` over ioredis, one per acquire as its
 * README shows; no automatic refresh (`refreshInterval: 0`), as the other
 * rows hold no timer either.
 */
const redisSemaphore: Impl = {
  id: "redis-semaphore",
  label: "redis-semaphore",
  client: "ioredis",
  role: "peer",
  // RedlockMultiSemaphore takes several permits of one key, not several keys.
  multiResource: false,
  // Its refresh is a timer of the lock, not a using() around a routine.
  hasUsing: false,
  async open(ports, settings) {
    const connections = await connectAll("ioredis", ports);
    const clients = connections.map((c) => c.client);
    const unlimited = settings.retryCount === -1;
    return {
      errors: new ErrorCount(),
      async acquire(keys, ttl) {
        if (keys.length !== 1) unsupported("a lock on several resources");
        const mutex = new RedlockMutex(clients, keys[0]!, {
          lockTimeout: ttl,
          acquireTimeout: unlimited ? 3_600_000 : 10_000,
          acquireAttemptsLimit: unlimited ? Infinity : settings.retryCount + 1,
          retryInterval: settings.retryDelay,
          refreshInterval: 0,
        });
        try {
          await mutex.acquire();
        } catch (error) {
          if (error instanceof SemaphoreTimeoutError) throw new Error("redis-semaphore: locked");
          throw error;
        }
        return { release: () => mutex.release() };
      },
      using: () => unsupported("using()"),
      close: () => closeAll(connections),
    };
  },
};

/** The protocol floor with clients of `kind`. */
function floorImpl(kind: ClientKind): Impl {
  return {
    id: `floor-${kind}`,
    label: `floor (${kind})`,
    client: kind,
    role: "floor",
    multiResource: true,
    hasUsing: false,
    async open(ports, settings) {
      const connections = await connectAll(kind, ports);
      const floor = new Floor(
        connections.map((c) =>
          kind === "ioredis"
            ? ioredisFloor(c.client as IoredisClient)
            : nodeRedisFloor(c.client as NodeRedisClient)
        ),
      );
      await floor.load();
      const attempts = settings.retryCount === -1 ? Infinity : settings.retryCount + 1;
      return {
        errors: new ErrorCount(),
        async acquire(keys, ttl) {
          for (let attempt = 1;; attempt++) {
            const value = await floor.tryAcquire(keys, ttl);
            if (value !== null) {
              return {
                async release() {
                  if (!(await floor.release(keys, value))) {
                    throw new Error("floor: release did not reach a quorum");
                  }
                },
              };
            }
            if (attempt >= attempts) throw new Error("floor: resource is locked");
            await new Promise((r) =>
              setTimeout(r, settings.retryDelay + Math.random() * settings.retryJitter)
            );
          }
        },
        using: () => unsupported("using()"),
        close: () => closeAll(connections),
      };
    },
  };
}

/** Every implementation, in table order. */
export const IMPLS: readonly Impl[] = [
  xImpl("ioredis"),
  xImpl("node-redis"),
  nodeRedlockImpl(false),
  nodeRedlockImpl(true),
  universal,
  redisSemaphore,
  floorImpl("ioredis"),
  floorImpl("node-redis"),
];

/**
 * node-redlock as its README makes it, with its default settings: 10
 * retries 200 ± 100 ms apart, then an `ExecutionError` ({@linkcode Impl.gaveUp}).
 */
export const NODE_REDLOCK_DEFAULTS: Impl = nodeRedlockImpl(false, true);

/** The @x/redlock rows with release-notified waiting (W3). */
export const NOTIFY_IMPLS: readonly Impl[] = [
  xImpl("ioredis", { wait: "notify" }),
  xImpl("node-redis", { wait: "notify" }),
];
