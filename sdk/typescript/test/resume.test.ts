// Cut connections: a TCP proxy between the SDK and the daemon is cut mid-stream. The SDK must
// resume with Last-Event-ID and its Idempotency-Key (no duplicate, no hole, the command run
// once), and when it cannot resume it must fail, never report an exit code it did not see.
// The same holds for a code context's cells (runCode).

import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  ConflictError,
  NotFoundError,
  Sandbox,
  StreamLostError,
  parseSSEStream,
  type ExecEvent,
} from "sandstream";

import { startProxy, useDaemon, type Daemon, type Proxy } from "./helpers.js";

let daemon: Daemon;
let sandbox: Sandbox;
let proxy: Proxy;
let remote: Sandbox;

before(async () => {
  daemon = await useDaemon();
  sandbox = await Sandbox.create();
  proxy = await startProxy(daemon.port);
  remote = await Sandbox.connect(sandbox.id, { url: proxy.url });
});

beforeEach(() => {
  proxy.refuse = false;
  proxy.stall = false;
  proxy.fragment = false;
});

after(async () => {
  await proxy?.close();
  await sandbox?.kill();
  await daemon?.stop();
});

async function runs(file: string): Promise<number> {
  const result = await sandbox.exec(`cat ${file} 2>/dev/null || true`);
  return result.stdout.split("\n").filter((l) => l === "run").length;
}

test("callbacks: a cut after the first chunk resumes; output whole, command run once", async () => {
  const out: string[] = [];
  const before = proxy.connections;
  const code = await remote.execStream(
    "echo run >> runs-a.txt; echo one; sleep 1; echo two; sleep 0.2; echo three",
    {
      onStdout: (chunk) => {
        out.push(chunk);
        if (out.length === 1) proxy.cut();
      },
    },
  );
  assert.equal(code, 0);
  assert.equal(out.join(""), "one\ntwo\nthree\n");
  assert.ok(proxy.connections - before >= 2, "the SDK reconnected");
  assert.equal(await runs("runs-a.txt"), 1);
});

test("stream: a cut mid-stream is invisible to parseSSEStream", async () => {
  const stream = await remote.execStream("echo run >> runs-b.txt; echo one; sleep 1; echo two");
  const events: ExecEvent[] = [];
  for await (const event of parseSSEStream(stream)) {
    events.push(event);
    if (event.type === "stdout" && event.data === "one\n") proxy.cut();
  }
  assert.deepEqual(
    events.map((e) => e.type),
    ["start", "stdout", "stdout", "complete"],
  );
  assert.equal(events.map((e) => (e.type === "stdout" ? e.data : "")).join(""), "one\ntwo\n");
  assert.equal(await runs("runs-b.txt"), 1);
});

test("buffered exec: a cut while waiting retries onto the same process", async () => {
  const pending = remote.exec("echo run >> runs-c.txt; sleep 1; echo done");
  await new Promise((resolve) => setTimeout(resolve, 300));
  proxy.cut();
  const result = await pending;
  assert.equal(result.exitCode, 0);
  assert.equal(result.stdout, "done\n");
  assert.equal(await runs("runs-c.txt"), 1);
});

test("a stalled connection is detected by the idle timeout and resumed", async () => {
  const impatient = await Sandbox.connect(sandbox.id, { url: proxy.url, streamIdleTimeoutMs: 500 });
  const out: string[] = [];
  const code = await impatient.execStream("echo run >> runs-d.txt; echo one; sleep 1.5; echo two", {
    onStdout: (chunk) => {
      out.push(chunk);
      if (out.length === 1) {
        proxy.stall = true;
        setTimeout(() => (proxy.stall = false), 700);
      }
    },
  });
  assert.equal(code, 0);
  assert.equal(out.join(""), "one\ntwo\n");
  assert.equal(await runs("runs-d.txt"), 1);
});

test("callbacks: no reconnection possible -> StreamLostError, no exit code", async () => {
  const fragile = await Sandbox.connect(sandbox.id, { url: proxy.url, maxReconnects: 2 });
  let processId = "";
  const outcome = fragile.execStream("echo one; sleep 1; echo two", {
    onStart: (id) => {
      processId = id;
    },
    onStdout: () => {
      proxy.refuse = true;
      proxy.cut();
    },
  });
  await assert.rejects(outcome, (error: unknown) => {
    assert.ok(error instanceof StreamLostError, String(error));
    assert.equal(error.processId, processId);
    assert.ok(error.lastEventId !== undefined);
    return true;
  });
  // The process itself was not affected by the lost connection.
  const exited = await sandbox.waitForExit(processId, { timeout: 10_000 });
  assert.equal(exited.exitCode, 0);
});

test("stream: no reconnection possible -> parseSSEStream throws, no complete event", async () => {
  const fragile = await Sandbox.connect(sandbox.id, { url: proxy.url, maxReconnects: 1 });
  const stream = await fragile.execStream("echo one; sleep 1; echo two");
  const seen: string[] = [];
  await assert.rejects(
    (async () => {
      for await (const event of parseSSEStream(stream)) {
        seen.push(event.type);
        if (event.type === "stdout") {
          proxy.refuse = true;
          proxy.cut();
        }
      }
    })(),
    StreamLostError,
  );
  assert.deepEqual(seen, ["start", "stdout"]);
});

test("process logs resume after a cut from the last event id", async () => {
  const proc = await remote.startProcess("echo one; sleep 1; echo two; sleep 0.2; echo three");
  const stream = await remote.streamProcessLogs(proc.id);
  const data: string[] = [];
  for await (const log of parseSSEStream(stream)) {
    data.push(log.type === "stdout" ? log.data : `[${log.type}]`);
    if (log.type === "stdout" && log.data === "one\n") proxy.cut();
  }
  assert.equal(data.join(""), "one\ntwo\nthree\n[exit]");
});

describe("runCode", () => {
  let interp: Sandbox;
  let interpRemote: Sandbox;

  before(async () => {
    interp = await Sandbox.create({ template: "code-interpreter" });
    interpRemote = await Sandbox.connect(interp.id, { url: proxy.url, maxReconnects: 10 });
  });

  after(async () => {
    await interp?.kill();
  });

  // Counts its runs in the interpreter, prints, sleeps, prints.
  const cell = (seconds: number): string =>
    `import time\nruns = globals().get('runs', 0) + 1\nprint('one', flush=True)\n` +
    `time.sleep(${seconds})\nprint('two', flush=True)\n'done'`;

  test("a cut after the first chunk resumes the same run: each event once, the cell run once", async () => {
    const context = await interp.createCodeContext();
    const out: string[] = [];
    const results: string[] = [];
    const connections = proxy.connections;
    const execution = await interpRemote.runCode(cell(1), {
      context,
      onStdout: (chunk) => {
        out.push(chunk);
        if (out.length === 1) proxy.cut();
      },
      onResult: (result) => results.push(result.text ?? ""),
    });
    assert.equal(out.join(""), "one\ntwo\n");
    assert.deepEqual(execution.logs.stdout, out);
    assert.deepEqual(results, ["'done'"]);
    assert.equal(execution.text, "'done'");
    assert.equal(execution.error, undefined);
    // The cell's request may reuse a kept-alive connection; the cut forces a new one.
    assert.ok(proxy.connections > connections, "the SDK reconnected");
    assert.equal((await interp.runCode("runs", { context })).text, "1");
    assert.equal((await interp.getCodeContext(context)).executionCount, execution.executionCount + 1);
  });

  test("a cut before the cell starts (queued behind another) attaches again by its key", async () => {
    const context = await interp.createCodeContext();
    const busy = interp.runCode("import time\ntime.sleep(1.5)", { context });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const connections = proxy.connections;
    const queued = interpRemote.runCode(cell(0), { context });
    setTimeout(() => proxy.cut(), 500);
    const execution = await queued;
    await busy;
    assert.ok(proxy.connections > connections, "the SDK reconnected");
    assert.equal(execution.logs.stdout.join(""), "one\ntwo\n");
    assert.equal(execution.executionCount, 2);
    assert.equal((await interp.runCode("runs", { context })).text, "1");
  });

  test("a stalled run stream is detected by the idle timeout and resumed", async () => {
    const context = await interp.createCodeContext();
    const impatient = await Sandbox.connect(interp.id, { url: proxy.url, streamIdleTimeoutMs: 500 });
    const out: string[] = [];
    const execution = await impatient.runCode(cell(1.5), {
      context,
      onStdout: (chunk) => {
        out.push(chunk);
        if (out.length === 1) {
          proxy.stall = true;
          setTimeout(() => (proxy.stall = false), 700);
        }
      },
    });
    assert.equal(out.join(""), "one\ntwo\n");
    assert.equal(execution.text, "'done'");
    assert.equal((await interp.runCode("runs", { context })).text, "1");
  });

  test("a retry with the same idempotencyKey attaches to the run; other code is ConflictError", async () => {
    const context = await interp.createCodeContext();
    const key = `cell-${Date.now()}`;
    const first = await interp.runCode(cell(0), { context, idempotencyKey: key });
    const again = await interp.runCode(cell(0), { context, idempotencyKey: key });
    assert.equal(again.executionCount, first.executionCount);
    assert.deepEqual(again.logs, first.logs);
    assert.equal(again.text, "'done'");
    await assert.rejects(interp.runCode("runs", { context, idempotencyKey: key }), ConflictError);
    assert.equal((await interp.runCode("runs", { context })).text, "1");
  });

  test("a run the context has forgotten is not resumed by running the cell again", async () => {
    const context = await interp.createCodeContext();
    let firstChunk!: () => void;
    const started = new Promise<void>((resolve) => (firstChunk = resolve));
    const outcome = interpRemote.runCode(cell(3), {
      context,
      onStdout: () => {
        proxy.refuse = true;
        proxy.cut();
        firstChunk();
      },
    });
    outcome.catch(() => undefined);
    await started;
    // The context remembers its last 32 ended runs: 32 more cells, one after another behind
    // the sleeping one, make it forget the run the SDK is trying to resume.
    for (let i = 0; i < 32; i++) await interp.runCode("pass", { context });
    assert.equal((await interp.getCodeContext(context)).executionCount, 33);
    proxy.refuse = false;
    await assert.rejects(outcome, (error: unknown) => {
      assert.ok(error instanceof StreamLostError, String(error));
      assert.ok(error.cause instanceof NotFoundError, String(error.cause));
      return true;
    });
    assert.equal((await interp.runCode("runs", { context })).text, "1");
  });
});
