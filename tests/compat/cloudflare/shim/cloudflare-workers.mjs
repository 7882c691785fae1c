// Stand-in for the Workers runtime module `cloudflare:workers`: only the names that the
// package's module graph imports at load time. SandboxClient itself uses none of them.
export class DurableObject {
  constructor(ctx, env) {
    this.ctx = ctx;
    this.env = env;
  }
}
export class WorkerEntrypoint {
  constructor(ctx, env) {
    this.ctx = ctx;
    this.env = env;
  }
}
export class RpcTarget {}
export const env = {};
const span = { setAttribute() {}, setAttributes() {}, end() {} };
export const tracing = {
  startActiveSpan: (_name, fn) => fn(span),
  enterSpan: (_name, fn, ...args) => fn(span, ...args),
};
export default { DurableObject, WorkerEntrypoint, RpcTarget, env, tracing };
