// Sandbox: the facade over a sandbox's surfaces. Create, connect, list, kill and the templates
// live here; each other surface lives in a module of its own (exec.ts, processes.ts, sessions.ts,
// contexts.ts, ports.ts, tokens.ts, files.ts) and the methods below hand over to it, so the
// public API stays one class.

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
import { type Scope, type Tenant, type Token, usage } from "./access.js";
import { Client, type ConnectionOptions } from "./client.js";
import { CodeContexts } from "./contexts.js";
import { NotFoundError } from "./errors.js";
import { exec, execStream } from "./exec.js";
import { Files } from "./files.js";
import type { CodeContext, Execution, Language, RunCodeOptions, SessionInfo } from "./interpreter.js";
import {
  type ExecResult,
  type Port,
  type ProcessInfo,
  type ProcessLogs,
  type SandboxInfo,
  type SandboxMetrics,
  limitsToWire,
  metricsFromWire,
  networkToWire,
  networkUpdateToWire,
  type NetworkUpdate,
  type PauseMode,
  previewUrl,
  sandboxFromWire,
  volumesToWire,
} from "./models.js";
import type {
  Command,
  CommandOptions,
  CreateOptions,
  ExecOptions,
  ExecStreamCallbacks,
  ExecStreamStreamOptions,
  Flow,
  ForkOptions,
  LifecycleOptions,
  LogMatch,
  MetricsOptions,
  SnapshotOptions,
  StartProcessOptions,
  StreamLogsOptions,
  TokenUrlOptions,
  WaitForLogOptions,
  WaitForPortOptions,
} from "./options.js";
import { Ports } from "./ports.js";
import type { Process } from "./process.js";
import { ProcessOps, Processes } from "./processes.js";
import { type SandboxScope, type Wire, sandboxScope } from "./scope.js";
import { Sessions } from "./sessions.js";
import { Tokens } from "./tokens.js";

export class Sandbox implements AsyncDisposable {
  readonly id: string;
  /** The sandbox as last read from the daemon. */
  info: SandboxInfo;
  readonly client: Client;
  /** The sandbox's files. */
  readonly files: Files;
  /** The sandbox's background processes: `start`, `list`, `get`. */
  readonly processes: Processes;
  readonly #scope: SandboxScope;
  readonly #processOps: ProcessOps;
  readonly #sessions: Sessions;
  readonly #contexts: CodeContexts;
  readonly #tokens: Tokens;
  readonly #ports: Ports;

  private constructor(client: Client, info: SandboxInfo) {
    this.client = client;
    this.info = info;
    this.id = info.id;
    this.#scope = sandboxScope(client, info.id);
    this.files = new Files(client, info.id);
    this.#processOps = new ProcessOps(this.#scope);
    this.processes = new Processes(this.#scope, this.#processOps);
    this.#sessions = new Sessions(this.#scope);
    this.#contexts = new CodeContexts(this.#scope);
    this.#tokens = new Tokens(this.#scope);
    this.#ports = new Ports(this.#scope);
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
    if (options.volumes !== undefined) body["volumes"] = volumesToWire(options.volumes);
    if (options.metadata !== undefined) body["metadata"] = options.metadata;
    if (options.tenant !== undefined) body["tenant"] = options.tenant;
    Object.assign(body, lifecycleToWire(options));
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
   * Template `name` of this sandbox as it is now. Without `memory`: its files (its template's
   * layers and what it changed); its processes keep running and each file is copied as it is
   * when read. `memory: true`: also its running processes and code contexts, checkpointed with
   * CRIU while it runs on; a sandbox created from the template starts with them running where
   * they were, with the same process and context ids (`memory` is true on the template,
   * `layersCount` 0). A daemon without CRIU, or a sandbox it cannot checkpoint (one with volumes
   * or egress, or made from an image or a files snapshot), answers NotImplementedError.
   */
  async snapshot(name: string, options: SnapshotOptions = {}): Promise<Template> {
    const json: Wire = { name };
    if (options.memory) json["memory"] = true;
    return templateFromWire(await this.client.json<Wire>("POST", `${this.#scope.path}/snapshot`, { json }));
  }

  /**
   * New sandboxes made from this one as it is now, with its env, cwd, limits, network, time to
   * live and metadata: one, or an array of `count` (1 to 32).
   *
   * With memory (the default): the sandbox is checkpointed with CRIU while it runs and each fork
   * restored from that checkpoint, so its running processes and code contexts go on in each fork
   * where they were (the same process and context ids; `runCode`'s default context carries over,
   * its variables kept); this sandbox runs on and no template is made. A daemon without CRIU, or
   * a sandbox it cannot checkpoint (one with volumes or egress, or made from an image or a files
   * snapshot), answers NotImplementedError.
   *
   * `memory: false`: a snapshot of its files only, as template `name` (or a generated
   * `fork-...`), and the forks made from it. A `name` without `memory` means `memory: false`;
   * `name` with `memory: true` is InvalidRequestError.
   *
   * A paused sandbox is resumed first (SandboxPausedError with `autoResume: false`).
   */
  fork(options?: ForkOptions & { count?: undefined }): Promise<Sandbox>;
  fork(options: ForkOptions & { count: number }): Promise<Sandbox[]>;
  fork(options?: ForkOptions): Promise<Sandbox | Sandbox[]>;
  async fork(options: ForkOptions = {}): Promise<Sandbox | Sandbox[]> {
    const memory = options.memory ?? options.name === undefined;
    const json: Wire = { memory };
    if (options.name !== undefined) json["name"] = options.name;
    if (options.count !== undefined) json["count"] = options.count;
    const wire = await this.client.json<Wire>("POST", `${this.#scope.path}/fork`, { json });
    const forked = (w: Wire): Sandbox => {
      const fork = new Sandbox(new Client(this.client.options), sandboxFromWire(w));
      if (memory) fork.#contexts.inheritDefaults(this.#contexts);
      return fork;
    };
    if (options.count === undefined) return forked(wire);
    return ((wire["sandboxes"] as Wire[] | undefined) ?? []).map(forked);
  }

  /** What the key's tenant takes now, and its quotas; the same as the module's `usage()`. */
  static async usage(options: ConnectionOptions = {}): Promise<Tenant> {
    return usage(options);
  }


  /** Reads the sandbox again. */
  async refresh(): Promise<SandboxInfo> {
    this.info = sandboxFromWire(await this.client.json<Wire>("GET", this.#scope.path));
    return this.info;
  }

  /**
   * Pauses the sandbox, and its process timeouts and time to live stop counting. `freeze` (the
   * default): every process stops where it is, its memory kept. `checkpoint`: its processes,
   * their memory and its files are written to disk (with CRIU) and the processes end, freeing
   * their memory; `resume()` restores them where they were, with the same pids, and their output
   * streams go on. A daemon without CRIU, or a sandbox it cannot checkpoint (one with volumes or
   * egress, or made from an image or a snapshot), answers NotImplementedError and the sandbox
   * runs on. A later request for it (a command, a file, a terminal) resumes it first unless it
   * was created with `autoResume: false`. Pausing a paused sandbox returns it as it is;
   * `info.pauseMode` says how it is paused.
   */
  async pause(options: { mode?: PauseMode } = {}): Promise<SandboxInfo> {
    const wire = await this.client.json<Wire>("POST", `${this.#scope.path}/pause`, {
      json: { mode: options.mode ?? "freeze" },
    });
    this.info = sandboxFromWire(wire);
    return this.info;
  }

  /**
   * Changes how the sandbox pauses: idle seconds and how it then pauses (`autoPause`,
   * `autoPauseMode`), its TTL's action, `autoResume`; what is not given stays as it is.
   */
  async setLifecycle(options: LifecycleOptions): Promise<SandboxInfo> {
    const wire = await this.client.json<Wire>("PATCH", this.#scope.path, { json: lifecycleToWire(options) });
    this.info = sandboxFromWire(wire);
    return this.info;
  }

  /**
   * Gives the sandbox new egress rules in place of those it had: `{ allow, deny }` (checked as
   * at create: InvalidRequestError naming a bad rule), or `"egress"` for every public address
   * and name. From the answer on, new connections and DNS answers follow the new rules; the
   * sandbox's open connections are cut, so a host just denied is unreachable at once, and the
   * addresses its names had opened are closed until they resolve again. The new rules outlive
   * a daemon restart. Only a sandbox made with egress has rules to change, and only for other
   * egress rules (ConflictError otherwise; to cut everything, `{ allow: [] }`). A paused
   * sandbox is resumed first (SandboxPausedError when made with `autoResume: false`).
   */
  async updateNetwork(network: NetworkUpdate): Promise<SandboxInfo> {
    const wire = await this.client.json<Wire>("PATCH", `${this.#scope.path}/network`, {
      json: networkUpdateToWire(network),
    });
    this.info = sandboxFromWire(wire);
    return this.info;
  }

  /** Resumes a paused sandbox where it stopped; a running one is returned as it is. */
  async resume(): Promise<SandboxInfo> {
    this.info = sandboxFromWire(await this.client.json<Wire>("POST", `${this.#scope.path}/resume`));
    return this.info;
  }

  /**
   * The sandbox's CPU, memory and disk use over time: the samples the daemon took (every
   * `intervalSeconds`, 5 by default) between `start` and `end`, oldest first, with its CPU
   * count, memory limit and disk size. Reading them does not resume a paused sandbox. The
   * daemon keeps them in memory, a bounded series per sandbox: a restart starts them afresh.
   */
  async metrics(options: MetricsOptions = {}): Promise<SandboxMetrics> {
    const wire = await this.client.json<Wire>("GET", `${this.#scope.path}/metrics`, {
      query: { start: timeToWire(options.start, "start"), end: timeToWire(options.end, "end") },
      signal: options.signal,
    });
    return metricsFromWire(wire);
  }

  /** Deletes the sandbox: kills its processes, ends their streams with exit events. Idempotent. */
  async kill(): Promise<void> {
    try {
      await this.client.send("DELETE", this.#scope.path);
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
  }

  // Commands.

  /**
   * Runs a command to completion. With `stream: true` (or onOutput) output also arrives per
   * chunk as it is produced. Retries after a cut connection attach to the same process.
   */
  exec(command: Command, options: ExecOptions = {}): Promise<ExecResult> {
    return exec(this.#scope, command, options);
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
  execStream(
    command: Command,
    options: CommandOptions & Partial<ExecStreamCallbacks> = {},
  ): Promise<number | ReadableStream<Uint8Array>> {
    return execStream(this.#scope, command, options);
  }

  // Background processes by id (the Cloudflare names; `processes` is the collection).

  /** Starts a background process; stdin stays open unless `stdin` is given. */
  startProcess(command: Command, options: StartProcessOptions = {}): Promise<Process> {
    return this.processes.start(command, options);
  }

  /** The sandbox's processes; `status` filters. The same as `processes.list()`. */
  listProcesses(status?: "running" | "exited"): Promise<Process[]> {
    return this.processes.list(status);
  }

  /** NotFoundError if the sandbox has no such process. */
  getProcess(processId: string): Promise<Process> {
    return this.processes.get(processId);
  }

  /**
   * Without a signal: kills the process group (TERM, grace, KILL) and waits for it (reason
   * `killed`). With one (`"TERM"`, `"SIGINT"`, 9): sends just that signal.
   */
  killProcess(processId: string, signal?: string | number, options: { group?: boolean } = {}): Promise<ProcessInfo> {
    return this.#processOps.kill(processId, signal, options);
  }

  /** Kills every running process of the sandbox; resolves to how many were killed. */
  killAllProcesses(): Promise<number> {
    return this.#processOps.killAll();
  }

  /**
   * Follows a process's output as an SSE byte stream in the Cloudflare encoding, from the
   * first retained event (or after `since`) to its `exit` (or `error`); every event
   * carries `data` and `processId` (see LogEvent). Resumes a cut connection, with the same
   * `flow`; a follow resumed at or past the exit (the daemon answers 204) is simply over.
   */
  streamProcessLogs(processId: string, options: StreamLogsOptions = {}): Promise<ReadableStream<Uint8Array>> {
    return this.#processOps.streamLogs(processId, options);
  }

  /** The retained output now, as JSON (no following). */
  getProcessLogs(processId: string, options: { since?: number; tail?: number } = {}): Promise<ProcessLogs> {
    return this.#processOps.getLogs(processId, options);
  }

  /**
   * Resolves to the process once it has exited. `timeout` in milliseconds (rounded up to
   * seconds); when it passes first: TimeoutError.
   */
  waitForExit(processId: string, options: { timeout?: number } = {}): Promise<ProcessInfo> {
    return this.#processOps.waitForExit(processId, options);
  }

  /**
   * Resolves at the first complete output line that contains `pattern` (a string) or matches
   * it (a RegExp), searching from the start of the retained output. ProcessExitedError if the
   * process ends first; TimeoutError if `timeout` ms pass first.
   */
  waitForLog(processId: string, pattern: string | RegExp, options: WaitForLogOptions = {}): Promise<LogMatch> {
    return this.#processOps.waitForLog(processId, pattern, options);
  }

  /** Writes to a background process's stdin; `eof` closes it after. Resolves to bytes written. */
  writeStdin(processId: string, data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<number> {
    return this.#processOps.writeStdin(processId, data, options);
  }

  /** Closes a background process's stdin (the process sees end of file). */
  closeStdin(processId: string): Promise<void> {
    return this.#processOps.closeStdin(processId);
  }

  // Shell sessions.

  /** Starts a persistent shell session: `cd` and `export` persist between its commands. */
  createSession(options: { env?: Record<string, string>; cwd?: string; id?: string } = {}): Promise<SessionInfo> {
    return this.#sessions.create(options);
  }

  listSessions(): Promise<SessionInfo[]> {
    return this.#sessions.list();
  }

  /** The session now (`commands`, `busy`); NotFoundError once it was deleted. */
  getSession(sessionId: string): Promise<SessionInfo> {
    return this.#sessions.get(sessionId);
  }

  /** Ends the session; a running command is killed. */
  deleteSession(sessionId: string): Promise<void> {
    return this.#sessions.delete(sessionId);
  }

  // Code contexts.

  /** Starts a persistent interpreter: "python", "javascript", "typescript" or "bash". */
  createCodeContext(
    options: { language?: Language; cwd?: string; env?: Record<string, string> } = {},
  ): Promise<CodeContext> {
    return this.#contexts.create(options);
  }

  /**
   * Runs a cell, calling onStdout/onStderr/onResult as its events arrive; resolves to the
   * Execution (`results`, `logs`, `error`). State persists between cells of one context.
   * A cut connection resumes the same run after its last event: the cell runs once, and
   * each event reaches the callbacks once.
   */
  runCode(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    return this.#contexts.run(code, options);
  }

  listCodeContexts(): Promise<CodeContext[]> {
    return this.#contexts.list();
  }

  /** The context now (`status`, `executionCount`); NotFoundError once it was deleted. */
  getCodeContext(context: CodeContext | string): Promise<CodeContext> {
    return this.#contexts.get(context);
  }

  /** Starts the context's interpreter afresh (after a crash, or to drop its state). */
  restartCodeContext(context: CodeContext | string): Promise<CodeContext> {
    return this.#contexts.restart(context);
  }

  deleteCodeContext(context: CodeContext | string): Promise<void> {
    return this.#contexts.delete(context);
  }

  // Scoped tokens and the URLs that carry one.

  /**
   * Makes a token that opens this sandbox alone, for `scopes`, until `ttlSeconds` pass (default
   * the daemon's: an hour; at most 7 days), it is revoked or the sandbox is deleted. Its secret,
   * `token.token`, is shown this once. Needs a key, not a token.
   */
  createToken(scopes: readonly Scope[], options: { ttlSeconds?: number } = {}): Promise<Token & { token: string }> {
    return this.#tokens.create(scopes, options);
  }

  /** The sandbox's live tokens, without their secrets. */
  listTokens(): Promise<Token[]> {
    return this.#tokens.list();
  }

  /** Revokes a token (or a token id); requests and streams made with it end. */
  revokeToken(token: Token | string): Promise<void> {
    return this.#tokens.revoke(token);
  }

  /**
   * A URL of this sandbox's `path` (`/processes/p1/logs`, `/exec/pty`, ...) for a browser's
   * EventSource or WebSocket, which cannot set headers: it carries a new token of `scopes` in
   * `?access_token=`, never the API key (URLs end up in histories, logs and `Referer` headers).
   */
  tokenUrl(path: string, scopes: readonly Scope[], options: TokenUrlOptions = {}): Promise<string> {
    return this.#tokens.url(path, scopes, options);
  }

  /**
   * A URL that follows a process's output from a browser's `EventSource`
   * (`logs?follow=1&format=...`), with a `read` token.
   */
  logsUrl(
    processId: string,
    options: { format?: "cloudflare"; flow?: Flow; ttlSeconds?: number } = {},
  ): Promise<string> {
    return this.#tokens.logsUrl(processId, options);
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

  // Exposed ports.

  /**
   * Exposes a port of the sandbox through the daemon; resolves to it with its two URLs: `url`
   * (the host form, for pages with absolute paths) and `pathUrl`. Exposing it again resolves
   * to the same Port. A server on the sandbox's loopback is enough; requests to either URL
   * need a key or a token of scope `port:N` (`Authorization: Bearer`, or `?access_token=`).
   */
  exposePort(port: number): Promise<Port> {
    return this.#ports.expose(port);
  }

  listPorts(): Promise<Port[]> {
    return this.#ports.list();
  }

  /** One exposed port; NotFoundError if it is not exposed. */
  getPort(port: number): Promise<Port> {
    return this.#ports.get(port);
  }

  /** Stops exposing a port (NotFoundError if it was not); connections already relayed go on. */
  closePort(port: number): Promise<void> {
    return this.#ports.close(port);
  }

  /**
   * Resolves once something in the sandbox accepts connections on `port` (exposed or not);
   * TimeoutError after `timeoutSeconds` (default 30).
   */
  waitForPort(port: number, options: WaitForPortOptions = {}): Promise<void> {
    return this.#ports.waitFor(port, options);
  }
}

/**
 * `auto_pause` (`{ idle_seconds, mode }`, the mode only when given), `on_timeout` and
 * `auto_resume` on the wire, for those given.
 */
function lifecycleToWire(options: LifecycleOptions): Wire {
  const body: Wire = {};
  if (options.autoPauseMode !== undefined && options.autoPause === undefined) {
    throw new TypeError("autoPauseMode needs autoPause (the idle seconds) beside it");
  }
  if (options.autoPause !== undefined) {
    const autoPause: Wire = { idle_seconds: options.autoPause };
    if (options.autoPauseMode !== undefined) autoPause["mode"] = options.autoPauseMode;
    body["auto_pause"] = options.autoPause > 0 ? autoPause : null;
  }
  if (options.onTimeout !== undefined) body["on_timeout"] = options.onTimeout;
  if (options.autoResume !== undefined) body["auto_resume"] = options.autoResume;
  return body;
}

/** A time of the metrics window as the daemon reads it: RFC 3339 in UTC with milliseconds. */
function timeToWire(value: Date | number | undefined, name: string): string | undefined {
  if (value === undefined) return undefined;
  const at = typeof value === "number" ? new Date(value) : value;
  if (!(at instanceof Date) || Number.isNaN(at.getTime())) {
    throw new TypeError(`${name} must be a Date or milliseconds since the epoch, not ${String(value)}`);
  }
  return at.toISOString();
}
