import assert from "node:assert/strict";
import { bunRedisClient, glideClient, Redlock, type ScriptClient, toScriptClient } from "../mod.ts";
import { isNoScript } from "../src/clients/clients.ts";
import { ACQUIRE } from "../src/protocol/scripts.ts";
import { commandCalls, keysLeft, startServers } from "./_redis.ts";

const NOSCRIPT_MESSAGES = [
  "NOSCRIPT No matching script. Please use EVAL.", // ioredis, node-redis, Bun
  "-NOSCRIPT No matching script. Please use EVAL.", // deno-redis
  "Command failed: NOSCRIPT No matching script. Please use EVAL.", // Upstash, auto-pipelined
  'NOSCRIPT No matching script. Please use EVAL., command was: ["evalsha"]', // Upstash
  "An error was signalled by the server: - NoScriptError: No matching script. Please use EVAL.", // GLIDE
];

const OTHER_MESSAGES = [
  "ERR unknown command 'EVALSHA'",
  "NOSCRIPTS are fine", // not the code as a word
  "ERR Error running script: user_script:1: key NOSCRIPT_KEY is busy",
  "WRONGTYPE Operation against a key holding the wrong kind of value",
  "Command failed: ERR value is not an integer",
  "Connection is closed.",
  "",
];

Deno.test("isNoScript() recognises NOSCRIPT wherever each client puts it", () => {
  for (const message of NOSCRIPT_MESSAGES) {
    assert.equal(isNoScript(new Error(message)), true, message);
  }
});

Deno.test("isNoScript() rejects other errors and non-errors", () => {
  for (const message of OTHER_MESSAGES) {
    assert.equal(isNoScript(new Error(message)), false, message);
  }
  for (const value of [undefined, null, 42, { message: "NOSCRIPT x" }]) {
    assert.equal(isNoScript(value), false, String(value));
  }
});

/** A client whose EVALSHA fails with `message` once, then answers; records its calls. */
function failingOnce(message: string) {
  const calls: string[] = [];
  const reply = (name: string) => {
    calls.push(name);
    if (name === "EVALSHA" && calls.length === 1) return Promise.reject(new Error(message));
    return Promise.resolve(7);
  };
  return {
    calls,
    bun: { send: (command: string) => reply(command) },
    deno: {
      eval: () => reply("EVAL"),
      evalsha: () => reply("EVALSHA"),
    },
  };
}

Deno.test("every adapter falls back to EVAL on NOSCRIPT in any client's wording, and only then", async () => {
  for (const message of [...NOSCRIPT_MESSAGES, ...OTHER_MESSAGES.slice(0, 2)]) {
    const noScript = NOSCRIPT_MESSAGES.includes(message);
    for (const kind of ["bun", "deno"] as const) {
      const fake = failingOnce(message);
      const client: ScriptClient = toScriptClient(fake[kind]);
      const result = client.evalScript(ACQUIRE, ["k"], ["v"]);
      if (noScript) assert.equal(await result, 7, `${kind}: ${message}`);
      else await assert.rejects(result, { message }, `${kind}: ${message}`);
      assert.deepEqual(fake.calls, noScript ? ["EVALSHA", "EVAL"] : ["EVALSHA"], message);
    }
  }
});

Deno.test("toScriptClient() tells Bun's client by send() and GLIDE by customCommand()", () => {
  const bun = { send: () => Promise.resolve(1), eval: () => 1, evalsha: () => 1 };
  assert.match(String(toScriptClient(bun)), /ScriptClient/);
  assert.equal(typeof toScriptClient(bun).setIfAbsent, "function");
  // deno-redis also has sendCommand: it stays on its own adapter (no setIfAbsent)
  const deno = { sendCommand: () => 1, send: () => 1, eval: () => 1, evalsha: () => 1 };
  assert.equal(toScriptClient(deno).setIfAbsent, undefined);
  const glide = { customCommand: () => Promise.resolve(1), invokeScript: () => 1 };
  assert.equal(typeof toScriptClient(glide).pttl, "function");
  assert.throws(() => bunRedisClient({} as never), TypeError);
  assert.throws(() => glideClient({} as never), TypeError);
});

/** GLIDE's types pull in @types/node, whose DOM types clash with Deno's: load it untyped. */
async function loadGlide(): Promise<{ createClient(config: unknown): Promise<GlideClient> }> {
  const specifier: string = "@valkey/valkey-glide";
  const glide = await import(specifier);
  glide.Logger.setLoggerConfig("off"); // it logs every NOSCRIPT the fallback handles
  return glide.GlideClient;
}

interface GlideClient {
  customCommand(args: string[]): Promise<unknown>;
  invokeScript(...args: never[]): unknown;
  close(): void;
}

Deno.test("[glide] Valkey GLIDE takes, contends for, fences and releases locks on 3 servers", async () => {
  await using servers = await startServers(3);
  const GlideClient = await loadGlide();
  const clients = await Promise.all(
    servers.ports.map((port) =>
      GlideClient.createClient({ addresses: [{ host: "127.0.0.1", port }], requestTimeout: 500 })
    ),
  );
  try {
    await using redlock = new Redlock(clients, { retryDelay: 20, retryJitter: 5 });
    // fencing goes through the scripts: EVALSHA, NOSCRIPT, then EVAL
    const first = await redlock.acquire("glide", 2_000, { fencing: true });
    assert.equal(typeof first.fencingToken, "number");
    assert.equal(await redlock.tryAcquire("glide", 2_000), null, "held");
    const waiting = redlock.acquire("glide", 2_000, { timeout: 3_000, fencing: true });
    await new Promise((r) => setTimeout(r, 50));
    await first.release();
    const second = await waiting;
    assert.ok(second.fencingToken! > first.fencingToken!, "the token grows");
    await second.extend(3_000);
    assert.ok(await redlock.isLocked("glide"));
    await second.release();
    assert.equal(await redlock.isLocked("glide"), false);
    // one resource without fencing: SET NX
    const plain = await redlock.acquire("glide:plain", 10_000);
    await plain.release();
    for (const server of servers.servers) {
      assert.ok(await commandCalls(server, "eval") >= 1, "EVAL after NOSCRIPT");
      assert.ok(await commandCalls(server, "set") >= 1, "SET NX for a plain lock");
    }
    assert.deepEqual(await keysLeft(servers, "glide", "glide:plain"), [0, 0, 0]);
  } finally {
    for (const client of clients) client.close();
  }
});
