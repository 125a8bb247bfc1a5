/**
 * Test helpers for TLS: a certificate authority and a server certificate
 * for 127.0.0.1 made with `openssl` in a temporary directory, and servers
 * that listen for TLS besides their plain port (which the raw helpers of
 * tests/_redis.ts keep using).
 */

import { connect, type Connection, type RedisServers, startServers } from "./_redis.ts";

/** A CA and a server certificate signed by it, as files and the CA's PEM text. */
export interface Certificates extends AsyncDisposable {
  readonly dir: string;
  /** The CA certificate's file. */
  readonly caFile: string;
  /** The CA certificate, PEM. */
  readonly ca: string;
  readonly certFile: string;
  readonly keyFile: string;
}

async function openssl(dir: string, ...args: string[]): Promise<void> {
  const { success, stderr } = await new Deno.Command("openssl", {
    args,
    cwd: dir,
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!success) {
    throw new Error(`openssl ${args[0]} failed: ${new TextDecoder().decode(stderr).trim()}`);
  }
}

/** Makes a CA and a certificate for 127.0.0.1 and localhost, valid for a day. */
export async function makeCertificates(): Promise<Certificates> {
  const dir = await Deno.makeTempDir({ prefix: "redlock-tls-" });
  const remove = () => Deno.remove(dir, { recursive: true }).catch(() => {});
  try {
    const rsa = ["-newkey", "rsa:2048", "-nodes"];
    await openssl(
      dir,
      "req",
      "-x509",
      ...rsa,
      "-keyout",
      "ca.key",
      "-out",
      "ca.crt",
      "-days",
      "1",
      "-subj",
      "/CN=redlock test CA",
    );
    await openssl(
      dir,
      "req",
      ...rsa,
      "-keyout",
      "server.key",
      "-out",
      "server.csr",
      "-subj",
      "/CN=localhost",
    );
    await Deno.writeTextFile(`${dir}/san.ext`, "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
    await openssl(
      dir,
      "x509",
      "-req",
      "-in",
      "server.csr",
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-out",
      "server.crt",
      "-days",
      "1",
      "-extfile",
      "san.ext",
    );
  } catch (error) {
    await remove();
    throw error;
  }
  return {
    dir,
    caFile: `${dir}/ca.crt`,
    ca: await Deno.readTextFile(`${dir}/ca.crt`),
    certFile: `${dir}/server.crt`,
    keyFile: `${dir}/server.key`,
    [Symbol.asyncDispose]: remove,
  };
}

/** Servers with a TLS port each, and the certificates they use. */
export interface TlsServers extends AsyncDisposable {
  readonly servers: RedisServers;
  /** The TLS port of each server, in order. */
  readonly tlsPorts: readonly number[];
  readonly certificates: Certificates;
}

function freeLoopbackPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/**
 * Starts `count` local servers (the certificates are files here, so no
 * containers) that take TLS connections on a port of their own, without
 * client certificates.
 */
export async function startTlsServers(count: number): Promise<TlsServers> {
  const certificates = await makeCertificates();
  const tlsPorts = new Map<number, number>();
  let servers: RedisServers;
  try {
    servers = await startServers(count, {
      engine: "local",
      args: (port) => {
        const tls = freeLoopbackPort();
        tlsPorts.set(port, tls);
        return [
          "--tls-port",
          String(tls),
          "--tls-cert-file",
          certificates.certFile,
          "--tls-key-file",
          certificates.keyFile,
          "--tls-ca-cert-file",
          certificates.caFile,
          "--tls-auth-clients",
          "no",
        ];
      },
    });
  } catch (error) {
    await certificates[Symbol.asyncDispose]();
    throw error;
  }
  return {
    servers,
    tlsPorts: servers.servers.map((s) => tlsPorts.get(s.port)!),
    certificates,
    [Symbol.asyncDispose]: async () => {
      await servers.stop();
      await certificates[Symbol.asyncDispose]();
    },
  };
}

/** Connects a client of `kind` over TLS to `port`, trusting only `ca`. */
export async function connectTls(
  kind: "ioredis" | "node-redis",
  port: number,
  ca: string,
): Promise<Connection> {
  return await connect(kind, port, { tlsCa: ca });
}
