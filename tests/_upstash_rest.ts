/**
 * A loopback translator of Upstash's REST protocol to a real Redis server,
 * so that the real `@upstash/redis` client runs in the tests: `POST /` with
 * a command as a JSON array, `POST /pipeline` with an array of them,
 * `POST /subscribe/<channel>` as Server-Sent Events, the
 * `Upstash-Encoding: base64` response encoding, a bearer token, and error
 * replies as HTTP 400 `{ "error": … }`.
 */

import { DenoRedisFixture, type Reply } from "./_deno_redis.ts";

const encoder = new TextEncoder();

/** Error replies of Redis lose deno-redis's leading `-` here, as Upstash sends them. */
const errorText = (error: unknown) =>
  (error instanceof Error ? error.message : String(error)).replace(/^-/, "");

function base64(text: string): string {
  let binary = "";
  for (const byte of encoder.encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** A reply as JSON, its strings base64-encoded when the client asked (but "OK", as Upstash does). */
function encode(reply: Reply, asBase64: boolean): unknown {
  if (typeof reply === "string") return asBase64 && reply !== "OK" ? base64(reply) : reply;
  if (Array.isArray(reply)) return reply.map((item) => encode(item, asBase64));
  return reply;
}

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

export class UpstashRest implements AsyncDisposable {
  /** The URL to give `new Redis({ url, token })`. */
  readonly url: string;
  /** The bearer token it expects. */
  readonly token = "test-token";
  readonly #server: Deno.HttpServer<Deno.NetAddr>;
  readonly #redisPort: number;
  readonly #commands: DenoRedisFixture;
  /** Subscribed connections of open event streams, closed on dispose. */
  readonly #streams = new Set<() => void>();
  /** HTTP requests answered so far, by path. */
  readonly requests = new Map<string, number>();

  private constructor(redisPort: number, commands: DenoRedisFixture) {
    this.#redisPort = redisPort;
    this.#commands = commands;
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      (request) => this.#handle(request),
    );
    this.url = `http://127.0.0.1:${this.#server.addr.port}`;
  }

  /** Starts a translator for the Redis server on `redisPort`. */
  static async start(redisPort: number): Promise<UpstashRest> {
    return new UpstashRest(redisPort, await DenoRedisFixture.connect(redisPort));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    for (const close of this.#streams) close();
    await this.#server.shutdown();
    await this.#commands[Symbol.asyncDispose]();
  }

  async #handle(request: Request): Promise<Response> {
    const path = new URL(request.url).pathname;
    this.requests.set(path, (this.requests.get(path) ?? 0) + 1);
    if (request.headers.get("authorization") !== `Bearer ${this.token}`) {
      return json({ error: "Unauthorized" }, 401);
    }
    const asBase64 = request.headers.get("upstash-encoding") === "base64";
    const body = await request.text();
    if (path.startsWith("/subscribe/")) {
      return this.#subscribe(decodeURIComponent(path.slice("/subscribe/".length)));
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      return json({ error: "ERR malformed JSON body" }, 400);
    }
    if (path === "/pipeline") {
      if (!Array.isArray(parsed)) return json({ error: "ERR a pipeline is an array" }, 400);
      const results = [];
      for (const command of parsed) {
        try {
          results.push({ result: encode(await this.#send(command), asBase64) });
        } catch (error) {
          results.push({ error: errorText(error) });
        }
      }
      return json(results);
    }
    if (path !== "/") return json({ error: `ERR unknown path ${path}` }, 404);
    try {
      return json({ result: encode(await this.#send(parsed), asBase64) });
    } catch (error) {
      return json({ error: errorText(error) }, 400);
    }
  }

  #send(command: unknown): Promise<Reply> {
    if (!Array.isArray(command) || command.length === 0) {
      return Promise.reject(new Error("ERR a command is a non-empty JSON array"));
    }
    const [name, ...args] = command.map(String);
    return this.#commands.sendCommand(name!, args);
  }

  /** An event stream of `subscribe,<channel>,<count>` and `message,<channel>,<payload>` lines. */
  async #subscribe(channel: string): Promise<Response> {
    const connection = await DenoRedisFixture.connect(this.#redisPort);
    let closed = false;
    let stop = () => {};
    const stream = new ReadableStream<Uint8Array>({
      start: (controller) => {
        stop = () => {
          if (closed) return;
          closed = true;
          this.#streams.delete(stop);
          connection.close();
          try {
            controller.close();
          } catch {
            // already closed by the client
          }
        };
        this.#streams.add(stop);
        (async () => {
          try {
            await connection.sendCommand("SUBSCRIBE", [channel]);
            controller.enqueue(encoder.encode(`data: subscribe,${channel},1\n\n`));
            for (;;) {
              const push = await connection.read();
              if (!Array.isArray(push) || push[0] !== "message") continue;
              controller.enqueue(encoder.encode(`data: message,${push[1]},${push[2]}\n\n`));
            }
          } catch {
            stop(); // the connection closed
          }
        })();
      },
      cancel: () => stop(), // the client went away
    });
    return new Response(stream, {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
    });
  }
}
