// A sandbox's files: read, write (streamed), list, stat, mkdir, remove, move, watch; a volume's
// (volumes.ts) are the same routes under /v1/volumes/{id}, but watch.

import type { Client } from "./client.js";
import { NotFoundError, apiError } from "./errors.js";
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

/** Options every file operation takes. */
export interface FileOptions {
  /** Act as the sandbox's `user` (uid 1000, the default) or as its `root` (on a volume: as those ids). */
  user?: "user" | "root";
  signal?: AbortSignal;
}

export interface WriteFileOptions extends FileOptions {
  /** Octal mode of the file, "0755" or 0o755. */
  mode?: string | number;
  /** Create missing parent directories (default true). */
  parents?: boolean;
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

/**
 * The file operations of a sandbox and of a volume: the same requests under their own files
 * route (`/v1/sandboxes/{id}/files`, `/v1/volumes/{id}/files`).
 */
export class FileOps {
  protected readonly client: Client;
  /** `/v1/sandboxes/{id}/files` or `/v1/volumes/{id}/files`. */
  protected readonly filesPath: string;

  constructor(client: Client, filesPath: string) {
    this.client = client;
    this.filesPath = filesPath;
  }

  /** The file's bytes. */
  async read(path: string, options: FileOptions = {}): Promise<Uint8Array> {
    return new Uint8Array(await (await this.#content(path, options)).arrayBuffer());
  }

  /** The file as UTF-8 text. */
  async readText(path: string, options: FileOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, options));
  }

  /** The file's bytes as the daemon sends them, for files too large to hold in memory. */
  async readStream(path: string, options: FileOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const response = await this.#content(path, options);
    return response.body ?? new Blob([]).stream();
  }

  async #content(path: string, options: FileOptions): Promise<Response> {
    return this.client.send("GET", `${this.filesPath}/content`, {
      query: { path, user: options.user },
      signal: options.signal,
    });
  }

  /** Creates or replaces a file; a ReadableStream is uploaded as it is produced. */
  async write(
    path: string,
    data: string | Uint8Array | ReadableStream<Uint8Array>,
    options: WriteFileOptions = {},
  ): Promise<FileInfo> {
    const query = {
      path,
      parents: options.parents === false ? 0 : 1,
      mode: options.mode === undefined ? undefined : modeText(options.mode),
      user: options.user,
    };
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    return fileFromWire(
      await this.client.json<Wire>("PUT", `${this.filesPath}/content`, { query, body, signal: options.signal }),
    );
  }

  /** A directory's entries (symlinks not followed). */
  async list(path = ".", options: FileOptions = {}): Promise<FileInfo[]> {
    const wire = await this.client.json<{ entries: Wire[] }>("GET", this.filesPath, {
      query: { path, user: options.user },
      signal: options.signal,
    });
    return wire.entries.map(fileFromWire);
  }

  /** What `path` is (symlinks followed). */
  async stat(path: string, options: FileOptions = {}): Promise<FileInfo> {
    return fileFromWire(
      await this.client.json<Wire>("GET", `${this.filesPath}/stat`, {
        query: { path, user: options.user },
        signal: options.signal,
      }),
    );
  }

  async exists(path: string, options: FileOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (error) {
      if (error instanceof NotFoundError) return false;
      throw error;
    }
  }

  async mkdir(
    path: string,
    options: FileOptions & { parents?: boolean; mode?: string | number } = {},
  ): Promise<FileInfo> {
    const json: Wire = { path, parents: options.parents ?? true };
    if (options.mode !== undefined) json["mode"] = modeText(options.mode);
    return fileFromWire(
      await this.client.json<Wire>("POST", `${this.filesPath}/mkdir`, {
        json,
        query: { user: options.user },
        signal: options.signal,
      }),
    );
  }

  /** Deletes a file, a symlink or a directory (which must be empty unless `recursive`). */
  async remove(path: string, options: FileOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.client.send("DELETE", this.filesPath, {
      query: { path, recursive: options.recursive === true ? 1 : 0, user: options.user },
      signal: options.signal,
    });
  }

  async move(from: string, to: string, options: FileOptions & { overwrite?: boolean } = {}): Promise<FileInfo> {
    const json = { from, to, overwrite: options.overwrite ?? false };
    return fileFromWire(
      await this.client.json<Wire>("POST", `${this.filesPath}/move`, {
        json,
        query: { user: options.user },
        signal: options.signal,
      }),
    );
  }
}

/** Paths are absolute inside the sandbox, or relative to its working directory. */
export class Files extends FileOps {
  constructor(client: Client, sandboxId: string) {
    super(client, `/v1/sandboxes/${encodeURIComponent(sandboxId)}/files`);
  }

  /** Changes under a directory, until the signal aborts or the loop stops. */
  async *watch(path: string, options: FileOptions & { recursive?: boolean } = {}): AsyncGenerator<FileEvent> {
    const response = await this.client.send("GET", `${this.filesPath}/watch`, {
      query: { path, recursive: options.recursive === false ? 0 : 1, user: options.user },
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
