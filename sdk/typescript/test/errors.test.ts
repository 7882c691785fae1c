// Typed errors mirroring spec/errors.md, from responses and from the transport.

import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";

import {
  ApiError,
  ConflictError,
  ConnectionFailedError,
  ERROR_TABLE,
  InvalidRequestError,
  NotFoundError,
  NotImplementedError,
  Sandbox,
  SandstreamError,
  ShuttingDownError,
  UnauthorizedError,
  apiError,
  parseSSEStream,
  type ExecEvent,
} from "sandstream";

import { API_KEY, startDaemon, useDaemon, type Daemon } from "./helpers.js";

let daemon: Daemon;
let sandbox: Sandbox;

before(async () => {
  daemon = await useDaemon();
  sandbox = await Sandbox.create();
});

after(async () => {
  await sandbox?.kill();
  await daemon?.stop();
});

test("every code of spec/errors.md maps to its class and status", () => {
  const expected: Record<string, number> = {
    invalid_json: 400,
    invalid_request: 400,
    unauthorized: 401,
    forbidden: 403,
    not_found: 404,
    method_not_allowed: 405,
    timeout: 408,
    conflict: 409,
    payload_too_large: 413,
    unsupported_media_type: 415,
    quota_exceeded: 429,
    sandbox_setup_failed: 500,
    internal: 500,
    shutting_down: 503,
    bad_gateway: 502,
    request_header_too_large: 431,
    too_many_connections: 503,
    unavailable: 503,
    node_unreachable: 503,
    not_implemented: 501,
    paused: 409,
  };
  assert.deepEqual(Object.keys(ERROR_TABLE).sort(), Object.keys(expected).sort());
  for (const [code, status] of Object.entries(expected)) {
    const error = apiError(code, "m", 0);
    assert.ok(error instanceof ERROR_TABLE[code]![0]);
    assert.ok(error instanceof ApiError && error instanceof SandstreamError);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
  }
  assert.ok(apiError(undefined, "gateway", 404) instanceof NotFoundError);
  assert.ok(apiError(undefined, "gateway", 501) instanceof NotImplementedError);
  assert.ok(apiError(undefined, "gateway", 503) instanceof ShuttingDownError);
  assert.equal(apiError(undefined, "teapot", 418).code, "http_418");
});

test("unknown sandbox: NotFoundError with the daemon's message", async () => {
  await assert.rejects(Sandbox.connect("sb_0000000000000000"), (error: unknown) => {
    assert.ok(error instanceof NotFoundError);
    assert.equal(error.status, 404);
    assert.equal(error.code, "not_found");
    assert.ok(error.message.length > 0);
    return true;
  });
});

test("a wrong key: UnauthorizedError", async () => {
  await assert.rejects(Sandbox.create({ apiKey: "wrong" }), UnauthorizedError);
  await assert.rejects(Sandbox.connect(sandbox.id, { apiKey: "" }), UnauthorizedError);
});

test("an invalid request: InvalidRequestError, both for exec and execStream", async () => {
  await assert.rejects(sandbox.exec("true", { timeoutSeconds: -1 }), InvalidRequestError);
  await assert.rejects(sandbox.execStream("true", { timeoutSeconds: 0 }), InvalidRequestError);
  await assert.rejects(
    sandbox.execStream("true", { timeoutSeconds: -1, onStdout: () => undefined }),
    InvalidRequestError,
  );
  await assert.rejects(Sandbox.create({ template: "no-such-template" }), InvalidRequestError);
});

test("an idempotency key reused for another command: ConflictError; same command attaches", async () => {
  const key = `key-${Date.now()}`;
  const first = await sandbox.exec("echo once >> idem.txt; echo ok", { idempotencyKey: key });
  const again = await sandbox.exec("echo once >> idem.txt; echo ok", { idempotencyKey: key });
  assert.equal(again.processId, first.processId);
  assert.equal((await sandbox.exec("cat idem.txt")).stdout, "once\n");
  await assert.rejects(sandbox.exec("echo other", { idempotencyKey: key }), ConflictError);
});

test("a daemon that is not there: ConnectionFailedError after the retries", async () => {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  await assert.rejects(
    Sandbox.create({ url: `http://127.0.0.1:${port}`, apiKey: API_KEY, maxReconnects: 0 }),
    ConnectionFailedError,
  );
});

test("a deleted sandbox: its operations are NotFoundError", async () => {
  const doomed = await Sandbox.create();
  await doomed.kill();
  await doomed.kill(); // idempotent
  await assert.rejects(doomed.exec("true"), NotFoundError);
  await assert.rejects(doomed.refresh(), NotFoundError);
});

test("a daemon shutting down mid-stream: ShuttingDownError / an error event, no exit code", async () => {
  const doomed = await startDaemon();
  try {
    const options = { url: doomed.url, apiKey: API_KEY, maxReconnects: 0 };
    const sb = await Sandbox.create(options);
    const stream = await sb.execStream("echo hi; sleep 60");
    const pending = sb.execStream("echo hi; sleep 60", {
      onStdout: () => {
        doomed.process.kill("SIGTERM");
      },
    });
    await assert.rejects(pending, (error: unknown) => {
      assert.ok(error instanceof ShuttingDownError, String(error));
      assert.equal(error.code, "shutting_down");
      return true;
    });
    const events: ExecEvent[] = [];
    for await (const event of parseSSEStream(stream)) events.push(event);
    const last = events.at(-1);
    assert.equal(last?.type, "error");
    assert.equal(last.type === "error" && last.code, "shutting_down");
    assert.ok(!events.some((e) => e.type === "complete"));
  } finally {
    await doomed.stop();
  }
});
