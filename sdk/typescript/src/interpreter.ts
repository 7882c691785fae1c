// Code interpreter contexts (stateful python / javascript / bash cells with rich results) and
// persistent shell sessions.

import { StreamLostError, apiError } from "./errors.js";
import type { SseMessage } from "./sse.js";

type Wire = Record<string, unknown>;

export type Language = "python" | "javascript" | "typescript" | "bash";

export interface CodeContext {
  id: string;
  sandboxId: string;
  language: Language;
  cwd: string;
  status: "idle" | "busy" | "dead";
  createdAt: string;
  executionCount: number;
  restarts: number;
  /** The interpreter's background process, while there is one. */
  processId: string | null;
}

/** One rich result: a MIME bundle. */
export class Result {
  readonly data: Record<string, unknown>;
  readonly isMainResult: boolean;

  constructor(data: Record<string, unknown>, isMainResult: boolean) {
    this.data = data;
    this.isMainResult = isMainResult;
  }

  /** text/plain: the value's repr. */
  get text(): string | undefined {
    return this.#get("text/plain");
  }
  /** text/html, e.g. a pandas DataFrame. */
  get html(): string | undefined {
    return this.#get("text/html");
  }
  /** image/png as base64, e.g. a matplotlib figure. */
  get png(): string | undefined {
    return this.#get("image/png");
  }
  get formats(): string[] {
    return Object.keys(this.data);
  }

  #get(mime: string): string | undefined {
    const value = this.data[mime];
    return typeof value === "string" ? value : undefined;
  }
}

export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
  /** The cell hit its timeout. */
  timeout: boolean;
  /** ... and the interpreter was restarted (state lost). */
  restarted: boolean;
}

export interface Execution {
  results: Result[];
  logs: { stdout: string[]; stderr: string[] };
  error: ExecutionError | undefined;
  executionCount: number;
  /** The main result's text (the last expression's value). */
  text: string | undefined;
}

export interface RunCodeOptions {
  /** A context, or its id; default: one context per language, created on first use. */
  context?: CodeContext | string;
  language?: Language;
  onStdout?: (chunk: string) => unknown;
  onStderr?: (chunk: string) => unknown;
  onResult?: (result: Result) => unknown;
  onError?: (error: ExecutionError) => unknown;
  timeoutSeconds?: number;
  /**
   * Makes a retry attach to the same run instead of running the cell again; generated when
   * absent. The same key with other code is ConflictError.
   */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export function contextFromWire(w: Wire): CodeContext {
  return {
    id: String(w["id"]),
    sandboxId: String(w["sandbox_id"]),
    language: w["language"] as Language,
    cwd: String(w["cwd"]),
    status: w["status"] as CodeContext["status"],
    createdAt: String(w["created_at"]),
    executionCount: Number(w["execution_count"] ?? 0),
    restarts: Number(w["restarts"] ?? 0),
    processId: typeof w["process_id"] === "string" ? w["process_id"] : null,
  };
}

/** The body of a run request. */
export function cellBody(code: string, options: RunCodeOptions): Wire {
  const json: Wire = { code };
  if (options.timeoutSeconds !== undefined) json["timeout_seconds"] = options.timeoutSeconds;
  return json;
}

/**
 * Consumes a cell's run stream into an Execution, calling the callbacks as events arrive.
 * `onStart` learns the run's number (its `execution_count`) from the `start` event.
 */
export async function runCell(
  messages: AsyncIterable<SseMessage>,
  options: RunCodeOptions,
  onStart: (executionCount: number) => void,
): Promise<Execution> {
  const execution: Execution = {
    results: [],
    logs: { stdout: [], stderr: [] },
    error: undefined,
    executionCount: 0,
    text: undefined,
  };
  for await (const message of messages) {
    if (message.comment !== undefined) continue;
    const data = (message.data === "" ? {} : JSON.parse(message.data)) as Wire;
    switch (message.event) {
      case "start":
        execution.executionCount = Number(data["execution_count"] ?? 0);
        onStart(execution.executionCount);
        break;
      case "stdout":
      case "stderr": {
        const chunk = String(data["chunk"] ?? "");
        execution.logs[message.event].push(chunk);
        const callback = message.event === "stdout" ? options.onStdout : options.onStderr;
        callback?.(chunk);
        break;
      }
      case "result": {
        const result = new Result((data["data"] ?? {}) as Record<string, unknown>, data["is_main_result"] === true);
        execution.results.push(result);
        if (result.isMainResult) execution.text = result.text;
        options.onResult?.(result);
        break;
      }
      case "error": {
        if (typeof data["code"] === "string" && data["name"] === undefined) {
          throw apiError(data["code"], String(data["message"] ?? ""), 503);
        }
        execution.error = {
          name: String(data["name"] ?? "Error"),
          value: String(data["value"] ?? ""),
          traceback: String(data["traceback"] ?? ""),
          timeout: data["timeout"] === true,
          restarted: data["restarted"] === true,
        };
        options.onError?.(execution.error);
        return execution;
      }
      case "exit":
        return execution;
      default:
        break;
    }
  }
  throw new StreamLostError("the cell's stream ended without an exit or error event", undefined, undefined);
}

export interface SessionInfo {
  id: string;
  sandboxId: string;
  /** Where the session's first command started (a `cd` in a command does not change it). */
  cwd: string;
  env: Record<string, string>;
  createdAt: string;
  /** Commands run so far. */
  commands: number;
  /** A command is running. */
  busy: boolean;
}

export function sessionFromWire(w: Wire): SessionInfo {
  return {
    id: String(w["id"]),
    sandboxId: String(w["sandbox_id"]),
    cwd: String(w["cwd"]),
    env: (w["env"] ?? {}) as Record<string, string>,
    createdAt: String(w["created_at"]),
    commands: Number(w["commands"] ?? 0),
    busy: w["busy"] === true,
  };
}
