/**
 * `deno task demo`: five players on five "hosts" take turns in one game,
 * coordinated by @x/redlock over three Redis servers. Each turn is a
 * read-modify-write of the game's state in a separate store; one lock server
 * is killed mid-game, and the lock stays safe on the remaining majority.
 *
 * @module
 */

import { Redis } from "ioredis";
import { Redlock } from "../mod.ts";
import { orExplain, startServers } from "./redis.ts";

const PLAYERS = 5;
const TURNS_EACH = 16;
const TOTAL = PLAYERS * TURNS_EACH;
const KILL_AT = Math.floor(TOTAL * 0.4);

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
const ms = (x: number) => `${x.toFixed(1)} ms`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

console.log("Starting 3 Redis servers for the lock and 1 for the game state …");
await using lockServers = await orExplain(() => startServers(3));
await using storeServers = await orExplain(() => startServers(1));
// Ctrl-C (or a kill) still stops every server this demo started.
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, async () => {
    await Promise.all([lockServers.stop(), storeServers.stop()]);
    Deno.exit(130);
  });
}
const store = storeServers.servers[0]!;
console.log(
  `  lock servers on ports ${lockServers.ports.join(", ")} (${
    lockServers.servers[0]!.engine
  }); game state on ${store.port}\n`,
);

const connections: Redis[] = [];
const connect = (port: number) => {
  // No offline queue: a request to a dead server fails at once (an "error"
  // event) instead of waiting to be replayed when it comes back.
  const client = new Redis({
    host: "127.0.0.1",
    port,
    enableOfflineQueue: false,
    retryStrategy: () => 100,
  });
  client.on("error", () => {});
  connections.push(client);
  return client;
};

const waits: number[] = [];
const stopped: number[] = [];
let turns = 0;
let holders = 0;
let overlaps = 0;
let serverErrors = 0;
const started = performance.now();

const ready = (client: Redis) =>
  client.status === "ready" ? Promise.resolve() : new Promise((r) => client.once("ready", r));

async function player(id: number): Promise<void> {
  // every player is its own "host": its own connections and its own Redlock
  const redlock = new Redlock(lockServers.ports.map(connect), {
    retryCount: -1,
    retryDelay: 15,
    retryJitter: 15,
    requestTimeout: 250,
  });
  redlock.on("error", () => serverErrors++);
  const state = connect(store.port);
  await Promise.all(connections.map(ready));
  for (let turn = 0; turn < TURNS_EACH; turn++) {
    {
      const asked = performance.now();
      await using lock = await redlock.acquire("game:42", 2_000, { timeout: 20_000 });
      waits.push(performance.now() - asked);
      if (++holders > 1) overlaps++;
      // the turn: read the board, think, write it back (not atomic on its own)
      const moves = Number(await state.get("game:42:moves") ?? 0);
      await sleep(10 + Math.random() * 20);
      await state.set("game:42:moves", String(moves + 1));
      holders--;
      turns++;
      if (turns % 10 === 0 || turns === TOTAL) {
        const left = lock.remainingTime.toFixed(0);
        console.log(
          `  turn ${String(turns).padStart(3)}/${TOTAL}: player ${id} moved; board shows ${
            moves + 1
          } moves; lock had ${left} ms left`,
        );
      }
    } // released here, by `await using`
    await sleep(3 + Math.random() * 5); // let the others have a turn
    if (turns === KILL_AT && stopped.length === 0) {
      const victim = lockServers.servers[1]!;
      await victim.kill();
      stopped.push(victim.port);
      console.log(`  ✖ killed lock server on port ${victim.port} (kill -9); 2 of 3 remain`);
    }
  }
}

try {
  await Promise.all(Array.from({ length: PLAYERS }, (_, i) => player(i + 1)));
} finally {
  for (const connection of connections) connection.disconnect();
}

const board = Number(await store.command("GET", "game:42:moves").then((r) => r.split("\r\n")[1]));
const sorted = [...waits].sort((a, b) => a - b);
const seconds = (performance.now() - started) / 1000;
console.log(`
Summary
  players                 ${PLAYERS} (each with its own connections and Redlock)
  turns taken             ${turns} in ${seconds.toFixed(1)} s
  moves on the board      ${board} ${board === turns ? "= turns taken ✔" : "≠ turns taken ✘"}
  overlapping turns       ${overlaps}
  lock wait p50 / p99     ${ms(percentile(sorted, 0.5))} / ${ms(percentile(sorted, 0.99))}
  lock wait max           ${ms(sorted.at(-1) ?? NaN)}
  lock servers stopped    ${stopped.length} (port ${stopped.join(", ")}); ${
  3 - stopped.length
} of 3 kept the quorum
  per-server errors seen  ${serverErrors} (reported as "error" events, never fatal)
`);
if (board !== turns || overlaps > 0) {
  console.error("Safety was violated: this is a bug, please report it.");
  Deno.exitCode = 1;
}
