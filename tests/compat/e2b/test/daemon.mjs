// A real sandstreamd for the tests (tests/compat/daemon.mjs), and the environment a user sets to
// point E2B's SDK at it (this test process only: node --test runs each file in a child of its
// own).
import { Sandbox } from "e2b";

import { spawnDaemon } from "../../daemon.mjs";

export const API_KEY = "e2b-compat-key";
export const HOME = "/home/user";

export async function startDaemon() {
  const { url, stop } = await spawnDaemon({ apiKey: API_KEY, prefix: "e2b" });
  // What a user sets (README of tests/compat/e2b): both URLs the daemon's, its key, no debug.
  process.env.E2B_API_URL = url;
  process.env.E2B_SANDBOX_URL = url;
  process.env.E2B_API_KEY = API_KEY;
  delete process.env.E2B_DEBUG;
  delete process.env.E2B_DOMAIN;
  delete process.env.E2B_ACCESS_TOKEN;

  // sandstream's own API, to check effects independently of the SDK.
  async function v1(method, route, { body, raw } = {}) {
    const headers = { Authorization: `Bearer ${API_KEY}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(`${url}${route}`, {
      method,
      headers,
      body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
    });
  }

  return {
    url,
    port: Number(new URL(url).port),
    v1,
    async exists(sandboxId) {
      const r = await v1("GET", `/v1/sandboxes/${sandboxId}`);
      await r.arrayBuffer();
      if (r.status !== 200 && r.status !== 404) throw new Error(`GET sandbox: ${r.status}`);
      return r.status === 200;
    },
    async readFile(sandboxId, filePath) {
      const r = await v1("GET", `/v1/sandboxes/${sandboxId}/files/content?path=${encodeURIComponent(filePath)}`);
      if (r.status !== 200) throw new Error(`read ${filePath}: ${r.status} ${await r.text()}`);
      return Buffer.from(await r.arrayBuffer());
    },
    async writeFile(sandboxId, filePath, data) {
      const r = await v1("PUT", `/v1/sandboxes/${sandboxId}/files/content?path=${encodeURIComponent(filePath)}`, { raw: data });
      if (r.status !== 200 && r.status !== 201) throw new Error(`write ${filePath}: ${r.status} ${await r.text()}`);
      await r.arrayBuffer();
    },
    async statStatus(sandboxId, filePath) {
      const r = await v1("GET", `/v1/sandboxes/${sandboxId}/files/stat?path=${encodeURIComponent(filePath)}`);
      await r.arrayBuffer();
      return r.status;
    },
    async exec(sandboxId, cmd) {
      const r = await v1("POST", `/v1/sandboxes/${sandboxId}/exec`, { body: { cmd } });
      if (r.status !== 200) throw new Error(`exec: ${r.status} ${await r.text()}`);
      return r.json();
    },
    stop,
  };
}

// Polls `predicate` until it is truthy or `ms` pass; returns its last value.
export async function waitUntil(predicate, ms = 5_000, interval = 50) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await predicate();
    if (value || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, interval));
  }
}

// Whether a process whose command line contains `pattern` runs on this machine (sandboxes'
// processes are visible from the host's pid namespace).
export async function processRuns(pattern) {
  const { readdirSync, readFileSync } = await import("node:fs");
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
      if (cmdline.includes(pattern)) return true;
    } catch {
      // gone meanwhile
    }
  }
  return false;
}

// A unique `sleep` argument, so a process of this test is told apart from any other.
export function marker() {
  return `1000.${String(Math.floor(Math.random() * 1e9)).padStart(9, "0")}`;
}

// Runs `fn` with a sandbox made by Sandbox.create(), killed at its end.
export async function withSandbox(fn) {
  const sandbox = await Sandbox.create();
  try {
    await fn(sandbox);
  } finally {
    await sandbox.kill();
  }
}
