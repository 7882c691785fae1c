// Forks and snapshots with memory against the real daemon: a fork (one, or `count` of them)
// goes on with the source's code contexts and processes where they were, a snapshot with memory
// is a template whose sandboxes start with them, a fork of files still makes a template, and
// what cannot be checkpointed is NotImplementedError. The bodies sent, against a scripted fetch.

import assert from "node:assert/strict";
import { constants, accessSync } from "node:fs";
import { after, before, test } from "node:test";

import { InvalidRequestError, NotImplementedError, Sandbox, type Template } from "sandstream";

import { useDaemon, type Daemon } from "./helpers.js";

// The CRIU the daemon checkpoints sandboxes with (its `criu` default); scripts/install-criu builds
// it. Without it, a fork or snapshot with memory answers 501.
const CRIU = "/var/cache/sandstream/criu-4.2.1/sbin/criu";
const needsCriu = ((): false | string => {
  try {
    accessSync(CRIU, constants.X_OK);
    return false;
  } catch {
    return `CRIU is not installed at ${CRIU} (scripts/install-criu builds it)`;
  }
})();

const COUNTER = "i=0; while true; do echo $i > /tmp/count; i=$((i+1)); sleep 0.1; done";
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

let daemon: Daemon;

before(async () => {
  daemon = await useDaemon();
});

after(async () => {
  await daemon?.stop();
});

test("the bodies sent: memory unless a name is given, count only when given", async () => {
  const sent: Array<{ path: string; body: unknown }> = [];
  const sandboxWire = (id: string) => ({ id, template: "base", status: "running" });
  const fetch: typeof globalThis.fetch = async (input, init) => {
    const path = new URL(String(input instanceof Request ? input.url : input)).pathname;
    const body = typeof init?.body === "string" ? (JSON.parse(init.body) as Record<string, unknown>) : {};
    sent.push({ path, body });
    let answer: unknown = sandboxWire("sb_1");
    if (path.endsWith("/fork")) {
      const count = body["count"] as number | undefined;
      answer = count === undefined
        ? sandboxWire("sb_f")
        : { sandboxes: Array.from({ length: count }, (_, i) => sandboxWire(`sb_f${i}`)) };
    } else if (path.endsWith("/snapshot")) {
      answer = { name: body["name"], kind: "snapshot", status: "ready", memory: body["memory"] === true };
    }
    return new Response(JSON.stringify(answer), { status: 201, headers: { "Content-Type": "application/json" } });
  };
  const sb = await Sandbox.create({ url: "http://sandstream.test", fetch });
  const one: Sandbox = await sb.fork();
  assert.equal(one.id, "sb_f");
  assert.deepEqual(sent.at(-1)?.body, { memory: true });
  await sb.fork({ name: "files" });
  assert.deepEqual(sent.at(-1)?.body, { memory: false, name: "files" });
  const many: Sandbox[] = await sb.fork({ count: 3, memory: false });
  assert.deepEqual(many.map((s) => s.id), ["sb_f0", "sb_f1", "sb_f2"]);
  assert.deepEqual(sent.at(-1)?.body, { memory: false, count: 3 });
  await sb.fork({ name: "files", memory: true }); // the daemon's 400
  assert.deepEqual(sent.at(-1)?.body, { memory: true, name: "files" });
  const files: Template = await sb.snapshot("t");
  assert.deepEqual(sent.at(-1)?.body, { name: "t" });
  assert.equal(files.memory, false);
  const withMemory = await sb.snapshot("t", { memory: true });
  assert.deepEqual(sent.at(-1)?.body, { name: "t", memory: true });
  assert.equal(withMemory.memory, true);
});

test("a fork goes on with the code contexts and processes", { skip: needsCriu }, async () => {
  const sb = await Sandbox.create({ template: "code-interpreter" });
  try {
    await sb.runCode("x = 41");
    const [ctx] = await sb.listCodeContexts();
    const job = await sb.processes.start(COUNTER);
    await sleep(300);
    const forked = await sb.fork();
    try {
      assert.notEqual(forked.id, sb.id);
      assert.equal(forked.info.template, sb.info.template, "no template made");
      // runCode's default context carries over: the same context, its variable kept.
      assert.equal((await forked.runCode("x + 1")).text, "42");
      assert.deepEqual((await forked.listCodeContexts()).map((c) => c.id), [ctx!.id]);
      const copy = await forked.processes.get(job.id);
      assert.equal(copy.status, "running");
      const first = Number((await forked.exec("cat /tmp/count")).stdout);
      await sleep(400);
      assert.ok(Number((await forked.exec("cat /tmp/count")).stdout) > first, "it counts on");
      await forked.runCode("x = 0");
      assert.equal((await sb.runCode("x")).text, "41", "the source diverges");
      assert.equal((await forked.runCode("x")).text, "0");
    } finally {
      await forked.kill();
    }
  } finally {
    await sb.kill();
  }
});

test("a fork with count is an array of sandboxes", { skip: needsCriu }, async () => {
  const sb = await Sandbox.create({ template: "code-interpreter" });
  try {
    await sb.runCode("x = 7");
    const forks = await sb.fork({ count: 2 });
    try {
      assert.equal(forks.length, 2);
      assert.equal(new Set([sb.id, ...forks.map((f) => f.id)]).size, 3);
      for (const [i, f] of forks.entries()) await f.runCode(`x += ${i + 1}`);
      assert.deepEqual(await Promise.all(forks.map(async (f) => (await f.runCode("x")).text)), ["8", "9"]);
      assert.equal((await sb.runCode("x")).text, "7");
    } finally {
      for (const f of forks) await f.kill();
    }
  } finally {
    await sb.kill();
  }
});

test("a snapshot with memory starts its sandboxes where the source was", { skip: needsCriu }, async () => {
  const sb = await Sandbox.create({ template: "code-interpreter" });
  let ctxId: string;
  let jobId: string;
  try {
    await sb.runCode("answer = 6 * 7");
    ctxId = (await sb.listCodeContexts())[0]!.id;
    jobId = (await sb.processes.start(COUNTER)).id;
    await sleep(300);
    const t = await sb.snapshot("ts-mem", { memory: true });
    assert.equal(t.memory, true);
    assert.equal(t.kind, "snapshot");
    assert.equal(t.layersCount, 0);
    assert.equal(t.source, sb.id);
    assert.equal((await Sandbox.getTemplate("ts-mem")).memory, true);
    assert.equal((await Sandbox.getTemplate("base")).memory, false);
    assert.equal((await sb.snapshot("ts-files")).memory, false);
  } finally {
    await sb.kill();
  }
  try {
    const again = await Sandbox.create({ template: "ts-mem" });
    try {
      assert.deepEqual((await again.listCodeContexts()).map((c) => c.id), [ctxId]);
      assert.equal((await again.runCode("answer", { context: ctxId })).text, "42");
      assert.equal((await again.processes.get(jobId)).status, "running");
      const first = Number((await again.exec("cat /tmp/count")).stdout);
      await sleep(400);
      assert.ok(Number((await again.exec("cat /tmp/count")).stdout) > first);
    } finally {
      await again.kill();
    }
  } finally {
    for (const name of ["ts-mem", "ts-files"]) await Sandbox.deleteTemplate(name);
  }
});

test("a fork of files: a name means memory false, and makes that template", async () => {
  const sb = await Sandbox.create();
  const made: string[] = [];
  try {
    await sb.exec("echo kept > /workspace/f");
    await assert.rejects(sb.fork({ name: "ts-named", memory: true }), InvalidRequestError);
    const named = await sb.fork({ name: "ts-named" });
    made.push("ts-named");
    try {
      assert.equal(named.info.template, "ts-named");
      assert.equal(named.info.processesRunning, 0);
      assert.equal((await named.exec("cat /workspace/f")).stdout, "kept\n");
    } finally {
      await named.kill();
    }
    const forks = await sb.fork({ memory: false, count: 2 });
    made.push(forks[0]!.info.template);
    try {
      assert.match(forks[0]!.info.template, /^fork-/);
      assert.equal(forks[1]!.info.template, forks[0]!.info.template, "one snapshot, two forks");
      for (const f of forks) assert.equal((await f.exec("cat /workspace/f")).stdout, "kept\n");
    } finally {
      for (const f of forks) await f.kill();
    }
  } finally {
    await sb.kill();
    for (const name of made) await Sandbox.deleteTemplate(name);
  }
});

test("what cannot be checkpointed is NotImplementedError", async () => {
  const sb = await Sandbox.create();
  try {
    await sb.snapshot("ts-files-only");
  } finally {
    await sb.kill();
  }
  let generated: string | undefined;
  try {
    const ofFiles = await Sandbox.create({ template: "ts-files-only" });
    try {
      await assert.rejects(ofFiles.fork(), NotImplementedError);
      await assert.rejects(ofFiles.snapshot("ts-never", { memory: true }), NotImplementedError);
      const forked = await ofFiles.fork({ memory: false });
      generated = forked.info.template;
      await forked.kill();
    } finally {
      await ofFiles.kill();
    }
  } finally {
    await Sandbox.deleteTemplate("ts-files-only");
    if (generated !== undefined) await Sandbox.deleteTemplate(generated);
  }
});
