/**
 * A test fixture with deno.land/x/redis's calling convention
 * (`eval(script, keys, args)`, `evalsha(sha1, keys, args)`) and its error
 * format (error replies become errors whose message starts with `-`), over
 * a real RESP connection of its own. deno-redis itself cannot be downloaded
 * here; this keeps the adapter honest against a real server.
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Like deno-redis's ErrorReplyError: the message keeps the leading `-`. */
export class ErrorReplyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ErrorReplyError";
  }
}

export type Reply = string | number | null | Reply[];

export class DenoRedisFixture implements AsyncDisposable {
  readonly #conn: Deno.TcpConn;
  #buffer = new Uint8Array(0);
  #queue: Promise<unknown> = Promise.resolve();
  #closed = false;

  private constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
  }

  static async connect(port: number): Promise<DenoRedisFixture> {
    return new DenoRedisFixture(await Deno.connect({ hostname: "127.0.0.1", port }));
  }

  eval(script: string, keys: string[], args: string[]): Promise<Reply> {
    return this.sendCommand("EVAL", [script, String(keys.length), ...keys, ...args]);
  }

  evalsha(sha1: string, keys: string[], args: string[]): Promise<Reply> {
    return this.sendCommand("EVALSHA", [sha1, String(keys.length), ...keys, ...args]);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#conn.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return this.#queue.then(() => {}, () => {});
  }

  /** Sends one command and resolves to its reply (error replies reject), as deno-redis does. */
  sendCommand(command: string, commandArgs: readonly string[] = []): Promise<Reply> {
    const args = [command, ...commandArgs];
    const run = async () => {
      if (this.#closed) throw new Error("connection closed");
      const payload = `*${args.length}\r\n` +
        args.map((a) => `$${encoder.encode(a).length}\r\n${a}\r\n`).join("");
      await this.#conn.write(encoder.encode(payload));
      return await this.#reply();
    };
    const result = this.#queue.then(run, run);
    this.#queue = result.catch(() => {});
    return result;
  }

  /** Reads the next reply the server pushes (a subscribed connection's messages). */
  read(): Promise<Reply> {
    const result = this.#queue.then(() => this.#reply());
    this.#queue = result.catch(() => {});
    return result;
  }

  async #line(): Promise<string> {
    for (;;) {
      const end = this.#buffer.indexOf(10);
      if (end > 0 && this.#buffer[end - 1] === 13) {
        const line = decoder.decode(this.#buffer.subarray(0, end - 1));
        this.#buffer = this.#buffer.subarray(end + 1);
        return line;
      }
      await this.#fill();
    }
  }

  async #fill(): Promise<void> {
    const chunk = new Uint8Array(16384);
    const n = await this.#conn.read(chunk);
    if (n === null) throw new Error("connection closed by server");
    const next = new Uint8Array(this.#buffer.length + n);
    next.set(this.#buffer);
    next.set(chunk.subarray(0, n), this.#buffer.length);
    this.#buffer = next;
  }

  async #reply(): Promise<Reply> {
    const line = await this.#line();
    const body = line.slice(1);
    switch (line[0]) {
      case "+":
        return body;
      case "-":
        throw new ErrorReplyError(line);
      case ":":
        return Number(body);
      case "$": {
        const length = Number(body);
        if (length < 0) return null;
        while (this.#buffer.length < length + 2) await this.#fill();
        const text = decoder.decode(this.#buffer.subarray(0, length));
        this.#buffer = this.#buffer.subarray(length + 2);
        return text;
      }
      case "*": {
        const length = Number(body);
        if (length < 0) return null;
        const items: Reply[] = [];
        for (let i = 0; i < length; i++) items.push(await this.#reply());
        return items;
      }
      default:
        throw new Error(`unexpected reply line: ${line}`);
    }
  }
}
