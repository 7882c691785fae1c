// Sandbox: create/connect/kill, exec and execStream (both the PandaStack callback shape and the
// Cloudflare stream shape), background processes and stdin. Streams resume after a cut with
// Last-Event-ID and an Idempotency-Key, so a command never runs twice and no exit is guessed.

import {
  deleteTemplate,
  getTemplate,
  importTemplate,
  listTemplates,
  pullTemplate,
  type RegistryAuth,
  templateFromWire,
  type Template,
} from "./templates.js";
import { type Scope, type Tenant, type Token, tokenFromWire, usage } from "./access.js";
import { Client, type ConnectionOptions, type Query, type StreamOpener } from "./client.js";
import {
  NotFoundError,
  ProcessExitedError,
  StreamLostError,
  TimeoutError,
  apiError,
} from "./errors.js";
import {
  type ExitInfo,
  type ExecResult,
  type Limits,
  type NetworkOption,
  type Port,
  type ProcessInfo,
  type ProcessLogs,
  type SandboxInfo,
  execResultFromWire,
  limitsToWire,
  logsFromWire,
  networkToWire,
  portFromWire,
  previewUrl,
  processFromWire,
  sandboxFromWire,
} from "./models.js";
import { Files } from "./files.js";
import {
  type CodeContext,
  type Execution,
  type Language,
  type RunCodeOptions,
  type SessionInfo,
  cellBody,
  contextFromWire,
  runCell,
  sessionFromWire,
} from "./interpreter.js";
import { Process } from "./process.js";
import { encodeSSE, type GapEvent, type SseMessage } from "./sse.js";
import { LineBuffer } from "./text.js";

/** A shell command line (`sh -c`), or an argv run directly. */
export type Command = string | readonly string[];

export interface CreateOptions extends ConnectionOptions {
  /** `base` (default) or `code-interpreter`. */
  template?: string;
  env?: Record<string, string>;
  cwd?: string;
  /** Sandbox lifetime in milliseconds (rounded up to seconds); see also ttlSeconds. */
  timeout?: number;
  /** Sandbox lifetime in seconds; 0: the daemon's default. */
  ttlSeconds?: number;
  limits?: Limits;
  /**
   * `loopback` (the daemon's default), `none`, `egress` (every public address and name), or
   * `{ egress: { allow: [...], deny: [...] } }` for egress under a policy. A daemon without
   * egress (`egress_pool none`) answers InvalidRequestError.
   */
  network?: NetworkOption;
  metadata?: Record<string, string>;
  /** The admin key only: make it for this tenant, within its quotas. */
  tenant?: string;
}

/** A URL for a browser, opened with a scoped token (see `Sandbox.tokenUrl`). */
export interface TokenUrlOptions {
  /** Added to the URL's query. */
  query?: Query;
  /** The token's lifetime; default the daemon's (an hour), at most 7 days. */
  ttlSeconds?: number;
  /** A `ws:`/`wss:` URL, for a WebSocket route (exec/pty, exec/ws). */
  websocket?: boolean;
}

/** The command request shared by exec, execStream and startProcess. */
export interface CommandOptions {
  /** Added to the sandbox's env for this command only. */
  env?: Record<string, string>;
  cwd?: string;
  /** Written to stdin, which is then closed. */
  stdin?: string;
  /** Total run time in seconds; then the process group is killed (reason `timeout`). */
  timeoutSeconds?: number;
  /** Total run time in milliseconds (the Cloudflare SDK's unit); timeoutSeconds wins. */
  timeout?: number;
  /** No output for this many seconds: killed (reason `idle_timeout`). */
  idleTimeoutSeconds?: number;
  /** stderr goes to the stdout pipe (one stream, order kept). */
  mergeStderr?: boolean;
  /** Output the daemon retains for slow or reconnecting readers. */
  logWindowBytes?: number;
  /** Makes a retry attach to the same process; generated when absent. */
  idempotencyKey?: string;
  /** Stops waiting or reading (the process is not killed: use kill for that). */
  signal?: AbortSignal;
  /**
   * Streams only: resume after this event id (with the idempotencyKey of the request that
   * started the command), e.g. an EventSource's `Last-Event-ID` relayed by a server.
   */
  lastEventId?: string;
  /** Runs the command in this shell session (see createSession). */
  session?: string;
}

export type ChunkCallback = (chunk: string) => unknown;

interface StreamHooks {
  /** Output was lost because this reader fell behind the daemon's retained window. */
  onGap?: (gap: GapEvent) => unknown;
  /** The process started (its id is known from here on). */
  onStart?: (processId: string) => unknown;
}

/** execStream's PandaStack shape: per-chunk callbacks, resolves to the exit code. */
export type ExecStreamCallbacks = StreamHooks &
  ({ onStdout: ChunkCallback; onStderr?: ChunkCallback } | { onStdout?: ChunkCallback; onStderr: ChunkCallback });

/** execStream's Cloudflare shape: no callbacks, resolves to an SSE byte stream. */
export interface ExecStreamStreamOptions extends CommandOptions {
  onStdout?: undefined;
  onStderr?: undefined;
}

export interface ExecOptions extends CommandOptions, StreamHooks {
  /** Use the streaming endpoint and call onOutput per chunk; the result is the same. */
  stream?: boolean;
  onOutput?: (stream: "stdout" | "stderr", data: string) => unknown;
}

export interface StartProcessOptions extends CommandOptions {
  /** A caller-chosen process id (`[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`). */
  processId?: string;
}

/**
 * How a reader of a process's output paces it. `"wait"`: when the daemon's window is full of
 * output this reader has not taken, the process is held back (it blocks in write(2), as on a
 * pipe), so nothing is lost. `"skip"`: the process is never held; a reader that falls behind
 * the window gets a `gap` event naming what it missed.
 */
export type Flow = "wait" | "skip";

export interface StreamLogsOptions {
  /** Events after this sequence number; default all retained. */
  since?: number;
  /**
   * `"skip"` (the daemon's default for a follower) or `"wait"`, which holds the process while
   * this reader is a window behind, so every byte arrives, and keeps its place for the
   * daemon's resume grace (30 s by default) across a cut connection.
   */
  flow?: Flow;
  signal?: AbortSignal;
}

export interface WaitForLogOptions {
  /** Milliseconds; then TimeoutError. Default: no limit. */
  timeout?: number;
  /** Which output to search; default both. */
  stream?: "stdout" | "stderr" | "both";
  signal?: AbortSignal;
}

export interface WaitForPortOptions {
  /** Seconds until TimeoutError; default 30. `Infinity`: no limit. */
  timeoutSeconds?: number;
  signal?: AbortSignal;
}

export interface LogMatch {
  /** The whole line (without "\n") that matched. */
  line: string;
  /** The RegExp match, or null for a string pattern. */
  match: RegExpMatchArray | null;
  stream: "stdout" | "stderr";
}

type Wire = Record<string, unknown>;

function commandText(command: Command): string {
  return typeof command === "string" ? command : command.join(" ");
}

function commandBody(command: Command, options: CommandOptions): Wire {
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

function parseData(message: SseMessage): Wire {
  try {
    const value: unknown = JSON.parse(message.data);
    return value !== null && typeof value === "object" ? (value as Wire) : {};
  } catch {
    return {};
  }
}

function exitFromCloudflare(data: Wire): ExitInfo {
  return {
    exitCode: typeof data["exitCode"] === "number" ? data["exitCode"] : Number.NaN,
    signal: typeof data["signal"] === "string" ? data["signal"] : null,
    reason: data["reason"] as ExitInfo["reason"],
    durationMs: typeof data["durationMs"] === "number" ? data["durationMs"] : 0,
  };
}

/** Turns a resumable message iterator into an SSE byte stream; `map` may drop or rewrite. */
function toByteStream(
  messages: AsyncGenerator<SseMessage>,
  stop: AbortController,
  map: (message: SseMessage) => SseMessage | undefined = (m) => m,
): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          let step: IteratorResult<SseMessage>;
          try {
            step = await messages.next();
          } catch (error) {
            controller.error(error);
            return;
          }
          if (step.done === true) {
            controller.close();
            return;
          }
          const out = map(step.value);
          if (out !== undefined) {
            controller.enqueue(encodeSSE(out));
            return;
          }
        }
      },
      async cancel(reason) {
        stop.abort(reason);
        await messages.return(undefined).catch(() => undefined);
      },
    },
    { highWaterMark: 0 },
  );
}

export class Sandbox implements AsyncDisposable {
  readonly id: string;
  /** The sandbox as last read from the daemon. */
  info: SandboxInfo;
  readonly client: Client;
  /** The sandbox's files. */
  readonly files: Files;
  readonly #defaultContexts = new Map<Language, CodeContext>();

  private constructor(client: Client, info: SandboxInfo) {
    this.client = client;
    this.info = info;
    this.id = info.id;
    this.files = new Files(client, info.id);
  }

  /** Starts a persistent shell session: `cd` and `export` persist between its commands. */
  async createSession(options: { env?: Record<string, string>; cwd?: string; id?: string } = {}): Promise<SessionInfo> {
    return sessionFromWire(await this.client.json<Wire>("POST", `${this.#path}/sessions`, { json: options }));
  }

  async listSessions(): Promise<SessionInfo[]> {
    const wire = await this.client.json<{ sessions: Wire[] }>("GET", `${this.#path}/sessions`);
    return wire.sessions.map(sessionFromWire);
  }

  /** The session now (`commands`, `busy`); NotFoundError once it was deleted. */
  async getSession(sessionId: string): Promise<SessionInfo> {
    return sessionFromWire(await this.client.json<Wire>("GET", this.#sessionPath(sessionId)));
  }

  /** Ends the session; a running command is killed. */
  async deleteSession(sessionId: string): Promise<void> {
    await this.client.send("DELETE", this.#sessionPath(sessionId));
  }

  #sessionPath(sessionId: string): string {
    return `${this.#path}/sessions/${encodeURIComponent(sessionId)}`;
  }

  /** Starts a persistent interpreter: "python", "javascript" or "bash". */
  async createCodeContext(
    options: { language?: Language; cwd?: string; env?: Record<string, string> } = {},
  ): Promise<CodeContext> {
    const json = { language: options.language ?? "python", cwd: options.cwd, env: options.env };
    return contextFromWire(await this.client.json<Wire>("POST", `${this.#path}/contexts`, { json }));
  }

  /**
   * Runs a cell, calling onStdout/onStderr/onResult as its events arrive; resolves to the
   * Execution (`results`, `logs`, `error`). State persists between cells of one context.
   * A cut connection resumes the same run after its last event: the cell runs once, and
   * each event reaches the callbacks once.
   */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    let context = options.context;
    if (context === undefined) {
      const language = options.language ?? "python";
      context = this.#defaultContexts.get(language);
      if (context === undefined) {
        context = await this.createCodeContext({ language });
        this.#defaultContexts.set(language, context);
      }
    }
    const path = this.#contextPath(context);
    const json = cellBody(code, options);
    const key = options.idempotencyKey ?? crypto.randomUUID();
    let run: number | undefined;
    // Once the run's number is known, a reconnection reads that run: if the context has
    // forgotten it, resuming fails rather than submitting the cell again.
    const opener: StreamOpener = (lastEventId, signal) => {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (lastEventId !== undefined) headers["Last-Event-ID"] = lastEventId;
      if (run !== undefined) return this.client.send("GET", `${path}/runs/${run}`, { signal, headers });
      headers["Idempotency-Key"] = key;
      return this.client.send("POST", `${path}/run`, { json, signal, headers });
    };
    const messages = await this.#resume(opener, options.signal, { processId: undefined });
    return runCell(messages, options, (executionCount) => {
      run = executionCount;
    });
  }

  async listCodeContexts(): Promise<CodeContext[]> {
    const wire = await this.client.json<{ contexts: Wire[] }>("GET", `${this.#path}/contexts`);
    return wire.contexts.map(contextFromWire);
  }

  /** The context now (`status`, `executionCount`); NotFoundError once it was deleted. */
  async getCodeContext(context: CodeContext | string): Promise<CodeContext> {
    return contextFromWire(await this.client.json<Wire>("GET", this.#contextPath(context)));
  }

  /** Starts the context's interpreter afresh (after a crash, or to drop its state). */
  async restartCodeContext(context: CodeContext | string): Promise<CodeContext> {
    return contextFromWire(await this.client.json<Wire>("POST", `${this.#contextPath(context)}/restart`));
  }

  async deleteCodeContext(context: CodeContext | string): Promise<void> {
    await this.client.send("DELETE", this.#contextPath(context));
    const id = typeof context === "string" ? context : context.id;
    for (const [language, c] of this.#defaultContexts) {
      if (c.id === id) this.#defaultContexts.delete(language);
    }
  }

  // Exposed ports.

  // Scoped tokens.

  /**
   * Makes a token that opens this sandbox alone, for `scopes`, until `ttlSeconds` pass (default
   * the daemon's: an hour; at most 7 days), it is revoked or the sandbox is deleted. Its secret,
   * `token.token`, is shown this once. Needs a key, not a token.
   */
  async createToken(scopes: readonly Scope[], options: { ttlSeconds?: number } = {}): Promise<Token & { token: string }> {
    const json: Record<string, unknown> = { scopes };
    if (options.ttlSeconds !== undefined) json["ttl_seconds"] = options.ttlSeconds;
    const wire = await this.client.json<Wire>("POST", `${this.#path}/tokens`, { json });
    return tokenFromWire(wire) as Token & { token: string };
  }

  /** The sandbox's live tokens, without their secrets. */
  async listTokens(): Promise<Token[]> {
    const wire = await this.client.json<{ tokens: Wire[] }>("GET", `${this.#path}/tokens`);
    return wire.tokens.map(tokenFromWire);
  }

  /** Revokes a token (or a token id); requests and streams made with it end. */
  async revokeToken(token: Token | string): Promise<void> {
    const id = typeof token === "string" ? token : token.id;
    await this.client.send("DELETE", `${this.#path}/tokens/${encodeURIComponent(id)}`);
  }

  /**
   * A URL of this sandbox's `path` (`/processes/p1/logs`, `/exec/pty`, ...) for a browser's
   * EventSource or WebSocket, which cannot set headers: it carries a new token of `scopes` in
   * `?access_token=`, never the API key (URLs end up in histories, logs and `Referer` headers).
   */
  async tokenUrl(path: string, scopes: readonly Scope[], options: TokenUrlOptions = {}): Promise<string> {
    const token = await this.createToken(scopes, options.ttlSeconds === undefined ? {} : { ttlSeconds: options.ttlSeconds });
    const url = this.client.buildUrl(`${this.#path}${path}`, { ...options.query, access_token: token.token });
    return options.websocket === true ? url.replace(/^http/, "ws") : url;
  }

  /**
   * A URL that follows a process's output from a browser's `EventSource`
   * (`logs?follow=1&format=...`), with a `read` token.
   */
  async logsUrl(
    processId: string,
    options: { format?: "cloudflare"; flow?: Flow; ttlSeconds?: number } = {},
  ): Promise<string> {
    const query: Query = { follow: 1, format: options.format, flow: options.flow };
    const ttl = options.ttlSeconds === undefined ? {} : { ttlSeconds: options.ttlSeconds };
    return this.tokenUrl(`/processes/${encodeURIComponent(processId)}/logs`, ["read"], { query, ...ttl });
  }

  /**
   * A URL that opens the server on `port` in a browser tab: the port is exposed, a token of
   * scope `port:N` made, and `previewUrl` given that token, never the key.
   */
  async browserUrl(port: number, options: { ttlSeconds?: number } = {}): Promise<string> {
    const exposed = await this.exposePort(port);
    const token = await this.createToken([`port:${exposed.port}`], options);
    return previewUrl(exposed, token.token);
  }

  /**
   * Exposes a port of the sandbox through the daemon; resolves to it with its two URLs: `url`
   * (the host form, for pages with absolute paths) and `pathUrl`. Exposing it again resolves
   * to the same Port. A server on the sandbox's loopback is enough; requests to either URL
   * need a key or a token of scope `port:N` (`Authorization: Bearer`, or `?access_token=`).
   */
  async exposePort(port: number): Promise<Port> {
    return portFromWire(await this.client.json<Wire>("POST", `${this.#path}/ports`, { json: { port } }));
  }

  async listPorts(): Promise<Port[]> {
    const wire = await this.client.json<{ ports: Wire[] }>("GET", `${this.#path}/ports`);
    return wire.ports.map(portFromWire);
  }

  /** One exposed port; NotFoundError if it is not exposed. */
  async getPort(port: number): Promise<Port> {
    return portFromWire(await this.client.json<Wire>("GET", this.#portPath(port)));
  }

  /** Stops exposing a port (NotFoundError if it was not); connections already relayed go on. */
  async closePort(port: number): Promise<void> {
    await this.client.send("DELETE", this.#portPath(port));
  }

  /**
   * Resolves once something in the sandbox accepts connections on `port` (exposed or not);
   * TimeoutError after `timeoutSeconds` (default 30).
   */
  async waitForPort(port: number, options: WaitForPortOptions = {}): Promise<void> {
    const limit = options.timeoutSeconds ?? 30;
    const deadline = Date.now() + limit * 1000;
    for (;;) {
      // A long-poll of at most 240 s (below fetch's own 300 s header timeout), repeated.
      const seconds = Math.min(240, Math.max(0.001, (deadline - Date.now()) / 1000));
      try {
        await this.client.retrying(options.signal, () =>
          this.client.json<Wire>("GET", `${this.#portPath(port)}/wait`, {
            query: { timeout_seconds: Number(seconds.toFixed(3)) },
            signal: options.signal,
          }),
        );
        return;
      } catch (error) {
        if (!(error instanceof TimeoutError)) throw error;
        if (Date.now() < deadline) continue;
        throw new TimeoutError(
          `nothing accepted connections on port ${port} of sandbox ${this.id} within ${limit} s`,
          "timeout",
          error.status,
        );
      }
    }
  }

  #portPath(port: number): string {
    if (!Number.isInteger(port)) throw new TypeError(`port must be an integer, not ${String(port)}`);
    return `${this.#path}/ports/${port}`;
  }

  #contextPath(context: CodeContext | string): string {
    const id = typeof context === "string" ? context : context.id;
    return `${this.#path}/contexts/${encodeURIComponent(id)}`;
  }

  /** Creates a sandbox. Server from SANDSTREAM_URL, key from SANDSTREAM_API_KEY by default. */
  static async create(options: CreateOptions = {}): Promise<Sandbox> {
    const client = new Client(options);
    const body: Wire = {};
    if (options.template !== undefined) body["template"] = options.template;
    if (options.env !== undefined) body["env"] = options.env;
    if (options.cwd !== undefined) body["cwd"] = options.cwd;
    const ttl =
      options.ttlSeconds ?? (options.timeout !== undefined ? Math.ceil(options.timeout / 1000) : undefined);
    if (ttl !== undefined) body["ttl_seconds"] = ttl;
    if (options.limits !== undefined) body["limits"] = limitsToWire(options.limits);
    if (options.network !== undefined) body["network"] = networkToWire(options.network);
    if (options.metadata !== undefined) body["metadata"] = options.metadata;
    if (options.tenant !== undefined) body["tenant"] = options.tenant;
    const wire = await client.json<Wire>("POST", "/v1/sandboxes", { json: body });
    return new Sandbox(client, sandboxFromWire(wire));
  }

  /** Attaches to an existing sandbox; NotFoundError if there is none with this id. */
  static async connect(id: string, options: ConnectionOptions = {}): Promise<Sandbox> {
    const client = new Client(options);
    const wire = await client.json<Wire>("GET", `/v1/sandboxes/${encodeURIComponent(id)}`);
    return new Sandbox(client, sandboxFromWire(wire));
  }

  /** Every sandbox of the daemon (a tenant's key: its own), oldest first. */
  static async list(options: ConnectionOptions = {}): Promise<SandboxInfo[]> {
    const client = new Client(options);
    const wire = await client.json<{ sandboxes: Wire[] }>("GET", "/v1/sandboxes");
    return wire.sandboxes.map(sandboxFromWire);
  }

  /** Makes a template from an image archive; see the module's `importTemplate()`. */
  static async importTemplate(
    name: string,
    archive: Uint8Array | ReadableStream<Uint8Array>,
    options: ConnectionOptions = {},
  ): Promise<Template> {
    return importTemplate(name, archive, options);
  }

  /** Makes a template from an image in a registry; see the module's `pullTemplate()`. */
  static async pullTemplate(
    name: string,
    image: string,
    options: ConnectionOptions & { auth?: RegistryAuth } = {},
  ): Promise<Template> {
    return pullTemplate(name, image, options);
  }

  /** The templates this key may use. */
  static async listTemplates(options: ConnectionOptions = {}): Promise<Template[]> {
    return listTemplates(options);
  }

  /** One template; NotFoundError if this key may not use one of that name. */
  static async getTemplate(name: string, options: ConnectionOptions = {}): Promise<Template> {
    return getTemplate(name, options);
  }

  /** Deletes an image or snapshot template; ConflictError while a sandbox uses it. */
  static async deleteTemplate(name: string, options: ConnectionOptions = {}): Promise<void> {
    return deleteTemplate(name, options);
  }

  /**
   * A template of this sandbox's files now (its template's layers and what it changed); its
   * processes keep running and each file is copied as it is when read. Only sandboxes made from
   * an image or a snapshot can be snapshotted.
   */
  async snapshot(name: string): Promise<Template> {
    return templateFromWire(await this.client.json<Wire>("POST", `${this.#path}/snapshot`, { json: { name } }));
  }

  /**
   * A snapshot (template `name`, or a generated one) and a new sandbox made from it with this
   * one's env, cwd, limits, network, time to live and metadata.
   */
  async fork(options: { name?: string } = {}): Promise<Sandbox> {
    const wire = await this.client.json<Wire>("POST", `${this.#path}/fork`, { json: { name: options.name ?? null } });
    return new Sandbox(new Client(this.client.options), sandboxFromWire(wire));
  }

  /** What the key's tenant takes now, and its quotas; the same as the module's `usage()`. */
  static async usage(options: ConnectionOptions = {}): Promise<Tenant> {
    return usage(options);
  }

  get #path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}`;
  }

  #processPath(processId: string): string {
    return `${this.#path}/processes/${encodeURIComponent(processId)}`;
  }

  /** Reads the sandbox again. */
  async refresh(): Promise<SandboxInfo> {
    this.info = sandboxFromWire(await this.client.json<Wire>("GET", this.#path));
    return this.info;
  }

  /** Deletes the sandbox: kills its processes, ends their streams with exit events. Idempotent. */
  async kill(): Promise<void> {
    try {
      await this.client.send("DELETE", this.#path);
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
  }

  /**
   * Runs a command to completion. With `stream: true` (or onOutput) output also arrives per
   * chunk as it is produced. Retries after a cut connection attach to the same process.
   */
  async exec(command: Command, options: ExecOptions = {}): Promise<ExecResult> {
    if (options.stream === true || options.onOutput !== undefined) {
      return this.#execStreaming(command, options);
    }
    const headers = { "Idempotency-Key": options.idempotencyKey ?? crypto.randomUUID() };
    const json = { ...commandBody(command, options), flow: "wait" };
    const wire = await this.client.retrying(options.signal, () =>
      this.client.json<Wire>("POST", `${this.#path}/exec`, { json, headers, signal: options.signal }),
    );
    return execResultFromWire(wire, commandText(command));
  }

  /**
   * Runs a command and streams its output. One name, two shapes:
   * - with `onStdout`/`onStderr` callbacks (PandaStack): each chunk goes to its callback as it
   *   arrives; resolves to the exit code;
   * - without callbacks (Cloudflare): resolves, once the command has started, to a
   *   ReadableStream of SSE bytes in the Cloudflare encoding, for `parseSSEStream` or to return
   *   as a `text/event-stream` Response body.
   * Both wait (`flow: "wait"`): while this reader is a window behind, the daemon holds the
   * command back instead of dropping output, so a slow callback or consumer loses nothing. Both
   * resume a cut connection; a stream that cannot be resumed fails with StreamLostError
   * instead of ending.
   */
  execStream(command: Command, options: CommandOptions & ExecStreamCallbacks): Promise<number>;
  execStream(command: Command, options?: ExecStreamStreamOptions): Promise<ReadableStream<Uint8Array>>;
  async execStream(
    command: Command,
    options: CommandOptions & Partial<ExecStreamCallbacks> = {},
  ): Promise<number | ReadableStream<Uint8Array>> {
    if (hasCallbacks(options)) {
      const exit = await this.#runStream(command, options, (stream, data) => {
        const callback = stream === "stdout" ? options.onStdout : options.onStderr;
        callback?.(data);
      });
      return exit.exitCode;
    }
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const messages = await this.#openExecStream(command, { ...options, signal }, { processId: undefined });
    return toByteStream(messages, stop);
  }

  async #execStreaming(command: Command, options: ExecOptions): Promise<ExecResult> {
    const out: string[] = [];
    const err: string[] = [];
    let processId = "";
    const exit = await this.#runStream(
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
  async #runStream(
    command: Command,
    options: CommandOptions & StreamHooks,
    onOutput: (stream: "stdout" | "stderr", data: string) => void,
  ): Promise<ExitInfo> {
    const state = { processId: undefined as string | undefined };
    const messages = await this.#openExecStream(command, options, state);
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
  async #openExecStream(
    command: Command,
    options: CommandOptions,
    state: { processId: string | undefined },
  ): Promise<AsyncGenerator<SseMessage>> {
    const json = { ...commandBody(command, options), format: "cloudflare", flow: "wait" };
    const key = options.idempotencyKey ?? crypto.randomUUID();
    const opener: StreamOpener = (lastEventId, signal) =>
      this.client.send("POST", `${this.#path}/exec/stream`, {
        json,
        signal,
        headers: {
          Accept: "text/event-stream",
          "Idempotency-Key": key,
          ...(lastEventId !== undefined ? { "Last-Event-ID": lastEventId } : {}),
        },
      });
    return this.#resume(opener, options.signal, state, options.lastEventId);
  }

  /** Opens the first connection (retrying transport failures), then resumes as needed. */
  async #resume(
    opener: StreamOpener,
    signal: AbortSignal | undefined,
    state: { processId: string | undefined },
    lastEventId?: string,
  ): Promise<AsyncGenerator<SseMessage>> {
    const firstSignal = signal ?? new AbortController().signal;
    const first = await this.client.retrying(signal, () => opener(lastEventId, firstSignal));
    let used = false;
    const resumingOpener: StreamOpener = (lastEventId, attemptSignal) => {
      if (!used) {
        used = true;
        return Promise.resolve(first);
      }
      return opener(lastEventId, attemptSignal);
    };
    const messages = this.client.resumable(resumingOpener, signal, () => state, lastEventId);
    const tracked = async function* (): AsyncGenerator<SseMessage> {
      for await (const message of messages) {
        if (message.event === "start" && state.processId === undefined) {
          const id = parseData(message)["processId"];
          if (typeof id === "string") state.processId = id;
        }
        yield message;
      }
    };
    return tracked();
  }

  // Background processes.

  /** Starts a background process; stdin stays open unless `stdin` is given. */
  async startProcess(command: Command, options: StartProcessOptions = {}): Promise<Process> {
    const json = commandBody(command, options);
    if (options.processId !== undefined) json["id"] = options.processId;
    const headers = { "Idempotency-Key": options.idempotencyKey ?? crypto.randomUUID() };
    const wire = await this.client.retrying(options.signal, () =>
      this.client.json<Wire>("POST", `${this.#path}/processes`, {
        json,
        headers,
        signal: options.signal,
      }),
    );
    return new Process(this, processFromWire(wire));
  }

  async listProcesses(status?: "running" | "exited"): Promise<Process[]> {
    const wire = await this.client.json<{ processes: Wire[] }>("GET", `${this.#path}/processes`, {
      query: { status },
    });
    return wire.processes.map((p) => new Process(this, processFromWire(p)));
  }

  /** NotFoundError if the sandbox has no such process. */
  async getProcess(processId: string): Promise<Process> {
    return new Process(this, await this.#getProcessInfo(processId));
  }

  async #getProcessInfo(processId: string): Promise<ProcessInfo> {
    return processFromWire(await this.client.json<Wire>("GET", this.#processPath(processId)));
  }

  /**
   * Without a signal: kills the process group (TERM, grace, KILL) and waits for it (reason
   * `killed`). With one (`"TERM"`, `"SIGINT"`, 9): sends just that signal.
   */
  async killProcess(
    processId: string,
    signal?: string | number,
    options: { group?: boolean } = {},
  ): Promise<ProcessInfo> {
    if (signal === undefined) {
      return processFromWire(await this.client.json<Wire>("DELETE", this.#processPath(processId)));
    }
    const json: Wire = { signal };
    if (options.group !== undefined) json["group"] = options.group;
    return processFromWire(
      await this.client.json<Wire>("POST", `${this.#processPath(processId)}/signal`, { json }),
    );
  }

  /** Kills every running process of the sandbox; resolves to how many were killed. */
  async killAllProcesses(): Promise<number> {
    const running = await this.listProcesses("running");
    const results = await Promise.allSettled(running.map((p) => this.killProcess(p.id)));
    return results.filter((r) => r.status === "fulfilled").length;
  }

  /**
   * Follows a process's output as an SSE byte stream in the Cloudflare encoding, from the
   * first retained event (or after `since`) to its `exit` (or `error`); every event
   * carries `data` and `processId` (see LogEvent). Resumes a cut connection, with the same
   * `flow`; a follow resumed at or past the exit (the daemon answers 204) is simply over.
   */
  async streamProcessLogs(
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
      this.client.send("GET", `${this.#processPath(processId)}/logs`, {
        query: { follow: 1, format: "cloudflare", flow, since: lastEventId === undefined ? since : undefined },
        signal: attemptSignal,
        headers: {
          Accept: "text/event-stream",
          ...(lastEventId !== undefined ? { "Last-Event-ID": lastEventId } : {}),
        },
      });
    return this.#resume(opener, signal, { processId });
  }

  /** The retained output now, as JSON (no following). */
  async getProcessLogs(
    processId: string,
    options: { since?: number; tail?: number } = {},
  ): Promise<ProcessLogs> {
    const wire = await this.client.json<Wire>("GET", `${this.#processPath(processId)}/logs`, {
      query: { since: options.since, tail: options.tail },
    });
    return logsFromWire(wire);
  }

  /**
   * Resolves to the process once it has exited. `timeout` in milliseconds (rounded up to
   * seconds); when it passes first: TimeoutError.
   */
  async waitForExit(processId: string, options: { timeout?: number } = {}): Promise<ProcessInfo> {
    const deadline = options.timeout === undefined ? undefined : Date.now() + options.timeout;
    for (;;) {
      // A long-poll shorter than fetch's own 300 s header timeout, repeated.
      const remaining = deadline === undefined ? 240_000 : Math.max(0, deadline - Date.now());
      const seconds = Math.max(1, Math.ceil(Math.min(remaining, 240_000) / 1000));
      try {
        const wire = await this.client.retrying(undefined, () =>
          this.client.json<Wire>("GET", `${this.#processPath(processId)}/wait`, {
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

  /**
   * Resolves at the first complete output line that contains `pattern` (a string) or matches
   * it (a RegExp), searching from the start of the retained output. ProcessExitedError if the
   * process ends first; TimeoutError if `timeout` ms pass first.
   */
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

  /** Writes to a background process's stdin; `eof` closes it after. Resolves to bytes written. */
  async writeStdin(
    processId: string,
    data: string | Uint8Array,
    options: { eof?: boolean } = {},
  ): Promise<number> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const wire = await this.client.json<{ written: number }>(
      "POST",
      `${this.#processPath(processId)}/stdin`,
      { body, query: { eof: options.eof ? 1 : undefined } },
    );
    return wire.written;
  }

  /** Closes a background process's stdin (the process sees end of file). */
  async closeStdin(processId: string): Promise<void> {
    await this.client.json("POST", `${this.#processPath(processId)}/stdin`, {
      json: { data: "", eof: true },
    });
  }
}

