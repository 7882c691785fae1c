// Volumes: storage that outlives sandboxes. `Volumes` makes, lists, finds and deletes them; a
// `Volume` is one, mounted into sandboxes at create (`Sandbox.create({ volumes })`) and whose
// files are read and written without a sandbox (`volume.files`).

import { Client, type ConnectionOptions } from "./client.js";
import { FileOps } from "./files.js";

type Wire = Record<string, unknown>;

/** A volume as the daemon describes it: an ext4 filesystem of `sizeMb`, and what it holds now. */
export interface VolumeInfo {
  /** `vol_...` */
  id: string;
  /** Unique among its tenant's volumes. */
  name: string;
  /** Its owner; null: the admin's. */
  tenant: string | null;
  sizeMb: number;
  createdAt: string;
  /** What its filesystem holds now (statfs); null when the daemon could not read it. */
  usedBytes: number | null;
  /** Its filesystem's size (statfs): less than `sizeMb` by what ext4 keeps; null as above. */
  totalBytes: number | null;
  /** The ids of the sandboxes that mount it. */
  mountedBy: string[];
}

const str = (v: unknown): string => (typeof v === "string" ? v : "");
const num = (v: unknown): number => (typeof v === "number" ? v : 0);
const optNum = (v: unknown): number | null => (typeof v === "number" ? v : null);

export function volumeFromWire(w: Wire): VolumeInfo {
  return {
    id: str(w["id"]),
    name: str(w["name"]),
    tenant: typeof w["tenant"] === "string" ? w["tenant"] : null,
    sizeMb: num(w["size_mb"]),
    createdAt: str(w["created_at"]),
    usedBytes: optNum(w["used_bytes"]),
    totalBytes: optNum(w["total_bytes"]),
    mountedBy: Array.isArray(w["mounted_by"]) ? w["mounted_by"].map(String) : [],
  };
}

function volumePath(idOrName: string): string {
  return `/v1/volumes/${encodeURIComponent(idOrName)}`;
}

/**
 * A volume's files, without a sandbox: those of `sandbox.files` but `watch`. Paths are inside
 * the volume, `/` its top (a relative one is taken from there); one that climbs above the top
 * is InvalidRequestError. They act as the sandbox user (uid 1000), who owns the top, unless
 * `user: "root"`; a full volume is PayloadTooLargeError.
 */
export class VolumeFiles extends FileOps {
  constructor(client: Client, volumeId: string) {
    super(client, `${volumePath(volumeId)}/files`);
  }
}

/**
 * One volume: an ext4 filesystem of its size that outlives sandboxes. `info` is what the daemon
 * said of it (size, use, the sandboxes that mount it); `files` reads and writes it without a
 * sandbox. Made by `Volumes`, through whose client it talks.
 */
export class Volume {
  readonly id: string;
  readonly name: string;
  /** The volume as last read from the daemon; `refresh()` reads it again. */
  info: VolumeInfo;
  readonly files: VolumeFiles;
  readonly #client: Client;

  constructor(client: Client, info: VolumeInfo) {
    this.#client = client;
    this.info = info;
    this.id = info.id;
    this.name = info.name;
    this.files = new VolumeFiles(client, info.id);
  }

  /** Reads the volume again: what it holds now, who mounts it. */
  async refresh(): Promise<VolumeInfo> {
    this.info = volumeFromWire(await this.#client.json<Wire>("GET", volumePath(this.id)));
    return this.info;
  }

  /** Deletes the volume and everything on it; ConflictError (naming the sandbox) while one mounts it. */
  async delete(): Promise<void> {
    await this.#client.send("DELETE", volumePath(this.id));
  }
}

/**
 * The volumes API. Server from SANDSTREAM_URL, key from SANDSTREAM_API_KEY by default: the
 * admin's or a tenant's (a tenant sees its own volumes only), not a sandbox's token.
 */
export class Volumes {
  readonly client: Client;

  constructor(options: ConnectionOptions = {}) {
    this.client = new Client(options);
  }

  /**
   * Makes volume `name` (1 to 63 of `A-Za-z0-9._-`, not `.` or `..`, not starting with `vol_`;
   * ConflictError if the tenant has one of that name) of `sizeMb` (16 up to the daemon's
   * `volume_max_mb`; default its `volume_default_mb`, 1024). A tenant's volumes count against
   * its `volumeStorageMb` quota (QuotaExceededError).
   */
  async create(name: string, options: { sizeMb?: number } = {}): Promise<Volume> {
    const json: Wire = { name };
    if (options.sizeMb !== undefined) json["size_mb"] = options.sizeMb;
    return new Volume(this.client, volumeFromWire(await this.client.json<Wire>("POST", "/v1/volumes", { json })));
  }

  /** The volumes this key sees (a tenant's key: its own), oldest first. */
  async list(): Promise<Volume[]> {
    const wire = await this.client.json<{ volumes: Wire[] }>("GET", "/v1/volumes");
    return wire.volumes.map((w) => new Volume(this.client, volumeFromWire(w)));
  }

  /** A volume by id (`vol_...`) or name; NotFoundError if this key sees none. */
  async get(idOrName: string): Promise<Volume> {
    return new Volume(this.client, volumeFromWire(await this.client.json<Wire>("GET", volumePath(idOrName))));
  }

  /**
   * Deletes a volume (or the volume of an id or name) and everything on it; ConflictError
   * (naming the sandbox) while a sandbox mounts it, NotFoundError if there is none.
   */
  async delete(volume: Volume | string): Promise<void> {
    await this.client.send("DELETE", volumePath(typeof volume === "string" ? volume : volume.id));
  }
}
