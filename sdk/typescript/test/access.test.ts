// Tenants, keys, usage and scoped tokens against the real daemon: a tenant sees its own
// sandboxes only, a read token cannot exec, usage reports quotas, browser URLs carry tokens.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  Admin,
  ConflictError,
  ForbiddenError,
  NotFoundError,
  Sandbox,
  UnauthorizedError,
  usage,
} from "sandstream";

import { API_KEY, useDaemon, type Daemon } from "./helpers.js";

let daemon: Daemon;
let admin: Admin;

before(async () => {
  daemon = await useDaemon();
  admin = new Admin();
});

after(async () => {
  await daemon?.stop();
});

test("tenants and keys through the admin API", async () => {
  const tenant = await admin.createTenant("ts-team", { sandboxes: 3, memoryMb: 1024 });
  assert.equal(tenant.name, "ts-team");
  assert.equal(tenant.quotas.sandboxes, 3);
  assert.equal(tenant.quotas.memoryMb, 1024);
  assert.equal(tenant.usage.sandboxes, 0);
  assert.deepEqual((await admin.listTenants()).map((t) => t.name), ["ts-team"]);
  await assert.rejects(admin.createTenant("ts-team"), ConflictError);
  const key = await admin.createKey("ts-team");
  assert.match(key.key, /^ssk_/);
  const listed = await admin.listKeys("ts-team");
  assert.deepEqual(listed.map((k) => k.id), [key.id]);
  assert.equal(listed[0]!.key, undefined);
  assert.equal((await admin.setQuotas("ts-team", { streams: 2 })).quotas.sandboxes, 0);
  // A tenant's key is no admin key.
  await assert.rejects(new Admin({ apiKey: key.key }).listTenants(), ForbiddenError);
  await admin.revokeKey("ts-team", key);
  await assert.rejects(Sandbox.list({ apiKey: key.key }), UnauthorizedError);
  await admin.deleteTenant("ts-team");
  await assert.rejects(admin.getTenant("ts-team"), NotFoundError);
});

test("a tenant's client sees only its sandboxes", async () => {
  await admin.createTenant("ts-a");
  await admin.createTenant("ts-b");
  const a = (await admin.createKey("ts-a")).key;
  const b = (await admin.createKey("ts-b")).key;
  const mine = await Sandbox.create({ apiKey: a });
  const theirs = await Sandbox.create({ apiKey: b });
  try {
    assert.equal(mine.info.tenant, "ts-a");
    assert.deepEqual((await Sandbox.list({ apiKey: a })).map((s) => s.id), [mine.id]);
    assert.deepEqual((await Sandbox.list({ apiKey: b })).map((s) => s.id), [theirs.id]);
    const all = new Set((await Sandbox.list()).map((s) => s.id));
    assert.ok(all.has(mine.id) && all.has(theirs.id));
    await assert.rejects(Sandbox.connect(theirs.id, { apiKey: a }), NotFoundError);
    // The admin makes one for a tenant.
    const made = await Sandbox.create({ tenant: "ts-b" });
    assert.equal(made.info.tenant, "ts-b");
    await made.kill();
  } finally {
    await mine.kill();
    await theirs.kill();
  }
  await admin.deleteTenant("ts-a");
  await admin.deleteTenant("ts-b");
});

test("a read-only token cannot exec", async () => {
  const sandbox = await Sandbox.create();
  try {
    assert.equal(sandbox.info.tenant, null);
    const token = await sandbox.createToken(["read"], { ttlSeconds: 600 });
    assert.match(token.token, /^sst_/);
    assert.deepEqual(token.scopes, ["read"]);
    assert.equal(token.sandboxId, sandbox.id);
    const viewer = await Sandbox.connect(sandbox.id, { apiKey: token.token });
    await assert.rejects(viewer.exec("true"), (error: unknown) => {
      assert.ok(error instanceof ForbiddenError);
      assert.equal(error.status, 403);
      assert.equal(error.code, "forbidden");
      return true;
    });
    await assert.rejects(viewer.createToken(["exec"]), ForbiddenError);
    const runner = await sandbox.createToken(["read", "exec"]);
    const viaToken = await Sandbox.connect(sandbox.id, { apiKey: runner.token });
    assert.equal((await viaToken.exec("echo via token")).stdout, "via token\n");
    const listed = await sandbox.listTokens();
    assert.deepEqual(new Set(listed.map((t) => t.id)), new Set([token.id, runner.id]));
    assert.ok(listed.every((t) => t.token === undefined));
    await sandbox.revokeToken(runner);
    await assert.rejects(viaToken.exec("true"), UnauthorizedError);
    await sandbox.revokeToken(token.id);
    assert.deepEqual(await sandbox.listTokens(), []);
  } finally {
    await sandbox.kill();
  }
});

test("browser URLs carry a scoped token, never the key", async () => {
  const sandbox = await Sandbox.create();
  try {
    await sandbox.startProcess("for i in 1 2 3; do echo line $i; done", { processId: "p" });
    await sandbox.waitForExit("p");
    const logs = await sandbox.logsUrl("p", { format: "cloudflare" });
    assert.ok(!logs.includes(API_KEY), logs);
    assert.match(logs, /access_token=sst_/);
    const body = await (await fetch(logs)).text();
    assert.match(body, /line 3/);
    const pty = await sandbox.tokenUrl("/exec/pty", ["terminal"], { websocket: true, query: { rows: 30 } });
    assert.match(pty, /^ws:\/\/.*\/exec\/pty\?rows=30&access_token=sst_/);
    await sandbox.startProcess("python3 -m http.server 8000 --bind 127.0.0.1", { processId: "web" });
    await sandbox.waitForPort(8000, { timeoutSeconds: 20 });
    const tab = await sandbox.browserUrl(8000, { ttlSeconds: 300 });
    assert.ok(!tab.includes(API_KEY), tab);
    assert.match(tab, /^http:\/\/8000-sb_[^/]+\/\?access_token=sst_/);
    const scopes = (await sandbox.listTokens()).map((t) => t.scopes.join(","));
    assert.deepEqual(scopes.sort(), ["port:8000", "read", "terminal"]);
  } finally {
    await sandbox.kill();
  }
});

test("usage reports quotas", async () => {
  await admin.createTenant("ts-usage", { sandboxes: 2, memoryMb: 1024 });
  const key = (await admin.createKey("ts-usage")).key;
  const sandbox = await Sandbox.create({ apiKey: key, limits: { memoryMb: 256 } });
  try {
    const mine = await usage({ apiKey: key });
    assert.equal(mine.name, "ts-usage");
    assert.equal(mine.quotas.sandboxes, 2);
    assert.equal(mine.quotas.memoryMb, 1024);
    assert.equal(mine.usage.sandboxes, 1);
    assert.equal(mine.usage.memoryMb, 256);
    assert.deepEqual(await Sandbox.usage({ apiKey: key }), mine);
    await assert.rejects(admin.deleteTenant("ts-usage"), ConflictError);
  } finally {
    await sandbox.kill();
  }
  assert.equal((await usage()).name, null);
  await admin.deleteTenant("ts-usage");
});
