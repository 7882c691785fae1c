// Every TypeScript/JavaScript usage of seeds 000, 001 and 003, run as a program (or, for the
// Worker handler, called) against a real daemon; commands that need the internet are replaced
// by local equivalents inside the snippets.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { Sandbox, parseSSEStream, type ExecEvent } from "sandstream";

import { PACKAGE_DIR, useDaemon, type Daemon } from "./helpers.js";

const compiledSeeds = path.join(path.dirname(fileURLToPath(import.meta.url)), "seeds");
const jsSeeds = path.join(PACKAGE_DIR, "test", "seeds");

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(script: string, env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [script],
      { env: { ...process.env, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : null;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

let daemon: Daemon;
let sandbox: Sandbox;

before(async () => {
  daemon = await useDaemon();
  sandbox = await Sandbox.create();
});

after(async () => {
  await sandbox?.kill();
  await daemon?.stop();
});

for (const [flavour, dir, ext] of [
  ["TypeScript", compiledSeeds, "js"],
  ["JavaScript", jsSeeds, "mjs"],
] as const) {
  describe(`seed 000 (${flavour})`, () => {
    test("Stream command execution: stdout, stderr, exit code", async () => {
      const result = await run(path.join(dir, `000-stream-command.${ext}`), { SANDBOX_ID: sandbox.id });
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /> build/);
      assert.match(result.stdout, /built in 1s/);
      assert.match(result.stdout, /Exit code: 0\n$/);
      assert.match(result.stderr, /warning: slow/);
    });

    test("Stream to client: the handler's Response is an SSE stream with the exit", async () => {
      const module = (await import(pathToFileURL(path.join(dir, `000-stream-to-client.${ext}`)).href)) as {
        default: { fetch(request: Request, env: { SANDBOX_ID: string }): Promise<Response> };
      };
      const response = await module.default.fetch(new Request("http://localhost/build"), {
        SANDBOX_ID: sandbox.id,
      });
      assert.equal(response.headers.get("content-type"), "text/event-stream");
      assert.equal(response.headers.get("cache-control"), "no-cache");
      const events: ExecEvent[] = [];
      for await (const event of parseSSEStream(response.body!)) events.push(event);
      assert.equal(events[0]?.type, "start");
      const output = events.flatMap((e) => (e.type === "stdout" ? [e.data] : [])).join("");
      assert.equal(output, "> build\nbuilt\n");
      const last = events.at(-1);
      assert.equal(last?.type, "complete");
      assert.equal(last.type === "complete" && last.exitCode, 0);
    });

    test("Stream process logs: breaks at the readiness line", async () => {
      const result = await run(path.join(dir, `000-stream-process-logs.${ext}`), { SANDBOX_ID: sandbox.id });
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /booting/);
      assert.match(result.stdout, /Server listening on :8080\n\nServer is ready\n$/);
      await sandbox.killAllProcesses();
    });

    test("Handle errors: a non-zero exit code throws", async () => {
      const result = await run(path.join(dir, `000-handle-errors.${ext}`), { SANDBOX_ID: sandbox.id });
      assert.notEqual(result.code, 0);
      assert.match(result.stdout, /compiling/);
      assert.match(result.stderr, /Build failed with exit code 2/);
    });
  });
}

describe("seed 001", () => {
  test("TypeScript execStream with onStdout/onStderr resolves to the exit code", async () => {
    const result = await run(path.join(compiledSeeds, "001-exec-stream.js"));
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "ok 1 - adds\nok 2 - subtracts\n");
    assert.equal(result.stderr, "deprecation warning\n");
  });
});

describe("seed 003", () => {
  test("Stream a build (code-interpreter template, bash -lc, timeoutSeconds)", async () => {
    const result = await run(path.join(compiledSeeds, "003-stream-build.js"));
    assert.equal(result.code, 0, result.stderr);
    assert.equal(
      result.stdout,
      "== installing ==\ninstalled rich\n== building ==\n" +
        [1, 2, 3, 4, 5].map((i) => `step ${i}/5\n`).join("") +
        "== done ==\n\nbuild exited with code 0\n",
    );
  });

  test("Capturing while streaming", async () => {
    const result = await run(path.join(compiledSeeds, "003-capture.js"));
    assert.equal(result.code, 0, result.stderr);
    const text = "task 1\ntask 2\ntask 3\n";
    assert.equal(result.stdout, text + JSON.stringify({ exitCode: 0, fullOutput: text }) + "\n");
  });
});
