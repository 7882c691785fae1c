// Pausing and resuming: pause() and resume() answer the sandbox's state, a request resumes a
// paused sandbox, and one made with autoResume: false refuses with SandboxPausedError. autoPause
// with its mode on the wire and back; a checkpoint (CRIU) that keeps a background process.

import assert from "node:assert/strict";
import { constants, accessSync } from "node:fs";
import { after, before, test } from "node:test";

import { Sandbox, SandboxPausedError, type PauseMode } from "sandstream";

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

// The CRIU the daemon checkpoints sandboxes with (its `criu` default); scripts/install-criu builds
// it. Without it, a pause with mode "checkpoint" answers 501.
const CRIU = "/var/cache/sandstream/criu-4.2.1/sbin/criu";
const needsCriu = ((): false | string => {
  try {
    accessSync(CRIU, constants.X_OK);
    return false;
  } catch {
    return `CRIU is not installed at ${CRIU} (scripts/install-criu builds it)`;
  }
})();

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test("autoPauseMode: sent with autoPause only, and read back", async () => {
  const sent: unknown[] = [];
  const fetch: typeof globalThis.fetch = async (_input, init) => {
    const body: unknown = typeof init?.body === "string" ? JSON.parse(init.body) : undefined;
    sent.push(body);
    const autoPause = (body as { auto_pause?: unknown } | undefined)?.auto_pause ?? null;
    return new Response(JSON.stringify({ id: "sb_1", status: "running", auto_pause: autoPause }), {
      status: 200,
      headers: { "Content-Type": "application/json" },
    });
  };
  const options = { url: "http://sandstream.test", fetch };
  const sandbox = await Sandbox.create({ ...options, autoPause: 60, autoPauseMode: "checkpoint" });
  assert.deepEqual(sent.at(-1), { auto_pause: { idle_seconds: 60, mode: "checkpoint" } });
  assert.equal(sandbox.info.autoPauseMode, "checkpoint");
  await sandbox.setLifecycle({ autoPause: 30 });
  assert.deepEqual(sent.at(-1), { auto_pause: { idle_seconds: 30 } });
  assert.equal(sandbox.info.autoPauseMode, "freeze", "a daemon that leaves the mode out freezes");
  await sandbox.setLifecycle({ autoPause: 0, autoPauseMode: "checkpoint" });
  assert.deepEqual(sent.at(-1), { auto_pause: null });
  assert.equal(sandbox.info.autoPauseSeconds, null);
  assert.equal(sandbox.info.autoPauseMode, null);
  const count = sent.length;
  await assert.rejects(sandbox.setLifecycle({ autoPauseMode: "checkpoint" }), TypeError);
  await assert.rejects(Sandbox.create({ ...options, autoPauseMode: "freeze" }), TypeError);
  assert.equal(sent.length, count, "nothing sent");
});

test("autoPauseMode against the daemon: at create and through setLifecycle", async () => {
  const sandbox = await Sandbox.create({ autoPause: 600, autoPauseMode: "checkpoint" });
  try {
    const pair = (): [number | null, PauseMode | null] => [sandbox.info.autoPauseSeconds, sandbox.info.autoPauseMode];
    assert.deepEqual(pair(), [600, "checkpoint"]);
    await sandbox.refresh();
    assert.deepEqual(pair(), [600, "checkpoint"]);
    await sandbox.setLifecycle({ autoPause: 300, autoPauseMode: "freeze" });
    assert.deepEqual(pair(), [300, "freeze"]);
    await sandbox.setLifecycle({ autoPause: 120, autoPauseMode: "checkpoint", onTimeout: "pause" });
    assert.deepEqual(pair(), [120, "checkpoint"]);
    assert.equal(sandbox.info.onTimeout, "pause");
    await sandbox.setLifecycle({ onTimeout: "kill" });
    assert.deepEqual(pair(), [120, "checkpoint"], "kept when not given");
    await sandbox.setLifecycle({ autoPause: 60 });
    assert.deepEqual(pair(), [60, "freeze"], "no mode: the daemon's default");
    await sandbox.setLifecycle({ autoPause: 0 });
    assert.deepEqual(pair(), [null, null]);
  } finally {
    await sandbox.kill();
  }
  const plain = await Sandbox.create({ autoPause: 600 });
  try {
    assert.equal(plain.info.autoPauseMode, "freeze");
  } finally {
    await plain.kill();
  }
});

test("autoPauseMode checkpoint: an idle sandbox checkpoints itself", { skip: needsCriu }, async () => {
  const sandbox = await Sandbox.create({ autoPause: 1, autoPauseMode: "checkpoint" });
  try {
    const job = await sandbox.startProcess("sleep 600");
    const deadline = Date.now() + 15_000;
    while ((await sandbox.refresh()).status !== "paused" && Date.now() < deadline) await sleep(200);
    assert.equal(sandbox.info.status, "paused");
    assert.equal(sandbox.info.pauseMode, "checkpoint");
    assert.equal((await sandbox.exec("echo awake")).stdout, "awake\n", "a request restores it");
    assert.equal((await sandbox.refresh()).status, "running");
    assert.equal(sandbox.info.pauseMode, null);
    const pid = job.pid;
    assert.equal((await job.refresh()).status, "running");
    assert.equal(job.pid, pid);
  } finally {
    await sandbox.kill();
  }
});

test("pause({ mode: checkpoint }) and resume keep a background process", { skip: needsCriu }, async () => {
  const sandbox = await Sandbox.create({ autoResume: false });
  try {
    const job = await sandbox.startProcess(
      "i=0; while true; do echo $i > /tmp/count; i=$((i+1)); sleep 0.1; done",
    );
    await sleep(500);
    const pid = (await job.refresh()).pid;
    const paused = await sandbox.pause({ mode: "checkpoint" });
    assert.equal(paused.status, "paused");
    assert.equal(paused.pauseMode, "checkpoint");
    assert.ok(paused.pausedAt);
    assert.equal((await sandbox.refresh()).pauseMode, "checkpoint");
    assert.equal((await sandbox.pause({ mode: "checkpoint" })).pauseMode, "checkpoint", "as it is");
    const resumed = await sandbox.resume();
    assert.equal(resumed.status, "running");
    assert.equal(resumed.pauseMode, null);
    assert.equal(resumed.pausedAt, null);
    await job.refresh();
    assert.equal(job.status, "running");
    assert.equal(job.pid, pid, "restored with the same pid");
    const first = Number((await sandbox.exec("cat /tmp/count")).stdout);
    await sleep(500);
    assert.ok(Number((await sandbox.exec("cat /tmp/count")).stdout) > first, "and it counts on");
  } finally {
    await sandbox.kill();
  }
});
