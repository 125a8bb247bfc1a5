import assert from "node:assert/strict";
import { runHttp } from "../bench/_http_service.ts";

Deno.test("a web service under load loses no update while a lock server is killed and restarted", async () => {
  const lease = 500;
  const connections = 20;
  const r = await runHttp({
    impl: "x-redlock",
    connections,
    seconds: 5,
    resources: 16,
    lease,
    lockTimeout: 2_000,
    kill: true,
    fencing: true,
    wait: "notify",
  });
  assert.ok(
    r.killedAt !== null && r.restartedAt !== null,
    "a lock server was killed and restarted",
  );
  assert.ok(r.restartedAt - r.killedAt >= lease, "restarted after the longest lease");
  assert.ok(r.answered2xx > 0, "requests succeeded");
  // Every 2xx increment is in the store once, and nothing else is.
  assert.equal(r.unmatched, 0, "2xx responses and recorded ids match");
  assert.equal(r.recorded, r.answered2xx);
  assert.equal(r.lostUpdates, 0, "no update lost");
  assert.equal(r.staleRefused, 0, "no write with a stale token");
  // Lock timeouts (503) are the only failures.
  const failures = Object.keys(r.outcomes).filter((k) =>
    !k.startsWith("200") && !k.startsWith("503")
  );
  assert.deepEqual(failures, [], JSON.stringify(r.outcomes));
  assert.equal(r.clientErrors + r.clientTimeouts, 0, "no connection error or client timeout");
  // autocannon does not count the responses in flight when it stopped.
  assert.ok(r.responses2xx <= r.answered2xx && r.answered2xx - r.responses2xx <= connections);
});

Deno.test("the web service's audit finds the updates lost when the app takes no lock", async () => {
  const r = await runHttp({
    impl: "none",
    connections: 20,
    seconds: 2,
    resources: 16,
    lease: 500,
    lockTimeout: 2_000,
    kill: false,
    fencing: false,
    wait: "notify",
  });
  assert.ok(r.answered2xx > 0);
  assert.equal(r.unmatched, 0, "each 2xx id is recorded: the updates were lost, not the ids");
  assert.ok(
    r.lostUpdates > 0,
    `concurrent read-modify-writes overwrote each other: ${r.lostUpdates}`,
  );
});
