import type { RedisClient, ScriptClient } from "../clients/clients.ts";
import { RequestTimeoutError } from "../api/errors.ts";
import { now } from "../util/time.ts";

/** One server (or cluster) of a Redlock. */
export interface Member {
  readonly index: number;
  /** The client as the user gave it. */
  readonly client: RedisClient;
  readonly runner: ScriptClient;
}

/** What a round collected by the time it settled. */
export interface Tally<T> {
  /** Answers by server index, in the order they arrived. */
  readonly answers: ReadonlyMap<number, T>;
  /** Failures (client errors, error replies, timeouts) by server index. */
  readonly errors: ReadonlyMap<number, Error>;
}

export interface RoundOptions<T, R = Tally<T>> {
  /** ms each request may take before it counts as a {@linkcode RequestTimeoutError}. */
  readonly timeout: number;
  /** The monotonic instant the round starts, when the caller has just read the clock. */
  readonly start?: number | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Whether the round can settle with what it has (called after each answer or error). */
  readonly done: (tally: Tally<T>) => boolean;
  /** Called for every failure of a request, also after the round settled. */
  readonly onError: (error: Error, member: Member) => void;
  /**
   * Called for an answer (undefined for a failure) that comes after the
   * round settled, also when it came in the same batch as the answers that
   * settled it.
   */
  readonly late?: ((member: Member, answer: T | undefined, tally: Tally<T>) => void) | undefined;
  /**
   * Turns a reply into the answer tallied, or a promise of it when the
   * server must be asked more first; what it throws (or rejects with)
   * counts as the request's failure. Without it the reply is the answer.
   * (Judging here, not in a `then` of each request, saves a promise per
   * request.)
   */
  readonly judge?: (reply: unknown, member: Member) => T | Promise<T>;
  /** Turns a failure into the error reported and tallied; without it, as it is. */
  readonly failure?: (error: Error, member: Member) => Error;
  /**
   * What the round resolves to, made from the tally as it settles; without
   * it, the tally. (Saves the caller a `then`.)
   */
  readonly settle?: (tally: Tally<T>) => R;
  /** Called when `signal` aborts the round, before it rejects. */
  readonly aborted?: (() => void) | undefined;
}

/** `error` as an Error: itself, or one that says it and keeps it as `cause`. */
export const toError = (error: unknown): Error =>
  error instanceof Error ? error : new Error(String(error), { cause: error });

/**
 * A round waiting for answers (or an {@linkcode Alarm}), as the deadline
 * sweeper sees it: a link of the list of entries in flight.
 */
export interface Pending {
  /** The monotonic instant its requests time out (or it is due). */
  readonly deadline: number;
  /**
   * True for rounds, which mostly settle long before their deadline: while
   * one is in the list the sweeper checks back within {@linkcode IDLE_MS}
   * instead of sleeping until the deadline, so that once the last one has
   * settled the timer is gone within IDLE_MS without being cleared.
   */
  readonly brief: boolean;
  /** Times out what has not answered and settles the round (or fires the alarm). */
  expire(): void;
  prev: Pending | undefined;
  next: Pending | undefined;
}

/** ms the sweeper may outlive the last round. */
export const IDLE_MS = 10;

/**
 * The rounds (and alarms) in flight in this process, and the one timer (the
 * sweeper) that bounds them all. The sweeper fires at the earliest deadline,
 * or within {@linkcode IDLE_MS} if that is sooner while a round is in the
 * list; each time it expires the entries that are due, and re-arms itself
 * only while entries are in flight. A round that settles leaves the list;
 * the timer is left to run out, so it outlives the last round by at most
 * IDLE_MS. Rounds in flight together, or one after another, thus share one
 * timer (making a timer costs more than a round's own work; while rounds
 * keep coming it is set again with `refresh()`), and deadlines are kept to
 * the ms.
 * With only alarms in the list the sweeper sleeps until the earliest one
 * (no ticks during a long wait), and is cleared when the last one leaves
 * early.
 */
let first: Pending | undefined;
let last: Pending | undefined;
let sweeper: ReturnType<typeof setTimeout> | undefined;
let sweeperAt = Infinity;
/** Whether the sweeper is set more than IDLE_MS ahead (for alarms only). */
let sweeperFar = false;

/**
 * The sweeper's timer for a check IDLE_MS ahead, kept to be set again by
 * `refresh()` where timers have it (Node-style timers: Node, Bun, and Deno
 * 2.9, whose global `setTimeout` makes them; a number has none),
 * which costs less than making one: while rounds are in flight the sweeper
 * is set this way every IDLE_MS.
 */
let tick: ReturnType<typeof setTimeout> | undefined;

function arm(at: number, t: number): void {
  // Rounded up: a timer may truncate its delay, and firing early costs a second one.
  // (Less a rounding error: `t + IDLE_MS - t` may exceed IDLE_MS.)
  const ms = Math.max(0, Math.ceil(at - t - 1e-6));
  const reuse = ms === IDLE_MS && tick !== undefined;
  if (sweeper !== undefined && !(reuse && sweeper === tick)) stop(sweeper);
  sweeperAt = at;
  sweeperFar = ms > IDLE_MS;
  if (reuse) {
    (tick as { refresh(): unknown }).refresh();
    sweeper = tick;
  } else {
    sweeper = setTimeout(sweep, ms);
    if (ms === IDLE_MS && typeof (sweeper as { refresh?: unknown }).refresh === "function") {
      tick = sweeper;
    }
  }
}

/**
 * Forgets the timer kept for `refresh()` unless it is pending, so that the
 * next one is made anew (for tests that count timers).
 */
export function forgetTimer(): void {
  if (sweeper !== tick) tick = undefined;
}

/** How many rounds and alarms the sweeper's list holds (for tests that count timers). */
export function inFlight(): number {
  let count = 0;
  for (let entry = first; entry !== undefined; entry = entry.next) count++;
  return count;
}

/** Clears a timer of the sweeper (a cleared one cannot be set again). */
function stop(timer: ReturnType<typeof setTimeout>): void {
  clearTimeout(timer);
  if (timer === tick) tick = undefined;
}

/** When the sweeper must look at `entry` next. */
const dueAt = (entry: Pending, t: number): number =>
  entry.brief ? Math.min(entry.deadline, t + IDLE_MS) : entry.deadline;

const listed = (entry: Pending): boolean => entry.prev !== undefined || first === entry;

function sweep(): void {
  sweeper = undefined;
  sweeperAt = Infinity;
  sweeperFar = false;
  const t = now();
  const due: Pending[] = [];
  let next = Infinity;
  for (let entry = first; entry !== undefined; entry = entry.next) {
    // Timers have ms granularity: a deadline under 1 ms away is due.
    if (entry.deadline - t < 1) due.push(entry);
    else next = Math.min(next, dueAt(entry, t));
  }
  if (next !== Infinity) arm(next, t);
  let failure: unknown;
  for (const entry of due) {
    // One that an earlier one's expiry took out of the list (or set again) is not due.
    if (!listed(entry) || entry.deadline - t >= 1) continue;
    try {
      entry.expire();
    } catch (error) {
      failure ??= error;
    }
  }
  if (failure !== undefined) throw failure;
}

/**
 * Adds `entry` to the list; with `slack`, a sweeper due up to that many ms
 * after the entry's deadline will do.
 */
export function watch(entry: Pending, t: number, slack = 0): void {
  entry.prev = last;
  if (last === undefined) first = entry;
  else last.next = entry;
  last = entry;
  if (entry.deadline + slack < sweeperAt) arm(dueAt(entry, t), t);
}

/**
 * Sends to every member at once; each reply goes to `answer`, each failure
 * (a rejection or a throw while sending) to `fail`.
 */
export function sendAll(
  members: readonly Member[],
  send: (member: Member) => Promise<unknown>,
  answer: (member: Member, reply: unknown) => void,
  fail: (member: Member, error: Error) => void,
): void {
  for (const member of members) {
    let request: Promise<unknown>;
    try {
      request = send(member);
    } catch (error) {
      request = Promise.reject(error);
    }
    request.then((reply) => answer(member, reply), (error) => fail(member, toError(error)));
  }
}

/**
 * Calls `abort` once `signal` aborts, also when a client aborted it while
 * the requests were sent; returns the listener, to remove once settled.
 */
export function listenAbort(signal: AbortSignal, abort: () => void): () => void {
  signal.addEventListener("abort", abort, { once: true });
  if (signal.aborted) {
    signal.removeEventListener("abort", abort);
    abort();
  }
  return abort;
}

/** Takes `entry` out of the list (nothing when it is not in it). */
export function unwatch(entry: Pending): void {
  if (!listed(entry)) return;
  const { prev, next } = entry;
  if (prev === undefined) first = next;
  else prev.next = next;
  if (next === undefined) last = prev;
  else next.prev = prev;
  entry.prev = entry.next = undefined;
  if (first === undefined && sweeperFar) {
    // The last alarm left early: its far-off timer would outlive it.
    stop(sweeper!);
    sweeper = undefined;
    sweeperAt = Infinity;
    sweeperFar = false;
  }
  // With no round left a sweeper due within IDLE_MS is not cleared: it
  // fires, finds nothing and stops, and rounds that start before then need
  // no timer of their own (a timer per round costs more than the round).
}

/**
 * A callback due at a monotonic instant (a subclass's `ring()`), kept by the shared sweeper above
 * instead of a timer of its own: setting, moving and cancelling it costs no
 * timer while the sweeper runs anyway (while rounds are in flight), a long
 * alarm costs one timer however long it is, and nothing is left behind for
 * longer than {@linkcode IDLE_MS}. It fires once per `at()` (not after
 * `cancel()`), to the ms like a timer (up to `slack` ms later when given).
 */
export abstract class Alarm implements Pending {
  deadline = Infinity;
  readonly brief = false;
  prev: Pending | undefined = undefined;
  next: Pending | undefined = undefined;

  /**
   * (Re)sets the alarm to `deadline`, or up to `slack` ms later if that
   * saves re-arming the sweeper.
   */
  at(deadline: number, slack = 0, t: number = now()): void {
    unwatch(this);
    this.deadline = deadline;
    watch(this, t, slack);
  }

  /** Unsets the alarm. */
  cancel(): void {
    unwatch(this);
  }

  expire(): void {
    unwatch(this);
    this.ring();
  }

  /** What the alarm does when it goes off. */
  protected abstract ring(): void;
}

/**
 * Sends one request to every member at once and resolves as soon as `done`
 * says so, or when every request has answered, failed or timed out. All
 * requests start together, so one deadline bounds them all (kept by the
 * shared sweeper above). A request still in flight when the round settles is
 * left to its client; a later failure of it still reaches `onError`, and so
 * does its timeout when it has not answered by the deadline. An
 * abort rejects at once with `signal.reason`. (Give `settle` whenever `R` is
 * not the tally.)
 */
export function round<T, R = Tally<T>>(
  members: readonly Member[],
  send: (member: Member) => Promise<unknown>,
  options: RoundOptions<T, R>,
): Promise<R> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  if (members.length === 0) {
    const tally: Tally<T> = { answers: new Map(), errors: new Map() };
    return Promise.resolve(options.settle ? options.settle(tally) : tally as R);
  }
  return new Round(members, send, options).promise;
}

/** One round in flight: its tally, its place in the sweeper's list, its promise. */
class Round<T, R> implements Pending, Tally<T> {
  readonly brief = true;
  readonly answers = new Map<number, T>();
  readonly errors = new Map<number, Error>();
  readonly deadline: number;
  prev: Pending | undefined = undefined;
  next: Pending | undefined = undefined;
  readonly promise: Promise<R>;
  readonly #members: readonly Member[];
  readonly #options: RoundOptions<T, R>;
  #resolve!: (result: R) => void;
  #reject!: (reason: unknown) => void;
  #onAbort: (() => void) | undefined;
  /** Members not heard of yet (no answer, failure or timeout). */
  #unheard: number;
  /** Members heard of after it settled, by index (made at the first). */
  #heardLate: boolean[] | undefined;
  #settled = false;

  constructor(
    members: readonly Member[],
    send: (member: Member) => Promise<unknown>,
    options: RoundOptions<T, R>,
  ) {
    this.#members = members;
    this.#options = options;
    this.#unheard = members.length;
    const start = options.start ?? now();
    this.deadline = start + options.timeout;
    // Requests first: the rest is done while they are in flight.
    sendAll(members, send, (member, value) => this.#answer(member, value), (member, error) => {
      this.#fail(member, error);
    });
    this.promise = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    watch(this, start);
    const { signal } = options;
    if (signal !== undefined) {
      this.#onAbort = listenAbort(signal, () => {
        if (this.#settled) return;
        this.#finish();
        try {
          options.aborted?.();
        } finally {
          this.#reject(signal.reason);
        }
      });
    }
  }

  expire(): void {
    const { timeout, onError } = this.#options;
    const settled = this.#settled;
    for (const member of this.#members) {
      if (this.#heard(member.index)) continue;
      const error = new RequestTimeoutError(member.index, timeout);
      onError(error, member);
      if (settled) this.#hearLate(member.index);
      else {
        this.errors.set(member.index, error);
        this.#unheard--;
      }
    }
    if (settled) return unwatch(this);
    this.#finish();
    this.#settle();
  }

  /** Whether `server` answered, failed or timed out. */
  #heard(server: number): boolean {
    return this.answers.has(server) || this.errors.has(server) ||
      this.#heardLate?.[server] === true;
  }

  /** `server` is heard of after the round settled; the last one takes it out of the list. */
  #hearLate(server: number): void {
    if (this.#heard(server)) return;
    (this.#heardLate ??= [])[server] = true;
    if (--this.#unheard === 0) unwatch(this);
  }

  #answer(member: Member, reply: unknown): void {
    const { judge } = this.#options;
    if (judge === undefined) return this.#count(member, reply as T);
    let value: T | Promise<T>;
    try {
      value = judge(reply, member);
    } catch (error) {
      this.#fail(member, toError(error));
      return;
    }
    if (value instanceof Promise) {
      value.then((answer) => this.#count(member, answer), (error) => {
        this.#fail(member, toError(error));
      });
    } else this.#count(member, value);
  }

  #count(member: Member, value: T): void {
    if (this.#settled) {
      this.#hearLate(member.index);
      this.#options.late?.(member, value, this);
      return;
    }
    this.#unheard--;
    this.answers.set(member.index, value);
    this.#check();
  }

  #fail(member: Member, failed: Error): void {
    const { failure } = this.#options;
    const error = failure === undefined ? failed : failure(failed, member);
    this.#options.onError(error, member);
    if (this.#settled) {
      this.#hearLate(member.index);
      this.#options.late?.(member, undefined, this);
      return;
    }
    this.#unheard--;
    this.errors.set(member.index, error);
    this.#check();
  }

  #check(): void {
    if (this.#unheard === 0 || this.#options.done(this)) {
      this.#finish();
      this.#settle();
    }
  }

  #settle(): void {
    const { settle } = this.#options;
    if (settle === undefined) {
      this.#resolve(this as unknown as R);
      return;
    }
    try {
      this.#resolve(settle(this));
    } catch (error) {
      this.#reject(error);
    }
  }

  #finish(): void {
    this.#settled = true;
    // Still listed while a request is out: its deadline reports it as timed out.
    if (this.#unheard === 0) unwatch(this);
    if (this.#onAbort !== undefined) {
      this.#options.signal!.removeEventListener("abort", this.#onAbort);
    }
  }
}
