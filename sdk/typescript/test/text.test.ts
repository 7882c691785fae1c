// Line, ANSI and UTF-8 helpers must give the same result however the input is chunked.

import assert from "node:assert/strict";
import { test } from "node:test";

import { AnsiStripper, LineBuffer, Utf8Decoder, encodeSSE, lines, parseSSEStream, stripAnsi } from "sandstream";

/** Every way of cutting `text` into two pieces, and one character at a time. */
function splits(text: string): string[][] {
  const chars = Array.from(text);
  const out: string[][] = [chars];
  for (let i = 0; i <= chars.length; i++) out.push([chars.slice(0, i).join(""), chars.slice(i).join("")]);
  return out;
}

test("LineBuffer joins partial lines and strips \\r of \\r\\n", () => {
  const text = "alpha\r\nbeta\n\ngam";
  for (const pieces of splits(text)) {
    const buffer = new LineBuffer();
    const got = pieces.flatMap((p) => buffer.push(p));
    assert.deepEqual(got, ["alpha", "beta", ""]);
    assert.equal(buffer.flush(), "gam");
    assert.equal(buffer.flush(), undefined);
  }
});

test("AnsiStripper removes CSI, OSC and short escapes split anywhere", () => {
  const text = "\u001b[1;31mred\u001b[0m \u001b]0;title\u0007plain \u001b]8;;http://x\u001b\\link\u001b]8;;\u001b\\ \u001b(Bok\u001b7!";
  const expected = "red plain link ok!";
  assert.equal(stripAnsi(text), expected);
  for (const pieces of splits(text)) {
    const stripper = new AnsiStripper();
    assert.equal(pieces.map((p) => stripper.push(p)).join(""), expected);
  }
});

test("lines() with stripAnsi gives clean lines from arbitrary chunks", () => {
  const text = "\u001b[32m[1/2]\u001b[0m build\n\u001b[2K\r[2/2] done\nno newline";
  for (const pieces of splits(text)) {
    const got: string[] = [];
    const onChunk = lines((line) => got.push(line), { stripAnsi: true });
    for (const p of pieces) onChunk(p);
    onChunk.flush();
    assert.deepEqual(got, ["[1/2] build", "\r[2/2] done", "no newline"]);
  }
});

test("Utf8Decoder keeps a code point split between byte chunks", () => {
  const bytes = new TextEncoder().encode("a€😀日b");
  for (let i = 0; i <= bytes.length; i++) {
    for (let j = i; j <= bytes.length; j++) {
      const decoder = new Utf8Decoder();
      const text =
        decoder.decode(bytes.slice(0, i)) + decoder.decode(bytes.slice(i, j)) + decoder.decode(bytes.slice(j)) + decoder.flush();
      assert.equal(text, "a€😀日b");
    }
  }
  const broken = new Utf8Decoder();
  assert.equal(broken.decode(Uint8Array.of(0xe2, 0x82)) + broken.flush(), "\uFFFD");
});

test("parseSSEStream: byte-split events, multi-line data, comments, PandaStack names", async () => {
  const wire = new TextEncoder().encode(
    ': keepalive\n\nid: 2\nevent: stdout\ndata: {"chunk":"h€llo\\n"}\n\n' +
      'id: 3\nevent: stdout\ndata: {"type":"stdout",\ndata: "data":"x"}\n\n' +
      'id: 4\nevent: exit\ndata: {"exit_code":0}\n\n',
  );
  for (let cut = 0; cut <= wire.length; cut += 7) {
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(wire.slice(0, cut));
        controller.enqueue(wire.slice(cut));
        controller.close();
      },
    });
    const events: unknown[] = [];
    for await (const e of parseSSEStream<Record<string, unknown>>(stream)) events.push(e);
    assert.deepEqual(events, [
      { type: "stdout", chunk: "h€llo\n" },
      { type: "stdout", data: "x" },
      { type: "exit", exit_code: 0 },
    ]);
  }
});

test("encodeSSE round-trips through parseSSEStream", async () => {
  const data = JSON.stringify({ type: "stdout", data: "line1\nline2" });
  const bytes = encodeSSE({ id: "7", event: "stdout", data });
  assert.equal(new TextDecoder().decode(bytes), `id: 7\nevent: stdout\ndata: ${data}\n\n`);
  const events = [];
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(bytes);
      controller.close();
    },
  });
  for await (const e of parseSSEStream(stream)) events.push(e);
  assert.deepEqual(events, [{ type: "stdout", data: "line1\nline2" }]);
});
