// E2B's code interpreter SDK (@e2b/code-interpreter, pinned, on top of e2b) against a real
// sandstreamd: Sandbox.create() asks for E2B's code-interpreter-v1 (the daemon's own
// code-interpreter template) and runCode / *CodeContext go to /execute and /contexts at the
// daemon's root. The Python SDK's counterpart is tests/integration/test_e2b_code_interpreter.py.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { NotFoundError, Sandbox, SandboxError, TimeoutError } from "@e2b/code-interpreter";

import { HOME, startDaemon } from "./daemon.mjs";

// A cell that imports matplotlib for the first time may take a while.
const SLOW_CELL_MS = 120_000;

let daemon;

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  await daemon?.stop();
});

// Runs `fn` with a sandbox of the code interpreter's Sandbox.create(), killed at its end.
async function withInterpreter(fn) {
  const sandbox = await Sandbox.create();
  try {
    await fn(sandbox);
  } finally {
    await sandbox.kill();
  }
}

// A traceback without its terminal colours.
function plain(traceback) {
  return traceback.replace(/\x1b\[[0-9;]*[A-Za-z]/g, "");
}

// Asserts the cell raised nothing; returns it.
function ok(execution) {
  assert.equal(execution.error, undefined, execution.error && `${execution.error.name}: ${execution.error.value}\n${plain(execution.error.traceback)}`);
  return execution;
}

// The sandbox's code contexts by id, through sandstream's own API.
async function v1Contexts(sandboxId) {
  const r = await daemon.v1("GET", `/v1/sandboxes/${sandboxId}/contexts`);
  assert.equal(r.status, 200, await r.clone().text());
  return new Map((await r.json()).contexts.map((c) => [c.id, c]));
}

test("runCode keeps state; onStdout and onResult are called as the cell runs", async () => {
  await withInterpreter(async (sandbox) => {
    const v1 = await (await daemon.v1("GET", `/v1/sandboxes/${sandbox.sandboxId}`)).json();
    assert.equal(v1.template, "code-interpreter");

    const first = ok(await sandbox.runCode("x = 41"));
    assert.deepEqual(first.results, []);
    const second = ok(await sandbox.runCode("x + 1"));
    assert.equal(second.text, "42");
    assert.equal(second.executionCount, first.executionCount + 1);
    assert.equal(second.results.length, 1);
    assert.equal(second.results[0].isMainResult, true);

    const start = Date.now();
    const out = [];
    const results = [];
    const execution = ok(
      await sandbox.runCode("import time\nprint('one')\ntime.sleep(1)\nprint('two')\nx * 2", {
        onStdout: (m) => out.push([Date.now() - start, m.line]),
        onResult: (r) => results.push(r),
      }),
    );
    const done = Date.now() - start;
    assert.equal(out.map(([, line]) => line).join(""), "one\ntwo\n");
    assert.equal(execution.logs.stdout.join(""), "one\ntwo\n");
    // The first line came while the cell still slept, not with its end.
    assert.ok(done - out[0][0] >= 700, JSON.stringify({ done, out }));
    assert.deepEqual(results.map((r) => [r.text, r.isMainResult]), [["82", true]]);
    assert.equal(execution.text, "82");
  });
});

test("language javascript runs Node with state across cells; an unknown language is refused", async () => {
  await withInterpreter(async (sandbox) => {
    const js = ok(await sandbox.runCode("const a = 1; a + 1", { language: "javascript" }));
    assert.equal(js.text, "2");
    const again = ok(await sandbox.runCode("console.log('from node'); a + 10", { language: "javascript" }));
    assert.equal(again.logs.stdout.join(""), "from node\n");
    assert.equal(again.text, "11");
    const sh = ok(await sandbox.runCode("echo hi", { language: "bash" }));
    assert.equal(sh.logs.stdout.join(""), "hi\n");
    // (A short requestTimeoutMs: the SDK leaves its request timer running when the answer is an
    // error, which would hold the test process that long.)
    await assert.rejects(sandbox.runCode("DISPLAY 'HI'.", { language: "cobol", requestTimeoutMs: 3_000 }), (e) => {
      assert.ok(e instanceof SandboxError && !(e instanceof NotFoundError), e);
      assert.match(e.message, /400/);
      return true;
    });
  });
});

test("a context is created with its cwd, listed (by the SDK and /v1), separate, and removed", async () => {
  await withInterpreter(async (sandbox) => {
    const ctx = await sandbox.createCodeContext({ cwd: "/tmp", language: "python" });
    assert.ok(ctx.id);
    assert.equal(ctx.language, "python");
    assert.equal(ctx.cwd, "/tmp");
    assert.equal(ok(await sandbox.runCode("import os; os.getcwd()", { context: ctx })).text, "'/tmp'");
    ok(await sandbox.runCode("only_here = 1", { context: ctx }));
    assert.equal((await sandbox.runCode("only_here")).error?.name, "NameError");

    const listed = await sandbox.listCodeContexts();
    const mine = listed.find((c) => c.id === ctx.id);
    assert.ok(mine, JSON.stringify(listed));
    assert.equal(mine.cwd, "/tmp");
    const v1 = await v1Contexts(sandbox.sandboxId);
    assert.equal(v1.get(ctx.id)?.cwd, "/tmp");

    await sandbox.restartCodeContext(ctx);
    assert.equal((await sandbox.runCode("only_here", { context: ctx })).error?.name, "NameError");

    await sandbox.removeCodeContext(ctx.id);
    assert.equal((await sandbox.listCodeContexts()).some((c) => c.id === ctx.id), false);
    assert.equal((await v1Contexts(sandbox.sandboxId)).has(ctx.id), false);
    await assert.rejects(sandbox.runCode("1", { context: ctx, requestTimeoutMs: 3_000 }), (e) => e instanceof NotFoundError);
  });
});

test("an exception is execution.error with its name, value and traceback", async () => {
  await withInterpreter(async (sandbox) => {
    const errors = [];
    const execution = await sandbox.runCode("def divide(a):\n    return a / 0\nprint('before')\ndivide(7)", {
      onError: (e) => errors.push(e),
    });
    assert.ok(execution.error);
    assert.equal(execution.error.name, "ZeroDivisionError");
    assert.equal(execution.error.value, "division by zero");
    assert.match(plain(execution.error.traceback), /return a \/ 0/);
    assert.equal(errors.length, 1);
    assert.equal(execution.logs.stdout.join(""), "before\n");
    assert.deepEqual(execution.results, []);
    assert.equal(ok(await sandbox.runCode("'still alive'")).text, "'still alive'");
  });
});

test("a matplotlib plot is a PNG and E2B's chart", async () => {
  await withInterpreter(async (sandbox) => {
    const execution = ok(
      await sandbox.runCode(
        "import matplotlib.pyplot as plt\n" +
          "plt.plot([1, 2, 3], [1, 4, 9], label='squares')\n" +
          "plt.plot([1, 2, 3], [2, 4, 6], label='doubles')\n" +
          "plt.title('Growth')\nplt.legend()\nplt.show()",
        { timeoutMs: SLOW_CELL_MS },
      ),
    );
    assert.equal(execution.results.length, 1);
    const [result] = execution.results;
    assert.ok(result.png?.startsWith("iVBOR"), result.formats());
    assert.ok(Buffer.from(result.png, "base64").subarray(0, 8).equals(Buffer.from("\x89PNG\r\n\x1a\n", "latin1")));
    assert.equal(result.chart?.type, "line", JSON.stringify(result.chart));
    assert.equal(result.chart.title, "Growth");
    assert.deepEqual(
      result.chart.elements.map((e) => [e.label, e.points.map(([x, y]) => [Number(x), Number(y)])]),
      [
        ["squares", [[1, 1], [2, 4], [3, 9]]],
        ["doubles", [[1, 2], [2, 4], [3, 6]]],
      ],
    );
  });
});

test("timeoutMs ends runCode with TimeoutError; the daemon interrupts the cell", async () => {
  await withInterpreter(async (sandbox) => {
    const ctx = await sandbox.createCodeContext();
    ok(await sandbox.runCode("kept = 'still here'", { context: ctx }));
    let start = Date.now();
    await assert.rejects(
      sandbox.runCode("import time\ntime.sleep(30)", { context: ctx, timeoutMs: 2_000 }),
      (e) => e instanceof TimeoutError,
    );
    const elapsed = Date.now() - start;
    assert.ok(elapsed >= 1_500 && elapsed < 8_000, `${elapsed} ms`);
    start = Date.now();
    assert.equal(ok(await sandbox.runCode("1 + 1", { context: ctx, timeoutMs: 25_000 })).text, "2");
    assert.ok(Date.now() - start < 10_000, `${Date.now() - start} ms`);
    assert.equal(ok(await sandbox.runCode("kept", { context: ctx })).text, "'still here'");
  });
});

test("commands and files of the base SDK work on a code interpreter sandbox", async () => {
  await withInterpreter(async (sandbox) => {
    assert.equal((await sandbox.commands.run("echo from-command")).stdout, "from-command\n");
    ok(await sandbox.runCode(`with open('${HOME}/from_cell.txt', 'w') as f:\n    f.write('from a cell')`));
    assert.equal(await sandbox.files.read(`${HOME}/from_cell.txt`), "from a cell");
    assert.equal((await daemon.readFile(sandbox.sandboxId, `${HOME}/from_cell.txt`)).toString(), "from a cell");
  });
});
