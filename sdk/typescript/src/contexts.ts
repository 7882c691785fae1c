// A sandbox's code contexts (persistent interpreters) and the cells run in them, with one
// default context per language made on first use.

import type { StreamOpener } from "./client.js";
import {
  type CodeContext,
  type Execution,
  type Language,
  type RunCodeOptions,
  cellBody,
  contextFromWire,
  runCell,
} from "./interpreter.js";
import type { SandboxScope, Wire } from "./scope.js";
import { resume } from "./streams.js";

export class CodeContexts {
  readonly #scope: SandboxScope;
  readonly #defaultContexts = new Map<Language, CodeContext>();

  constructor(scope: SandboxScope) {
    this.#scope = scope;
  }

  /** Takes `source`'s default contexts: a fork with memory has the same contexts (their ids). */
  inheritDefaults(source: CodeContexts): void {
    for (const [language, context] of source.#defaultContexts) this.#defaultContexts.set(language, context);
  }

  async create(
    options: { language?: Language; cwd?: string; env?: Record<string, string> } = {},
  ): Promise<CodeContext> {
    const json = { language: options.language ?? "python", cwd: options.cwd, env: options.env };
    return contextFromWire(await this.#scope.client.json<Wire>("POST", `${this.#scope.path}/contexts`, { json }));
  }

  async run(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    let context = options.context;
    if (context === undefined) {
      const language = options.language ?? "python";
      context = this.#defaultContexts.get(language);
      if (context === undefined) {
        context = await this.create({ language });
        this.#defaultContexts.set(language, context);
      }
    }
    const path = this.#contextPath(context);
    const json = cellBody(code, options);
    const key = options.idempotencyKey ?? crypto.randomUUID();
    let run: number | undefined;
    // Once the run's number is known, a reconnection reads that run: if the context has
    // forgotten it, resuming fails rather than submitting the cell again.
    const opener: StreamOpener = (lastEventId, signal) => {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (lastEventId !== undefined) headers["Last-Event-ID"] = lastEventId;
      if (run !== undefined) return this.#scope.client.send("GET", `${path}/runs/${run}`, { signal, headers });
      headers["Idempotency-Key"] = key;
      return this.#scope.client.send("POST", `${path}/run`, { json, signal, headers });
    };
    const messages = await resume(this.#scope.client, opener, options.signal, { processId: undefined });
    return runCell(messages, options, (executionCount) => {
      run = executionCount;
    });
  }

  async list(): Promise<CodeContext[]> {
    const wire = await this.#scope.client.json<{ contexts: Wire[] }>("GET", `${this.#scope.path}/contexts`);
    return wire.contexts.map(contextFromWire);
  }

  async get(context: CodeContext | string): Promise<CodeContext> {
    return contextFromWire(await this.#scope.client.json<Wire>("GET", this.#contextPath(context)));
  }

  async restart(context: CodeContext | string): Promise<CodeContext> {
    return contextFromWire(await this.#scope.client.json<Wire>("POST", `${this.#contextPath(context)}/restart`));
  }

  async delete(context: CodeContext | string): Promise<void> {
    await this.#scope.client.send("DELETE", this.#contextPath(context));
    const id = typeof context === "string" ? context : context.id;
    for (const [language, c] of this.#defaultContexts) {
      if (c.id === id) this.#defaultContexts.delete(language);
    }
  }

  #contextPath(context: CodeContext | string): string {
    const id = typeof context === "string" ? context : context.id;
    return `${this.#scope.path}/contexts/${encodeURIComponent(id)}`;
  }
}
