// Code contexts (runCode), sessions and files against the real daemon.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { InvalidRequestError, NotFoundError, Sandbox, type Result } from "sandstream";

import { useDaemon, type Daemon } from "./helpers.js";

let daemon: Daemon;
let sandbox: Sandbox;

before(async () => {
  daemon = await useDaemon();
  sandbox = await Sandbox.create({ template: "code-interpreter" });
});

after(async () => {
  await sandbox?.kill();
  await daemon?.stop();
});

test("runCode keeps state, streams output and returns results", async () => {
  const chunks: string[] = [];
  await sandbox.runCode("values = [1, 2, 3]");
  const execution = await sandbox.runCode("print('summing')\nsum(values)", {
    onStdout: (c) => chunks.push(c),
  });
  // Chunks are what each read returned: print may arrive as "summing" and "\n".
  assert.equal(chunks.join(""), "summing\n");
  assert.equal(execution.text, "6");
  assert.equal(execution.error, undefined);
  assert.equal(execution.logs.stdout.join(""), "summing\n");
});

test("an exception is execution.error", async () => {
  const execution = await sandbox.runCode("1 / 0");
  assert.equal(execution.error?.name, "ZeroDivisionError");
  assert.match(execution.error?.traceback ?? "", /ZeroDivisionError/);
});

test("a matplotlib chart comes back as a PNG", async () => {
  const results: Result[] = [];
  const execution = await sandbox.runCode(
    "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()",
    { onResult: (r) => results.push(r), timeoutSeconds: 120 },
  );
  assert.equal(execution.error, undefined);
  const png = execution.results.find((r) => r.png !== undefined)?.png;
  assert.ok(png !== undefined);
  assert.deepEqual([...Buffer.from(png, "base64").subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.equal(results.length, execution.results.length);
});

test("a timeout interrupts the cell", async () => {
  const context = await sandbox.createCodeContext({ language: "python" });
  const execution = await sandbox.runCode("import time\ntime.sleep(30)", { context, timeoutSeconds: 1 });
  assert.equal(execution.error?.name, "KeyboardInterrupt");
  assert.equal(execution.error?.timeout, true);
  assert.equal(execution.error?.restarted, false);
  await sandbox.deleteCodeContext(context);
});

test("javascript contexts", async () => {
  await sandbox.runCode("globalThis.base = 40", { language: "javascript" });
  assert.equal((await sandbox.runCode("base + 2", { language: "javascript" })).text, "42");
});

test("contexts: get, list, restart drops state, delete", async () => {
  const context = await sandbox.createCodeContext({ language: "python", cwd: "/tmp" });
  assert.equal(context.sandboxId, sandbox.id);
  assert.equal(context.cwd, "/tmp");
  assert.match(context.processId ?? "", /^proc_/);
  await sandbox.runCode("kept = 1", { context });
  const now = await sandbox.getCodeContext(context.id);
  assert.equal(now.executionCount, 1);
  assert.equal(now.status, "idle");
  assert.ok((await sandbox.listCodeContexts()).some((c) => c.id === context.id));
  const restarted = await sandbox.restartCodeContext(context);
  assert.equal(restarted.restarts, context.restarts + 1);
  assert.notEqual(restarted.processId, context.processId);
  assert.equal((await sandbox.runCode("kept", { context })).error?.name, "NameError");
  await sandbox.deleteCodeContext(context);
  await assert.rejects(sandbox.getCodeContext(context), NotFoundError);
  assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === context.id));
});

test("sessions keep cd and export; get, list, delete", async () => {
  const session = await sandbox.createSession({ id: "build", env: { STAGE: "test" } });
  assert.equal(session.id, "build");
  assert.equal(session.sandboxId, sandbox.id);
  await sandbox.exec("cd /tmp && export X=1", { session: session.id });
  const result = await sandbox.exec("pwd; echo $X $STAGE", { session: session.id });
  assert.equal(result.stdout, "/tmp\n1 test\n");
  const now = await sandbox.getSession(session.id);
  assert.equal(now.commands, 2);
  assert.equal(now.busy, false);
  assert.equal(now.createdAt, session.createdAt);
  assert.deepEqual(
    (await sandbox.listSessions()).map((s) => s.id),
    ["build"],
  );
  await sandbox.deleteSession(session.id);
  await assert.rejects(sandbox.getSession(session.id), NotFoundError);
  await assert.rejects(sandbox.exec("true", { session: session.id }), NotFoundError);
  assert.deepEqual(await sandbox.listSessions(), []);
});

test("files: write, read, list, move, remove, escapes refused", async () => {
  const info = await sandbox.files.write("/workspace/t/hello.txt", "hi there");
  assert.equal(info.size, 8);
  assert.equal(await sandbox.files.readText("/workspace/t/hello.txt"), "hi there");
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new Uint8Array(70_000).fill(65));
      controller.enqueue(new Uint8Array(30_000).fill(66));
      controller.close();
    },
  });
  assert.equal((await sandbox.files.write("/workspace/t/big.bin", stream)).size, 100_000);
  const names = (await sandbox.files.list("/workspace/t")).map((f) => f.name).sort();
  assert.deepEqual(names, ["big.bin", "hello.txt"]);
  await sandbox.files.move("/workspace/t/hello.txt", "/workspace/t/moved.txt");
  assert.equal(await sandbox.files.exists("/workspace/t/hello.txt"), false);
  await sandbox.files.remove("/workspace/t", { recursive: true });
  assert.equal(await sandbox.files.exists("/workspace/t"), false);
  await assert.rejects(sandbox.files.read("/../../etc/passwd"), InvalidRequestError);
});

test("files: readStream delivers a large file in pieces", async () => {
  const size = 3 * 1024 * 1024 + 5;
  const data = new Uint8Array(size).map((_, i) => i % 251);
  await sandbox.files.write("/workspace/large.bin", data);
  const pieces: Uint8Array[] = [];
  const reader = (await sandbox.files.readStream("/workspace/large.bin")).getReader();
  for (let r = await reader.read(); !r.done; r = await reader.read()) pieces.push(r.value);
  assert.ok(pieces.length > 1, `${pieces.length} piece(s)`);
  assert.deepEqual(Buffer.concat(pieces), Buffer.from(data));
  await sandbox.files.remove("/workspace/large.bin");
});

test("files: user root may write where user may not", async () => {
  await assert.rejects(sandbox.files.write("/etc/sandstream-test", "x"), InvalidRequestError);
  const info = await sandbox.files.write("/etc/sandstream-test", "x", { user: "root", mode: 0o600 });
  assert.equal(info.mode, "0600");
  await assert.rejects(sandbox.files.read("/etc/sandstream-test"), InvalidRequestError);
  assert.equal(await sandbox.files.readText("/etc/sandstream-test", { user: "root" }), "x");
  await assert.rejects(sandbox.files.mkdir("/etc/sandstream-dir"), InvalidRequestError);
  await sandbox.files.mkdir("/etc/sandstream-dir", { user: "root" });
  await sandbox.files.move("/etc/sandstream-test", "/etc/sandstream-dir/moved", { user: "root" });
  const names = (await sandbox.files.list("/etc/sandstream-dir", { user: "root" })).map((f) => f.name);
  assert.deepEqual(names, ["moved"]);
  await assert.rejects(sandbox.files.remove("/etc/sandstream-dir", { recursive: true }), InvalidRequestError);
  await sandbox.files.remove("/etc/sandstream-dir", { recursive: true, user: "root" });
  assert.equal(await sandbox.files.exists("/etc/sandstream-dir", { user: "root" }), false);
});
