// A real sandstreamd for the compatibility suites (tests/compat/*): SANDSTREAM_BIN (else
// SANDSTREAMD, else the dev build) on 127.0.0.1:0 with a data directory of its own and the API
// key given. No egress: these daemons run in this machine's own network namespace. Stopped, the
// daemon ends its sandboxes.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const REPO_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

// Resolves to { url, stop() } once the daemon listens; its log's tail is printed if it fails.
// `env`: settings of this daemon's own (`SANDSTREAM_...`), over the environment's.
export async function spawnDaemon({ apiKey, prefix, env = {} }) {
  const binary =
    process.env.SANDSTREAM_BIN ??
    process.env.SANDSTREAMD ??
    path.join(REPO_DIR, "build/dev/bin/sandstreamd");
  const dataDir = mkdtempSync(path.join(os.tmpdir(), `sandstream-${prefix}-`));
  const child = spawn(binary, ["--listen", "127.0.0.1:0", "--data-dir", dataDir], {
    env: {
      ...process.env,
      SANDSTREAM_API_KEY: apiKey,
      SANDSTREAM_EGRESS_POOL: "none",
      SANDSTREAM_TEARDOWN_ON_EXIT: "true",
      ...env,
    },
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
    const timer = setTimeout(() => reject(new Error(`${binary} did not listen in 30 s`)), 30_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${binary} exited with ${code} before listening:\n${logTail.join("\n")}`));
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
    async stop() {
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
