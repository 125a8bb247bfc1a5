import assert from "node:assert/strict";
import { parseArgs, UsageError } from "../src/cli/args.ts";

const noEnv = () => undefined;

Deno.test("the CLI names the scheme of a --redis URL that is not redis:// or rediss://", () => {
  assert.throws(
    () => parseArgs(["status", "--redis", "http://ops:hunter2@127.0.0.1:6379", "job"], noEnv),
    (error: unknown) => {
      assert.ok(error instanceof UsageError);
      assert.match(
        error.message,
        /must be a redis:\/\/ or rediss:\/\/ URL, got the scheme "http:"/,
      );
      assert.doesNotMatch(error.message, /hunter2/);
      return true;
    },
  );
});

Deno.test("the CLI says when a --redis URL has no host", () => {
  assert.throws(
    () => parseArgs(["status", "--redis", "redis://", "job"], noEnv),
    (error: unknown) => {
      assert.ok(error instanceof UsageError);
      assert.match(error.message, /--redis redis:\/\/ has no host/);
      return true;
    },
  );
});
