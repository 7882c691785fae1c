// Flow control: a command execStream starts and reads is held back rather than losing output,
// a process follower waits when asked to (and skips by default), the choice is on the wire
// (resumes included), and a follow the daemon answers with 204 ends cleanly.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Sandbox, parseSSEStream, type LogEvent } from "sandstream";

import { useDaemon, type Daemon } from "./helpers.js";

let daemon: Daemon;
let sandbox: Sandbox;

before(async () => {
  daemon = await useDaemon();
  sandbox = await Sandbox.create();
});

after(async () => {
  await sandbox?.kill();
  await daemon?.stop();
});

const LINE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n";

/** Prints `size` bytes of LINE repeated as fast as it can, after `pause` seconds. */
function producer(size: number, pause = 0): string {
  return `${pause > 0 ? `sleep ${pause}; ` : ""}yes ${LINE.slice(0, -1)} | head -c ${size}`;
}

/** Checks that chunks are LINE repeated, in order, with holes only where a gap says. */
class TextCheck {
  pos = 0;
  received = 0;
  skipped = 0;
  gaps = 0;

  feed(chunk: string): void {
    const start = this.pos % LINE.length;
    const want = LINE.repeat(Math.floor(chunk.length / LINE.length) + 2).slice(start, start + chunk.length);
    if (chunk !== want) assert.fail(`output changed or out of order at offset ${this.pos}`);
    this.pos += chunk.length;
    this.received += chunk.length;
  }

  event(event: LogEvent): void {
    if (event.type === "stdout") this.feed(event.data);
    if (event.type === "gap") {
      assert.notEqual(event.bytes, null);
      this.gaps++;
      this.pos += event.bytes ?? 0;
      this.skipped += event.bytes ?? 0;
    }
  }
}

test("execStream: a fast producer's 256 MiB arrive whole and in order", { timeout: 300_000 }, async () => {
  const size = 256 << 20;
  const check = new TextCheck();
  const code = await sandbox.execStream(producer(size), {
    onStdout: (chunk) => check.feed(chunk),
    onGap: (gap) => assert.fail(`gap ${JSON.stringify(gap)}`),
  });
  assert.equal(code, 0);
  assert.equal(check.received, size);
});

async function follow(processId: string, flow?: "wait" | "skip"): Promise<TextCheck> {
  const check = new TextCheck();
  const options = flow === undefined ? {} : { flow };
  for await (const event of parseSSEStream<LogEvent>(await sandbox.streamProcessLogs(processId, options))) {
    check.event(event);
    if (event.type === "exit") assert.equal(event.exitCode, 0);
  }
  return check;
}

test("a waiting follower gets every byte; a skipping one is told what it missed", async () => {
  const size = 32 << 20;
  // The pause lets the follower attach before the first byte.
  const waited = await follow((await sandbox.startProcess(producer(size, 0.5))).id, "wait");
  assert.equal(waited.gaps, 0);
  assert.equal(waited.received, size);
  const skipped = await follow((await sandbox.startProcess(producer(size, 0.5))).id);
  assert.equal(skipped.received + skipped.skipped, size);
});

interface Sent {
  url: URL;
  headers: Record<string, string>;
  body: Record<string, unknown> | undefined;
}

/** A fetch that records each request and answers with the daemon's. */
function recorder(): { fetch: typeof fetch; sent: Sent[] } {
  const sent: Sent[] = [];
  const recording: typeof fetch = (input, init) => {
    const body = typeof init?.body === "string" ? (JSON.parse(init.body) as Record<string, unknown>) : undefined;
    sent.push({ url: new URL(String(input)), headers: { ...(init?.headers as Record<string, string>) }, body });
    return fetch(input, init);
  };
  return { fetch: recording, sent };
}

test("flow is on the wire: execStream and exec wait, a follower sends what it was given", async () => {
  const { fetch: recording, sent } = recorder();
  const remote = await Sandbox.connect(sandbox.id, { fetch: recording });
  assert.equal(await remote.execStream("echo hi", { onStdout: () => undefined }), 0);
  assert.equal((await remote.exec("true")).exitCode, 0);
  const stream = await remote.execStream("echo hi");
  await new Response(stream).text();
  const bodies = sent.filter((s) => /\/exec(\/stream)?$/.test(s.url.pathname)).map((s) => s.body?.["flow"]);
  assert.deepEqual(bodies, ["wait", "wait", "wait"]);

  const proc = await remote.startProcess("echo one");
  sent.length = 0;
  await new Response(await remote.streamProcessLogs(proc.id, { flow: "wait" })).text();
  await new Response(await proc.streamLogs()).text();
  assert.deepEqual(
    sent.map((s) => s.url.searchParams.get("flow")),
    ["wait", null],
  );
});

function sse(id: number, event: string, data: Record<string, unknown>): string {
  return `id: ${id}\nevent: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
}

test("a 204 answer to a follow ends it cleanly, first or on a resume", async () => {
  const proc = await sandbox.startProcess("echo one");
  await proc.waitForExit(10_000);
  const whole = await new Response(await proc.streamLogs()).text();
  const exitId = Number(/id: (\d+)\nevent: exit/.exec(whole)?.[1]);
  assert.ok(exitId > 0, whole);
  assert.equal(await new Response(await proc.streamLogs({ since: exitId, flow: "wait" })).text(), "");

  // A resume the daemon answers with 204: the follow is over, not lost.
  const sent: Sent[] = [];
  const scripted: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    sent.push({ url, headers: { ...(init?.headers as Record<string, string>) }, body: undefined });
    if (!url.pathname.endsWith("/logs")) return Response.json({ id: "sb_x", status: "running" });
    if (sent.length === 2) {
      return new Response(sse(1, "start", { processId: "p" }) + sse(2, "stdout", { data: "a" }), {
        headers: { "Content-Type": "text/event-stream" },
      });
    }
    return new Response(null, { status: 204 });
  };
  const fake = await Sandbox.connect("sb_x", { fetch: scripted, url: "http://127.0.0.1:9" });
  const events = [];
  for await (const e of parseSSEStream<LogEvent>(await fake.streamProcessLogs("p", { flow: "wait" }))) {
    events.push(e);
  }
  assert.deepEqual(events.map((e) => [e.type, e.data]), [["stdout", "a"]]);
  const logs = sent.slice(1);
  assert.equal(logs.length, 2);
  assert.deepEqual(logs.map((s) => s.url.searchParams.get("flow")), ["wait", "wait"]);
  assert.equal(logs[1]!.headers["Last-Event-ID"], "2");
});
