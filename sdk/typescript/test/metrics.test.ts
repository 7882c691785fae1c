// Resource metrics against a daemon that samples five times a second: a busy CPU shows in the
// samples, the window (`start`, `end`) filters them, a paused sandbox is read without resuming
// it, and a missing one is NotFoundError.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { NotFoundError, Sandbox, type SandboxMetrics } from "sandstream";

import { API_KEY, startDaemon, type Daemon } from "./helpers.js";

let daemon: Daemon;

before(async () => {
  daemon = await startDaemon(["--metrics-interval-seconds", "0.2"]);
  process.env["SANDSTREAM_URL"] = daemon.url;
  process.env["SANDSTREAM_API_KEY"] = API_KEY;
});

after(async () => {
  await daemon?.stop();
});

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test("metrics: a busy CPU, the limits, the window", async () => {
  const sandbox = await Sandbox.create();
  try {
    const created = Date.now();
    await sandbox.exec("timeout 2 sh -c 'while :; do :; done'");
    await sleep(600);
    const metrics: SandboxMetrics = await sandbox.metrics();
    assert.equal(metrics.sandboxId, sandbox.id);
    assert.equal(metrics.intervalSeconds, 0.2);
    assert.equal(metrics.cpuCount, sandbox.info.limits.cpuPercent / 100);
    assert.equal(metrics.memoryTotalBytes, sandbox.info.limits.memoryMb * 2 ** 20);
    assert.ok(metrics.diskTotalBytes !== null && metrics.diskTotalBytes > 0, String(metrics.diskTotalBytes));
    assert.ok(metrics.samples.length >= 5, `${metrics.samples.length} samples`);
    const times = metrics.samples.map((s) => Date.parse(s.timestamp));
    assert.deepEqual(times, [...times].sort((a, b) => a - b));
    assert.match(metrics.samples[0]!.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const busiest = Math.max(...metrics.samples.map((s) => s.cpuUsedPct));
    assert.ok(busiest > 50, `busiest sample ${busiest}%`);
    for (const s of metrics.samples) {
      assert.ok(s.cpuUsedPct >= 0 && s.cpuUsedPct <= 100, String(s.cpuUsedPct));
      assert.ok(s.memoryUsedBytes > 0 && s.diskUsedBytes > 0, JSON.stringify(s));
      assert.equal(typeof s.memoryCacheBytes, "number");
    }

    const middle = Date.parse(metrics.samples[Math.floor(metrics.samples.length / 2)]!.timestamp);
    const later = await sandbox.metrics({ start: new Date(middle) });
    assert.ok(later.samples.length > 0 && Date.parse(later.samples[0]!.timestamp) >= middle);
    assert.deepEqual((await sandbox.metrics({ end: created - 60_000 })).samples, []);
    assert.deepEqual((await sandbox.metrics({ start: Date.now() + 3_600_000 })).samples, []);
    await assert.rejects(sandbox.metrics({ start: Number.NaN }), TypeError);
  } finally {
    await sandbox.kill();
  }
});

test("metrics of a paused sandbox leave it paused; of a missing one, NotFoundError", async () => {
  const sandbox = await Sandbox.create();
  try {
    await sleep(500);
    await sandbox.pause();
    const metrics = await sandbox.metrics();
    assert.ok(metrics.samples.length > 0);
    assert.equal((await sandbox.refresh()).status, "paused");
  } finally {
    await sandbox.kill();
  }
  await assert.rejects(sandbox.metrics(), NotFoundError);
});
