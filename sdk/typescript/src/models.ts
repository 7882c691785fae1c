// The public shapes of sandboxes, processes and results (camelCase), and their conversion from
// and to the wire's snake_case JSON (spec/README.md). Volumes themselves are volumes.ts's.

import type { ExitReason } from "./sse.js";

export interface Limits {
  memoryMb?: number;
  pids?: number;
  cpuPercent?: number;
  diskMb?: number;
  openFiles?: number;
}

/**
 * What a sandbox can reach: `loopback` (the daemon's default) its own loopback only, `none` not
 * even that, `egress` loopback and every public address and name.
 */
export type Network = "loopback" | "none" | "egress";

/**
 * How a sandbox pauses: `freeze` stops every process where it is, its memory kept; `checkpoint`
 * writes its processes, their memory and its files to disk (with CRIU) and ends them, and a
 * resume restores them.
 */
export type PauseMode = "freeze" | "checkpoint";

/**
 * Egress under a policy. Rules are IPv4 addresses (`203.0.113.7`), prefixes (`198.18.0.0/15`),
 * names (`pypi.org`) and name patterns (`*.github.com`: every name under it but not itself; `*`:
 * every name). `allow` absent or null: every public address and name; a list: only these.
 * `deny` wins over `allow`. Private, loopback and link-local ranges, the host and other
 * sandboxes stay out of reach unless an allow rule names them.
 */
export interface EgressPolicy {
  allow?: readonly string[] | null;
  deny?: readonly string[];
}

/** `CreateOptions.network`: a mode, or `{ egress: policy }` (`{ egress: true }` is `"egress"`). */
export type NetworkOption = Network | { egress: true | EgressPolicy };

/**
 * `Sandbox.updateNetwork`: new egress rules, as a policy (`{ allow, deny }`, an `Egress` too),
 * `"egress"` (every public address and name) or `{ egress: true | policy }`.
 */
export type NetworkUpdate = EgressPolicy | "egress" | { egress: true | EgressPolicy };

/** The egress of a sandbox created with network `egress`: its policy and its addresses. */
export interface Egress {
  /** null: every public address and name. */
  allow: string[] | null;
  deny: string[];
  /** The sandbox's address (its eth0). */
  address: string | null;
  /** The host's end of the sandbox's link, where its DNS resolver answers. */
  gateway: string | null;
}

/**
 * A volume to mount at create (`CreateOptions.volumes`); see `Volumes`. `name` is the volume's
 * name or id (an unknown one is InvalidRequestError naming it); `path` is absolute inside the
 * sandbox, normalized, not `/` and not under `/proc`, `/sys` or `/dev`.
 */
export interface VolumeMount {
  name: string;
  path: string;
  /** Mount it read-only (default false): nothing in the sandbox, root included, writes it. */
  readOnly?: boolean;
}

/** A volume a sandbox mounts (`SandboxInfo.volumes`): the mount as asked, with the volume's id. */
export interface MountedVolume {
  id: string;
  name: string;
  path: string;
  readOnly: boolean;
}

export interface SandboxInfo {
  id: string;
  template: string;
  /** `paused`: its processes stopped where they are (see `Sandbox.pause`). */
  status: "running" | "pausing" | "paused" | "resuming" | "deleting" | "lost";
  createdAt: string;
  expiresAt: string | null;
  ttlSeconds: number;
  env: Record<string, string>;
  cwd: string;
  limits: Required<Limits>;
  network: Network;
  /** The egress policy and addresses with network `egress`; null otherwise. */
  egress: Egress | null;
  metadata: Record<string, string>;
  processesRunning: number;
  /** The tenant it belongs to; null for the admin's own. */
  tenant: string | null;
  /**
   * While paused: since when, and how (`freeze`: its processes stopped where they are, in
   * memory; `checkpoint`: written to disk and ended); null while running.
   */
  pausedAt: string | null;
  pauseMode: PauseMode | null;
  /** Whether a request for it while paused resumes it (else SandboxPausedError). */
  autoResume: boolean;
  /** It pauses itself after this many idle seconds; null: never. */
  autoPauseSeconds: number | null;
  /** How it pauses itself when idle (`freeze` or `checkpoint`); null: it never does. */
  autoPauseMode: PauseMode | null;
  /** What its TTL does: `kill` (deletes it) or `pause`. */
  onTimeout: "kill" | "pause";
  /** The volumes it mounts, as asked at create. */
  volumes: MountedVolume[];
}

export interface ProcessInfo {
  id: string;
  sandboxId: string;
  /** The command as given (`cmd`), or argv joined by spaces. */
  command: string;
  cmd: string | null;
  argv: string[];
  status: "running" | "exited";
  pid: number;
  startedAt: string;
  endedAt: string | null;
  /** Null while running; 128 + n when signal n ended it. */
  exitCode: number | null;
  signal: string | null;
  reason: ExitReason | null;
  durationMs: number | null;
  stdoutBytes: number;
  stderrBytes: number;
  nextSeq: number;
  /** While it runs, its sandbox does not pause itself when idle (`autoPause`). */
  keepAwake: boolean;
}

export interface ExecResult {
  /** exitCode === 0. */
  success: boolean;
  exitCode: number;
  signal: string | null;
  reason: ExitReason;
  stdout: string;
  stderr: string;
  command: string;
  processId: string;
  durationMs: number;
  /** Same as durationMs (the Cloudflare SDK's name). */
  duration: number;
  /** The daemon's output cap was hit; the tail of the output was dropped. */
  truncated: boolean;
  /** When the result was received. */
  timestamp: string;
}

export interface ExitInfo {
  exitCode: number;
  signal: string | null;
  reason: ExitReason;
  durationMs: number;
}

export interface LogChunk {
  seq: number;
  stream: "stdout" | "stderr";
  data: string;
}

export interface GapInfo {
  fromSeq: number;
  toSeq: number;
  /** Bytes of output lost, when known. */
  bytes: number | null;
}

export interface ProcessLogs {
  processId: string;
  chunks: LogChunk[];
  stdout: string;
  stderr: string;
  nextSeq: number;
  gap: GapInfo | null;
  exit: ExitInfo | null;
}

/** An exposed port of a sandbox and the two URLs that reach the server listening on it. */
export interface Port {
  port: number;
  /**
   * The host form, `http://{port}-{id}.{preview_domain}:{daemon port}/`, for pages that use
   * absolute paths. A browser opens it with `?access_token=KEY` (see `previewUrl`).
   */
  url: string;
  /** The path form, `{daemon}/v1/sandboxes/{id}/ports/{port}/`. */
  pathUrl: string;
  createdAt: string;
}

/** One sample of a sandbox's resource use, taken by the daemon every `intervalSeconds`. */
export interface MetricSample {
  /** When it was taken: RFC 3339 in UTC with milliseconds. */
  timestamp: string;
  /** Share of the sandbox's CPUs it used since the previous sample, 0 to 100. */
  cpuUsedPct: number;
  /** Memory charged to it, its inactive file cache aside. */
  memoryUsedBytes: number;
  /** Its file cache. */
  memoryCacheBytes: number;
  /** What its writable root filesystem holds. */
  diskUsedBytes: number;
}

/**
 * A sandbox's CPU, memory and disk use over time (`Sandbox.metrics`), with what each is out of.
 * The daemon keeps a bounded series per sandbox in memory (720 samples, then the older half is
 * merged pairwise); a daemon restart starts it afresh.
 */
export interface SandboxMetrics {
  sandboxId: string;
  /** How often the daemon samples (`metrics_interval_seconds`). */
  intervalSeconds: number;
  /** Its CPU limit in CPUs (`cpuPercent / 100`). */
  cpuCount: number;
  /** Its memory limit. */
  memoryTotalBytes: number;
  /** Its filesystem's size; null before the first sample. */
  diskTotalBytes: number | null;
  /** Oldest first. */
  samples: MetricSample[];
}

type Wire = Record<string, unknown>;

const str = (v: unknown): string => (typeof v === "string" ? v : "");
const num = (v: unknown): number => (typeof v === "number" ? v : 0);
const optStr = (v: unknown): string | null => (typeof v === "string" ? v : null);
const optNum = (v: unknown): number | null => (typeof v === "number" ? v : null);
const obj = (v: unknown): Wire => (v !== null && typeof v === "object" ? (v as Wire) : {});

export function limitsToWire(limits: Limits): Wire {
  const wire: Wire = {};
  if (limits.memoryMb !== undefined) wire["memory_mb"] = limits.memoryMb;
  if (limits.pids !== undefined) wire["pids"] = limits.pids;
  if (limits.cpuPercent !== undefined) wire["cpu_percent"] = limits.cpuPercent;
  if (limits.diskMb !== undefined) wire["disk_mb"] = limits.diskMb;
  if (limits.openFiles !== undefined) wire["open_files"] = limits.openFiles;
  return wire;
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x) => typeof x === "string") : []);

/** The request form of `network`; a policy sends only its rules (an `Egress` may be reused). */
export function networkToWire(network: NetworkOption): unknown {
  // Anything but a policy (true, or what a caller without types sent) goes as it is, for the
  // daemon to check.
  if (typeof network !== "object" || network === null || typeof network.egress !== "object" ||
      network.egress === null) {
    return network;
  }
  const policy: Wire = {};
  if (network.egress.allow !== undefined) {
    policy["allow"] = network.egress.allow === null ? null : [...network.egress.allow];
  }
  if (network.egress.deny !== undefined) policy["deny"] = [...network.egress.deny];
  return { egress: policy };
}

/** The body of `PATCH .../network`: a bare policy becomes `{ egress: policy }`, its rules only. */
export function networkUpdateToWire(network: NetworkUpdate): unknown {
  if (typeof network === "object" && network !== null && !("egress" in network)) {
    return networkToWire({ egress: network });
  }
  return networkToWire(network as NetworkOption);
}

/** The request form of `volumes`: `{ name, path, read_only }` each. */
export function volumesToWire(volumes: readonly VolumeMount[]): Wire[] {
  return volumes.map((v) => ({ name: v.name, path: v.path, read_only: v.readOnly ?? false }));
}

export function egressFromWire(v: unknown): Egress | null {
  if (v === null || typeof v !== "object") return null;
  const w = v as Wire;
  return {
    allow: Array.isArray(w["allow"]) ? strings(w["allow"]) : null,
    deny: strings(w["deny"]),
    address: optStr(w["address"]),
    gateway: optStr(w["gateway"]),
  };
}

/** A sandbox's `auto_pause` (null: off); a daemon that leaves its mode out freezes. */
function autoPauseFromWire(v: unknown): Pick<SandboxInfo, "autoPauseSeconds" | "autoPauseMode"> {
  if (v === null || typeof v !== "object") return { autoPauseSeconds: null, autoPauseMode: null };
  const w = v as Wire;
  return {
    autoPauseSeconds: num(w["idle_seconds"]),
    autoPauseMode: (optStr(w["mode"]) ?? "freeze") as PauseMode,
  };
}

export function sandboxFromWire(w: Wire): SandboxInfo {
  const l = obj(w["limits"]);
  return {
    id: str(w["id"]),
    template: str(w["template"]),
    status: str(w["status"]) as SandboxInfo["status"],
    createdAt: str(w["created_at"]),
    expiresAt: optStr(w["expires_at"]),
    ttlSeconds: num(w["ttl_seconds"]),
    env: obj(w["env"]) as Record<string, string>,
    cwd: str(w["cwd"]),
    limits: {
      memoryMb: num(l["memory_mb"]),
      pids: num(l["pids"]),
      cpuPercent: num(l["cpu_percent"]),
      diskMb: num(l["disk_mb"]),
      openFiles: num(l["open_files"]),
    },
    network: str(w["network"]) as Network,
    egress: egressFromWire(w["egress"]),
    metadata: obj(w["metadata"]) as Record<string, string>,
    processesRunning: num(w["processes_running"]),
    tenant: optStr(w["tenant"]),
    pausedAt: optStr(w["paused_at"]),
    pauseMode: optStr(w["pause_mode"]) as SandboxInfo["pauseMode"],
    autoResume: w["auto_resume"] !== false,
    ...autoPauseFromWire(w["auto_pause"]),
    onTimeout: w["on_timeout"] === "pause" ? "pause" : "kill",
    volumes: (Array.isArray(w["volumes"]) ? (w["volumes"] as Wire[]) : []).map((v) => ({
      id: str(v["id"]),
      name: str(v["name"]),
      path: str(v["path"]),
      readOnly: v["read_only"] === true,
    })),
  };
}

export function processFromWire(w: Wire): ProcessInfo {
  const argv = Array.isArray(w["argv"]) ? (w["argv"] as string[]) : [];
  const cmd = optStr(w["cmd"]);
  return {
    id: str(w["id"]),
    sandboxId: str(w["sandbox_id"]),
    command: cmd ?? argv.join(" "),
    cmd,
    argv,
    status: str(w["status"]) as ProcessInfo["status"],
    pid: num(w["pid"]),
    startedAt: str(w["started_at"]),
    endedAt: optStr(w["ended_at"]),
    exitCode: optNum(w["exit_code"]),
    signal: optStr(w["signal"]),
    reason: optStr(w["reason"]) as ExitReason | null,
    durationMs: optNum(w["duration_ms"]),
    stdoutBytes: num(w["stdout_bytes"]),
    stderrBytes: num(w["stderr_bytes"]),
    nextSeq: num(w["next_seq"]),
    keepAwake: w["keep_awake"] === true,
  };
}

export function portFromWire(w: Wire): Port {
  return {
    port: num(w["port"]),
    url: str(w["url"]),
    pathUrl: str(w["path_url"]),
    createdAt: str(w["created_at"]),
  };
}

/**
 * `port.url` with `?access_token=` for a browser: the daemon moves the token into an HttpOnly
 * cookie of that host alone and redirects to `port.url`. Pass a scoped token of scope `port:N`
 * (`sandbox.browserUrl(port)` makes one), never the API key: a URL ends up in histories, logs
 * and `Referer` headers.
 */
export function previewUrl(port: Port, token: string): string {
  return `${port.url}?access_token=${encodeURIComponent(token)}`;
}

export function exitFromWire(w: Wire): ExitInfo {
  return {
    exitCode: num(w["exit_code"]),
    signal: optStr(w["signal"]),
    reason: str(w["reason"]) as ExitReason,
    durationMs: num(w["duration_ms"]),
  };
}

export function execResultFromWire(w: Wire, command: string): ExecResult {
  const exitCode = num(w["exit_code"]);
  const durationMs = num(w["duration_ms"]);
  return {
    success: exitCode === 0,
    exitCode,
    signal: optStr(w["signal"]),
    reason: str(w["reason"]) as ExitReason,
    stdout: str(w["stdout"]),
    stderr: str(w["stderr"]),
    command,
    processId: str(w["process_id"]),
    durationMs,
    duration: durationMs,
    truncated: w["truncated"] === true,
    timestamp: new Date().toISOString(),
  };
}

export function logsFromWire(w: Wire): ProcessLogs {
  const gap = w["gap"] === null || w["gap"] === undefined ? null : obj(w["gap"]);
  const exit = w["exit"] === null || w["exit"] === undefined ? null : obj(w["exit"]);
  return {
    processId: str(w["process_id"]),
    chunks: (Array.isArray(w["chunks"]) ? (w["chunks"] as Wire[]) : []).map((c) => ({
      seq: num(c["seq"]),
      stream: str(c["stream"]) as LogChunk["stream"],
      data: str(c["data"]),
    })),
    stdout: str(w["stdout"]),
    stderr: str(w["stderr"]),
    nextSeq: num(w["next_seq"]),
    gap: gap && {
      fromSeq: num(gap["from_seq"]),
      toSeq: num(gap["to_seq"]),
      bytes: optNum(gap["bytes"]),
    },
    exit: exit && exitFromWire(exit),
  };
}

export function metricsFromWire(w: Wire): SandboxMetrics {
  return {
    sandboxId: str(w["sandbox_id"]),
    intervalSeconds: num(w["interval_seconds"]),
    cpuCount: num(w["cpu_count"]),
    memoryTotalBytes: num(w["memory_total_bytes"]),
    diskTotalBytes: optNum(w["disk_total_bytes"]),
    samples: (Array.isArray(w["samples"]) ? (w["samples"] as Wire[]) : []).map((s) => ({
      timestamp: str(s["timestamp"]),
      cpuUsedPct: num(s["cpu_used_pct"]),
      memoryUsedBytes: num(s["memory_used_bytes"]),
      memoryCacheBytes: num(s["memory_cache_bytes"]),
      diskUsedBytes: num(s["disk_used_bytes"]),
    })),
  };
}
