// A sandbox's files: read, write (streamed), list, stat, mkdir, remove, move, watch.

import type { Client } from "./client.js";
import { apiError } from "./errors.js";
import { readSSE } from "./sse.js";

type Wire = Record<string, unknown>;

export interface FileInfo {
  path: string;
  name: string;
  type: "file" | "directory" | "symlink" | "other";
  size: number;
  mtime: string;
  /** Octal permission bits, "0644". */
  mode: string;
  /** Symlinks: where the link points. */
  target?: string;
}

export interface FileEvent {
  type: "create" | "modify" | "delete" | "move" | "overflow";
  path: string;
  isDir: boolean;
  /** Moves: the old path. */
  from?: string;
}

export interface WriteFileOptions {
  /** Octal mode of the file, "0755" or 0o755. */
  mode?: string | number;
  /** Create missing parent directories (default true). */
  parents?: boolean;
  signal?: AbortSignal;
}

function fileFromWire(w: Wire): FileInfo {
  const info: FileInfo = {
    path: String(w["path"]),
    name: String(w["name"]),
    type: w["type"] as FileInfo["type"],
    size: Number(w["size"]),
    mtime: String(w["mtime"]),
    mode: String(w["mode"]),
  };
  if (typeof w["target"] === "string") info.target = w["target"];
  return info;
}

function modeText(mode: string | number): string {
  return typeof mode === "string" ? mode : mode.toString(8).padStart(4, "0");
}

/** Paths are absolute inside the sandbox, or relative to its working directory. */
export class Files {
  readonly #client: Client;
  readonly #path: string;

  constructor(client: Client, sandboxId: string) {
    this.#client = client;
    this.#path = `/v1/sandboxes/${encodeURIComponent(sandboxId)}/files`;
  }

  /** The file's bytes. */
  async read(path: string, options: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const response = await this.#client.send("GET", `${this.#path}/content`, {
      query: { path },
      signal: options.signal,
    });
    return new Uint8Array(await response.arrayBuffer());
  }

  /** The file as UTF-8 text. */
  async readText(path: string, options: { signal?: AbortSignal } = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, options));
  }

  /** Creates or replaces a file; a ReadableStream is uploaded as it is produced. */
  async write(
    path: string,
    data: string | Uint8Array | ReadableStream<Uint8Array>,
    options: WriteFileOptions = {},
  ): Promise<FileInfo> {
    const query: Record<string, string> = { path, parents: options.parents === false ? "0" : "1" };
    if (options.mode !== undefined) query["mode"] = modeText(options.mode);
    const headers: Record<string, string> = { "Content-Type": "application/octet-stream" };
    if (this.#client.apiKey !== "") headers["Authorization"] = `Bearer ${this.#client.apiKey}`;
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const init: RequestInit & { duplex?: "half" } = {
      method: "PUT",
      headers,
      body,
      signal: options.signal ?? null,
    };
    if (body instanceof ReadableStream) init.duplex = "half";
    const response = await fetch(this.#client.buildUrl(`${this.#path}/content`, query), init);
    const wire = (await response.json()) as Wire;
    if (!response.ok) {
      const err = (wire["error"] ?? {}) as Wire;
      throw apiError(err["code"] as string | undefined, String(err["message"] ?? ""), response.status);
    }
    return fileFromWire(wire);
  }

  /** A directory's entries (symlinks not followed). */
  async list(path = "."): Promise<FileInfo[]> {
    const wire = await this.#client.json<{ entries: Wire[] }>("GET", this.#path, { query: { path } });
    return wire.entries.map(fileFromWire);
  }

  async stat(path: string): Promise<FileInfo> {
    return fileFromWire(await this.#client.json<Wire>("GET", `${this.#path}/stat`, { query: { path } }));
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (error) {
      if (error instanceof Error && error.name === "NotFoundError") return false;
      throw error;
    }
  }

  async mkdir(path: string, options: { parents?: boolean; mode?: string | number } = {}): Promise<FileInfo> {
    const json: Wire = { path, parents: options.parents ?? true };
    if (options.mode !== undefined) json["mode"] = modeText(options.mode);
    return fileFromWire(await this.#client.json<Wire>("POST", `${this.#path}/mkdir`, { json }));
  }

  async remove(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.#client.send("DELETE", this.#path, {
      query: { path, recursive: options.recursive === true ? "1" : "0" },
    });
  }

  async move(from: string, to: string, options: { overwrite?: boolean } = {}): Promise<FileInfo> {
    const json = { from, to, overwrite: options.overwrite ?? false };
    return fileFromWire(await this.#client.json<Wire>("POST", `${this.#path}/move`, { json }));
  }

  /** Changes under a directory, until the signal aborts or the loop stops. */
  async *watch(
    path: string,
    options: { recursive?: boolean; signal?: AbortSignal } = {},
  ): AsyncGenerator<FileEvent> {
    const response = await this.#client.send("GET", `${this.#path}/watch`, {
      query: { path, recursive: options.recursive === false ? "0" : "1" },
      headers: { Accept: "text/event-stream" },
      signal: options.signal,
    });
    if (response.body === null) return;
    for await (const message of readSSE(response.body, options.signal)) {
      if (message.comment !== undefined || message.event === "ready") continue;
      const data = JSON.parse(message.data) as Wire;
      if (message.event === "error") {
        throw apiError(data["code"] as string | undefined, String(data["message"] ?? ""), 0);
      }
      const event: FileEvent = {
        type: message.event as FileEvent["type"],
        path: String(data["path"]),
        isDir: data["is_dir"] === true,
      };
      if (typeof data["from"] === "string") event.from = data["from"];
      yield event;
    }
  }
}
