/**
 * A process group: signalled as a whole, and asked whether any process of
 * it is still running (zombies, which wait for their reaper, do not count).
 *
 * @module
 */

/** ms between two looks at whether a group has emptied. */
const POLL_MS = 25;

/**
 * Sends `signal` to every process of the group `pgid`.
 *
 * @param pgid The group's id (its leader's pid).
 * @param signal The signal.
 * @returns false when the group has no process left.
 */
export function signalGroup(pgid: number, signal: Deno.Signal): boolean {
  try {
    Deno.kill(-pgid, signal);
    return true;
  } catch {
    return false; // ESRCH: nobody left
  }
}

/** Whether a process of the group `pgid` is running, from /proc (Linux). */
function runningInProc(pgid: number): boolean | undefined {
  let entries: Iterable<Deno.DirEntry>;
  try {
    entries = Deno.readDirSync("/proc");
  } catch {
    return undefined;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      // Fields after the command name: state, ppid, pgrp, …
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(pgrp) === pgid && state !== "Z" && state !== "X") return true;
    } catch {
      // exited while we looked
    }
  }
  return false;
}

/**
 * Whether a process of the group `pgid` is still running. Where /proc is
 * missing, SIGCONT (harmless, and what coreutils `timeout` sends after its
 * signal) tells whether the group has any process, zombies included.
 *
 * @param pgid The group's id.
 * @returns true while one runs.
 */
export function groupRunning(pgid: number): boolean {
  return runningInProc(pgid) ?? signalGroup(pgid, "SIGCONT");
}

/**
 * Resolves true once no process of the group runs, false when `ms` passed first.
 *
 * @param pgid The group's id.
 * @param ms How long to wait at most.
 * @returns Whether the group emptied in time.
 */
export async function groupEmptied(pgid: number, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (groupRunning(pgid)) {
    const left = deadline - performance.now();
    if (left <= 0) return false;
    await new Promise((resolve) => setTimeout(resolve, Math.min(POLL_MS, left)));
  }
  return true;
}
