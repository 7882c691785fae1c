// Background processes: start, list, get, logs (JSON and streamed), waitForLog, waitForExit,
// stdin, signals, kill and killAll.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  ConflictError,
  NotFoundError,
  ProcessExitedError,
  Sandbox,
  TimeoutError,
  parseSSEStream,
  type LogEvent,
} from "sandstream";

import { useDaemon, type Daemon } from "./helpers.js";

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

test("start, get, list, waitForExit, getProcessLogs", async () => {
  const proc = await sandbox.startProcess("echo out; echo err >&2; sleep 0.3; exit 4", {
    processId: "job-1",
  });
  assert.equal(proc.id, "job-1");
  assert.equal(proc.status, "running");
  assert.equal(proc.sandboxId, sandbox.id);
  assert.ok(proc.pid > 0);

  const got = await sandbox.getProcess("job-1");
  assert.equal(got.id, "job-1");
  assert.ok((await sandbox.listProcesses()).some((p) => p.id === "job-1"));

  const exited = await proc.waitForExit(10_000);
  assert.equal(exited.status, "exited");
  assert.equal(exited.exitCode, 4);
  assert.equal(exited.reason, "exited");
  assert.equal(proc.exitCode, 4);
  assert.ok((await sandbox.listProcesses("exited")).some((p) => p.id === "job-1"));
  assert.ok(!(await sandbox.listProcesses("running")).some((p) => p.id === "job-1"));

  const logs = await sandbox.getProcessLogs("job-1");
  assert.equal(logs.stdout, "out\n");
  assert.equal(logs.stderr, "err\n");
  assert.equal(logs.exit?.exitCode, 4);
  assert.ok(logs.chunks.some((c) => c.stream === "stdout" && c.data === "out\n"));

  await assert.rejects(sandbox.startProcess("true", { processId: "job-1" }), ConflictError);
  await assert.rejects(sandbox.getProcess("no-such-process"), NotFoundError);
});

test("streamProcessLogs yields LogEvents with data and processId, ending at exit", async () => {
  const proc = await sandbox.startProcess("echo a; sleep 0.2; echo b >&2; exit 1");
  const events: LogEvent[] = [];
  for await (const log of parseSSEStream<LogEvent>(await sandbox.streamProcessLogs(proc.id))) {
    events.push(log);
  }
  assert.deepEqual(
    events.map((e) => [e.type, e.data]),
    [
      ["stdout", "a\n"],
      ["stderr", "b\n"],
      ["exit", "Process failed with exit code 1"],
    ],
  );
  assert.ok(events.every((e) => e.processId === proc.id));
  const last = events.at(-1)!;
  assert.equal(last.type === "exit" && last.exitCode, 1);
});

test("waitForLog: string and RegExp, across chunk boundaries", async () => {
  const proc = await sandbox.startProcess(
    "printf 'Server lis'; sleep 0.2; printf 'tening on port 8123\\n'; sleep 600",
  );
  const byString = await proc.waitForLog("Server listening");
  assert.equal(byString.line, "Server listening on port 8123");
  const byRegex = await sandbox.waitForLog(proc.id, /port (\d+)/);
  assert.equal(byRegex.match?.[1], "8123");
  assert.equal(byRegex.stream, "stdout");
  await assert.rejects(proc.waitForLog("never printed", { timeout: 300 }), TimeoutError);
  await proc.kill();
  assert.equal(proc.status, "exited");
  assert.equal(proc.reason, "killed");
});

test("waitForLog: the process exits first -> ProcessExitedError with its exit code", async () => {
  const proc = await sandbox.startProcess("echo nothing useful; exit 5");
  await assert.rejects(proc.waitForLog("ready"), (error: unknown) => {
    assert.ok(error instanceof ProcessExitedError);
    assert.equal(error.exitCode, 5);
    return true;
  });
});

test("stdin: write, then close; a closed stdin is a ConflictError", async () => {
  const proc = await sandbox.startProcess("cat");
  assert.equal(await proc.writeStdin("hello "), 6);
  assert.equal(await sandbox.writeStdin(proc.id, new TextEncoder().encode("wörld\n")), 7);
  await proc.closeStdin();
  const exited = await proc.waitForExit(10_000);
  assert.equal(exited.exitCode, 0);
  assert.equal((await proc.getLogs()).stdout, "hello wörld\n");
  await assert.rejects(proc.writeStdin("late"), ConflictError);

  const once = await sandbox.startProcess("cat");
  await once.writeStdin("last line\n", { eof: true });
  await once.waitForExit(10_000);
  assert.equal((await once.getLogs()).stdout, "last line\n");

  const fed = await sandbox.exec("cat", { stdin: "from exec\n" });
  assert.equal(fed.stdout, "from exec\n");
});

test("signals, kill and killAllProcesses", async () => {
  const proc = await sandbox.startProcess("sleep 600");
  await sandbox.killProcess(proc.id, "TERM");
  const exited = await proc.waitForExit(10_000);
  assert.equal(exited.exitCode, 143);
  assert.equal(exited.signal, "SIGTERM");

  await sandbox.startProcess("sleep 600");
  await sandbox.startProcess("sleep 600");
  const killed = await sandbox.killAllProcesses();
  assert.equal(killed, 2);
  assert.equal((await sandbox.listProcesses("running")).length, 0);
});

test("waitForExit with a timeout that passes first: TimeoutError", async () => {
  const proc = await sandbox.startProcess("sleep 600");
  await assert.rejects(sandbox.waitForExit(proc.id, { timeout: 1000 }), TimeoutError);
  await proc.kill();
});
