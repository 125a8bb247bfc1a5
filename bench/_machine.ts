/**
 * What machine a run happened on: the absolute figures are this machine's.
 *
 * @module
 */

/** The machine and software of a run. */
export interface Machine {
  readonly cpu: string;
  readonly cores: number;
  readonly memoryGiB: number;
  readonly os: string;
  readonly deno: string;
  readonly v8: string;
  readonly redis: string;
}

async function text(cmd: string, args: string[]): Promise<string> {
  try {
    const { stdout } = await new Deno.Command(cmd, { args, stderr: "null" }).output();
    return new TextDecoder().decode(stdout).trim();
  } catch {
    return "";
  }
}

/** Describes this machine. */
export async function describeMachine(): Promise<Machine> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  const cpu = /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1]?.trim() ?? Deno.build.arch;
  const redis = /v=(\S+)/.exec(await text("redis-server", ["--version"]))?.[1] ?? "unknown";
  return {
    cpu,
    cores: navigator.hardwareConcurrency,
    memoryGiB: Math.round(Deno.systemMemoryInfo().total / 2 ** 30),
    os: `${Deno.build.os} ${Deno.osRelease()}`,
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    redis,
  };
}

/** One line: `AMD EPYC, 2 cores, 8 GiB, linux 6.1, Deno 2.9.6, Redis 7.0.15`. */
export function machineLine(m: Machine): string {
  return `${m.cpu}, ${m.cores} cores, ${m.memoryGiB} GiB, ${m.os}, Deno ${m.deno}, Redis ${m.redis}`;
}
