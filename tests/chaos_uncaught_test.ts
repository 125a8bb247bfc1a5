import assert from "node:assert/strict";
import { Uncaught } from "../chaos/_uncaught.ts";

Deno.test("the fault runs' counter notes an unhandled rejection and an uncaught error", async () => {
  const heard: string[] = [];
  {
    using uncaught = new Uncaught((what) => heard.push(what));
    Promise.reject(new RangeError("nobody holds this"));
    setTimeout(() => {
      throw new TypeError("nobody catches this");
    }, 0);
    for (let i = 0; i < 50 && uncaught.seen.length < 2; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.deepEqual(uncaught.seen.toSorted(), [
      "error: TypeError: nobody catches this",
      "unhandledrejection: RangeError: nobody holds this",
    ]);
  }
  assert.equal(heard.length, 2);
});
