// Access: tenants, their quotas and keys (the admin key's `Admin`), usage, and the scoped tokens
// of one sandbox (`sst_...`), which a browser may carry in `?access_token=` where a key must not.

import { Client, type ConnectionOptions } from "./client.js";

/** A scope of a token: `read`, `exec`, `terminal`, `files:read`, `files:write`, `port:N`. */
export type Scope = "read" | "exec" | "terminal" | "files:read" | "files:write" | `port:${number}`;

/** A tenant's quotas; 0 (or absent) means none. */
export interface Quotas {
  sandboxes?: number;
  runningProcesses?: number;
  /** The sum of its sandboxes' memory limits. */
  memoryMb?: number;
  cpuPercent?: number;
  diskMb?: number;
  /** Open SSE streams and WebSockets. */
  streams?: number;
  requestsPerSecond?: number;
  /** The sum of its image and snapshot templates' sizes (size_bytes), per node. */
  templateStorageMb?: number;
  /** The sum of its volumes' sizes (`sizeMb`), per node. */
  volumeStorageMb?: number;
  /** File watches open at once in its sandboxes; 0 (or absent): the daemon's default share. */
  watches?: number;
}

export interface Usage {
  sandboxes: number;
  runningProcesses: number;
  memoryMb: number;
  cpuPercent: number;
  diskMb: number;
  streams: number;
  /** The sum of its volumes' sizes on the node that answered. */
  volumeStorageMb: number;
}

/** A tenant, its quotas and what it takes now (`name` null: the admin key's own usage). */
export interface Tenant {
  name: string | null;
  quotas: Required<Quotas>;
  usage: Usage;
  createdAt: string | null;
}

/** A tenant's key; `key` (the secret, `ssk_...`) only in the answer that made it. */
export interface Key {
  id: string;
  tenant: string;
  createdAt: string;
  key?: string;
}

/** A scoped token of one sandbox; `token` (the secret, `sst_...`) only in the answer that made it. */
export interface Token {
  id: string;
  sandboxId: string;
  scopes: string[];
  createdAt: string;
  expiresAt: string;
  token?: string;
}

type Wire = Record<string, unknown>;

const num = (v: unknown): number => (typeof v === "number" ? v : 0);
const str = (v: unknown): string => (typeof v === "string" ? v : "");
const obj = (v: unknown): Wire => (v !== null && typeof v === "object" ? (v as Wire) : {});

const QUOTA_WIRE: ReadonlyArray<readonly [keyof Quotas, string]> = [
  ["sandboxes", "sandboxes"],
  ["runningProcesses", "running_processes"],
  ["memoryMb", "memory_mb"],
  ["cpuPercent", "cpu_percent"],
  ["diskMb", "disk_mb"],
  ["streams", "streams"],
  ["requestsPerSecond", "requests_per_second"],
  ["templateStorageMb", "template_storage_mb"],
  ["volumeStorageMb", "volume_storage_mb"],
  ["watches", "watches"],
];

export function quotasToWire(quotas: Quotas): Wire {
  const wire: Wire = {};
  for (const [name, field] of QUOTA_WIRE) if (quotas[name] !== undefined) wire[field] = quotas[name];
  return wire;
}

export function tenantFromWire(w: Wire): Tenant {
  const q = obj(w["quotas"]);
  const u = obj(w["usage"]);
  const quotas = {} as Required<Quotas>;
  for (const [name, field] of QUOTA_WIRE) quotas[name] = num(q[field]);
  return {
    name: typeof w["name"] === "string" ? w["name"] : null,
    quotas,
    usage: {
      sandboxes: num(u["sandboxes"]),
      runningProcesses: num(u["running_processes"]),
      memoryMb: num(u["memory_mb"]),
      cpuPercent: num(u["cpu_percent"]),
      diskMb: num(u["disk_mb"]),
      streams: num(u["streams"]),
      volumeStorageMb: num(u["volume_storage_mb"]),
    },
    createdAt: typeof w["created_at"] === "string" ? w["created_at"] : null,
  };
}

export function keyFromWire(w: Wire): Key {
  const key: Key = { id: str(w["id"]), tenant: str(w["tenant"]), createdAt: str(w["created_at"]) };
  if (typeof w["key"] === "string") key.key = w["key"];
  return key;
}

export function tokenFromWire(w: Wire): Token {
  const token: Token = {
    id: str(w["id"]),
    sandboxId: str(w["sandbox_id"]),
    scopes: Array.isArray(w["scopes"]) ? w["scopes"].map(String) : [],
    createdAt: str(w["created_at"]),
    expiresAt: str(w["expires_at"]),
  };
  if (typeof w["token"] === "string") token.token = w["token"];
  return token;
}

/** What the key's tenant takes now, and its quotas (the admin key: its own, no quotas). */
export async function usage(options: ConnectionOptions = {}): Promise<Tenant> {
  return tenantFromWire(await new Client(options).json<Wire>("GET", "/v1/usage"));
}

/**
 * The admin key's API: tenants, their quotas and keys. Server from SANDSTREAM_URL, key from
 * SANDSTREAM_API_KEY by default (the daemon's own key: a tenant's key gets ForbiddenError).
 */
export class Admin {
  readonly client: Client;

  constructor(options: ConnectionOptions = {}) {
    this.client = new Client(options);
  }

  /** Creates a tenant (ConflictError if it exists). */
  async createTenant(name: string, quotas: Quotas = {}): Promise<Tenant> {
    const body = { name, quotas: quotasToWire(quotas) };
    return tenantFromWire(await this.client.json<Wire>("POST", "/v1/admin/tenants", { json: body }));
  }

  /** Every tenant, with its usage. */
  async listTenants(): Promise<Tenant[]> {
    const wire = await this.client.json<{ tenants: Wire[] }>("GET", "/v1/admin/tenants");
    return wire.tenants.map(tenantFromWire);
  }

  /** A tenant, its quotas and usage; NotFoundError if there is none of that name. */
  async getTenant(name: string): Promise<Tenant> {
    return tenantFromWire(await this.client.json<Wire>("GET", tenantPath(name)));
  }

  /** Sets every quota of a tenant (absent ones become none); holds at once. */
  async setQuotas(name: string, quotas: Quotas): Promise<Tenant> {
    const json = { quotas: quotasToWire(quotas) };
    return tenantFromWire(await this.client.json<Wire>("PATCH", tenantPath(name), { json }));
  }

  /** Deletes a tenant and its keys; ConflictError while it has sandboxes. */
  async deleteTenant(name: string): Promise<void> {
    await this.client.send("DELETE", tenantPath(name));
  }

  /**
   * Makes a key of the tenant; its secret, `key.key` (`ssk_...`), is shown this once. To rotate
   * a key, make a new one, move to it, and revoke the old one.
   */
  async createKey(tenant: string): Promise<Key & { key: string }> {
    return keyFromWire(await this.client.json<Wire>("POST", `${tenantPath(tenant)}/keys`)) as Key & { key: string };
  }

  /** The tenant's keys, without the keys themselves. */
  async listKeys(tenant: string): Promise<Key[]> {
    const wire = await this.client.json<{ keys: Wire[] }>("GET", `${tenantPath(tenant)}/keys`);
    return wire.keys.map(keyFromWire);
  }

  /** Revokes a key (or a key id); it opens nothing from now on. */
  async revokeKey(tenant: string, key: Key | string): Promise<void> {
    const id = typeof key === "string" ? key : key.id;
    await this.client.send("DELETE", `${tenantPath(tenant)}/keys/${encodeURIComponent(id)}`);
  }
}

function tenantPath(name: string): string {
  return `/v1/admin/tenants/${encodeURIComponent(name)}`;
}
