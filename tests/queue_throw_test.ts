/**
 * A ScriptClient whose evalScript throws synchronously (instead of
 * rejecting) while a queued acquire ends, from its abort listener or mid
 * attempt: the acquire settles all the same, within 3 s, and nothing is
 * left uncaught.
 */
import assert from "node:assert/strict";
import { duplicateSubscriber, Redlock, type ScriptClient, toScriptClient } from "../mod.ts";
import { setup, sleep } from "./_redis.ts";

/** Settles with "settled: …" or "HUNG" after `ms`. */
function outcome(p: Promise<unknown>, ms: number): Promise<string> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p.then(
      () => "settled: resolved",
      (e) => `settled: rejected ${e?.name}: ${String(e?.message).slice(0, 60)}`,
    ),
    new Promise<string>((r) => (timer = setTimeout(() => r("HUNG"), ms))),
  ]).finally(() => clearTimeout(timer));
}

async function scenario(trigger: "abort-in-queue" | "abort-mid-attempt"): Promise<void> {
  const uncaught: string[] = [];
  const onError = (e: ErrorEvent) => {
    uncaught.push(`error event: ${e.error?.message ?? e.message}`);
    e.preventDefault();
  };
  const onRejection = (e: PromiseRejectionEvent) => {
    uncaught.push(`unhandled rejection: ${e.reason?.message ?? e.reason}`);
    e.preventDefault();
  };
  globalThis.addEventListener("error", onError);
  globalThis.addEventListener("unhandledrejection", onRejection);
  await using env = await setup("ioredis", 3);
  await using holder = new Redlock(env.clients, { wait: "poll" });
  let boom = false;
  let slow = false;
  const clients: ScriptClient[] = env.clients.map((c) => {
    const inner = toScriptClient(c);
    return {
      evalScript(script, keys, args) {
        if (boom && script.name === "release") throw new Error("evalScript threw synchronously");
        const reply = inner.evalScript(script, keys, args);
        // mid-attempt: the acquire replies reach the lock only after 1 s
        return slow && script.name === "acquire"
          ? reply.then((r) => sleep(1_000).then(() => r))
          : reply;
      },
    };
  });
  await using waiter = new Redlock(clients, {
    retryCount: -1,
    requestTimeout: 200,
    subscriber: (_client, index, onMessage) =>
      duplicateSubscriber(env.clients[index]!, index, onMessage),
  });
  const held = await holder.acquire("k", 10_000);
  const controller = new AbortController();
  const acquiring = waiter.acquire("k", 5_000, { signal: controller.signal });
  acquiring.catch(() => {});
  await sleep(400); // queued and asleep (recheck after 200+ ms, or the holder's TTL)
  boom = true;
  if (trigger === "abort-mid-attempt") {
    slow = true;
    await sleep(600); // the recheck (after 200-300 ms asleep) is in flight, its replies held
  }
  controller.abort(new Error("caller aborted"));
  const result = await outcome(acquiring, 3_000);
  boom = false;
  await held.release();
  await sleep(100);
  globalThis.removeEventListener("error", onError);
  globalThis.removeEventListener("unhandledrejection", onRejection);
  console.log(`${trigger}: ${result}; uncaught: ${JSON.stringify(uncaught)}`);
  assert.notEqual(result, "HUNG", `the acquire never settled; uncaught: ${uncaught.join("; ")}`);
  assert.deepEqual(uncaught, [], "an error was left uncaught");
}

Deno.test({
  name: "a queued acquire aborted while its queue-leave release throws synchronously settles",
  fn: () => scenario("abort-in-queue"),
});

Deno.test({
  name:
    "an acquire aborted mid-attempt in the queue while its releases throw synchronously settles",
  fn: () => scenario("abort-mid-attempt"),
});
