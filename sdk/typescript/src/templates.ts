// Templates: images pulled or imported as templates (`Sandbox.pullTemplate`,
// `Sandbox.importTemplate`), snapshots and forks of a
// sandbox (`sandbox.snapshot`, `sandbox.fork`), and the list of templates.

import { Client, type ConnectionOptions } from "./client.js";

type Wire = Record<string, unknown>;

/** What a sandbox's root is made from. */
export interface Template {
  name: string;
  kind: "base" | "directory" | "image" | "snapshot";
  /** "ready", or "creating" while it is imported. */
  status: string;
  /** Its owner; null: everyone's. */
  tenant: string | null;
  /** "archive", the reference pulled, the directory, or the sandbox a snapshot was taken of. */
  source: string | null;
  /** The image manifest's digest. */
  digest: string | null;
  tags: string[];
  layersCount: number;
  sizeBytes: number;
  /** The image's Env, under a sandbox's own. */
  env: string[];
  /** A sandbox's default cwd. */
  workingDir: string | null;
  /** Whom processes run as, unless as root. */
  user: string;
  createdAt: string | null;
  /**
   * A snapshot with memory: a sandbox made from it starts with the source's processes and code
   * contexts running where they were.
   */
  memory: boolean;
}

const text = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));

export function templateFromWire(w: Wire): Template {
  return {
    name: String(w["name"]),
    kind: String(w["kind"]) as Template["kind"],
    status: String(w["status"]),
    tenant: text(w["tenant"]),
    source: text(w["source"]),
    digest: text(w["digest"]),
    tags: ((w["tags"] as unknown[] | undefined) ?? []).map(String),
    layersCount: Number(w["layers_count"] ?? 0),
    sizeBytes: Number(w["size_bytes"] ?? 0),
    env: ((w["env"] as unknown[] | undefined) ?? []).map(String),
    workingDir: text(w["working_dir"]),
    user: String(w["user"] ?? ""),
    createdAt: text(w["created_at"]),
    memory: w["memory"] === true,
  };
}

export function templatePath(name: string): string {
  return `/v1/templates/${encodeURIComponent(name)}`;
}

/**
 * Makes template `name` from an image archive (an OCI image layout or a `docker save` tar), as
 * bytes or a stream. Every layer is checked against its digest and stored once; a bad archive
 * throws InvalidRequestError naming what is wrong. With a tenant's key it is the tenant's own.
 */
export async function importTemplate(
  name: string,
  archive: Uint8Array | ReadableStream<Uint8Array>,
  options: ConnectionOptions = {},
): Promise<Template> {
  const client = new Client(options);
  const wire = await client.json<Wire>("POST", "/v1/templates", {
    query: { name },
    body: archive,
    headers: { "Content-Type": "application/x-tar" },
  });
  return templateFromWire(wire);
}

/** Credentials a registry's auth challenge is answered with, for one pull. */
export interface RegistryAuth {
  username: string;
  password?: string;
}

/**
 * Makes template `name` from `image` pulled from its registry
 * (`host[:port]/repository[:tag][@sha256:...]`; Docker Hub when it names no host). Throws
 * NotFoundError when the registry has no such image, ForbiddenError when the daemon's registry
 * policy refuses it, BadGatewayError when the registry fails or refuses the credentials.
 */
export async function pullTemplate(
  name: string,
  image: string,
  options: ConnectionOptions & { auth?: RegistryAuth } = {},
): Promise<Template> {
  const { auth, ...connection } = options;
  const body: Wire = { name, image };
  if (auth) body["auth"] = { username: auth.username, password: auth.password ?? "" };
  const wire = await new Client(connection).json<Wire>("POST", "/v1/templates", { json: body });
  return templateFromWire(wire);
}

/** The templates this key may use: built in, directories, images and snapshots. */
export async function listTemplates(options: ConnectionOptions = {}): Promise<Template[]> {
  const wire = await new Client(options).json<{ templates: Wire[] }>("GET", "/v1/templates");
  return wire.templates.map(templateFromWire);
}

/** One template; NotFoundError if this key may not use one of that name. */
export async function getTemplate(name: string, options: ConnectionOptions = {}): Promise<Template> {
  return templateFromWire(await new Client(options).json<Wire>("GET", templatePath(name)));
}

/** Deletes an image or snapshot template; ConflictError while a sandbox uses it. */
export async function deleteTemplate(name: string, options: ConnectionOptions = {}): Promise<void> {
  await new Client(options).send("DELETE", templatePath(name));
}
