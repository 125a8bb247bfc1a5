import assert from "node:assert/strict";
import { Watchdog } from "../scripts/_watchdog.ts";

const E = "\x1b[0m\x1b[1m\x1b[33m";

Deno.test("the watchdog names a test that ran past the limit, and its file", () => {
  const dog = new Watchdog(120);
  assert.equal(
    dog.read(`${E}running 3 tests from ./tests/a_test.ts${E}\nquick ... ok\n`),
    undefined,
  );
  assert.equal(dog.read(`${E}running 2 tests from ./tests/lead_test.ts\n`), undefined);
  assert.equal(
    dog.read(`lead() hangs ...${E}'lead() hangs' has been running for over `),
    undefined,
  );
  assert.equal(dog.read(`${E}(1m0s)${E}\n`), undefined, "one minute is within the limit");
  assert.deepEqual(
    dog.read(`${E}'lead() hangs' has been running for over ${E}(2m0s)${E}\n`),
    { test: "lead() hangs", file: "./tests/lead_test.ts", seconds: 120 },
  );
});

Deno.test("the watchdog reads a report split across chunks", () => {
  const dog = new Watchdog(60);
  assert.equal(dog.read("running 1 test from ./x_test.ts\nslow ...'slow' has been run"), undefined);
  assert.deepEqual(dog.read("ning for over (1m0s)\n"), {
    test: "slow",
    file: "./x_test.ts",
    seconds: 60,
  });
});
