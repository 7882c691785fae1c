// The option and result types of a sandbox's calls: what create, exec, execStream, the process
// calls and the URL helpers accept. Types only; nothing here runs.

import type { ConnectionOptions, Query } from "./client.js";
import type { Limits, NetworkOption, PauseMode, VolumeMount } from "./models.js";
import type { GapEvent } from "./sse.js";

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
  /**
   * Volumes to mount (see `Volumes`), at most 16: `{ name, path, readOnly? }`, `name` a volume's
   * name or id. An unknown volume or a bad path is InvalidRequestError naming it.
   */
  volumes?: readonly VolumeMount[];
  metadata?: Record<string, string>;
  /** The admin key only: make it for this tenant, within its quotas. */
  tenant?: string;
  /**
   * Whether a request for it while paused resumes it first (default true); false: such a
   * request fails with SandboxPausedError until `resume()`.
   */
  autoResume?: boolean;
  /**
   * Seconds after which a sandbox nothing asks anything of (no request, no open stream or
   * terminal) pauses itself; 0 or absent: never.
   */
  autoPause?: number;
  /**
   * How it pauses itself when idle: `freeze` (the daemon's default) or `checkpoint` (see
   * `Sandbox.pause`). Only with `autoPause` (TypeError otherwise).
   */
  autoPauseMode?: PauseMode;
  /** What its TTL does: `kill` (default, deletes it) or `pause`. */
  onTimeout?: "kill" | "pause";
}

/** What `Sandbox.fork` makes. */
export interface ForkOptions {
  /**
   * `true` (the default, unless `name` is given): the sandbox is checkpointed with CRIU while it
   * runs and each fork restored from it, its processes and code contexts going on where they
   * were; no template is made. `false`: a snapshot of its files (template `name`, or a generated
   * `fork-...`) and forks made from it.
   */
  memory?: boolean;
  /** How many forks (1 to 32): `fork` then resolves to an array of them. */
  count?: number;
  /**
   * The template of a fork of files. Given without `memory`, it means `memory: false`; with
   * `memory: true` the daemon answers InvalidRequestError (a fork with memory makes no template).
   */
  name?: string;
}

/** What `Sandbox.snapshot` keeps. */
export interface SnapshotOptions {
  /**
   * `true`: its running processes and code contexts too, checkpointed with CRIU; a sandbox made
   * from the template starts with them where they were. `false` (the default): its files.
   */
  memory?: boolean;
}

/** What `Sandbox.setLifecycle` changes; what is not given stays as it is. */
export interface LifecycleOptions {
  /** Idle seconds before it pauses itself; 0: never. */
  autoPause?: number;
  /**
   * How it then pauses: `freeze` or `checkpoint`; absent: `freeze`, whatever it was. Only with
   * `autoPause` (TypeError otherwise).
   */
  autoPauseMode?: PauseMode;
  onTimeout?: "kill" | "pause";
  autoResume?: boolean;
}

/**
 * The window of `Sandbox.metrics`: samples taken at or after `start` and at or before `end`
 * (either absent: no bound). A number is milliseconds since the epoch, as `Date.now()` gives.
 */
export interface MetricsOptions {
  start?: Date | number;
  end?: Date | number;
  signal?: AbortSignal;
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

export interface StreamHooks {
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
  /** While it runs, the sandbox does not pause itself when idle (`autoPause`). */
  keepAwake?: boolean;
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
