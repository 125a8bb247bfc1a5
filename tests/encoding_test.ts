import assert from "node:assert/strict";
import {
  CONFLICT,
  conflictTtl,
  lockValue,
  LUA_VALUE_ID,
  LUA_VALUE_LEASE,
  queueLife,
  RELEASE_CHANNEL,
  releaseChannel,
  RESERVED,
  WAKE_CHANNEL,
  wakeChannel,
} from "../src/protocol/encoding.ts";
import { ACQUIRE, EXTEND, type LuaScript, RELEASE } from "../src/protocol/scripts.ts";
import { RW_READ, RW_RELEASE, RW_WRITE } from "../src/protocol/read_write_scripts.ts";
import { MISMATCH, SEM_ACQUIRE, SEM_EXTEND } from "../src/protocol/semaphore_script.ts";
import { toVote } from "../src/quorum/servers.ts";
import { Conflict } from "../src/quorum/votes.ts";

const REFUSING: readonly LuaScript[] = [
  ACQUIRE,
  EXTEND,
  RW_READ,
  RW_WRITE,
  SEM_ACQUIRE,
  SEM_EXTEND,
];

/** A Lua pattern of the kinds the encodings use, as a JavaScript RegExp. */
function luaPattern(pattern: string): RegExp {
  return new RegExp(pattern.replaceAll("%d", "\\d"));
}

Deno.test("every refusing script replies CONFLICT - pttl, and toVote() reads the pttl back", () => {
  for (const script of REFUSING) {
    const refusals = [...script.source.matchAll(/return (-?\d+) - /g)].map((m) => Number(m[1]));
    assert.ok(refusals.length > 0, `${script.name} has a refusal`);
    // (SEM_ACQUIRE's other negative reply, MISMATCH - permits, tells no holder.)
    for (const base of refusals.filter((n) => n !== MISMATCH)) {
      assert.equal(base, CONFLICT, script.name);
    }
  }
  for (const pttl of [-2, -1, 0, 1, 2_000]) {
    const vote = toVote(CONFLICT - pttl, 1);
    assert.ok(vote instanceof Conflict);
    assert.equal(vote.ttl, pttl);
    assert.equal(conflictTtl(CONFLICT - pttl), pttl);
  }
  assert.equal(toVote(0, 1), 0, "a grant is no conflict");
});

Deno.test("RELEASE reserves keys and publishes with the encodings the waiters read", () => {
  const { source } = RELEASE;
  assert.ok(source.includes(`"${RESERVED}" .. head`), "a reservation is RESERVED and the value");
  assert.ok(source.includes(`"${RESERVED}" .. value`), "a reserved key is freed by its value");
  assert.ok(ACQUIRE.source.includes(`"${RESERVED}" .. value`), "its waiter takes a reserved key");
  assert.ok(source.includes(`"${RELEASE_CHANNEL}" .. key`));
  assert.ok(source.includes(`"${WAKE_CHANNEL}" .. string.match(head, "${LUA_VALUE_ID}")`));
  assert.ok(source.includes(`string.match(head, "${LUA_VALUE_LEASE}")`));
  assert.equal(releaseChannel("a:b"), "redlock:release:a:b");
  assert.equal(wakeChannel("id"), "redlock:wake:id");
  assert.ok(RW_RELEASE.source.includes(`"${RELEASE_CHANNEL}"`), "RW_RELEASE publishes as RELEASE");
});

Deno.test("lockValue() makes values whose id and lease the Lua patterns read back", () => {
  const id = crypto.randomUUID();
  for (const [count, lease] of [[1, 0], [35, 5_000], [123_456, 2 ** 31 - 1]] as const) {
    const value = lockValue(id, count, lease);
    assert.equal(value.match(luaPattern(LUA_VALUE_ID))?.[0], id);
    assert.equal(Number(value.match(luaPattern(LUA_VALUE_LEASE))?.[1]), lease);
    assert.equal(value.split(":")[1], count.toString(36));
  }
  assert.notEqual(lockValue(id, 1, 10), lockValue(id, 2, 10), "the count makes values unique");
});

Deno.test("queueLife() is four request timeouts", () => {
  assert.equal(queueLife(500), 2_000);
  assert.equal(queueLife(1), 4);
});
