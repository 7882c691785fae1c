// A sandbox's scoped tokens, and the URLs that carry one for a browser (which cannot set
// headers): never the API key, which would end up in histories, logs and `Referer` headers.

import { type Scope, type Token, tokenFromWire } from "./access.js";
import type { Query } from "./client.js";
import type { Flow, TokenUrlOptions } from "./options.js";
import type { SandboxScope, Wire } from "./scope.js";

export class Tokens {
  readonly #scope: SandboxScope;

  constructor(scope: SandboxScope) {
    this.#scope = scope;
  }

  async create(scopes: readonly Scope[], options: { ttlSeconds?: number } = {}): Promise<Token & { token: string }> {
    const json: Record<string, unknown> = { scopes };
    if (options.ttlSeconds !== undefined) json["ttl_seconds"] = options.ttlSeconds;
    const wire = await this.#scope.client.json<Wire>("POST", `${this.#scope.path}/tokens`, { json });
    return tokenFromWire(wire) as Token & { token: string };
  }

  async list(): Promise<Token[]> {
    const wire = await this.#scope.client.json<{ tokens: Wire[] }>("GET", `${this.#scope.path}/tokens`);
    return wire.tokens.map(tokenFromWire);
  }

  async revoke(token: Token | string): Promise<void> {
    const id = typeof token === "string" ? token : token.id;
    await this.#scope.client.send("DELETE", `${this.#scope.path}/tokens/${encodeURIComponent(id)}`);
  }

  async url(path: string, scopes: readonly Scope[], options: TokenUrlOptions = {}): Promise<string> {
    const token = await this.create(scopes, options.ttlSeconds === undefined ? {} : { ttlSeconds: options.ttlSeconds });
    const url = this.#scope.client.buildUrl(`${this.#scope.path}${path}`, { ...options.query, access_token: token.token });
    return options.websocket === true ? url.replace(/^http/, "ws") : url;
  }

  async logsUrl(
    processId: string,
    options: { format?: "cloudflare"; flow?: Flow; ttlSeconds?: number } = {},
  ): Promise<string> {
    const query: Query = { follow: 1, format: options.format, flow: options.flow };
    const ttl = options.ttlSeconds === undefined ? {} : { ttlSeconds: options.ttlSeconds };
    return this.url(`/processes/${encodeURIComponent(processId)}/logs`, ["read"], { query, ...ttl });
  }
}
