// Test fixtures: a real sandstreamd on a random loopback port, and a TCP proxy in front of it
// that a test can cut, stall or make deliver one byte per write.

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const API_KEY = "testkey";

const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const REPO_DIR = path.resolve(packageDir, "../..");
export const PACKAGE_DIR = packageDir;

export interface Daemon {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts sandstreamd (SANDSTREAMD, else build/dev/bin/sandstreamd) on 127.0.0.1:0, with `args`
 * after its own.
 */
export async function startDaemon(args: readonly string[] = []): Promise<Daemon> {
  const binary = process.env["SANDSTREAMD"] ?? path.join(REPO_DIR, "build/dev/bin/sandstreamd");
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "sandstream-ts-"));
  const child = spawn(binary, ["--listen", "127.0.0.1:0", "--data-dir", dataDir, ...args], {
    // No egress, whatever the environment says: these daemons run in this machine's own
    // network namespace, where no test may turn on forwarding.
    env: { ...process.env, SANDSTREAM_API_KEY: API_KEY, SANDSTREAM_EGRESS_POOL: "none" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  // The daemon's log stays quiet unless it fails; then its tail (an ASan report, say) is shown.
  const logTail: string[] = [];
  createInterface({ input: child.stderr! }).on("line", (line) => {
    logTail.push(line);
    if (logTail.length > 400) logTail.shift();
  });
  let stopping = false;
  child.once("exit", (code, signal) => {
    if (!stopping && (code !== 0 || signal !== null)) {
      process.stderr.write(
        `sandstreamd failed (code ${code}, signal ${signal}); its last log lines:\n` +
          logTail.join("\n") +
          "\n",
      );
    }
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${binary} did not report listening in 20 s`));
    }, 20_000);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`cannot start ${binary}: ${error.message}`));
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${binary} exited with ${code} before listening`));
    });
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      const match = /^sandstreamd .*listening on (http:\/\/\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]!);
      }
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    process: child,
    async stop() {
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Starts a daemon and points SANDSTREAM_URL / SANDSTREAM_API_KEY at it, as a user would. */
export async function useDaemon(): Promise<Daemon> {
  const daemon = await startDaemon();
  process.env["SANDSTREAM_URL"] = daemon.url;
  process.env["SANDSTREAM_API_KEY"] = API_KEY;
  return daemon;
}

export interface Proxy {
  url: string;
  /** Destroys every open connection (both sides); the proxy keeps listening. */
  cut(): void;
  /** While set, new connections are closed at once. */
  refuse: boolean;
  /** While set, data from the daemon is held back (the connection stays open). */
  stall: boolean;
  /** While set, data from the daemon is written to the client one byte per write. */
  fragment: boolean;
  connections: number;
  close(): Promise<void>;
}

/** A TCP proxy on 127.0.0.1 in front of `port`. */
export async function startProxy(port: number): Promise<Proxy> {
  const sockets = new Set<net.Socket>();
  const proxy: Proxy = {
    url: "",
    refuse: false,
    stall: false,
    fragment: false,
    connections: 0,
    cut() {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
    async close() {
      proxy.cut();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  const server = net.createServer((client) => {
    proxy.connections++;
    if (proxy.refuse) {
      client.destroy();
      return;
    }
    client.setNoDelay(true);
    const upstream = net.connect(port, "127.0.0.1");
    upstream.setNoDelay(true);
    sockets.add(client);
    sockets.add(upstream);
    const destroy = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    // Bytes from the daemon go out in order, and the client's side closes only after them.
    let pending = Promise.resolve();
    const write = (data: Buffer): Promise<void> =>
      new Promise((resolve) => client.write(data, () => resolve()));
    client.on("error", destroy).on("close", destroy);
    upstream.on("error", destroy);
    upstream.on("close", () => {
      pending = pending.then(() => {
        client.end();
        sockets.delete(client);
        sockets.delete(upstream);
      });
    });
    client.on("data", (data) => upstream.write(data));
    upstream.on("data", (data: Buffer) => {
      if (proxy.stall) return;
      if (!proxy.fragment) {
        pending = pending.then(() => write(data));
        return;
      }
      pending = pending.then(async () => {
        for (const byte of data) {
          if (client.destroyed) return;
          await write(Buffer.of(byte));
          await new Promise((resolve) => setImmediate(resolve));
        }
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return proxy;
}

/** Collects every line written to a mocked console method or stream write. */
export function callText(calls: ReadonlyArray<{ arguments: unknown[] }>): string[] {
  return calls.map((call) => call.arguments.map(String).join(" "));
}

export async function streamText(stream: ReadableStream<Uint8Array>): Promise<string> {
  return await new Response(stream).text();
}
