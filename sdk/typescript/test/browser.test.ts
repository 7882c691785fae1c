// Headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core) against the
// example server's page and against the daemon's own GET process-logs stream: output shows up
// as it is printed, before the command ends, then the complete event with the exit code.

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";

import { chromium, type BrowserContext } from "playwright-core";
import { Sandbox, parseSSEStream, type ExecEvent } from "sandstream";

import { API_KEY, PACKAGE_DIR, useDaemon, type Daemon } from "./helpers.js";

const CHROMIUM = "/usr/bin/chromium";
const PRINT_SLEEP_PRINT = "echo first; sleep 2; echo second";

interface PageEvent {
  at: number;
  type: string;
  data?: string;
  exitCode?: number;
}

let daemon: Daemon;
let browser: BrowserContext;
let profileDir: string;
let example: ChildProcess;
let exampleUrl: string;

before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y chromium`);
  daemon = await useDaemon();
  example = spawn(process.execPath, [path.join(PACKAGE_DIR, "examples/stream-server/server.mjs")], {
    env: { ...process.env, PORT: "0", STREAM_CMD: PRINT_SLEEP_PRINT },
    stdio: ["ignore", "pipe", "inherit"],
  });
  exampleUrl = await new Promise<string>((resolve, reject) => {
    example.once("exit", (code) => reject(new Error(`the example server exited with ${code}`)));
    createInterface({ input: example.stdout! }).on("line", (line) => {
      const match = /listening on (http:\/\/\S+)/.exec(line);
      if (match) resolve(match[1]!);
    });
  });
  profileDir = mkdtempSync(path.join(os.tmpdir(), "sandstream-chromium-"));
  browser = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--no-first-run",
    ],
  });
});

after(async () => {
  await browser?.close();
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
  if (example && example.exitCode === null) {
    const exited = new Promise((resolve) => example.once("exit", resolve));
    example.kill("SIGTERM");
    await exited;
  }
  await daemon?.stop();
});

test("the example page shows the first line before the command ends, then the exit code", async () => {
  const page = await browser.newPage();
  await page.goto(exampleUrl);
  await page.waitForFunction(() => document.getElementById("output")!.textContent!.includes("first"));
  // Seen while the command sleeps: no second line and no exit yet.
  const during = await page.evaluate(() => ({
    output: document.getElementById("output")!.textContent,
    status: document.getElementById("status")!.textContent,
  }));
  assert.equal(during.output, "first\n");
  assert.doesNotMatch(during.status ?? "", /exit code/);

  await page.waitForFunction(() => document.getElementById("status")!.textContent!.startsWith("exit code"), null, {
    timeout: 15_000,
  });
  const done = await page.evaluate(() => ({
    output: document.getElementById("output")!.textContent,
    status: document.getElementById("status")!.textContent,
    events: (window as unknown as { streamEvents: PageEvent[] }).streamEvents,
  }));
  assert.equal(done.output, "first\nsecond\n");
  assert.equal(done.status, "exit code 0");
  const types = done.events.map((e) => e.type);
  assert.deepEqual(types, ["start", "stdout", "stdout", "complete"]);
  const first = done.events[1]!;
  const complete = done.events[3]!;
  assert.ok(complete.at - first.at >= 1000, JSON.stringify(done.events));
  assert.equal(complete.exitCode, 0);
  await page.close();
});

test("a plain EventSource follows the daemon's process logs with access_token", async () => {
  const sandbox = await Sandbox.create();
  try {
    // The command waits for a line on stdin, sent once the page saw `start`, so that its
    // output is produced while the page watches rather than replayed from the retained log.
    const proc = await sandbox.startProcess(`read go; ${PRINT_SLEEP_PRINT}`);
    const page = await browser.newPage();
    await page.exposeFunction("startSeen", () => proc.writeStdin("go\n"));
    await page.goto(`${daemon.url}/healthz`);
    const events = await page.evaluate(
      ({ path, key }) =>
        new Promise<PageEvent[]>((resolve, reject) => {
          const seen: PageEvent[] = [];
          const source = new EventSource(`${path}?follow=1&format=cloudflare&access_token=${key}`);
          for (const type of ["start", "stdout", "stderr", "exit"]) {
            source.addEventListener(type, (event) => {
              seen.push({ at: performance.now(), ...JSON.parse((event as MessageEvent).data) });
              if (type === "start") (window as unknown as { startSeen(): void }).startSeen();
              if (type === "exit") {
                source.close();
                resolve(seen);
              }
            });
          }
          source.addEventListener("error", (event) => {
            source.close();
            const data = (event as unknown as { data?: string }).data;
            reject(new Error(`EventSource error: ${data ?? "connection failed"}`));
          });
        }),
      { path: `/v1/sandboxes/${sandbox.id}/processes/${proc.id}/logs`, key: API_KEY },
    );
    const output = events.filter((e) => e.type === "stdout");
    assert.deepEqual(
      output.map((e) => e.data),
      ["first\n", "second\n"],
    );
    const exit = events.at(-1)!;
    assert.equal(exit.type, "exit");
    assert.equal(exit.exitCode, 0);
    assert.ok(exit.at - output[0]!.at >= 1000);
    await page.close();
  } finally {
    await sandbox.kill();
  }
});

test("the example server resumes a build for a reconnecting client instead of rerunning it", async () => {
  const sandboxes = await Sandbox.list();
  assert.equal(sandboxes.length, 1);
  const sandbox = await Sandbox.connect(sandboxes[0]!.id);
  const before = (await sandbox.listProcesses()).length;

  const url = `${exampleUrl}/build?id=${crypto.randomUUID()}`;
  const first = await fetch(url);
  const reader = first.body!.getReader();
  let text = "";
  while (!text.includes('"data":"first\\n"')) {
    const { value, done } = await reader.read();
    assert.ok(!done, "the stream ended before the first line");
    text += new TextDecoder().decode(value);
  }
  await reader.cancel();
  const processId = /"processId":"([^"]+)"/.exec(text)![1]!;
  const lastEventId = [...text.matchAll(/^id: (\d+)$/gm)].at(-1)![1]!;

  const again = await fetch(url, { headers: { "Last-Event-ID": lastEventId } });
  const events: ExecEvent[] = [];
  for await (const event of parseSSEStream(again.body!)) events.push(event);
  assert.deepEqual(
    events.map((e) => (e.type === "stdout" ? e.data : e.type)),
    ["second\n", "complete"],
  );
  const processes = await sandbox.listProcesses();
  assert.equal(processes.length, before + 1, "the command ran once");
  assert.ok(processes.some((p) => p.id === processId));
});
