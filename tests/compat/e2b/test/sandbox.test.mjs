// E2B's JS SDK against a real sandstreamd: the control plane (create, connect, getInfo, list,
// setTimeout, kill) and the SDK's own error classes for what goes wrong.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import {
  AuthenticationError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
} from "e2b";

import { spawnDaemon } from "../../daemon.mjs";
import { API_KEY, HOME, startDaemon, waitUntil } from "./daemon.mjs";

// A background command that counts in /tmp/n: a process whose state is its memory.
const COUNTER = "n=0; while :; do n=$((n+1)); echo $n > /tmp/n; sleep 0.1; done";

let daemon;

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  await daemon?.stop();
});

// The last number COUNTER wrote in the sandbox (0 before its first).
async function count(sandbox) {
  const r = await sandbox.commands.run("cat /tmp/n 2>/dev/null || echo 0");
  return Number(r.stdout.trim() || 0);
}

test("metadata and envs of create show in getInfo, Sandbox.list and commands", async () => {
  const tag = `e2b-${randomBytes(4).toString("hex")}`;
  const metadata = { suite: tag, owner: "ci" };
  const sandbox = await Sandbox.create({ metadata, envs: { GREETING: "hi there" }, timeoutMs: 120_000 });
  try {
    const v1 = await (await daemon.v1("GET", `/v1/sandboxes/${sandbox.sandboxId}`)).json();
    assert.deepEqual(v1.metadata, metadata);
    assert.equal((await sandbox.commands.run('echo "$GREETING"')).stdout, "hi there\n");

    const info = await sandbox.getInfo();
    assert.equal(info.sandboxId, sandbox.sandboxId);
    assert.equal(info.templateId, v1.template);
    assert.deepEqual(info.metadata, metadata);
    assert.equal(info.state, "running");
    assert.ok(info.startedAt instanceof Date && info.endAt instanceof Date);
    const span = (info.endAt - info.startedAt) / 1000;
    assert.ok(Math.abs(span - 120) < 3, `${span} s`);

    const found = [];
    const paginator = Sandbox.list();
    while (paginator.hasNext) {
      for (const s of await paginator.nextItems()) if (s.sandboxId === sandbox.sandboxId) found.push(s);
    }
    assert.equal(found.length, 1);
    assert.deepEqual(found[0].metadata, metadata);
    const filtered = await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems();
    assert.deepEqual(filtered.map((s) => s.sandboxId), [sandbox.sandboxId]);
  } finally {
    await sandbox.kill();
  }
});

test("setTimeout moves the end, and a short one ends the sandbox", async () => {
  const sandbox = await Sandbox.create();
  try {
    await sandbox.setTimeout(600_000);
    const info = await sandbox.getInfo();
    const left = (info.endAt - Date.now()) / 1000;
    assert.ok(left > 590 && left <= 601, `${left} s`);
    await sandbox.setTimeout(1_000);
    assert.equal(await waitUntil(async () => !(await daemon.exists(sandbox.sandboxId)), 8_000, 200), true);
    assert.equal(await sandbox.isRunning(), false);
  } finally {
    await sandbox.kill();
  }
});

test("kill ends the sandbox; isRunning follows; a second kill is false", async () => {
  const sandbox = await Sandbox.create();
  assert.equal(await sandbox.isRunning(), true);
  assert.equal(await sandbox.kill(), true);
  assert.equal(await daemon.exists(sandbox.sandboxId), false);
  assert.equal(await sandbox.isRunning(), false);
  assert.equal(await Sandbox.kill(sandbox.sandboxId), false);
  // E2B's answer for a sandbox that is gone ("The sandbox was not found"), as the SDK maps it.
  await assert.rejects(sandbox.commands.run("true"), (e) => e instanceof SandboxNotFoundError);
  await assert.rejects(sandbox.files.read("/home/user/x"), (e) => {
    assert.ok(e instanceof TimeoutError, e);
    assert.match(e.message, /was not found/);
    return true;
  });
});

test("Sandbox.connect reaches the same sandbox; getHost names the preview host", async () => {
  const sandbox = await Sandbox.create();
  try {
    const again = await Sandbox.connect(sandbox.sandboxId);
    assert.equal(again.sandboxId, sandbox.sandboxId);
    await again.files.write("/home/user/from-connect.txt", "via connect");
    assert.equal((await sandbox.commands.run("cat /home/user/from-connect.txt")).stdout, "via connect");
    assert.equal(sandbox.getHost(8000), `8000-${sandbox.sandboxId}.localhost:${daemon.port}`);
  } finally {
    await sandbox.kill();
  }
});

test("a wrong API key is AuthenticationError with sandstream's reason", async () => {
  await assert.rejects(Sandbox.create({ apiKey: "not-the-key" }), (e) => {
    assert.ok(e instanceof AuthenticationError, e);
    assert.match(e.message, /wrong API key/);
    return true;
  });
});

test("an unknown template fails naming it", async () => {
  await assert.rejects(Sandbox.create("no-such-template-e2b"), (e) => {
    assert.ok(e instanceof SandboxError, e);
    assert.match(e.message, /no-such-template-e2b/);
    return true;
  });
});

test("fork({ count: 2 }) gives running Sandboxes with the source's files and processes; updateNetwork without internet is 409", async () => {
  // Fork checkpoints the sandbox's memory with CRIU (tests/integration/test_e2b.py has the
  // code interpreter's variables). No egress here (the daemon has none): updateNetwork's effect
  // is tested where there is, tests/integration/test_egress.py.
  const sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  let forks = [];
  try {
    await sandbox.files.write(`${HOME}/state.txt`, "before the fork");
    const counter = await sandbox.commands.run(COUNTER, { background: true });
    forks = await sandbox.fork({ count: 2, timeoutMs: 60_000 });
    assert.equal(forks.length, 2);
    for (const fork of forks) assert.ok(fork instanceof Sandbox, `${fork}`);
    const ids = forks.map((f) => f.sandboxId);
    assert.equal(new Set(ids).size, 2);
    assert.ok(!ids.includes(sandbox.sandboxId), ids.join());
    for (const [i, fork] of forks.entries()) {
      assert.equal((await fork.commands.run("hostname")).stdout, `${fork.sandboxId}\n`);
      assert.equal(await fork.files.read(`${HOME}/state.txt`), "before the fork");
      await fork.files.write(`${HOME}/state.txt`, `fork ${i}`);
      assert.ok((await fork.commands.list()).some((p) => p.pid === counter.pid), "the counter");
      assert.equal(await daemon.exists(fork.sandboxId), true);
      const info = await fork.getInfo();
      const left = (info.endAt - Date.now()) / 1000;
      assert.ok(Math.abs(left - 60) < 5, `${left} s`);
    }
    for (const [i, fork] of forks.entries()) {
      assert.equal(String(await daemon.readFile(fork.sandboxId, `${HOME}/state.txt`)), `fork ${i}`);
    }
    const kept = await daemon.readFile(sandbox.sandboxId, `${HOME}/state.txt`);
    assert.equal(String(kept), "before the fork");
    assert.equal((await sandbox.commands.run("hostname")).stdout, `${sandbox.sandboxId}\n`);
    const listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
    for (const id of [sandbox.sandboxId, ...ids]) assert.ok(listed.includes(id), id);
    for (const fork of forks) assert.equal(await fork.kill(), true);
    for (const id of ids) assert.equal(await daemon.exists(id), false);
    assert.equal(await sandbox.isRunning(), true);

    await assert.rejects(
      sandbox.updateNetwork({ allowOut: ["pypi.org"], denyOut: ["0.0.0.0/0"] }),
      (e) => {
        assert.ok(!(e instanceof SandboxNotFoundError), `${e}`);
        assert.match(e.message, /409/);
        return true;
      },
    );
    assert.equal(await sandbox.isRunning(), true);
  } finally {
    for (const fork of forks) if (fork instanceof Sandbox) await fork.kill();
    await sandbox.kill();
  }
  await assert.rejects(Sandbox.fork(sandbox.sandboxId), (e) => e instanceof SandboxNotFoundError);
});

test("createSnapshot, listSnapshots, Sandbox.create(snapshotId) with its processes running, deleteSnapshot", async () => {
  const sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  const name = `e2b-snap-${randomBytes(4).toString("hex")}`;
  let snapshotId;
  const made = [];
  try {
    await sandbox.files.write(`${HOME}/kept.txt`, "in the snapshot");
    const counter = await sandbox.commands.run(COUNTER, { background: true });
    assert.ok(await waitUntil(async () => (await count(sandbox)) > 3, 10_000, 100));
    const snap = await sandbox.createSnapshot();
    snapshotId = snap.snapshotId;
    assert.ok(snapshotId);
    assert.deepEqual(snap.names, [snapshotId]);
    assert.equal(await sandbox.isRunning(), true);
    const named = await Sandbox.createSnapshot(sandbox.sandboxId, { name });
    assert.deepEqual(named, { snapshotId: name, names: [name] });

    const ids = async (paginator) => (await paginator.nextItems()).map((s) => s.snapshotId);
    const ofSandbox = Sandbox.listSnapshots({ sandboxId: sandbox.sandboxId });
    assert.deepEqual(await ids(ofSandbox), [name, snapshotId]);
    assert.deepEqual(await ids(sandbox.listSnapshots()), [name, snapshotId]);
    assert.deepEqual(await ids(Sandbox.listSnapshots({ name })), [name]);
    assert.ok((await ids(Sandbox.listSnapshots())).includes(snapshotId));

    // Made from it: the files, and the counter running on from where it was.
    const fromSnap = await Sandbox.create(snapshotId, { timeoutMs: 60_000 });
    made.push(fromSnap);
    assert.equal(await fromSnap.files.read(`${HOME}/kept.txt`), "in the snapshot");
    assert.ok((await fromSnap.commands.list()).some((p) => p.pid === counter.pid), "the counter");
    const at = await count(fromSnap);
    assert.ok(at > 3, `${at}: the counter started again`);
    assert.ok(await waitUntil(async () => (await count(fromSnap)) > at + 3, 10_000, 100));
    assert.equal((await fromSnap.getInfo()).templateId, snapshotId);
    const v1 = await (await daemon.v1("GET", `/v1/sandboxes/${fromSnap.sandboxId}`)).json();
    assert.equal(v1.template, snapshotId);

    // In use, it is not deleted: an error naming the sandbox that uses it, not a quiet false.
    await assert.rejects(Sandbox.deleteSnapshot(snapshotId), (e) => {
      assert.ok(e instanceof SandboxError, `${e}`);
      assert.match(e.message, /409/);
      assert.ok(e.message.includes(fromSnap.sandboxId), e.message);
      return true;
    });
    assert.deepEqual(await ids(Sandbox.listSnapshots({ name: snapshotId })), [snapshotId]);
    assert.equal(await fromSnap.kill(), true);
    assert.equal(await Sandbox.deleteSnapshot(snapshotId), true);
    assert.equal(await Sandbox.deleteSnapshot(snapshotId), false);
    assert.equal((await daemon.v1("GET", `/v1/templates/${snapshotId}`)).status, 404);
    assert.deepEqual(await ids(sandbox.listSnapshots()), [name]);
    assert.equal(await Sandbox.deleteSnapshot(name), true);
    assert.deepEqual(await ids(sandbox.listSnapshots()), []);
  } finally {
    for (const s of made) await s.kill();
    await sandbox.kill();
    if (snapshotId) await Sandbox.deleteSnapshot(snapshotId);
    await Sandbox.deleteSnapshot(name);
  }
});

test("getMetrics reads the samples of a daemon that samples every 0.2 s", async () => {
  // A daemon of its own, reached through the constructor's options (the other tests keep the
  // environment's, and the default interval).
  const sampling = await spawnDaemon({
    apiKey: API_KEY,
    prefix: "e2b-metrics",
    env: { SANDSTREAM_METRICS_INTERVAL_SECONDS: "0.2" },
  });
  const opts = { apiUrl: sampling.url, sandboxUrl: sampling.url, apiKey: API_KEY };
  try {
    const sandbox = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
    const created = Date.now();
    try {
      await sandbox.commands.run("timeout 2 sh -c 'while :; do :; done' || true");
      await new Promise((resolve) => setTimeout(resolve, 600));
      const metrics = await sandbox.getMetrics();
      const { limits } = await (await fetch(`${sampling.url}/v1/sandboxes/${sandbox.sandboxId}`, {
        headers: { Authorization: `Bearer ${API_KEY}` },
      })).json();
      assert.ok(metrics.length >= 5, `${metrics.length} samples`);
      for (const m of metrics) {
        assert.ok(m.timestamp instanceof Date && !Number.isNaN(m.timestamp.getTime()));
        assert.equal(m.cpuCount, Math.ceil(limits.cpu_percent / 100));
        assert.equal(m.memTotal, limits.memory_mb * 2 ** 20);
        assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal && m.memCache >= 0, JSON.stringify(m));
        assert.ok(m.diskTotal > 0 && m.diskUsed > 0 && m.diskUsed <= m.diskTotal, JSON.stringify(m));
        assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, JSON.stringify(m));
      }
      const times = metrics.map((m) => m.timestamp.getTime());
      assert.deepEqual(times, [...times].sort((a, b) => a - b));
      // A core's worth of spinning; other work on a loaded machine may take part of it.
      assert.ok(Math.max(...metrics.map((m) => m.cpuUsedPct)) > 25, JSON.stringify(metrics));
      assert.ok((await Sandbox.getMetrics(sandbox.sandboxId, opts)).length >= metrics.length);
      assert.deepEqual(await sandbox.getMetrics({ end: new Date(created - 60_000) }), []);
      assert.deepEqual(await sandbox.getMetrics({ start: new Date(Date.now() + 3_600_000) }), []);
    } finally {
      await sandbox.kill();
    }
    await assert.rejects(Sandbox.getMetrics(sandbox.sandboxId, opts), (e) => e instanceof SandboxNotFoundError);
  } finally {
    await sampling.stop();
  }
});
