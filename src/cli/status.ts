/**
 * `redlock status`: whether a lock is held, and for how long.
 *
 * @module
 */

import { ExecutionError } from "../api/errors.ts";
import type { CliArgs } from "./args.ts";
import { CliRedis, type Log } from "./redis.ts";
import { EXIT } from "./usage.ts";

/**
 * `status`: held or free, and for how long; see `redlock status --help`.
 *
 * @param args The parsed command line.
 * @param log Where the CLI's lines go.
 * @returns The exit status.
 */
export async function status(args: CliArgs, log: Log): Promise<number> {
  await using redis = await CliRedis.connect(args.redis, args.lease, args.tlsCa);
  try {
    const ttl = await redis.redlock.remainingTtlForResource(args.name);
    if (ttl === null) {
      console.log(`${args.name}: free`);
      return EXIT.FREE;
    }
    console.log(`${args.name}: held, ${ttl === Infinity ? "without expiry" : `${ttl} ms left`}`);
    return EXIT.HELD;
  } catch (error) {
    if (!(error instanceof ExecutionError)) throw error;
    log(
      `too few Redis servers answered to tell whether "${args.name}" is held: ${redis.failures()}`,
    );
    return EXIT.UNAVAILABLE;
  }
}
