// A real sandstreamd for the tests: SANDSTREAMD, else the dev build, on 127.0.0.1:0, with its
// own data directory and API key, and a sandbox to point a SandboxClient at.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const API_KEY = "cf-compat-key";
const REPO_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

export async function startDaemon() {
  const binary = process.env.SANDSTREAMD ?? path.join(REPO_DIR, "build/dev/bin/sandstreamd");
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "sandstream-cf-"));
  const child = spawn(binary, ["--listen", "127.0.0.1:0", "--data-dir", dataDir], {
    // No egress: these daemons run in this machine's own network namespace.
    env: { ...process.env, SANDSTREAM_API_KEY: API_KEY, SANDSTREAM_EGRESS_POOL: "none" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const logTail = [];
  createInterface({ input: child.stderr }).on("line", (line) => {
    logTail.push(line);
    if (logTail.length > 200) logTail.shift();
  });
  let stopping = false;
  child.once("exit", (code, signal) => {
    if (!stopping && (code !== 0 || signal !== null)) {
      process.stderr.write(`sandstreamd failed (${code}, ${signal}):\n${logTail.join("\n")}\n`);
    }
  });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${binary} did not listen in 20 s`)), 20_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${binary} exited with ${code} before listening`));
    });
    createInterface({ input: child.stdout }).on("line", (line) => {
      const match = /^sandstreamd .*listening on (http:\/\/\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
  });
  return {
    url,
    async createSandbox(body = {}) {
      const r = await fetch(`${url}/v1/sandboxes`, {
        method: "POST",
        headers: { Authorization: `Bearer ${API_KEY}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (r.status !== 201) throw new Error(`create sandbox: ${r.status} ${await r.text()}`);
      return (await r.json()).id;
    },
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
