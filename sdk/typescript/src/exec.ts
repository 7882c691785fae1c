// Running a command in a sandbox: `exec` to completion, and `execStream` in its two shapes
// (per-chunk callbacks, or an SSE byte stream). Streams resume after a cut with Last-Event-ID
// and an Idempotency-Key, so a command never runs twice and no exit is guessed.

import type { StreamOpener } from "./client.js";
import { StreamLostError, apiError } from "./errors.js";
import { type ExecResult, type ExitInfo, execResultFromWire } from "./models.js";
import type {
  Command,
  CommandOptions,
  ExecOptions,
  ExecStreamCallbacks,
  StreamHooks,
} from "./options.js";
import type { SandboxScope, Wire } from "./scope.js";
import type { GapEvent, SseMessage } from "./sse.js";
import { type StreamState, exitFromCloudflare, parseData, resume, toByteStream } from "./streams.js";

export function commandText(command: Command): string {
  return typeof command === "string" ? command : command.join(" ");
}

/** The command request shared by exec, execStream and starting a process. */
export function commandBody(command: Command, options: CommandOptions): Wire {
  const body: Wire = typeof command === "string" ? { cmd: command } : { argv: [...command] };
  if (options.env !== undefined) body["env"] = options.env;
  if (options.cwd !== undefined) body["cwd"] = options.cwd;
  if (options.stdin !== undefined) body["stdin"] = options.stdin;
  const timeoutSeconds =
    options.timeoutSeconds ?? (options.timeout !== undefined ? options.timeout / 1000 : undefined);
  if (timeoutSeconds !== undefined) body["timeout_seconds"] = timeoutSeconds;
  if (options.idleTimeoutSeconds !== undefined) {
    body["idle_timeout_seconds"] = options.idleTimeoutSeconds;
  }
  if (options.mergeStderr !== undefined) body["merge_stderr"] = options.mergeStderr;
  if (options.logWindowBytes !== undefined) body["log_window_bytes"] = options.logWindowBytes;
  if (options.session !== undefined) body["session"] = options.session;
  return body;
}

function hasCallbacks(options: object): boolean {
  const o = options as { onStdout?: unknown; onStderr?: unknown };
  return typeof o.onStdout === "function" || typeof o.onStderr === "function";
}

/** `Sandbox.exec`. */
export async function exec(scope: SandboxScope, command: Command, options: ExecOptions): Promise<ExecResult> {
  if (options.stream === true || options.onOutput !== undefined) {
    return execStreaming(scope, command, options);
  }
  const headers = { "Idempotency-Key": options.idempotencyKey ?? crypto.randomUUID() };
  const json = { ...commandBody(command, options), flow: "wait" };
  const wire = await scope.client.retrying(options.signal, () =>
    scope.client.json<Wire>("POST", `${scope.path}/exec`, { json, headers, signal: options.signal }),
  );
  return execResultFromWire(wire, commandText(command));
}

/** `Sandbox.execStream`. */
export async function execStream(
  scope: SandboxScope,
  command: Command,
  options: CommandOptions & Partial<ExecStreamCallbacks>,
): Promise<number | ReadableStream<Uint8Array>> {
  if (hasCallbacks(options)) {
    const exit = await runStream(scope, command, options, (stream, data) => {
      const callback = stream === "stdout" ? options.onStdout : options.onStderr;
      callback?.(data);
    });
    return exit.exitCode;
  }
  const stop = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
  const messages = await openExecStream(scope, command, { ...options, signal }, { processId: undefined });
  return toByteStream(messages, stop);
}

async function execStreaming(scope: SandboxScope, command: Command, options: ExecOptions): Promise<ExecResult> {
  const out: string[] = [];
  const err: string[] = [];
  let processId = "";
  const exit = await runStream(
    scope,
    command,
    {
      ...options,
      onStart: (id) => {
        processId = id;
        options.onStart?.(id);
      },
    },
    (stream, data) => {
      (stream === "stdout" ? out : err).push(data);
      options.onOutput?.(stream, data);
    },
  );
  return {
    success: exit.exitCode === 0,
    exitCode: exit.exitCode,
    signal: exit.signal,
    reason: exit.reason,
    stdout: out.join(""),
    stderr: err.join(""),
    command: commandText(command),
    processId,
    durationMs: exit.durationMs,
    duration: exit.durationMs,
    truncated: false,
    timestamp: new Date().toISOString(),
  };
}

/** Consumes an exec stream into callbacks; resolves to its exit, rejects on `error`. */
async function runStream(
  scope: SandboxScope,
  command: Command,
  options: CommandOptions & StreamHooks,
  onOutput: (stream: "stdout" | "stderr", data: string) => void,
): Promise<ExitInfo> {
  const state: StreamState = { processId: undefined };
  const messages = await openExecStream(scope, command, options, state);
  for await (const message of messages) {
    if (message.comment !== undefined) continue;
    const data = parseData(message);
    switch (message.event) {
      case "start":
        state.processId = String(data["processId"] ?? "");
        await options.onStart?.(state.processId);
        break;
      case "stdout":
      case "stderr":
        onOutput(message.event, String(data["data"] ?? ""));
        break;
      case "gap":
        await options.onGap?.(data as unknown as GapEvent);
        break;
      case "complete":
        return exitFromCloudflare(data);
      case "error":
        throw apiError(String(data["code"] ?? "internal"), String(data["error"] ?? ""), 0);
    }
  }
  throw new StreamLostError(
    "the stream ended without an exit event",
    undefined,
    state.processId,
  );
}

/** Starts an exec stream (Cloudflare encoding) and returns its resumable messages. */
async function openExecStream(
  scope: SandboxScope,
  command: Command,
  options: CommandOptions,
  state: StreamState,
): Promise<AsyncGenerator<SseMessage>> {
  const json = { ...commandBody(command, options), format: "cloudflare", flow: "wait" };
  const key = options.idempotencyKey ?? crypto.randomUUID();
  const opener: StreamOpener = (lastEventId, signal) =>
    scope.client.send("POST", `${scope.path}/exec/stream`, {
      json,
      signal,
      headers: {
        Accept: "text/event-stream",
        "Idempotency-Key": key,
        ...(lastEventId !== undefined ? { "Last-Event-ID": lastEventId } : {}),
      },
    });
  return resume(scope.client, opener, options.signal, state, options.lastEventId);
}
