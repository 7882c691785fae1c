// A handle on one background process: its last known state plus the sandbox's process
// operations bound to its id.

import type { ProcessInfo, ProcessLogs } from "./models.js";
import type { LogMatch, Sandbox, StreamLogsOptions, WaitForLogOptions } from "./sandbox.js";

export interface Process extends ProcessInfo {}

export class Process {
  readonly #sandbox: Sandbox;

  constructor(sandbox: Sandbox, info: ProcessInfo) {
    this.#sandbox = sandbox;
    Object.assign(this, info);
  }

  /** Reads the process again and updates this handle. */
  async refresh(): Promise<this> {
    Object.assign(this, await this.#sandbox.getProcess(this.id).then(toInfo));
    return this;
  }

  /** The current status (`running` or `exited`). */
  async getStatus(): Promise<ProcessInfo["status"]> {
    return (await this.refresh()).status;
  }

  /** Kills the group and waits (no signal), or sends one signal. */
  async kill(signal?: string | number): Promise<void> {
    Object.assign(this, await this.#sandbox.killProcess(this.id, signal));
  }

  getLogs(options?: { since?: number; tail?: number }): Promise<ProcessLogs> {
    return this.#sandbox.getProcessLogs(this.id, options);
  }

  streamLogs(options?: StreamLogsOptions): Promise<ReadableStream<Uint8Array>> {
    return this.#sandbox.streamProcessLogs(this.id, options);
  }

  async waitForExit(timeout?: number): Promise<ProcessInfo> {
    const info = await this.#sandbox.waitForExit(
      this.id,
      timeout === undefined ? {} : { timeout },
    );
    Object.assign(this, info);
    return info;
  }

  waitForLog(pattern: string | RegExp, options?: WaitForLogOptions): Promise<LogMatch> {
    return this.#sandbox.waitForLog(this.id, pattern, options);
  }

  writeStdin(data: string | Uint8Array, options?: { eof?: boolean }): Promise<number> {
    return this.#sandbox.writeStdin(this.id, data, options);
  }

  closeStdin(): Promise<void> {
    return this.#sandbox.closeStdin(this.id);
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
  };
}
