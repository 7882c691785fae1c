// Pausing and resuming: pause() and resume() answer the sandbox's state, a request resumes a
// paused sandbox, and one made with autoResume: false refuses with SandboxPausedError.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Sandbox, SandboxPausedError } from "sandstream";

import { useDaemon, type Daemon } from "./helpers.js";

let daemon: Daemon;

before(async () => {
  daemon = await useDaemon();
});

after(async () => {
  await daemon?.stop();
});

test("pause, a request that resumes, resume", async () => {
  const sandbox = await Sandbox.create();
  try {
    const paused = await sandbox.pause();
    assert.equal(paused.status, "paused");
    assert.equal(paused.pauseMode, "freeze");
    assert.ok(paused.pausedAt);
    assert.equal((await sandbox.pause()).status, "paused");
    assert.equal((await sandbox.exec("echo woke")).stdout, "woke\n");
    assert.equal((await sandbox.refresh()).status, "running");
    await sandbox.pause();
    const resumed = await sandbox.resume();
    assert.equal(resumed.status, "running");
    assert.equal(resumed.pausedAt, null);
  } finally {
    await sandbox.kill();
  }
});

test("autoResume: false refuses a request while paused", async () => {
  const sandbox = await Sandbox.create({ autoResume: false });
  try {
    assert.equal(sandbox.info.autoResume, false);
    await sandbox.pause();
    await assert.rejects(sandbox.exec("true"), (error: unknown) => {
      assert.ok(error instanceof SandboxPausedError, String(error));
      assert.equal(error.status, 409);
      return true;
    });
    await sandbox.resume();
    assert.equal((await sandbox.exec("echo ok")).stdout, "ok\n");
    const changed = await sandbox.setLifecycle({ autoPause: 600, onTimeout: "pause", autoResume: true });
    assert.equal(changed.autoPauseSeconds, 600);
    assert.equal(changed.onTimeout, "pause");
    assert.equal(changed.autoResume, true);
    assert.equal((await sandbox.setLifecycle({ autoPause: 0 })).autoPauseSeconds, null);
  } finally {
    await sandbox.kill();
  }
});

test("autoPause: an idle sandbox pauses itself", async () => {
  const sandbox = await Sandbox.create({ autoPause: 1 });
  try {
    assert.equal(sandbox.info.autoPauseSeconds, 1);
    const job = await sandbox.startProcess("sleep 3", { keepAwake: true });
    assert.equal(job.keepAwake, true);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    assert.equal((await sandbox.refresh()).status, "running", "kept awake by the job");
    const deadline = Date.now() + 6000;
    while ((await sandbox.refresh()).status !== "paused" && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.equal(sandbox.info.status, "paused");
  } finally {
    await sandbox.kill();
  }
});
