/**
 * Starts and stops Redis servers on free loopback ports for the tests, the
 * demo, the benchmarks and the chaos run: Docker containers (host
 * networking, bound to 127.0.0.1) when a Docker engine answers and has the
 * image, local `redis-server` processes otherwise; `REDLOCK_ENGINE` chooses.
 *
 * Every started server writes its pid (or container id) into the directory
 * named by `REDLOCK_RUN_DIR` when that is set, so that the task that set it
 * can stop whatever a crashed or interrupted run left behind
 * ({@linkcode reapServers}).
 *
 * @module
 */

/** How servers are run. */
export type Engine = "docker" | "local";

/** Options of {@linkcode startServers}. */
export interface StartOptions {
  /** Make a Redis Cluster of the servers (at least 3, all masters). Default false. */
  cluster?: boolean;
  /** Persist with AOF and `appendfsync always`, so a restart remembers locks. Default false. */
  aof?: boolean;
  /** Force an engine instead of detecting one. */
  engine?: Engine;
  /** More `redis-server` arguments for the server on `port` (e.g. `--tls-port`). Default none. */
  args?: (port: number) => readonly string[];
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();

/** The image containers run: `REDLOCK_REDIS_IMAGE`, or `redis:7`. */
export function redisImage(): string {
  return Deno.env.get("REDLOCK_REDIS_IMAGE") || "redis:7";
}

/**
 * Servers cannot be started here; the message is one line that names what
 * to install or start. The scripts print it instead of a stack trace.
 */
export class CannotRunRedis extends Error {
  override name = "CannotRunRedis";
}

let detected: Promise<Engine> | undefined;

async function succeeds(cmd: string, args: string[]): Promise<boolean> {
  try {
    const { success } = await new Deno.Command(cmd, { args, stdout: "null", stderr: "null" })
      .output();
    return success;
  } catch {
    return false;
  }
}

/**
 * `REDLOCK_ENGINE` (`docker` or `local`) when set, else Docker when `docker
 * info` succeeds and the engine has the image ({@linkcode redisImage}), else
 * local `redis-server`; throws {@linkcode CannotRunRedis} when the one asked
 * for, or both, cannot run.
 */
export function detectEngine(): Promise<Engine> {
  detected ??= (async () => {
    const wanted = Deno.env.get("REDLOCK_ENGINE");
    if (wanted !== undefined && wanted !== "docker" && wanted !== "local") {
      throw new CannotRunRedis(`REDLOCK_ENGINE must be docker or local, not ${wanted}`);
    }
    const image = redisImage();
    if (wanted !== "local") {
      const engine = await succeeds("docker", ["info"]);
      const hasImage = engine && await succeeds("docker", ["image", "inspect", image]);
      if (hasImage) return "docker";
      if (wanted === "docker") {
        throw new CannotRunRedis(
          engine
            ? `cannot run Redis in Docker: the engine has no image ${image} and cannot pull ` +
              `here: build one with scripts/redis_image.sh ${image}, or set REDLOCK_REDIS_IMAGE`
            : "cannot run Redis in Docker: no engine answers `docker info`: install docker.io " +
              "and start `dockerd --bridge=none --iptables=false` (or unset REDLOCK_ENGINE)",
        );
      }
    }
    if (await succeeds("redis-server", ["--version"])) return "local";
    throw new CannotRunRedis(
      "cannot run Redis: install redis-server (apt-get install redis-server), or start a " +
        `Docker engine with the image ${image} (REDLOCK_ENGINE=docker, REDLOCK_REDIS_IMAGE)`,
    );
  })();
  return detected;
}

/** Reserves a free loopback port (and, for a cluster, its bus port + 10000). */
function freePort(cluster: boolean): number {
  for (let i = 0; i < 100; i++) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const { port } = listener.addr as Deno.NetAddr;
    listener.close();
    if (!cluster) return port;
    if (port >= 55535) continue;
    try {
      Deno.listen({ hostname: "127.0.0.1", port: port + 10000 }).close();
      return port;
    } catch {
      // bus port taken; try another
    }
  }
  throw new Error("no free port pair found");
}

/** Sends one command over a fresh connection and returns the raw reply text. */
export async function command(port: number, ...args: string[]): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    const payload = `*${args.length}\r\n` +
      args.map((a) => `$${encoder.encode(a).length}\r\n${a}\r\n`).join("");
    await conn.write(encoder.encode(payload));
    const buffer = new Uint8Array(65536);
    let text = "";
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      const n = await conn.read(buffer);
      if (n === null) break;
      text += decoder.decode(buffer.subarray(0, n));
      if (isComplete(text)) break;
    }
    return text;
  } finally {
    conn.close();
  }
}

function isComplete(text: string): boolean {
  return skipReply(text, 0) !== -1;
}

/** The index after the RESP reply that starts at `at`, or -1 when it is incomplete. */
function skipReply(text: string, at: number): number {
  const eol = text.indexOf("\r\n", at);
  if (eol === -1) return -1;
  const type = text[at];
  const size = Number(text.slice(at + 1, eol));
  if (type === "$") {
    if (size < 0) return eol + 2;
    const end = eol + 2 + size + 2;
    return text.length >= end ? end : -1;
  }
  if (type === "*") {
    let next = eol + 2;
    for (let i = 0; i < size && next !== -1; i++) next = skipReply(text, next);
    return next;
  }
  return eol + 2;
}

async function waitReady(port: number, timeout = 10_000): Promise<void> {
  const deadline = Date.now() + timeout;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      if ((await command(port, "PING")).startsWith("+PONG")) return;
    } catch (error) {
      last = error;
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`redis on port ${port} did not become ready in ${timeout} ms`, { cause: last });
}

/** One Redis server this module started. */
export class RedisServer {
  /** The loopback port. */
  readonly port: number;
  /** How it runs. */
  readonly engine: Engine;
  readonly #dir: string;
  readonly #args: string[];
  readonly #env: Record<string, string> | undefined;
  #child: Deno.ChildProcess | undefined;
  #container: string | undefined;
  #paused = false;

  constructor(
    port: number,
    engine: Engine,
    dir: string,
    args: string[],
    env?: Record<string, string>,
  ) {
    this.port = port;
    this.engine = engine;
    this.#dir = dir;
    this.#args = args;
    this.#env = env;
  }

  /** `redis://127.0.0.1:port` */
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Whether the server process is up (it may be paused). */
  get running(): boolean {
    return this.#child !== undefined || this.#container !== undefined;
  }

  /** The local process id, when it runs as a process. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Starts (or restarts) the server and waits until it answers PING. */
  async start(): Promise<void> {
    if (this.running) return;
    if (this.engine === "local") {
      this.#child = new Deno.Command("redis-server", {
        args: [
          "--port",
          String(this.port),
          "--bind",
          "127.0.0.1",
          "--dir",
          this.#dir,
          ...this.#args,
        ],
        ...(this.#env ? { env: this.#env } : {}),
        stdin: "null",
        stdout: "null",
        stderr: "null",
      }).spawn();
      await record(`${this.port}.pid`, String(this.#child.pid));
    } else {
      // Host networking: the server binds the loopback address like a local
      // one, and no traffic goes to a bridge's private addresses.
      const { stdout, stderr, success } = await new Deno.Command("docker", {
        args: [
          "run",
          "--detach",
          "--rm",
          "--network",
          "host",
          "--label",
          "redlock.test=1",
          redisImage(),
          "redis-server",
          "--port",
          String(this.port),
          "--bind",
          "127.0.0.1",
          "--dir",
          "/tmp",
          ...this.#args,
        ],
      }).output();
      if (!success) {
        throw new CannotRunRedis(
          `docker run of ${redisImage()} failed for port ${this.port}: ${
            decoder.decode(stderr).trim()
          }`,
        );
      }
      this.#container = decoder.decode(stdout).trim();
      await record(`${this.port}.container`, this.#container);
    }
    this.#paused = false;
    try {
      await waitReady(this.port);
    } catch (error) {
      await this.kill();
      throw error;
    }
  }

  /** Kills the server at once (SIGKILL: no save, no goodbye) and waits until it is gone. */
  async kill(): Promise<void> {
    if (this.#child) {
      const child = this.#child;
      this.#child = undefined;
      if (this.#paused) this.#signal(child, "SIGCONT");
      this.#signal(child, "SIGKILL");
      await child.status;
      await forget(`${this.port}.pid`);
    } else if (this.#container) {
      const id = this.#container;
      this.#container = undefined;
      await succeeds("docker", ["rm", "-f", id]);
      await forget(`${this.port}.container`);
    }
    this.#paused = false;
  }

  /** Freezes the server (SIGSTOP, or `docker pause`): it accepts nothing, answers nothing. */
  async pause(): Promise<void> {
    if (this.#child) this.#signal(this.#child, "SIGSTOP");
    else if (this.#container) await succeeds("docker", ["pause", this.#container]);
    this.#paused = true;
  }

  /** Lets a paused server go on (SIGCONT, or `docker unpause`). */
  async resume(): Promise<void> {
    if (this.#child) this.#signal(this.#child, "SIGCONT");
    else if (this.#container) await succeeds("docker", ["unpause", this.#container]);
    this.#paused = false;
  }

  /** Sends a raw command and returns the raw reply (for tests and faults). */
  command(...args: string[]): Promise<string> {
    return command(this.port, ...args);
  }

  #signal(child: Deno.ChildProcess, signal: Deno.Signal): void {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  }

  /** Stops the server and removes its data directory. */
  async stop(): Promise<void> {
    await this.kill();
    await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
  }
}

/** A group of servers that stops them all when disposed. */
export class RedisServers implements AsyncDisposable {
  /** The servers, in start order. */
  readonly servers: readonly RedisServer[];

  constructor(servers: readonly RedisServer[]) {
    this.servers = servers;
  }

  /** The ports, in order. */
  get ports(): number[] {
    return this.servers.map((s) => s.port);
  }

  /** Stops every server. */
  async stop(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.stop()));
  }

  /** Stops every server; for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }
}

async function record(name: string, content: string): Promise<void> {
  const dir = Deno.env.get("REDLOCK_RUN_DIR");
  if (dir) await Deno.writeTextFile(`${dir}/${name}`, content);
}

async function forget(name: string): Promise<void> {
  const dir = Deno.env.get("REDLOCK_RUN_DIR");
  if (dir) await Deno.remove(`${dir}/${name}`).catch(() => {});
}

/**
 * Starts `count` servers on free loopback ports, without persistence unless
 * `aof` is set, and (with `cluster`) joins them into a cluster of masters.
 */
export async function startServers(
  count: number,
  options: StartOptions = {},
): Promise<RedisServers> {
  const engine = options.engine ?? await detectEngine();
  const cluster = options.cluster ?? false;
  const servers: RedisServer[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const port = freePort(cluster);
      const dir = await Deno.makeTempDir({ prefix: `redlock-redis-${port}-` });
      const args = [
        "--save",
        "",
        ...(options.aof
          ? ["--appendonly", "yes", "--appendfsync", "always"]
          : ["--appendonly", "no"]),
        ...(cluster
          ? ["--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`]
          : []),
        ...(options.args?.(port) ?? []),
      ];
      const server = new RedisServer(port, engine, dir, args);
      servers.push(server);
      await server.start();
    }
    if (cluster) await createCluster(servers);
  } catch (error) {
    await Promise.all(servers.map((s) => s.stop()));
    throw error;
  }
  return new RedisServers(servers);
}

/** The wall clock of a server started by {@linkcode startClockedServers}. */
export class ServerClock {
  /** The time file libfaketime re-reads on every clock call. */
  readonly file: string;
  #offset = 0;

  constructor(file: string) {
    this.file = file;
  }

  /** Seconds the server's wall clock is ahead of the real one. */
  get offset(): number {
    return this.#offset;
  }

  /** Moves the server's wall clock by `seconds` (forward when positive), at once. */
  async jump(seconds: number): Promise<void> {
    this.#offset += seconds;
    await Deno.writeTextFile(this.file, `${this.#offset >= 0 ? "+" : ""}${this.#offset}\n`);
  }
}

/** The first of `paths` that exists. */
function existing(paths: readonly string[]): string | undefined {
  return paths.find((path) => {
    try {
      return Deno.statSync(path).isFile;
    } catch {
      return false;
    }
  });
}

/**
 * Starts `count` local servers (no persistence) under Debian's libfaketime
 * with a time file each, so that {@linkcode ServerClock.jump} moves a
 * server's wall clock (on which Redis expires keys) while it runs; the
 * monotonic clock is left alone, as an NTP step would. glibc's malloc is
 * preloaded first because libfaketime cannot start in a process whose
 * malloc is jemalloc (Debian's redis-server): jemalloc asks for the time
 * while libfaketime initialises (libfaketime issue #130).
 */
export async function startClockedServers(
  count: number,
): Promise<{ servers: RedisServers; clocks: ServerClock[] }> {
  const triplet = `${Deno.build.arch === "aarch64" ? "aarch64" : "x86_64"}-linux-gnu`;
  const faketime = existing([`/usr/lib/${triplet}/faketime/libfaketime.so.1`]);
  const malloc = existing([
    `/usr/lib/${triplet}/libc_malloc_debug.so.0`,
    `/lib/${triplet}/libc_malloc_debug.so.0`,
  ]);
  if (!faketime || !malloc) {
    throw new Error(
      "Clock jumps need libfaketime and glibc's libc_malloc_debug " +
        "(`apt-get install faketime libc6`)",
    );
  }
  const servers: RedisServer[] = [];
  const clocks: ServerClock[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const port = freePort(false);
      const dir = await Deno.makeTempDir({ prefix: `redlock-redis-${port}-` });
      const clock = new ServerClock(`${dir}/clock`);
      await clock.jump(0);
      const server = new RedisServer(port, "local", dir, ["--save", "", "--appendonly", "no"], {
        LD_PRELOAD: `${malloc}:${faketime}`,
        FAKETIME_TIMESTAMP_FILE: clock.file,
        FAKETIME_NO_CACHE: "1",
        FAKETIME_DONT_FAKE_MONOTONIC: "1",
      });
      servers.push(server);
      clocks.push(clock);
      await server.start();
    }
  } catch (error) {
    await Promise.all(servers.map((s) => s.stop()));
    throw error;
  }
  return { servers: new RedisServers(servers), clocks };
}

async function createCluster(servers: RedisServer[]): Promise<void> {
  const nodes = servers.map((s) => `127.0.0.1:${s.port}`);
  const create = new Deno.Command("redis-cli", {
    args: ["--cluster", "create", ...nodes, "--cluster-replicas", "0", "--cluster-yes"],
    stdout: "piped",
    stderr: "piped",
  });
  const { success, stdout, stderr } = await create.output();
  if (!success) {
    throw new Error(
      `redis-cli --cluster create failed: ${decoder.decode(stdout)} ${decoder.decode(stderr)}`,
    );
  }
  const deadline = Date.now() + 20_000;
  for (const server of servers) {
    while (!(await server.command("CLUSTER", "INFO")).includes("cluster_state:ok")) {
      if (Date.now() > deadline) throw new Error("the cluster did not reach cluster_state:ok");
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/**
 * Stops every server recorded in `dir` (pid files and container ids) and
 * returns how many it stopped: the safety net for interrupted runs.
 */
export async function reapServers(dir: string): Promise<number> {
  let stopped = 0;
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}/${entry.name}`;
    const content = (await Deno.readTextFile(path).catch(() => "")).trim();
    if (entry.name.endsWith(".pid") && /^\d+$/.test(content)) {
      for (const signal of ["SIGCONT", "SIGKILL"] as const) {
        try {
          Deno.kill(Number(content), signal);
          if (signal === "SIGKILL") stopped++;
        } catch {
          // already gone
        }
      }
    } else if (entry.name.endsWith(".container") && content) {
      if (await succeeds("docker", ["rm", "-f", content])) stopped++;
    }
    await Deno.remove(path).catch(() => {});
  }
  return stopped;
}

/** Runs `main`; a {@linkcode CannotRunRedis} ends the process with its one line. */
export async function orExplain<T>(main: () => Promise<T>): Promise<T> {
  try {
    return await main();
  } catch (error) {
    if (!(error instanceof CannotRunRedis)) throw error;
    console.error(error.message);
    Deno.exit(1);
  }
}

if (import.meta.main) {
  // `deno run -A scripts/redis.ts 3`: start 3 servers, print their ports, stop on Ctrl-C.
  const count = Number(Deno.args[0] ?? 3);
  const group = await orExplain(() => startServers(count));
  console.log(
    `started ${count} Redis server(s) (${group.servers[0]?.engine}) on ports ${
      group.ports.join(", ")
    }; Ctrl-C stops them`,
  );
  const stop = async () => {
    await group.stop();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
}
