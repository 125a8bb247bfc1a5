/**
 * A campaigner of the lead chaos case: `deno run -A _lead_worker.ts <log>
 * <name> <lease> <notify|poll> <port>...` leads `name` and appends, for each term, a
 * `start` line, a `valid` line each time its lock is extended (the new
 * expiration) and an `end` line (at the instant its signal aborted), as
 * `<event> <pid> <term> <Date.now()> <lock.expiration>`, and the spans in
 * which it could not run its timers (stalls). SIGTERM ends it (exit 0; 3
 * when a rejection went unhandled or an error uncaught, each also printed
 * on stderr).
 *
 * @module
 */

import { Redis } from "ioredis";
import { Redlock } from "../mod.ts";
import { Uncaught } from "./_uncaught.ts";

const [log, name, lease, wait, ...ports] = Deno.args;
const uncaught = new Uncaught((what) => console.error(`campaigner ${Deno.pid}: ${what}`));
const clients = ports.map((port) => {
  const client = new Redis({ host: "127.0.0.1", port: Number(port), retryStrategy: () => 50 });
  client.on("error", () => {});
  return client;
});
const redlock = new Redlock(clients, {
  retryDelay: 100,
  retryJitter: 100,
  requestTimeout: 200,
  wait: wait === "poll" ? "poll" : "notify",
});
redlock.on("error", () => {});
const write = (event: string, term: number, expiration: number, at = Date.now()) =>
  Deno.writeTextFile(log!, `${event} ${Deno.pid} ${term} ${at} ${expiration}\n`, {
    append: true,
  });

/**
 * Logs the spans in which this process ran no JavaScript for longer than
 * the drift allowance (a starved CPU, a long GC): like a paused process, it
 * could not run its timers then, as `# <from> stall leader <pid> <to>`.
 */
function watchStalls(allowance: number): ReturnType<typeof setInterval> {
  const TICK = 5;
  let last = Date.now();
  return setInterval(() => {
    const now = Date.now();
    if (now - last > TICK + allowance) {
      Deno.writeTextFile(log!, `# ${last} stall leader ${Deno.pid} ${now}\n`, { append: true });
    }
    last = now;
  }, TICK);
}

const shutdown = new AbortController();
Deno.addSignalListener("SIGTERM", () => shutdown.abort());
const stalls = watchStalls(Math.round(0.01 * Number(lease)) + 2);
await redlock.lead(name!, Number(lease), async (signal, context) => {
  let lock = context.lock;
  // The end of the term is the instant its signal aborted, not when the loop saw it.
  let abortedAt = Date.now();
  const mark = () => abortedAt = Date.now();
  if (!signal.aborted) signal.addEventListener("abort", mark, { once: true });
  await write("start", context.term, lock.expiration);
  while (!signal.aborted) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    if (context.lock !== lock) {
      lock = context.lock;
      await write("valid", context.term, lock.expiration);
    }
  }
  await write("end", context.term, lock.expiration, abortedAt);
}, { signal: shutdown.signal });
clearInterval(stalls);
for (const client of clients) client.disconnect();
Deno.exit(uncaught.seen.length > 0 ? 3 : 0);
