// Cloudflare's SandboxClient (@cloudflare/sandbox, pinned in package.json) against a real
// sandstreamd: its documented calls, unmodified, with `baseUrl` the sandbox's URL and the key
// in `defaultHeaders`. Effects are checked, not only answers.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Sandbox, SandboxClient, collectFile, parseSSEStream } from "@cloudflare/sandbox";

import { API_KEY, startDaemon } from "./daemon.mjs";

let daemon;
let sandboxId;
let client;

before(async () => {
  daemon = await startDaemon();
  sandboxId = await daemon.createSandbox();
  client = new SandboxClient({
    baseUrl: `${daemon.url}/v1/sandboxes/${sandboxId}`,
    defaultHeaders: { Authorization: `Bearer ${API_KEY}` },
  });
});

after(async () => {
  await daemon?.stop();
});

// The package's error classes are not exported: they are told apart by name and code.
function isError(className, code) {
  return (e) => {
    assert.equal(e.constructor.name, className);
    assert.equal(e.code, code);
    return true;
  };
}

// The package's own Sandbox methods that need nothing but a client (waitForExit, waitForLog).
function sandboxOver(routeClient) {
  const sb = Object.create(Sandbox.prototype);
  sb.client = routeClient;
  sb.logger = { debug() {}, info() {}, warn() {}, error() {}, child() { return this; } };
  return sb;
}

describe("utilities", () => {
  test("ping and version", async () => {
    assert.equal(await client.utils.ping(), "pong");
    assert.match(await client.utils.getVersion(), /^\d+\.\d+\.\d+/);
  });

  test("sessions keep their state; a second create of an id is SessionAlreadyExistsError", async () => {
    const made = await client.utils.createSession({ id: "s-state", env: { GREETING: "hello" } });
    assert.equal(made.id, "s-state");
    await client.commands.execute("cd /tmp && export LATER=kept", "s-state");
    const r = await client.commands.execute('pwd; echo "$GREETING $LATER"', "s-state");
    assert.equal(r.stdout, "/tmp\nhello kept\n");
    await assert.rejects(
      client.utils.createSession({ id: "s-state" }),
      isError("SessionAlreadyExistsError", "SESSION_ALREADY_EXISTS"),
    );
    await assert.rejects(client.utils.createSession({ id: "s-state" }), /s-state/);
    await client.utils.deleteSession("s-state");
  });
});

describe("commands", () => {
  test("execute returns stdout, stderr and the exit code", async () => {
    const ok = await client.commands.execute("echo hi; echo err >&2", "s1");
    assert.equal(ok.success, true);
    assert.equal(ok.exitCode, 0);
    assert.equal(ok.stdout, "hi\n");
    assert.equal(ok.stderr, "err\n");
    assert.equal(ok.command, "echo hi; echo err >&2");
    const failed = await client.commands.execute("exit 3", "s1");
    assert.equal(failed.success, false);
    assert.equal(failed.exitCode, 3);
  });

  test("execute takes env, cwd and timeoutMs for one command", async () => {
    const r = await client.commands.execute('echo "$X"; pwd', "s1", {
      env: { X: "y" },
      cwd: "/tmp",
      timeoutMs: 5000,
    });
    assert.equal(r.stdout, "y\n/tmp\n");
    const after = await client.commands.execute('echo "[$X]"', "s1");
    assert.equal(after.stdout, "[]\n");
    const slow = await client.commands.execute("sleep 5", "s1", { timeoutMs: 300 });
    assert.notEqual(slow.exitCode, 0);
  });

  test("executeStream with parseSSEStream: start, output, complete", async () => {
    const stream = await client.commands.executeStream(
      "for i in 1 2 3; do echo step $i; done; echo warn >&2; exit 4",
      "s1",
    );
    const events = [];
    for await (const event of parseSSEStream(stream)) events.push(event);
    assert.equal(events[0].type, "start");
    const last = events.at(-1);
    assert.equal(last.type, "complete");
    assert.equal(last.exitCode, 4);
    const text = (type) => events.filter((e) => e.type === type).map((e) => e.data).join("");
    assert.equal(text("stdout"), "step 1\nstep 2\nstep 3\n");
    assert.equal(text("stderr"), "warn\n");
    for (const e of events) assert.equal(typeof e.timestamp, "string");
  });
});

describe("processes", () => {
  test("start, get, list, logs, kill", async () => {
    const started = await client.processes.startProcess("echo ready; sleep 60", "s1", {
      processId: "web",
    });
    assert.equal(started.processId, "web");
    assert.ok(started.pid > 0);
    const sb = sandboxOver(client);
    await sb.waitForLogPattern("web", "echo ready; sleep 60", "ready", 10_000);
    const got = await client.processes.getProcess("web");
    assert.equal(got.process.status, "running");
    assert.equal(got.process.command, "echo ready; sleep 60");
    const list = await client.processes.listProcesses();
    assert.ok(list.processes.some((p) => p.id === "web" && p.status === "running"));
    const logs = await client.processes.getProcessLogs("web");
    assert.equal(logs.stdout, "ready\n");
    const killed = await client.processes.killProcess("web");
    assert.equal(killed.processId, "web");
    const after = await client.processes.getProcess("web");
    assert.equal(after.process.status, "killed");
    assert.equal(typeof after.process.exitCode, "number");
  });

  test('the guide\'s "Stream process logs" loop, with the package\'s parseSSEStream', async () => {
    const proc = await client.processes.startProcess(
      "echo booting; sleep 0.2; echo 'Server listening on 8080'; sleep 60",
      "s1",
    );
    const logStream = await client.processes.streamProcessLogs(proc.processId);
    const seen = [];
    let ready = false;
    for await (const log of parseSSEStream(logStream)) {
      seen.push(log.data);
      if (log.data.includes("Server listening")) {
        ready = true;
        break;
      }
    }
    assert.ok(ready, JSON.stringify(seen));
    await client.processes.killProcess(proc.processId);
  });

  test("a log stream ends with exit: the package's waitForProcessExit returns its code", async () => {
    const proc = await client.processes.startProcess("echo done; exit 7", "s1");
    const exit = await sandboxOver(client).waitForProcessExit(proc.processId, "exit 7", 10_000);
    assert.equal(exit.exitCode, 7);
    const events = [];
    const stream = await client.processes.streamProcessLogs(proc.processId);
    for await (const log of parseSSEStream(stream)) events.push(log);
    for (const log of events) assert.equal(typeof log.data.trim(), "string");
    const last = events.at(-1);
    assert.equal(last.type, "exit");
    assert.equal(last.exitCode, 7);
    assert.equal(last.processId, proc.processId);
    assert.equal(last.data, "Process failed with exit code 7");
  });

  test("killAllProcesses ends every running process", async () => {
    await client.processes.startProcess("sleep 60", "s1", { processId: "a" });
    await client.processes.startProcess("sleep 60", "s1", { processId: "b" });
    const r = await client.processes.killAllProcesses();
    assert.ok(r.killedCount >= 2, JSON.stringify(r));
    const list = await client.processes.listProcesses();
    assert.ok(list.processes.every((p) => p.status !== "running"), JSON.stringify(list));
  });

  test("an unknown process is ProcessNotFoundError with sandstream's message", async () => {
    const missing = client.processes.getProcess("missing");
    await assert.rejects(missing, isError("ProcessNotFoundError", "PROCESS_NOT_FOUND"));
    await assert.rejects(client.processes.getProcess("missing"), /no process 'missing'/);
  });
});

describe("files", () => {
  test("write, read, exists, list, mkdir, rename, move, delete", async () => {
    await client.files.writeFile("/workspace/hello.txt", "Hello, Sandbox!", "s1");
    const read = await client.files.readFile("/workspace/hello.txt", "s1");
    assert.equal(read.content, "Hello, Sandbox!");
    assert.equal(read.encoding, "utf-8");
    assert.equal(read.isBinary, false);
    assert.equal(read.size, 15);
    const cat = await client.commands.execute("cat /workspace/hello.txt", "s1");
    assert.equal(cat.stdout, "Hello, Sandbox!");

    assert.equal((await client.files.exists("/workspace/hello.txt", "s1")).exists, true);
    assert.equal((await client.files.exists("/workspace/nothing", "s1")).exists, false);

    await client.files.mkdir("/workspace/d/e", "s1", { recursive: true });
    await client.files.writeFile("/workspace/d/e/f.txt", "f", "s1");
    await client.files.writeFile("/workspace/.hidden", "h", "s1");
    const flat = await client.files.listFiles("/workspace", "s1");
    const names = flat.files.map((f) => f.name).sort();
    assert.ok(names.includes("hello.txt") && names.includes("d"), names.join());
    assert.ok(!names.includes(".hidden"));
    const file = flat.files.find((f) => f.name === "hello.txt");
    assert.equal(file.type, "file");
    assert.equal(file.absolutePath, "/workspace/hello.txt");
    assert.match(file.mode, /^[r-][w-][x-]{1}[r-][w-][x-][r-][w-][x-]$/);
    const deep = await client.files.listFiles("/workspace", "s1", { recursive: true, includeHidden: true });
    const relative = deep.files.map((f) => f.relativePath);
    assert.ok(relative.includes("d/e/f.txt") && relative.includes(".hidden"), relative.join());

    await client.files.renameFile("/workspace/hello.txt", "/workspace/h2.txt", "s1");
    await client.files.moveFile("/workspace/h2.txt", "/tmp/h2.txt", "s1");
    assert.equal((await client.files.exists("/workspace/h2.txt", "s1")).exists, false);
    assert.equal((await client.commands.execute("cat /tmp/h2.txt", "s1")).stdout, "Hello, Sandbox!");
    await client.files.deleteFile("/tmp/h2.txt", "s1");
    assert.equal((await client.files.exists("/tmp/h2.txt", "s1")).exists, false);
  });

  test("binary files: base64 in, base64 out, and collectFile over readFileStream", async () => {
    await client.files.writeFile("/workspace/b.bin", "AAEC/w==", "s1", { encoding: "base64" });
    const read = await client.files.readFile("/workspace/b.bin", "s1");
    assert.equal(read.isBinary, true);
    assert.equal(read.encoding, "base64");
    assert.equal(read.content, "AAEC/w==");
    const { content, metadata } = await collectFile(
      await client.files.readFileStream("/workspace/b.bin", "s1"),
    );
    assert.equal(metadata.isBinary, true);
    assert.deepEqual([...content], [0, 1, 2, 255]);
  });

  test("a large text file streams whole, across chunks", async () => {
    await client.commands.execute(
      "python3 -c \"import sys; sys.stdout.write('é' * 100000)\" > /workspace/big.txt || " +
        "awk 'BEGIN { for (i = 0; i < 100000; i++) printf \"é\" }' > /workspace/big.txt",
      "s1",
    );
    const { content } = await collectFile(await client.files.readFileStream("/workspace/big.txt", "s1"));
    assert.equal(content, "é".repeat(100000));
  });

  test("a missing file is FileNotFoundError with sandstream's message", async () => {
    const read = client.files.readFile("/workspace/missing", "s1");
    await assert.rejects(read, isError("FileNotFoundError", "FILE_NOT_FOUND"));
    await assert.rejects(client.files.readFile("/workspace/missing", "s1"), /\/workspace\/missing/);
  });
});

describe("code contexts", () => {
  let interpreter;

  before(async () => {
    const id = await daemon.createSandbox({ template: "code-interpreter" });
    interpreter = new SandboxClient({
      baseUrl: `${daemon.url}/v1/sandboxes/${id}`,
      defaultHeaders: { Authorization: `Bearer ${API_KEY}` },
    }).interpreter;
  });

  async function run(contextId, code) {
    const got = [];
    // Output comes as the code writes it: print() may write its text and its newline apart,
    // so a stream's adjacent chunks are joined before they are compared.
    const output = (name, text) => {
      const last = got[got.length - 1];
      if (last && last[0] === name) last[1] += text;
      else got.push([name, text]);
    };
    await interpreter.runCodeStream(contextId, code, "python", {
      onStdout: (o) => output("stdout", o.text),
      onStderr: (o) => output("stderr", o.text),
      onResult: (r) => got.push(["result", r.text, r.formats()]),
      onError: (e) => got.push(["error", e.name, e.message]),
    });
    return got;
  }

  test("create, run with callbacks (state kept between runs), list, delete", async () => {
    const context = await interpreter.createCodeContext({ language: "python" });
    assert.equal(context.language, "python");
    assert.deepEqual(await run(context.id, "x = 6\nprint('hello')\nx * 7"), [
      ["stdout", "hello\n"],
      ["result", "42", ["text"]],
    ]);
    assert.deepEqual(await run(context.id, "x"), [["result", "6", ["text"]]]);
    const [error] = await run(context.id, "1 / 0");
    assert.equal(error[0], "error");
    assert.equal(error[1], "ZeroDivisionError");
    assert.match(error[2], /division by zero/);
    const list = await interpreter.listCodeContexts();
    assert.ok(list.some((c) => c.id === context.id && c.language === "python"));
    await interpreter.deleteCodeContext(context.id);
    assert.ok(!(await interpreter.listCodeContexts()).some((c) => c.id === context.id));
  });

  test("no context: the language's default one, made on first use and kept", async () => {
    assert.deepEqual(await run(undefined, "y = 5\ny * 2"), [["result", "10", ["text"]]]);
    assert.deepEqual(await run(undefined, "y"), [["result", "5", ["text"]]]);
    const list = await interpreter.listCodeContexts();
    assert.equal(list.filter((c) => c.id === "default-python").length, 1);
  });

  test("an unknown context is a CONTEXT_NOT_FOUND error with sandstream's message", async () => {
    const missing = interpreter.deleteCodeContext("ctx_0000000000000000");
    await assert.rejects(missing, isError("ContextNotFoundError", "CONTEXT_NOT_FOUND"));
    await assert.rejects(run("ctx_0000000000000000", "1"), /no code context 'ctx_0000000000000000'/);
  });
});

describe("errors", () => {
  test("a wrong key and an unknown sandbox surface their messages", async () => {
    const wrongKey = new SandboxClient({
      baseUrl: `${daemon.url}/v1/sandboxes/${sandboxId}`,
      defaultHeaders: { Authorization: "Bearer wrong" },
    });
    await assert.rejects(wrongKey.utils.ping(), /wrong API key/);
    const gone = new SandboxClient({
      baseUrl: `${daemon.url}/v1/sandboxes/sb_0000000000000000`,
      defaultHeaders: { Authorization: `Bearer ${API_KEY}` },
    });
    await assert.rejects(gone.commands.execute("true", "s1"), /no sandbox 'sb_0000000000000000'/);
  });

  test("a call sandstream does not serve yet fails with a message, in the package's shape", async () => {
    await assert.rejects(client.utils.getCommands(), /no route \/v1\/sandboxes\/sb_\w+\/api\/commands/);
  });
});
