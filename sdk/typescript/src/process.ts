// A handle on one background process: its last known state plus the process operations of its
// sandbox bound to its id. Knows those operations only through `ProcessOperations`.

import type { ProcessInfo, ProcessLogs } from "./models.js";
import type { LogMatch, StreamLogsOptions, WaitForLogOptions } from "./options.js";

/** What a handle needs from its sandbox, by process id (implemented in processes.ts). */
export interface ProcessOperations {
  info(processId: string): Promise<ProcessInfo>;
  kill(processId: string, signal?: string | number, options?: { group?: boolean }): Promise<ProcessInfo>;
  getLogs(processId: string, options?: { since?: number; tail?: number }): Promise<ProcessLogs>;
  streamLogs(processId: string, options?: StreamLogsOptions): Promise<ReadableStream<Uint8Array>>;
  waitForExit(processId: string, options?: { timeout?: number }): Promise<ProcessInfo>;
  waitForLog(processId: string, pattern: string | RegExp, options?: WaitForLogOptions): Promise<LogMatch>;
  writeStdin(processId: string, data: string | Uint8Array, options?: { eof?: boolean }): Promise<number>;
  closeStdin(processId: string): Promise<void>;
}

export interface Process extends ProcessInfo {}

export class Process {
  readonly #ops: ProcessOperations;

  constructor(ops: ProcessOperations, info: ProcessInfo) {
    this.#ops = ops;
    Object.assign(this, info);
  }

  /** Reads the process again and updates this handle. */
  async refresh(): Promise<this> {
    Object.assign(this, toInfo(await this.#ops.info(this.id)));
    return this;
  }

  /** The current status (`running` or `exited`). */
  async getStatus(): Promise<ProcessInfo["status"]> {
    return (await this.refresh()).status;
  }

  /** Kills the group and waits (no signal), or sends one signal (the Cloudflare shape). */
  async kill(signal?: string | number): Promise<void> {
    Object.assign(this, await this.#ops.kill(this.id, signal));
  }

  /** Sends one signal (`"TERM"`, `"SIGINT"`, 9) to the process group, or only its leader. */
  async sendSignal(signal: string | number = "TERM", options: { group?: boolean } = {}): Promise<ProcessInfo> {
    const info = await this.#ops.kill(this.id, signal, options);
    Object.assign(this, info);
    return info;
  }

  getLogs(options?: { since?: number; tail?: number }): Promise<ProcessLogs> {
    return this.#ops.getLogs(this.id, options);
  }

  streamLogs(options?: StreamLogsOptions): Promise<ReadableStream<Uint8Array>> {
    return this.#ops.streamLogs(this.id, options);
  }

  async waitForExit(timeout?: number): Promise<ProcessInfo> {
    const info = await this.#ops.waitForExit(this.id, timeout === undefined ? {} : { timeout });
    Object.assign(this, info);
    return info;
  }

  waitForLog(pattern: string | RegExp, options?: WaitForLogOptions): Promise<LogMatch> {
    return this.#ops.waitForLog(this.id, pattern, options);
  }

  writeStdin(data: string | Uint8Array, options?: { eof?: boolean }): Promise<number> {
    return this.#ops.writeStdin(this.id, data, options);
  }

  closeStdin(): Promise<void> {
    return this.#ops.closeStdin(this.id);
  }

  toJSON(): ProcessInfo {
    return toInfo(this);
  }
}

function toInfo(p: ProcessInfo): ProcessInfo {
  return {
    id: p.id,
    sandboxId: p.sandboxId,
    command: p.command,
    cmd: p.cmd,
    argv: p.argv,
    status: p.status,
    pid: p.pid,
    startedAt: p.startedAt,
    endedAt: p.endedAt,
    exitCode: p.exitCode,
    signal: p.signal,
    reason: p.reason,
    durationMs: p.durationMs,
    stdoutBytes: p.stdoutBytes,
    stderrBytes: p.stderrBytes,
    nextSeq: p.nextSeq,
    keepAwake: p.keepAwake,
  };
}
