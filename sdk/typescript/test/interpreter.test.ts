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

test("sessions keep cd and export", async () => {
  const session = await sandbox.createSession();
  await sandbox.exec("cd /tmp && export X=1", { session: session.id });
  const result = await sandbox.exec("pwd; echo $X", { session: session.id });
  assert.equal(result.stdout, "/tmp\n1\n");
  await sandbox.deleteSession(session.id);
  await assert.rejects(sandbox.exec("true", { session: session.id }), NotFoundError);
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
