// execStream in both shapes and exec with stream: live delivery (the first chunk before the
// process exits), stdout/stderr separation, and UTF-8 split by the process and by the network.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Sandbox, parseSSEStream, type ExecEvent } from "sandstream";

import { startProxy, useDaemon, type Daemon, type Proxy } from "./helpers.js";

let daemon: Daemon;
let sandbox: Sandbox;
let proxy: Proxy;

before(async () => {
  daemon = await useDaemon();
  sandbox = await Sandbox.create();
  proxy = await startProxy(daemon.port);
});

after(async () => {
  await proxy?.close();
  await sandbox?.kill();
  await daemon?.stop();
});

const PRINT_SLEEP_PRINT = "echo first; sleep 2; echo second";

test("callbacks: the first stdout chunk arrives while the process still runs", async () => {
  const seen: Array<{ chunk: string; at: number }> = [];
  const started = Date.now();
  const exitCode = await sandbox.execStream(PRINT_SLEEP_PRINT, {
    onStdout: (chunk) => seen.push({ chunk, at: Date.now() }),
  });
  const ended = Date.now();
  assert.equal(exitCode, 0);
  assert.equal(seen.map((s) => s.chunk).join(""), "first\nsecond\n");
  assert.equal(seen[0]?.chunk, "first\n");
  // "first" was delivered before the 2 s sleep ended, not with the exit.
  assert.ok(ended - seen[0]!.at >= 1000, `first chunk ${seen[0]!.at - started} ms, end ${ended - started} ms`);
});

test("stream: the first stdout event arrives before the complete event, 2 s apart", async () => {
  const stream = await sandbox.execStream(PRINT_SLEEP_PRINT);
  const events: Array<{ event: ExecEvent; at: number }> = [];
  for await (const event of parseSSEStream(stream)) events.push({ event, at: Date.now() });
  const types = events.map((e) => e.event.type);
  assert.deepEqual(types, ["start", "stdout", "stdout", "complete"]);
  const first = events[1]!;
  const complete = events[3]!;
  assert.equal(first.event.type === "stdout" && first.event.data, "first\n");
  assert.ok(complete.at - first.at >= 1000);
  assert.equal(complete.event.type === "complete" && complete.event.exitCode, 0);
  assert.equal(complete.event.type === "complete" && complete.event.reason, "exited");
});

test("stream: raw SSE bytes carry ids, event names and Cloudflare data", async () => {
  const stream = await sandbox.execStream("echo hi");
  const text = await new Response(stream).text();
  assert.match(text, /^id: 1\nevent: start\ndata: \{"type":"start"/);
  assert.match(text, /\nevent: stdout\ndata: \{[^\n]*"data":"hi\\n"/);
  assert.match(text, /\nevent: complete\ndata: \{[^\n]*"exitCode":0/);
  assert.ok(text.endsWith("\n\n"));
});

test("stdout and stderr stay apart; mergeStderr joins them in order", async () => {
  const out: string[] = [];
  const err: string[] = [];
  const code = await sandbox.execStream("echo out; echo err >&2; exit 3", {
    onStdout: (c) => out.push(c),
    onStderr: (c) => err.push(c),
  });
  assert.equal(code, 3);
  assert.equal(out.join(""), "out\n");
  assert.equal(err.join(""), "err\n");

  const merged = await sandbox.exec("echo one; echo two >&2; echo three", { mergeStderr: true });
  assert.equal(merged.stdout, "one\ntwo\nthree\n");
  assert.equal(merged.stderr, "");
});

test("exec with stream: true calls onOutput per chunk and returns the full result", async () => {
  const chunks: Array<[string, string]> = [];
  const result = await sandbox.exec("echo a; echo b >&2; echo c", {
    stream: true,
    onOutput: (stream, data) => chunks.push([stream, data]),
  });
  assert.equal(result.exitCode, 0);
  assert.equal(result.success, true);
  assert.equal(result.stdout, "a\nc\n");
  assert.equal(result.stderr, "b\n");
  assert.match(result.processId, /^proc_/);
  assert.equal(chunks.filter(([s]) => s === "stdout").map(([, d]) => d).join(""), "a\nc\n");
  assert.deepEqual(chunks.filter(([s]) => s === "stderr"), [["stderr", "b\n"]]);
});

test("exec returns the buffered result with exit details", async () => {
  const result = await sandbox.exec("printf 'x\\ny'; exit 7", { env: { A: "1" } });
  assert.equal(result.stdout, "x\ny");
  assert.equal(result.exitCode, 7);
  assert.equal(result.success, false);
  assert.equal(result.reason, "exited");
  assert.equal(result.signal, null);
  const argv = await sandbox.exec(["printf", "%s|", "a b", "$HOME"]);
  assert.equal(argv.stdout, "a b|$HOME|");
  const env = await sandbox.exec("echo $GREETING", { env: { GREETING: "hello" } });
  assert.equal(env.stdout, "hello\n");
});

test("a code point split by the process between two writes arrives whole", async () => {
  const chunks: string[] = [];
  // "€" is e2 82 ac; the process writes the first two bytes, waits, then the last one.
  const code = await sandbox.execStream("printf '\\342\\202'; sleep 0.3; printf '\\254 ok\\n'", {
    onStdout: (c) => chunks.push(c),
  });
  assert.equal(code, 0);
  assert.equal(chunks.join(""), "€ ok\n");
  assert.ok(chunks.every((c) => !c.includes("\uFFFD")), JSON.stringify(chunks));
});

test("UTF-8 split by the network (one byte per TCP write) decodes intact", async () => {
  proxy.fragment = true;
  try {
    const remote = await Sandbox.connect(sandbox.id, { url: proxy.url });
    const text = "héllo wörld € 😀 日本語\n";
    const chunks: string[] = [];
    const code = await remote.execStream(`printf '%s\\n' 'héllo wörld € 😀 日本語'`, {
      onStdout: (c) => chunks.push(c),
    });
    assert.equal(code, 0);
    assert.equal(chunks.join(""), text);
    const stream = await remote.execStream("printf '😀'");
    const events = [];
    for await (const e of parseSSEStream(stream)) events.push(e);
    assert.equal(events.filter((e) => e.type === "stdout").map((e) => e.type === "stdout" && e.data).join(""), "😀");
  } finally {
    proxy.fragment = false;
  }
});

test("a signal is reported as 128 + n with its name, never as success", async () => {
  const code = await sandbox.execStream("kill -KILL $$", { onStdout: () => undefined });
  assert.equal(code, 137);
  const result = await sandbox.exec("kill -TERM $$");
  assert.equal(result.exitCode, 143);
  assert.equal(result.signal, "SIGTERM");
  assert.equal(result.reason, "signaled");
});

test("the total timeout kills the command: reason timeout", async () => {
  const stream = await sandbox.execStream("echo started; sleep 30", { timeoutSeconds: 0.5 });
  const events = [];
  for await (const e of parseSSEStream(stream)) events.push(e);
  const last = events.at(-1);
  assert.equal(last?.type, "complete");
  assert.equal(last.type === "complete" && last.reason, "timeout");
  assert.notEqual(last.type === "complete" && last.exitCode, 0);
});

test("breaking out of parseSSEStream cancels the stream, not the process", async () => {
  const stream = await sandbox.execStream("echo one; sleep 1; echo two > after.txt");
  let processId = "";
  for await (const event of parseSSEStream(stream)) {
    if (event.type === "start") processId = event.processId;
    if (event.type === "stdout") break;
  }
  const exited = await sandbox.waitForExit(processId, { timeout: 10_000 });
  assert.equal(exited.exitCode, 0);
  assert.equal(exited.reason, "exited");
  const check = await sandbox.exec("cat after.txt");
  assert.equal(check.stdout, "two\n");
});
