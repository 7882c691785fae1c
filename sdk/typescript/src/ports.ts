// A sandbox's exposed ports: exposing one through the daemon, listing, closing, and waiting
// until something in the sandbox accepts connections on a port.

import { TimeoutError } from "./errors.js";
import { type Port, portFromWire } from "./models.js";
import type { WaitForPortOptions } from "./options.js";
import type { SandboxScope, Wire } from "./scope.js";

export class Ports {
  readonly #scope: SandboxScope;

  constructor(scope: SandboxScope) {
    this.#scope = scope;
  }

  async expose(port: number): Promise<Port> {
    return portFromWire(await this.#scope.client.json<Wire>("POST", `${this.#scope.path}/ports`, { json: { port } }));
  }

  async list(): Promise<Port[]> {
    const wire = await this.#scope.client.json<{ ports: Wire[] }>("GET", `${this.#scope.path}/ports`);
    return wire.ports.map(portFromWire);
  }

  async get(port: number): Promise<Port> {
    return portFromWire(await this.#scope.client.json<Wire>("GET", this.#portPath(port)));
  }

  async close(port: number): Promise<void> {
    await this.#scope.client.send("DELETE", this.#portPath(port));
  }

  async waitFor(port: number, options: WaitForPortOptions = {}): Promise<void> {
    const limit = options.timeoutSeconds ?? 30;
    const deadline = Date.now() + limit * 1000;
    for (;;) {
      // A long-poll of at most 240 s (below fetch's own 300 s header timeout), repeated.
      const seconds = Math.min(240, Math.max(0.001, (deadline - Date.now()) / 1000));
      try {
        await this.#scope.client.retrying(options.signal, () =>
          this.#scope.client.json<Wire>("GET", `${this.#portPath(port)}/wait`, {
            query: { timeout_seconds: Number(seconds.toFixed(3)) },
            signal: options.signal,
          }),
        );
        return;
      } catch (error) {
        if (!(error instanceof TimeoutError)) throw error;
        if (Date.now() < deadline) continue;
        throw new TimeoutError(
          `nothing accepted connections on port ${port} of sandbox ${this.#scope.id} within ${limit} s`,
          "timeout",
          error.status,
        );
      }
    }
  }

  #portPath(port: number): string {
    if (!Number.isInteger(port)) throw new TypeError(`port must be an integer, not ${String(port)}`);
    return `${this.#scope.path}/ports/${port}`;
  }
}
