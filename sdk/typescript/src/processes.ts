// A sandbox's background processes: `sandbox.processes` (start, list, get) and the operations
// on one process by id that both its `Process` handle and the Sandbox's by-id calls use: kill and
// signal, logs (JSON, followed, searched), waiting for the exit, stdin.

import type { StreamOpener } from "./client.js";
import { ProcessExitedError, StreamLostError, TimeoutError, apiError } from "./errors.js";
import { commandBody } from "./exec.js";
import { type ProcessInfo, type ProcessLogs, logsFromWire, processFromWire } from "./models.js";
import type {
  Command,
  Flow,
  LogMatch,
  StartProcessOptions,
  StreamLogsOptions,
  WaitForLogOptions,
} from "./options.js";
import { Process, type ProcessOperations } from "./process.js";
import type { SandboxScope, Wire } from "./scope.js";
import type { SseMessage } from "./sse.js";
import { exitFromCloudflare, parseData, resume, toByteStream } from "./streams.js";
import { LineBuffer } from "./text.js";

/** `sandbox.processes`: starts, lists and finds the sandbox's background processes. */
export class Processes {
  readonly #scope: SandboxScope;
  readonly #ops: ProcessOps;

  /** @internal */
  constructor(scope: SandboxScope, ops: ProcessOps) {
    this.#scope = scope;
    this.#ops = ops;
  }

  /** Starts a background process; stdin stays open unless `stdin` is given. */
  async start(command: Command, options: StartProcessOptions = {}): Promise<Process> {
    const client = this.#scope.client;
    const json = commandBody(command, options);
    if (options.processId !== undefined) json["id"] = options.processId;
    if (options.keepAwake) json["keep_awake"] = true;
    const headers = { "Idempotency-Key": options.idempotencyKey ?? crypto.randomUUID() };
    const wire = await client.retrying(options.signal, () =>
      client.json<Wire>("POST", `${this.#scope.path}/processes`, { json, headers, signal: options.signal }),
    );
    return new Process(this.#ops, processFromWire(wire));
  }

  /** The sandbox's processes, oldest first; `status` filters. */
  async list(status?: "running" | "exited"): Promise<Process[]> {
    return (await this.#ops.list(status)).map((info) => new Process(this.#ops, info));
  }

  /** NotFoundError if the sandbox has no such process. */
  async get(processId: string): Promise<Process> {
    return new Process(this.#ops, await this.#ops.info(processId));
  }
}

/** The operations on one process by id. */
export class ProcessOps implements ProcessOperations {
  readonly #scope: SandboxScope;

  constructor(scope: SandboxScope) {
    this.#scope = scope;
  }

  #path(processId: string): string {
    return `${this.#scope.path}/processes/${encodeURIComponent(processId)}`;
  }

  async list(status?: "running" | "exited"): Promise<ProcessInfo[]> {
    const wire = await this.#scope.client.json<{ processes: Wire[] }>("GET", `${this.#scope.path}/processes`, {
      query: { status },
    });
    return wire.processes.map(processFromWire);
  }

  async info(processId: string): Promise<ProcessInfo> {
    return processFromWire(await this.#scope.client.json<Wire>("GET", this.#path(processId)));
  }

  async kill(processId: string, signal?: string | number, options: { group?: boolean } = {}): Promise<ProcessInfo> {
    const client = this.#scope.client;
    if (signal === undefined) {
      return processFromWire(await client.json<Wire>("DELETE", this.#path(processId)));
    }
    const json: Wire = { signal };
    if (options.group !== undefined) json["group"] = options.group;
    return processFromWire(await client.json<Wire>("POST", `${this.#path(processId)}/signal`, { json }));
  }

  async killAll(): Promise<number> {
    const running = await this.list("running");
    const results = await Promise.allSettled(running.map((p) => this.kill(p.id)));
    return results.filter((r) => r.status === "fulfilled").length;
  }


  async streamLogs(
    processId: string,
    options: StreamLogsOptions = {},
  ): Promise<ReadableStream<Uint8Array>> {
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const messages = await this.#openLogStream(processId, options.since, signal, options.flow);
    return toByteStream(messages, stop, (message) => {
      if (message.comment !== undefined) return message;
      if (message.event === "start") return undefined;
      const data = parseData(message);
      const event: Wire = { ...data, data: typeof data["data"] === "string" ? data["data"] : "", processId };
      return { id: message.id, event: message.event, data: JSON.stringify(event) };
    });
  }

  async #openLogStream(
    processId: string,
    since: number | undefined,
    signal: AbortSignal | undefined,
    flow?: Flow,
  ): Promise<AsyncGenerator<SseMessage>> {
    const opener: StreamOpener = (lastEventId, attemptSignal) =>
      this.#scope.client.send("GET", `${this.#path(processId)}/logs`, {
        query: { follow: 1, format: "cloudflare", flow, since: lastEventId === undefined ? since : undefined },
        signal: attemptSignal,
        headers: {
          Accept: "text/event-stream",
          ...(lastEventId !== undefined ? { "Last-Event-ID": lastEventId } : {}),
        },
      });
    return resume(this.#scope.client, opener, signal, { processId });
  }

  async getLogs(
    processId: string,
    options: { since?: number; tail?: number } = {},
  ): Promise<ProcessLogs> {
    const wire = await this.#scope.client.json<Wire>("GET", `${this.#path(processId)}/logs`, {
      query: { since: options.since, tail: options.tail },
    });
    return logsFromWire(wire);
  }

  async waitForExit(processId: string, options: { timeout?: number } = {}): Promise<ProcessInfo> {
    const deadline = options.timeout === undefined ? undefined : Date.now() + options.timeout;
    for (;;) {
      // A long-poll shorter than fetch's own 300 s header timeout, repeated.
      const remaining = deadline === undefined ? 240_000 : Math.max(0, deadline - Date.now());
      const seconds = Math.max(1, Math.ceil(Math.min(remaining, 240_000) / 1000));
      try {
        const wire = await this.#scope.client.retrying(undefined, () =>
          this.#scope.client.json<Wire>("GET", `${this.#path(processId)}/wait`, {
            query: { timeout_seconds: seconds },
          }),
        );
        return processFromWire(wire);
      } catch (error) {
        const expired = deadline !== undefined && Date.now() >= deadline;
        if (!(error instanceof TimeoutError) || expired) throw error;
      }
    }
  }

  async waitForLog(
    processId: string,
    pattern: string | RegExp,
    options: WaitForLogOptions = {},
  ): Promise<LogMatch> {
    const timer = options.timeout === undefined ? undefined : AbortSignal.timeout(options.timeout);
    const signals = [options.signal, timer].filter((s): s is AbortSignal => s !== undefined);
    const signal = signals.length > 0 ? AbortSignal.any(signals) : undefined;
    const wanted = options.stream ?? "both";
    const buffers = { stdout: new LineBuffer(), stderr: new LineBuffer() };
    const test = (line: string, stream: "stdout" | "stderr"): LogMatch | undefined => {
      if (typeof pattern === "string") {
        return line.includes(pattern) ? { line, match: null, stream } : undefined;
      }
      const match = line.match(pattern);
      return match ? { line, match, stream } : undefined;
    };
    try {
      const messages = await this.#openLogStream(processId, undefined, signal);
      for await (const message of messages) {
        if (message.comment !== undefined) continue;
        const event = message.event;
        if (event === "stdout" || event === "stderr") {
          if (wanted !== "both" && wanted !== event) continue;
          for (const line of buffers[event].push(String(parseData(message)["data"] ?? ""))) {
            const found = test(line, event);
            if (found) return found;
          }
        } else if (event === "exit") {
          for (const stream of ["stdout", "stderr"] as const) {
            const rest = buffers[stream].flush();
            const found = rest === undefined ? undefined : test(rest, stream);
            if (found) return found;
          }
          const exit = exitFromCloudflare(parseData(message));
          throw new ProcessExitedError(
            `process ${processId} exited (code ${exit.exitCode}) before its output matched ${String(pattern)}`,
            processId,
            exit.exitCode,
          );
        } else if (event === "error") {
          const data = parseData(message);
          throw apiError(String(data["code"] ?? "internal"), String(data["error"] ?? ""), 0);
        }
      }
      throw new StreamLostError("the log stream ended without an exit event", undefined, processId);
    } catch (error) {
      if (timer?.aborted && !(options.signal?.aborted ?? false)) {
        throw new TimeoutError(
          `no output line matched ${String(pattern)} within ${options.timeout} ms`,
          "timeout",
          0,
        );
      }
      throw error;
    }
  }

  async writeStdin(
    processId: string,
    data: string | Uint8Array,
    options: { eof?: boolean } = {},
  ): Promise<number> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const wire = await this.#scope.client.json<{ written: number }>(
      "POST",
      `${this.#path(processId)}/stdin`,
      { body, query: { eof: options.eof ? 1 : undefined } },
    );
    return wire.written;
  }

  async closeStdin(processId: string): Promise<void> {
    await this.#scope.client.json("POST", `${this.#path(processId)}/stdin`, {
      json: { data: "", eof: true },
    });
  }
}
