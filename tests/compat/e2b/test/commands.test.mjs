// E2B's JS SDK (e2b, pinned in package.json) against a real sandstreamd: its documented
// commands calls, unmodified, with E2B_API_URL and E2B_SANDBOX_URL the daemon's URL and
// E2B_API_KEY its key. Effects are checked through sandstream's own API or another command.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { CommandExitError, NotFoundError, Sandbox, TimeoutError } from "e2b";

import { HOME, marker, processRuns, startDaemon, waitUntil, withSandbox } from "./daemon.mjs";

let daemon;

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  await daemon?.stop();
});

// Consecutive chunks of one stream joined (a write may arrive split or joined).
function merged(events) {
  const out = [];
  for (const [stream, text] of events) {
    if (out.length && out.at(-1)[0] === stream) out.at(-1)[1] += text;
    else out.push([stream, text]);
  }
  return out;
}

test("the README example: Sandbox.create() and commands.run", async () => {
  const sandbox = await Sandbox.create();
  const result = await sandbox.commands.run('echo "Hello from E2B!"');
  assert.equal(result.stdout, "Hello from E2B!\n");
  assert.equal(result.stderr, "");
  assert.equal(result.exitCode, 0);
  assert.match(sandbox.sandboxId, /^sb_/);
  assert.equal(await daemon.exists(sandbox.sandboxId), true);
  assert.equal(await sandbox.kill(), true);
  assert.equal(await daemon.exists(sandbox.sandboxId), false);
});

test("onStdout and onStderr get the real chunks, in order", async () => {
  await withSandbox(async (sandbox) => {
    const events = [];
    const result = await sandbox.commands.run(
      "for i in 1 2 3; do echo out$i; sleep 0.1; echo err$i >&2; sleep 0.1; done",
      {
        onStdout: (d) => events.push(["out", d]),
        onStderr: (d) => events.push(["err", d]),
      },
    );
    assert.deepEqual(merged(events), [
      ["out", "out1\n"], ["err", "err1\n"], ["out", "out2\n"],
      ["err", "err2\n"], ["out", "out3\n"], ["err", "err3\n"],
    ]);
    assert.equal(result.stdout, "out1\nout2\nout3\n");
    assert.equal(result.stderr, "err1\nerr2\nerr3\n");
  });
});

test("envs, cwd and user take effect; the default is /home/user as user", async () => {
  await withSandbox(async (sandbox) => {
    const r = await sandbox.commands.run('echo "$FOO|$BAR"', { envs: { FOO: "a b", BAR: "c=d" } });
    assert.equal(r.stdout, "a b|c=d\n");
    assert.equal((await sandbox.commands.run("pwd", { cwd: "/tmp" })).stdout, "/tmp\n");
    assert.equal((await sandbox.commands.run('pwd; echo "$HOME"')).stdout, `${HOME}\n${HOME}\n`);
    assert.equal((await sandbox.commands.run("whoami")).stdout, "user\n");
    assert.equal((await sandbox.commands.run("whoami", { user: "root" })).stdout, "root\n");
  });
});

test("a nonzero exit is CommandExitError with exitCode, stderr and error", async () => {
  await withSandbox(async (sandbox) => {
    await assert.rejects(sandbox.commands.run("echo part; echo bad >&2; exit 3"), (e) => {
      assert.ok(e instanceof CommandExitError, e);
      assert.equal(e.exitCode, 3);
      assert.equal(e.stdout, "part\n");
      assert.equal(e.stderr, "bad\n");
      assert.equal(e.error, "exit status 3");
      return true;
    });
    await assert.rejects(sandbox.commands.run("kill -KILL $$"), (e) => {
      assert.ok(e instanceof CommandExitError, e);
      assert.equal(e.exitCode, -1);
      assert.equal(e.error, "signal: killed");
      return true;
    });
  });
});

test("timeoutMs kills the command", async () => {
  await withSandbox(async (sandbox) => {
    const m = marker();
    const start = Date.now();
    await assert.rejects(sandbox.commands.run(`sleep ${m}`, { timeoutMs: 2_000 }), (e) => {
      assert.ok(e instanceof TimeoutError || (e instanceof CommandExitError && e.exitCode === -1), e);
      return true;
    });
    const elapsed = Date.now() - start;
    assert.ok(elapsed >= 1_500 && elapsed < 6_000, `${elapsed} ms`);
    assert.equal(await waitUntil(async () => !(await processRuns(`sleep ${m}`)), 3_000), true);
  });
});

test("background: listed, connected from a second object, killed for real", async () => {
  await withSandbox(async (sandbox) => {
    const m = marker();
    const handle = await sandbox.commands.run(`sleep ${m}`, { background: true });
    assert.ok(Number.isInteger(handle.pid) && handle.pid > 0);
    const listed = (await sandbox.commands.list()).filter((p) => p.pid === handle.pid);
    assert.equal(listed.length, 1);
    assert.equal(listed[0].cmd, "/bin/bash");
    assert.deepEqual(listed[0].args, ["-l", "-c", `sleep ${m}`]);
    // Started means spawned: the command line may take a moment to be `sleep`'s.
    assert.equal(await waitUntil(() => processRuns(`sleep ${m}`), 3_000), true);

    const other = await Sandbox.connect(sandbox.sandboxId);
    const joined = await other.commands.connect(handle.pid);
    assert.equal(joined.pid, handle.pid);
    assert.equal(await other.commands.kill(handle.pid), true);
    await assert.rejects(joined.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1);
    await assert.rejects(handle.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1);
    assert.equal(await waitUntil(async () => !(await processRuns(`sleep ${m}`)), 3_000), true);
    const pids = (await sandbox.commands.list()).map((p) => p.pid);
    assert.ok(!pids.includes(handle.pid), pids);
    assert.equal(await sandbox.commands.kill(handle.pid), false);
    assert.equal(await handle.kill(), false);
  });
});

test("commands.connect streams the live output and the exit code", async () => {
  await withSandbox(async (sandbox) => {
    const handle = await sandbox.commands.run(
      "sleep 1; for i in 1 2 3; do echo line$i; sleep 0.2; done; exit 4",
      { background: true },
    );
    const other = await Sandbox.connect(sandbox.sandboxId);
    let seen = "";
    const joined = await other.commands.connect(handle.pid, {
      onStdout: (d) => {
        seen += d;
      },
    });
    await assert.rejects(joined.wait(), (e) => {
      assert.ok(e instanceof CommandExitError, e);
      assert.equal(e.exitCode, 4);
      assert.equal(e.stdout, "line1\nline2\nline3\n");
      return true;
    });
    assert.equal(seen, "line1\nline2\nline3\n");
  });
});

test("handle.kill() ends the process; connect to an unknown pid is NotFoundError", async () => {
  await withSandbox(async (sandbox) => {
    const m = marker();
    const handle = await sandbox.commands.run(`sleep ${m}`, { background: true });
    // Started means spawned: the command line may take a moment to be `sleep`'s.
    assert.equal(await waitUntil(() => processRuns(`sleep ${m}`), 3_000), true);
    assert.equal(await handle.kill(), true);
    await assert.rejects(handle.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1);
    assert.equal(await waitUntil(async () => !(await processRuns(`sleep ${m}`)), 3_000), true);
    assert.equal(await sandbox.commands.kill(4_000_000), false);
    await assert.rejects(sandbox.commands.connect(4_000_000), (e) => e instanceof NotFoundError);
  });
});

test("sendStdin reaches a cat started with stdin: true", async () => {
  await withSandbox(async (sandbox) => {
    let out = "";
    const handle = await sandbox.commands.run("cat", {
      background: true,
      stdin: true,
      onStdout: (d) => {
        out += d;
      },
    });
    await handle.sendStdin("hello stdin\n");
    assert.equal(await waitUntil(() => out === "hello stdin\n", 5_000), true, out);
    await sandbox.commands.sendStdin(handle.pid, "second\n");
    assert.equal(await waitUntil(() => out === "hello stdin\nsecond\n", 5_000), true, out);
    await handle.closeStdin();
    const result = await handle.wait();
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, "hello stdin\nsecond\n");
  });
});
