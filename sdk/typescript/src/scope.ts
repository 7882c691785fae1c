// What each surface of a sandbox (exec, processes, ports, ...) is given: the HTTP client and the
// sandbox's id and path. No calls here.

import type { Client } from "./client.js";

export type Wire = Record<string, unknown>;

export interface SandboxScope {
  readonly client: Client;
  readonly id: string;
  /** `/v1/sandboxes/{id}` */
  readonly path: string;
}

export function sandboxScope(client: Client, id: string): SandboxScope {
  return { client, id, path: `/v1/sandboxes/${encodeURIComponent(id)}` };
}
