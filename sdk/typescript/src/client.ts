// The HTTP layer: configuration (SANDSTREAM_URL, SANDSTREAM_API_KEY), JSON requests mapped to
// typed errors, and resumable SSE streams that reconnect with Last-Event-ID after a cut
// connection. Knows the wire, not sandboxes or processes.

import {
  ApiError,
  ConnectionFailedError,
  SandstreamError,
  StreamLostError,
  apiError,
} from "./errors.js";
import { readSSE, type SseMessage } from "./sse.js";

/** How to reach the daemon, and how hard to try to keep a stream. */
export interface ConnectionOptions {
  /** Base URL of sandstreamd. Default: `SANDSTREAM_URL`, else `http://127.0.0.1:8080`. */
  url?: string;
  /** API key. Default: `SANDSTREAM_API_KEY`. */
  apiKey?: string;
  /** Reconnections in a row without a new event before a stream gives up. Default 5. */
  maxReconnects?: number;
  /**
   * A stream that receives nothing (not even a `: keepalive`) for this long is treated as cut
   * and resumed. Default 45000 ms (the daemon sends keepalives every 15 s).
   */
  streamIdleTimeoutMs?: number;
  /** A fetch implementation; default the global one. */
  fetch?: typeof fetch;
}

export const DEFAULT_URL = "http://127.0.0.1:8080";

export type Query = Record<string, string | number | boolean | undefined>;

export interface RequestOptions {
  query?: Query;
  json?: unknown;
  /** Raw bytes; a ReadableStream is uploaded as it is produced. */
  body?: Uint8Array | ReadableStream<Uint8Array>;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
}

/** Names the event ids of a stream so that a terminal event ends it. */
const TERMINAL_EVENTS = new Set(["exit", "complete", "error"]);

function isAbort(error: unknown, signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true && (error === signal.reason || isAbortError(error));
}

function isAbortError(error: unknown): boolean {
  return error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError");
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Opens one connection of a resumable stream; `lastEventId` is set on reconnections. */
export type StreamOpener = (lastEventId: string | undefined, signal: AbortSignal) => Promise<Response>;

export class Client {
  readonly url: string;
  readonly apiKey: string;
  readonly maxReconnects: number;
  readonly streamIdleTimeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: ConnectionOptions = {}) {
    const url = options.url ?? process.env["SANDSTREAM_URL"] ?? DEFAULT_URL;
    this.url = url.replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? process.env["SANDSTREAM_API_KEY"] ?? "";
    this.maxReconnects = options.maxReconnects ?? 5;
    this.streamIdleTimeoutMs = options.streamIdleTimeoutMs ?? 45_000;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** The options this client was made from, for a Sandbox that shares it. */
  get options(): ConnectionOptions {
    return {
      url: this.url,
      apiKey: this.apiKey,
      maxReconnects: this.maxReconnects,
      streamIdleTimeoutMs: this.streamIdleTimeoutMs,
      fetch: this.#fetch,
    };
  }

  buildUrl(path: string, query: Query = {}): string {
    const url = new URL(this.url + path);
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    return url.toString();
  }

  /** Sends a request; a non-2xx answer throws its typed error, a transport failure ConnectionFailedError. */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...options.headers };
    if (this.apiKey !== "") headers["Authorization"] = `Bearer ${this.apiKey}`;
    const init: RequestInit & { duplex?: "half" } = { method, headers, signal: options.signal ?? null };
    if (options.json !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.json);
    } else if (options.body !== undefined) {
      if (headers["Content-Type"] === undefined) headers["Content-Type"] = "application/octet-stream";
      init.body = options.body;
      if (options.body instanceof ReadableStream) init.duplex = "half";
    }
    let response: Response;
    try {
      response = await this.#fetch(this.buildUrl(path, options.query), init);
    } catch (error) {
      if (isAbort(error, options.signal ?? undefined)) throw error;
      throw new ConnectionFailedError(`${method} ${path}: ${describe(error)}`, { cause: error });
    }
    if (!response.ok) throw await errorFromResponse(response);
    return response;
  }

  /** Sends a request and parses its JSON answer (undefined for 204). */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.send(method, path, {
      ...options,
      headers: { Accept: "application/json", ...options.headers },
    });
    if (response.status === 204) return undefined as T;
    try {
      return (await response.json()) as T;
    } catch (error) {
      if (isAbort(error, options.signal ?? undefined)) throw error;
      throw new ConnectionFailedError(`${method} ${path}: reading the answer: ${describe(error)}`, {
        cause: error,
      });
    }
  }

  /**
   * Retries an idempotent request (one that carries an Idempotency-Key, or a GET) after a
   * transport failure. Typed API errors are not retried.
   */
  async retrying<T>(signal: AbortSignal | undefined, attempt: () => Promise<T>): Promise<T> {
    for (let failures = 0; ; failures++) {
      try {
        return await attempt();
      } catch (error) {
        if (!(error instanceof ConnectionFailedError) || failures >= this.maxReconnects) throw error;
        await sleep(backoffMs(failures), signal);
      }
    }
  }

  /**
   * Yields a stream's messages (comments included) until its terminal event (`exit`,
   * `complete`, `error`) or a 204 answer, reconnecting with the last event id whenever a
   * connection ends early. The first connection's API error is thrown as is; giving up later
   * throws StreamLostError, never a made-up end.
   */
  async *resumable(
    opener: StreamOpener,
    signal: AbortSignal | undefined,
    describeStream: () => { processId: string | undefined },
    lastEventId?: string,
  ): AsyncGenerator<SseMessage> {
    let failures = 0;
    let lastFailure: unknown;
    for (let connection = 0; ; connection++) {
      if (connection > 0) {
        if (failures > this.maxReconnects) {
          const { processId } = describeStream();
          throw new StreamLostError(
            `the stream ended without an exit event and could not be resumed after ` +
              `${this.maxReconnects} reconnections (last event id ${lastEventId ?? "none"}): ` +
              describe(lastFailure),
            lastEventId,
            processId,
          );
        }
        await sleep(backoffMs(failures - 1), signal);
      }
      const attempt = new AbortController();
      const onAbort = (): void => attempt.abort(signal?.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      let idle: NodeJS.Timeout | undefined;
      const armIdle = (): void => {
        clearTimeout(idle);
        idle = setTimeout(
          () => attempt.abort(new ConnectionFailedError("no data within the stream idle timeout")),
          this.streamIdleTimeoutMs,
        );
      };
      try {
        let response: Response;
        try {
          armIdle();
          response = await opener(lastEventId, attempt.signal);
        } catch (error) {
          if (signal?.aborted) throw signal.reason;
          if (connection === 0 && !(error instanceof ConnectionFailedError)) throw error;
          if (!(error instanceof ConnectionFailedError)) {
            const { processId } = describeStream();
            throw new StreamLostError(
              `resuming the stream after event ${lastEventId ?? "none"} failed: ${describe(error)}`,
              lastEventId,
              processId,
              { cause: error },
            );
          }
          failures++;
          lastFailure = error;
          continue;
        }
        // 204: the follow was resumed at or past the exit, which was delivered before.
        if (response.status === 204) return;
        if (response.body === null) throw new ConnectionFailedError("the stream has no body");
        let progressed = false;
        try {
          for await (const message of readSSE(response.body, attempt.signal)) {
            armIdle();
            if (message.comment === undefined) {
              if (message.id !== undefined && message.id !== "") lastEventId = message.id;
              if (!progressed) {
                progressed = true;
                failures = 0;
              }
            }
            clearTimeout(idle);
            yield message;
            armIdle();
            if (message.comment === undefined && TERMINAL_EVENTS.has(message.event ?? "")) return;
          }
          lastFailure = new ConnectionFailedError("the connection closed before the exit event");
        } catch (error) {
          if (signal?.aborted) throw signal.reason;
          if (error instanceof SandstreamError && !(error instanceof ConnectionFailedError)) throw error;
          lastFailure = attempt.signal.aborted ? attempt.signal.reason : error;
        }
        failures++;
      } finally {
        clearTimeout(idle);
        signal?.removeEventListener("abort", onAbort);
        attempt.abort();
      }
    }
  }
}

function backoffMs(failures: number): number {
  return Math.min(2000, 100 * 2 ** Math.max(0, failures));
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? ` (${error.cause.message})` : "";
    return error.message + cause;
  }
  return String(error);
}

/** The typed error of a non-2xx response. */
export async function errorFromResponse(response: Response): Promise<ApiError> {
  const text = await response.text().catch(() => "");
  let code: string | undefined;
  let message = text || response.statusText || `HTTP ${response.status}`;
  try {
    const parsed = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    if (typeof parsed.error?.code === "string") code = parsed.error.code;
    if (typeof parsed.error?.message === "string") message = parsed.error.message;
  } catch {
    // Not JSON (a proxy's page, say): the status decides the class.
  }
  return apiError(code, message, response.status);
}
