/**
 * A process that used the library ends by itself once its Redlock is
 * disposed and its clients are closed, with every client kind, also when a
 * server is unreachable: nothing of the library keeps it alive.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { startServers } from "./_redis.ts";

const CHILD = fileURLToPath(new URL("./fixtures/exit_child.ts", import.meta.url));
/** ms the process is given to end after it printed `closed`. */
const EXIT_MS = 5_000;
/** ms it is given for everything before. */
const RUN_MS = 60_000;

/** Reads `stream` line by line into `lines`, calling `onLine` for each. */
async function readLines(stream: ReadableStream<Uint8Array>, lines: string[], onLine: () => void) {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    const parts = (rest + chunk).split("\n");
    rest = parts.pop()!;
    for (const line of parts) {
      lines.push(line);
      onLine();
    }
  }
}

/** Resolves once `test()` holds, checked on every call of the returned function; bounded by `ms`. */
function when(test: () => boolean, ms: number, what: string) {
  let check = () => {};
  let timer: ReturnType<typeof setTimeout> | undefined;
  const done = new Promise<void>((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
    check = () => {
      if (test()) resolve();
    };
  }).finally(() => clearTimeout(timer));
  return { done, check: () => check() };
}

for (const kind of ["ioredis", "node-redis", "deno-redis", "upstash"]) {
  for (const unreachable of [false, true]) {
    const which = unreachable ? ", one server unreachable" : "";
    Deno.test(`a process that used ${kind} clients ends by itself after dispose and closing them${which}`, async () => {
      const servers = await startServers(3);
      const child = new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", CHILD, kind, ...servers.ports.map(String)],
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const lines: string[] = [];
      const connected = when(() => lines.includes("connected"), RUN_MS, "connected");
      const closed = when(() => lines.includes("closed"), RUN_MS, "closed");
      const reading = readLines(child.stdout, lines, () => {
        connected.check();
        closed.check();
      });
      const stderr = new Response(child.stderr).text();
      let exited = false;
      try {
        await connected.done;
        if (unreachable) await servers.servers[2]!.kill();
        const writer = child.stdin.getWriter();
        await writer.write(new TextEncoder().encode("go\n"));
        await writer.close();
        await Promise.race([closed.done, child.status]);
        // (its stderr is read once it ended: awaiting it before would wait for the end)
        let timer: ReturnType<typeof setTimeout> | undefined;
        const status = await Promise.race([
          child.status,
          new Promise<undefined>((resolve) =>
            timer = setTimeout(() => resolve(undefined), EXIT_MS)
          ),
        ]).finally(() => clearTimeout(timer));
        exited = status !== undefined;
        assert.ok(exited, `the process ended within ${EXIT_MS} ms of closing its clients`);
        assert.equal(status!.code, 0, await stderr);
        assert.ok(lines.includes("closed"), "it closed all before it ended");
      } finally {
        if (!exited) {
          try {
            child.kill("SIGKILL");
          } catch {
            // ended meanwhile
          }
        }
        await child.status;
        await reading;
        await stderr;
        await servers.stop();
      }
    });
  }
}
