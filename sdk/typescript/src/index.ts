// The sandstream SDK's public surface.

export { VERSION } from "./version.js";
export { Sandbox } from "./sandbox.js";
export {
  deleteTemplate,
  getTemplate,
  importTemplate,
  listTemplates,
  pullTemplate,
  type RegistryAuth,
} from "./templates.js";
export type { Template } from "./templates.js";
export { Admin, usage } from "./access.js";
export { Volume, VolumeFiles, Volumes } from "./volumes.js";
export type { VolumeInfo } from "./volumes.js";
export type { Key, Quotas, Scope, Tenant, Token, Usage } from "./access.js";
export type {
  ChunkCallback,
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
export { Process } from "./process.js";
export { Processes } from "./processes.js";
export { Files } from "./files.js";
export type { FileEvent, FileInfo, FileOptions, WriteFileOptions } from "./files.js";
export { Result } from "./interpreter.js";
export type { CodeContext, Execution, ExecutionError, Language, RunCodeOptions, SessionInfo } from "./interpreter.js";
export type { ConnectionOptions } from "./client.js";
export { DEFAULT_URL } from "./client.js";
export type {
  Egress,
  EgressPolicy,
  ExecResult,
  ExitInfo,
  GapInfo,
  Limits,
  LogChunk,
  MetricSample,
  MountedVolume,
  Network,
  NetworkOption,
  NetworkUpdate,
  PauseMode,
  Port,
  ProcessInfo,
  ProcessLogs,
  SandboxInfo,
  SandboxMetrics,
  VolumeMount,
} from "./models.js";
export { previewUrl } from "./models.js";
export { encodeSSE, parseSSEStream, readSSE } from "./sse.js";
export type {
  CompleteEvent,
  ExitEvent,
  ErrorEvent,
  ExecEvent,
  ExitReason,
  GapEvent,
  LogEvent,
  OutputEvent,
  SseMessage,
  StartEvent,
} from "./sse.js";
export { AnsiStripper, LineBuffer, Utf8Decoder, lines, stripAnsi } from "./text.js";
export type { LinesOptions } from "./text.js";
export * from "./errors.js";
