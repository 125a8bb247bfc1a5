/**
 * A web service under load: an HTTP app on `Deno.serve` (loopback) where
 * each request locks one of a few resources and does a read-modify-write of
 * a counter in a separate store, driven by autocannon while one of three
 * lock servers is killed and restarted after the longest lease.
 *
 * The store is a Redis server of its own (not one of the lock servers), so
 * that the read and the write of each update are network round trips, as
 * with a real database: the window in which two holders could both read the
 * same value is real. Its write is a Lua script that refuses a fencing token
 * older than the last one it saw, and records each request's id in a set, so
 * that every increment can be matched with a 2xx response afterwards.
 *
 * @module
 */

import autocannon from "autocannon";
import { Redis } from "ioredis";
import NodeRedlock from "redlock";
import { Redlock } from "../mod.ts";
import { type RedisServers, startServers } from "../scripts/redis.ts";
import { sleep } from "./_stats.ts";

/** The lock libraries the app can use; "none" takes no lock (to show what the audit finds). */
export type HttpImpl = "x-redlock" | "node-redlock" | "none";

/** One run's settings. */
export interface HttpRunOptions {
  readonly impl: HttpImpl;
  /** autocannon's connections. */
  readonly connections: number;
  /** Seconds of load. */
  readonly seconds: number;
  /** How many resources the requests spread over. */
  readonly resources: number;
  /** Each lock's lease in ms: the longest lease, which the restart waits out. */
  readonly lease: number;
  /** ms a request may wait for its lock before it is answered 503. */
  readonly lockTimeout: number;
  /** Whether to kill one of the three lock servers midway and restart it. */
  readonly kill: boolean;
  /** Whether @x/redlock takes fencing tokens (node-redlock has none). */
  readonly fencing: boolean;
  /** How @x/redlock waits for a held lock: queued and woken by releases, or polling. */
  readonly wait: "notify" | "poll";
}

/** Requests answered with each status and reason, as the app saw them. */
export type Outcomes = Record<string, number>;

/** What one run measured and what the store holds afterwards. */
export interface HttpResult {
  readonly impl: HttpImpl;
  readonly connections: number;
  readonly seconds: number;
  /** Requests per second (2xx and others), autocannon's average. */
  readonly requestsPerSecond: number;
  /** Latency percentiles in ms, autocannon's. */
  readonly latency: { readonly p50: number; readonly p99: number; readonly p999: number };
  /** 2xx responses autocannon read (those in flight when it stopped are not counted). */
  readonly responses2xx: number;
  readonly responsesOther: number;
  /** 2xx responses the app sent. */
  readonly answered2xx: number;
  /** autocannon's connection errors and timeouts. */
  readonly clientErrors: number;
  readonly clientTimeouts: number;
  /** The app's answers by `status reason`, e.g. `503 TimeoutError`. */
  readonly outcomes: Outcomes;
  /** Increments the store recorded (ids in its sets). */
  readonly recorded: number;
  /** The counters' sum: recorded − lost updates. */
  readonly counted: number;
  /** Recorded increments whose update a concurrent write overwrote. */
  readonly lostUpdates: number;
  /** 2xx responses whose id the store does not have, plus ids it has without a 2xx. */
  readonly unmatched: number;
  /** Writes the store refused for a stale fencing token. */
  readonly staleRefused: number;
  /** When the kill and the restart happened, in ms from the start of the load. */
  readonly killedAt: number | null;
  readonly restartedAt: number | null;
}

/** The store's write: refuses a token below the last one; records the request's id once. */
const WRITE = `local token = tonumber(ARGV[2])
if token > 0 then
  local last = tonumber(redis.call("GET", KEYS[2]) or "0")
  if token < last then return -1 end
  redis.call("SET", KEYS[2], ARGV[2])
end
if redis.call("SADD", KEYS[3], ARGV[3]) == 0 then return -2 end
redis.call("SET", KEYS[1], ARGV[1])
return 1`;

const STALE = -1;

/** A lock the app takes around one update: the fencing token (0 without), and its release. */
interface Held {
  readonly token: number;
  release(): Promise<unknown>;
}

/** A lock library as the app uses it. */
interface Locks {
  acquire(resource: string): Promise<Held>;
  close(): Promise<void>;
}

/** ioredis clients as both libraries get them: requests fail at once while a server is down. */
function lockClient(port: number): Redis {
  const client = new Redis({
    host: "127.0.0.1",
    port,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => 100,
  });
  client.on("error", () => {});
  return client;
}

function openLocks(
  impl: HttpImpl,
  clients: Redis[],
  options: HttpRunOptions,
): Locks {
  const { lease, lockTimeout } = options;
  if (impl === "x-redlock") {
    const redlock = new Redlock(clients);
    redlock.on("error", () => {}); // the dead server's votes against, counted by the round
    return {
      async acquire(resource) {
        const lock = await redlock.acquire(resource, lease, {
          fencing: options.fencing,
          retryCount: -1,
          wait: options.wait,
          timeout: lockTimeout,
        });
        return { token: lock.fencingToken ?? 0, release: () => lock.release() };
      },
      close: () => redlock[Symbol.asyncDispose](),
    };
  }
  if (impl === "none") {
    return {
      acquire: () => Promise.resolve({ token: 0, release: () => Promise.resolve() }),
      close: () => Promise.resolve(),
    };
  }
  // node-redlock with its defaults (10 retries, 200 ms apart, 100 ms jitter: about 2 s),
  // and no fencing tokens: the store cannot refuse its stale writes.
  const redlock = new NodeRedlock(clients as never);
  redlock.on("error", () => {});
  return {
    async acquire(resource) {
      const lock = await redlock.acquire([resource], lease);
      return { token: 0, release: () => lock.release() };
    },
    close: () => redlock.quit().then(() => {}, () => {}),
  };
}

/** The app: `GET /inc/<resource>/<id>` locks the resource and increments its counter. */
function app(locks: Locks, store: Redis, outcomes: Outcomes, ok: Set<string>) {
  const count = (key: string) => void (outcomes[key] = (outcomes[key] ?? 0) + 1);
  return async (request: Request): Promise<Response> => {
    const [, verb, resource, id] = new URL(request.url).pathname.split("/");
    if (verb !== "inc" || !resource || !id) return new Response("not found", { status: 404 });
    let held: Held;
    try {
      held = await locks.acquire(`svc:${resource}`);
    } catch (error) {
      count(`503 ${(error as Error).name}`);
      return new Response("busy", { status: 503, headers: { "retry-after": "1" } });
    }
    let status = 200;
    let reason = "ok";
    try {
      const value = Number(await store.get(`counter:${resource}`) ?? "0");
      const written = await store.eval(
        WRITE,
        3,
        `counter:${resource}`,
        `token:${resource}`,
        `ids:${resource}`,
        String(value + 1),
        String(held.token),
        id,
      );
      if (written === STALE) [status, reason] = [409, "stale token"];
      else if (written !== 1) [status, reason] = [500, `store replied ${written}`];
    } catch (error) {
      [status, reason] = [500, (error as Error).name];
    }
    // The update is done or refused: a failed release only shortens nobody's wait.
    await held.release().catch(() => count("release failed"));
    count(`${status} ${reason}`);
    if (status === 200) ok.add(`${resource}/${id}`);
    return new Response(reason, { status });
  };
}

/** Compares the store with the 2xx answers: recorded, counted, lost and unmatched. */
async function audit(store: Redis, resources: number, ok: ReadonlySet<string>) {
  let recorded = 0;
  let counted = 0;
  let unmatched = 0;
  const seen = new Set<string>();
  for (let r = 0; r < resources; r++) {
    const ids = await store.smembers(`ids:${r}`);
    recorded += ids.length;
    counted += Number(await store.get(`counter:${r}`) ?? "0");
    for (const id of ids) {
      seen.add(`${r}/${id}`);
      if (!ok.has(`${r}/${id}`)) unmatched++;
    }
  }
  for (const key of ok) if (!seen.has(key)) unmatched++;
  return { recorded, counted, lostUpdates: recorded - counted, unmatched };
}

/** Kills the middle lock server at half time and restarts it `lease` + 100 ms later. */
async function killAndRestart(
  servers: RedisServers,
  options: HttpRunOptions,
  started: number,
  stop: AbortSignal,
): Promise<{ killedAt: number | null; restartedAt: number | null }> {
  if (!options.kill) return { killedAt: null, restartedAt: null };
  await sleep(options.seconds * 500);
  if (stop.aborted) return { killedAt: null, restartedAt: null };
  const victim = servers.servers[1]!;
  await victim.kill();
  const killedAt = performance.now() - started;
  await sleep(options.lease + 100);
  await victim.start();
  return { killedAt, restartedAt: performance.now() - started };
}

/** Runs the app with `options.impl` under autocannon and audits the store. */
export async function runHttp(options: HttpRunOptions): Promise<HttpResult> {
  await using servers = await startServers(3);
  await using storeServer = await startServers(1);
  const clients = servers.servers.map((s) => lockClient(s.port));
  await Promise.all(clients.map((c) => c.connect()));
  const store = new Redis({ host: "127.0.0.1", port: storeServer.servers[0]!.port });
  store.on("error", () => {});
  const locks = openLocks(options.impl, clients, options);
  const outcomes: Outcomes = {};
  const ok = new Set<string>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    app(locks, store, outcomes, ok),
  );
  const stop = new AbortController();
  try {
    let next = 0;
    const started = performance.now();
    const fault = killAndRestart(servers, options, started, stop.signal);
    const result = await autocannon({
      url: `http://127.0.0.1:${server.addr.port}`,
      connections: options.connections,
      duration: options.seconds,
      requests: [{
        setupRequest: (req: Record<string, unknown>) => {
          const id = next++;
          return { ...req, path: `/inc/${id % options.resources}/${id}` };
        },
      }],
    });
    stop.abort();
    const { killedAt, restartedAt } = await fault;
    await server.shutdown();
    const found = await audit(store, options.resources, ok);
    return {
      impl: options.impl,
      connections: options.connections,
      seconds: options.seconds,
      requestsPerSecond: result.requests.average,
      latency: { p50: result.latency.p50, p99: result.latency.p99, p999: result.latency.p99_9 },
      responses2xx: result["2xx"],
      responsesOther: result.non2xx,
      answered2xx: ok.size,
      clientErrors: result.errors,
      clientTimeouts: result.timeouts,
      outcomes,
      ...found,
      staleRefused: outcomes["409 stale token"] ?? 0,
      killedAt,
      restartedAt,
    };
  } finally {
    stop.abort();
    await server.shutdown().catch(() => {});
    await locks.close();
    for (const client of clients) client.disconnect();
    store.disconnect();
  }
}
