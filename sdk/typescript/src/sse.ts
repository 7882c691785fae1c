// Server-Sent Events on the client: reading a byte stream into messages (UTF-8 decoded with a
// streaming decoder, so a code point split between network reads is kept whole), encoding
// messages back to SSE bytes, and parseSSEStream, which yields each event's JSON data.

import { createParser, type EventSourceMessage } from "eventsource-parser";

import { Utf8Decoder } from "./text.js";

/** Why a process ended (spec/README.md, "Exit"). */
export type ExitReason = "exited" | "signaled" | "timeout" | "idle_timeout" | "killed" | "oom";

/** `start` in the Cloudflare encoding. */
export interface StartEvent {
  type: "start";
  timestamp: string;
  processId: string;
  sandboxId: string;
  pid: number;
  command: string;
}

/** A chunk of stdout or stderr: as read() returned it, not a line. */
export interface OutputEvent {
  type: "stdout" | "stderr";
  timestamp: string;
  data: string;
}

/** The process's one exit record. `exitCode` is 128 + n for signal n, never a guess. */
export interface CompleteEvent {
  type: "complete";
  timestamp: string;
  exitCode: number;
  signal: string | null;
  reason: ExitReason;
  durationMs: number;
}

/**
 * How a process's log stream ends (streamProcessLogs): its exit record, with `data` saying it
 * in words ("Process completed with exit code 0"), as Cloudflare's LogEvent readers expect.
 */
export interface ExitEvent extends Omit<CompleteEvent, "type"> {
  type: "exit";
  data: string;
}

/** The reader fell behind the daemon's retained window: entries fromSeq..toSeq are gone. */
export interface GapEvent {
  type: "gap";
  timestamp: string;
  fromSeq: number;
  toSeq: number;
  /** Bytes of output lost, when known. */
  bytes: number | null;
}

/** An infrastructure failure that ended the stream without an exit (spec/events.md). */
export interface ErrorEvent {
  type: "error";
  timestamp: string;
  error: string;
  code: string;
}

/** What `parseSSEStream(await sandbox.execStream(cmd))` yields. */
export type ExecEvent = StartEvent | OutputEvent | CompleteEvent | GapEvent | ErrorEvent;

/**
 * What `parseSSEStream<LogEvent>(await sandbox.streamProcessLogs(id))` yields: output events,
 * then `exit` or `error`. Every event carries a string `data` and `processId`, so
 * `log.data.includes(...)` is safe on each of them.
 */
export type LogEvent = (
  | OutputEvent
  | ExitEvent
  | (GapEvent & { data: "" })
  | (ErrorEvent & { data: "" })
) & { processId: string };

/** One SSE message or comment as read from the wire. */
export interface SseMessage {
  id?: string | undefined;
  event?: string | undefined;
  data: string;
  /** Set for a comment line (`: keepalive`); then `data` is empty. */
  comment?: string;
}

/** Reads a byte stream as SSE messages and comments. Cancels the stream when stopped early. */
export async function* readSSE(
  stream: ReadableStream<Uint8Array>,
  signal?: AbortSignal,
): AsyncGenerator<SseMessage> {
  const queue: SseMessage[] = [];
  const parser = createParser({
    onEvent: (message: EventSourceMessage) => {
      queue.push({ id: message.id, event: message.event, data: message.data });
    },
    onComment: (comment: string) => {
      queue.push({ data: "", comment });
    },
  });
  const decoder = new Utf8Decoder();
  const reader = stream.getReader();
  const onAbort = (): void => {
    reader.cancel(signal?.reason).catch(() => undefined);
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      signal?.throwIfAborted();
      const { done, value } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value));
      while (queue.length > 0) yield queue.shift() as SseMessage;
    }
    signal?.throwIfAborted();
    parser.feed(decoder.flush());
    while (queue.length > 0) yield queue.shift() as SseMessage;
  } finally {
    signal?.removeEventListener("abort", onAbort);
    reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}

const encoder = new TextEncoder();

/** Encodes one message as SSE bytes. Multi-line data becomes several `data:` lines. */
export function encodeSSE(message: SseMessage): Uint8Array {
  if (message.comment !== undefined) return encoder.encode(`:${message.comment}\n\n`);
  let text = "";
  if (message.id !== undefined) text += `id: ${message.id}\n`;
  if (message.event !== undefined) text += `event: ${message.event}\n`;
  for (const line of message.data.split(/\r\n|\r|\n/)) text += `data: ${line}\n`;
  return encoder.encode(text + "\n");
}

/**
 * Yields the JSON `data` of each event of an SSE byte stream, typed as T. An event whose data
 * has no `type` field gets the SSE event name as its `type`, so PandaStack-encoded streams
 * (`event: stdout` + `{"chunk": ...}`) parse too. Comments and empty events are skipped.
 * Breaking out of the loop cancels the stream.
 */
export async function* parseSSEStream<T = ExecEvent>(
  stream: ReadableStream<Uint8Array>,
  signal?: AbortSignal,
): AsyncGenerator<T> {
  for await (const message of readSSE(stream, signal)) {
    if (message.comment !== undefined || message.data === "") continue;
    const value: unknown = JSON.parse(message.data);
    if (
      value !== null &&
      typeof value === "object" &&
      !("type" in value) &&
      message.event !== undefined
    ) {
      yield { type: message.event, ...value } as T;
    } else {
      yield value as T;
    }
  }
}
