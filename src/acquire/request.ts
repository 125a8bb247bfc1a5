/**
 * An acquire's checked arguments, and what they decide before any attempt:
 * whether it may wait in a queue, whether it may take its resource by a
 * plain `SET NX`, and how its releases are built.
 *
 * @module
 */

import type { LockContext } from "../api/lock_context.ts";
import { Lock, type LockInit, type LockOwner } from "../api/lock.ts";
import type { AcquireOptions } from "../api/options.ts";
import { checkCallOptions, checkSettings, type Settings } from "../api/settings.ts";
import { queueLife } from "../protocol/encoding.ts";
import {
  type AcquireTerms,
  fenceKey,
  RELEASE,
  RELEASE_MODE,
  releaseCall,
  type ReleaseTerms,
  type Seat,
} from "../protocol/scripts.ts";
import type { Send, Servers } from "../quorum/servers.ts";
import { checkDuration, checkResources } from "../util/validate.ts";

/** One acquire's checked arguments. */
export interface AcquireRequest {
  readonly keys: readonly string[];
  readonly duration: number;
  readonly settings: Settings;
  readonly signal: AbortSignal | undefined;
  readonly fencing: boolean;
  /** ms the whole acquire may take (the caller's `timeout`). */
  readonly timeout: number | undefined;
  /**
   * Unique: the Redlock's id (which names the channel that wakes the acquire
   * when it queues), a count, and the lease a release hands the key to it
   * for (0: only reserve it, as a fencing token needs the acquire script).
   */
  readonly value: string;
}

/** Checks an acquire's arguments before any request; `known` are the option names. */
export function checkAcquire(
  context: LockContext,
  resources: unknown,
  duration: unknown,
  options: AcquireOptions | undefined,
  known: ReadonlySet<string>,
): AcquireRequest {
  const keys = checkResources(resources);
  checkDuration(duration);
  const opts = checkCallOptions(options, known);
  const settings = checkSettings(opts, context.settings, "options");
  const fencing = opts.fencing === true;
  context.servers.checkSlots(fencing ? [...keys, ...keys.map(fenceKey)] : keys);
  return {
    keys,
    duration: duration as number,
    settings,
    signal: opts.signal,
    fencing,
    value: context.nextValue(fencing ? 0 : duration as number),
    timeout: opts.timeout,
  };
}

/** Whether an acquire waits in the resource's queue when it is held (one resource, notify). */
export function queueable({ settings, keys }: AcquireRequest): boolean {
  return settings.wait === "notify" && keys.length === 1;
}

/** Whether an acquire may take its free resource by a plain SET NX (see `fast_path.ts`). */
export function takesBySet(servers: Servers, { fencing, keys }: AcquireRequest): boolean {
  return servers.plain && !fencing && keys.length === 1;
}

/** ACQUIRE's terms for `request` with `seat`. */
export function terms(request: AcquireRequest, seat: Seat): AcquireTerms {
  return {
    duration: request.duration,
    fencing: request.fencing,
    seat,
    queueLife: queueLife(request.settings.requestTimeout),
  };
}

/** RELEASE of the request's value, as `terms` say. */
export function releaser(
  servers: Servers,
  request: AcquireRequest,
  terms: Omit<ReleaseTerms, "reservation">,
): Send {
  const reservation = request.settings.requestTimeout;
  return servers.sender(
    RELEASE,
    releaseCall(request.keys, request.value, { ...terms, reservation }),
  );
}

/** Aborted mid-round: whatever lands on a server is released behind it. */
export function abandon(servers: Servers, request: AcquireRequest): void {
  servers.quietly(releaser(servers, request, { mode: RELEASE_MODE.release }), servers.members);
}

/** The lock `request` acquired, valid until `until`. */
export function newLock(
  owner: LockOwner,
  request: AcquireRequest,
  attempts: LockInit["attempts"],
  until: number,
  fencingToken: number | undefined,
): Lock {
  return new Lock({
    owner,
    resources: Object.freeze(request.keys),
    value: request.value,
    attempts,
    validUntil: until,
    fencingToken,
  });
}
