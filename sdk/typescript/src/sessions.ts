// A sandbox's shell sessions: `cd` and `export` persist between the commands run in one
// (`exec(..., { session })`).

import { type SessionInfo, sessionFromWire } from "./interpreter.js";
import type { SandboxScope, Wire } from "./scope.js";

export class Sessions {
  readonly #scope: SandboxScope;

  constructor(scope: SandboxScope) {
    this.#scope = scope;
  }

  async create(options: { env?: Record<string, string>; cwd?: string; id?: string } = {}): Promise<SessionInfo> {
    return sessionFromWire(await this.#scope.client.json<Wire>("POST", `${this.#scope.path}/sessions`, { json: options }));
  }

  async list(): Promise<SessionInfo[]> {
    const wire = await this.#scope.client.json<{ sessions: Wire[] }>("GET", `${this.#scope.path}/sessions`);
    return wire.sessions.map(sessionFromWire);
  }

  async get(sessionId: string): Promise<SessionInfo> {
    return sessionFromWire(await this.#scope.client.json<Wire>("GET", this.#sessionPath(sessionId)));
  }

  async delete(sessionId: string): Promise<void> {
    await this.#scope.client.send("DELETE", this.#sessionPath(sessionId));
  }

  #sessionPath(sessionId: string): string {
    return `${this.#scope.path}/sessions/${encodeURIComponent(sessionId)}`;
  }
}
