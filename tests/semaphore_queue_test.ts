import assert from "node:assert/strict";
import { Redlock, toScriptClient } from "../mod.ts";
import {
  QUEUED_AHEAD,
  SEM_ACQUIRE,
  SEM_LEAVE,
  semAcquireCall,
  semAliveKey,
  semLeaveCall,
  semQueueKey,
  semWantsKey,
  slotKey,
} from "../src/protocol/semaphore_script.ts";
import { CONFLICT } from "../src/protocol/encoding.ts";
import { eventually, hold, integer, type RedisServer, setup, sleep } from "./_redis.ts";

/** The SEM_ACQUIRE reply for a refusal by the queue alone, no slot being held. */
const QUEUED = CONFLICT - QUEUED_AHEAD;

/** Whether a SEM_ACQUIRE reply is a refusal (`CONFLICT - pttl`). */
const refused = (reply: unknown): boolean => typeof reply === "number" && reply <= CONFLICT;

/** Holds every slot of semaphore `name` on `server` for another value. */
async function fill(server: RedisServer, name: string, permits: number): Promise<void> {
  for (let i = 0; i < permits; i++) await hold(server, slotKey(name, i), "another", 30_000);
}

/** Frees slots `slots` of semaphore `name` on `server` (no release message). */
async function free(server: RedisServer, name: string, ...slots: number[]): Promise<void> {
  const keys = slots.map((i) => slotKey(name, i));
  assert.equal(await integer(server, "DEL", ...keys), keys.length);
}

/** The count `{name}:sem:wants` stores for `value` on `server`, or null. */
async function wantsOf(server: RedisServer, name: string, value: string): Promise<string | null> {
  const reply = await server.command("ZSCORE", semWantsKey(name), value);
  return reply.startsWith("$-1") ? null : reply.split("\r\n")[1] ?? null;
}

/** Whether `value` is in the wait queue of semaphore `name` on `server`. */
async function inQueue(server: RedisServer, name: string, value: string): Promise<boolean> {
  return !(await server.command("ZSCORE", semQueueKey(name), value)).startsWith("$-1");
}

/** How many of the semaphore's queue keys exist on `server`. */
const queueKeys = (server: RedisServer, name: string): Promise<number> =>
  integer(server, "EXISTS", semQueueKey(name), semAliveKey(name), semWantsKey(name));

Deno.test("SEM_ACQUIRE grants a waiter behind a live waiter for one permit while slots are free", async () => {
  await using env = await setup("ioredis", 1);
  const server = env.servers.servers[0]!;
  const client = toScriptClient(env.clients[0]!);
  const name = "lanes";
  const acquire = (value: string, count: number, ticket: string) => {
    const call = semAcquireCall(name, 4, value, 30_000, {
      want: [],
      count,
      fresh: true,
      ticket,
      aliveFor: 30_000,
    });
    return client.evalScript(SEM_ACQUIRE, call.keys, call.args);
  };
  await fill(server, name, 4);
  assert.ok(refused(await acquire("first", 1, "100")), "refused while every slot is held");
  assert.equal(await wantsOf(server, name, "first"), "1", "queued with its count");
  await free(server, name, 2, 3);
  // Two free slots: one for "first", queued ahead, and one for "second".
  assert.equal(await acquire("second", 1, "200"), 2);
  assert.equal(await wantsOf(server, name, "second"), null, "a grant stores no count");
  // One free slot left, and "first" is ahead: "third" waits.
  assert.ok(refused(await acquire("third", 1, "300")));
  assert.equal(await wantsOf(server, name, "third"), "1");
  // An acquire without a ticket leaves the slots live waiters ask for.
  assert.ok(refused(await acquire("try", 1, "")));
  assert.equal(await wantsOf(server, name, "try"), null, "a try is not queued");
  assert.equal(await acquire("first", 1, "100"), 3, "the first waiter takes the slot kept for it");
  assert.equal(await wantsOf(server, name, "first"), null, "its count left with it");
  assert.equal(await inQueue(server, name, "first"), false);
  const leave = semLeaveCall(name, "third");
  assert.equal(await client.evalScript(SEM_LEAVE, leave.keys, leave.args), 1);
  assert.equal(await queueKeys(server, name), 0, "the last waiter left: no queue key is left");
});

Deno.test("SEM_ACQUIRE refuses four permits behind a waiter for two, and lets one for two pass", async () => {
  await using env = await setup("ioredis", 1);
  const server = env.servers.servers[0]!;
  const client = toScriptClient(env.clients[0]!);
  const name = "weights";
  const acquire = (value: string, count: number, ticket: string) => {
    const call = semAcquireCall(name, 4, value, 30_000, {
      want: [],
      count,
      ticket,
      aliveFor: 30_000,
    });
    return client.evalScript(SEM_ACQUIRE, call.keys, call.args);
  };
  await fill(server, name, 4);
  assert.ok(refused(await acquire("pair", 2, "100")));
  assert.equal(await wantsOf(server, name, "pair"), "2");
  await free(server, name, 0, 1, 2, 3);
  assert.equal(await acquire("all", 4, "200"), QUEUED, "four free, two of them the pair's");
  assert.equal(await wantsOf(server, name, "all"), "4");
  // Behind the pair and the four: nothing is left for a later one.
  assert.equal(await acquire("late", 1, "300"), QUEUED);
  // Between the pair and the four, two of the four free slots are left.
  assert.deepEqual(await acquire("between", 2, "150"), [0, 1]);
  assert.deepEqual(await acquire("pair", 2, "100"), [2, 3]);
  assert.equal(await wantsOf(server, name, "pair"), null);
  assert.equal(await wantsOf(server, name, "all"), "4", "the four still wait");
});

Deno.test("SEM_ACQUIRE counts a queued waiter without a stored count as every permit, and drops stale ones", async () => {
  await using env = await setup("ioredis", 1);
  const server = env.servers.servers[0]!;
  const client = toScriptClient(env.clients[0]!);
  const name = "uncounted";
  const acquire = (value: string, ticket: string) => {
    const call = semAcquireCall(name, 4, value, 30_000, { want: [], ticket, aliveFor: 30_000 });
    return client.evalScript(SEM_ACQUIRE, call.keys, call.args);
  };
  // A waiter queued without its count, alive for 30 s more on the server's clock.
  const [seconds] = (await server.command("TIME")).split("\r\n").filter((l) => /^\d+$/.test(l));
  const until = String(Number(seconds) * 1000 + 30_000);
  await server.command("ZADD", semQueueKey(name), "100", "old");
  await server.command("ZADD", semAliveKey(name), until, "old");
  assert.equal(await acquire("new", "200"), QUEUED, "every slot is free, yet refused");
  assert.equal(await wantsOf(server, name, "new"), "1");
  // Once "old" is stale, the next acquire drops it from all three keys.
  await server.command("ZADD", semAliveKey(name), "1", "old");
  await server.command("ZADD", semWantsKey(name), "1", "old");
  assert.equal(await acquire("newer", "300"), 0, 'one slot for "new", one for "newer"');
  assert.equal(await inQueue(server, name, "old"), false, "the stale waiter left the queue");
  assert.equal(await wantsOf(server, name, "old"), null, "and its count");
  assert.equal(await integer(server, "ZCARD", semAliveKey(name)), 1, 'only "new" is alive');
});

Deno.test("a queued acquire of one permit holds back no later one while two slots are free", async () => {
  await using env = await setup("ioredis", 3);
  await using redlock = new Redlock(env.clients, { retryDelay: 3_000, retryJitter: 0 });
  const servers = env.servers.servers;
  const sem = redlock.semaphore("lanes", { permits: 4 });
  for (const server of servers) await fill(server, "lanes", 4);
  const first = sem.acquire(10_000, { retryCount: -1, timeout: 8_000 });
  const counts = () => Promise.all(servers.map((s) => integer(s, "ZCARD", semWantsKey("lanes"))));
  const all = (n: number) => servers.map(() => n);
  assert.deepEqual(await eventually(async () => String(await counts()), String(all(1))), "1,1,1");
  // Past its retry at once as a watcher; the next is 3 s away, or a release's message.
  await sleep(300);
  for (const server of servers) await free(server, "lanes", 2, 3);
  const second = await sem.acquire(10_000, { retryCount: -1, timeout: 1_500 });
  assert.equal(second.resources.length, 1);
  assert.deepEqual(await counts(), all(1), "the first still waits, its count stored");
  assert.equal(await sem.tryAcquire(10_000), null, "the last free slot is the first waiter's");
  await second.release();
  const granted = await first;
  assert.equal(granted.resources.length, 1);
  const left = () => Promise.all(servers.map((s) => queueKeys(s, "lanes")));
  assert.equal(String(await eventually(async () => String(await left()), "0,0,0")), "0,0,0");
  await granted.release();
});
