import assert from "node:assert/strict";
import { sha1 } from "../src/_sha1.ts";
import { hashSlot } from "../src/_slot.ts";
import { drift, validUntil } from "../src/_time.ts";
import { deadline, delay } from "../src/_delay.ts";
import { ACQUIRE, EXTEND, INSPECT, RELEASE } from "../src/scripts.ts";

async function subtleSha1(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test("sha1() agrees with crypto.subtle for empty, short, long and non-ASCII text", async () => {
  for (const text of ["", "abc", "a".repeat(55), "b".repeat(56), "c".repeat(1000), "tür 🔒"]) {
    assert.equal(sha1(text), await subtleSha1(text), JSON.stringify(text.slice(0, 10)));
  }
});

Deno.test("the scripts carry the SHA-1 of their source", async () => {
  for (const script of [ACQUIRE, EXTEND, RELEASE, INSPECT]) {
    assert.equal(script.sha1, await subtleSha1(script.source), script.name);
  }
});

Deno.test("hashSlot() matches Redis's CLUSTER KEYSLOT and honours hash tags", () => {
  assert.equal(hashSlot("foo"), 12182);
  assert.equal(hashSlot("123456789"), 12739);
  assert.equal(hashSlot("{user1000}.following"), hashSlot("{user1000}.followers"));
  assert.equal(hashSlot("{user1000}.following"), hashSlot("user1000"));
  assert.equal(hashSlot("foo{}{bar}"), hashSlot("foo{}{bar}")); // empty tag: whole key
  assert.notEqual(hashSlot("foo{}{bar}"), hashSlot("bar"));
});

Deno.test("drift() is round(factor × duration) + 2 and validUntil() subtracts it", () => {
  assert.equal(drift(10_000, 0.01), 102);
  assert.equal(drift(250, 0.01), 5); // round(2.5) = 3
  assert.equal(drift(1_000, 0), 2);
  assert.equal(validUntil(100, 10_000, 0.01), 100 + 10_000 - 102);
});

Deno.test("delay() rejects with the signal's reason and leaves no timer", async () => {
  const controller = new AbortController();
  const waiting = delay(10_000, controller.signal);
  const reason = new Error("stop");
  controller.abort(reason);
  await assert.rejects(waiting, (e) => e === reason);
  const aborted = AbortSignal.abort(reason);
  await assert.rejects(delay(10, aborted), (e) => e === reason);
});

Deno.test("deadline() aborts with a TimeoutError DOMException and dispose() clears it", async () => {
  const { signal, dispose } = deadline(undefined, 20);
  await assert.rejects(
    delay(5_000, signal),
    (e) => e instanceof DOMException && e.name === "TimeoutError",
  );
  dispose();
  const kept = deadline(undefined, 10_000);
  kept.dispose();
  assert.equal(kept.signal?.aborted, false);
});
