// Volumes: the requests the SDK sends (against a recording fetch, no daemon), then against the
// real daemon: made, listed, found, their files read and written without a sandbox, mounted by
// sandboxes (shared, read-only), refused deletion while mounted, a tenant's quota.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import {
  Admin,
  ConflictError,
  InvalidRequestError,
  NotFoundError,
  QuotaExceededError,
  Sandbox,
  Volume,
  Volumes,
  type VolumeInfo,
} from "sandstream";

import { API_KEY, useDaemon, type Daemon } from "./helpers.js";

const VOLUME = {
  id: "vol_0123456789abcdef",
  name: "data",
  tenant: null,
  size_mb: 64,
  created_at: "2026-01-02T03:04:05.000Z",
  used_bytes: 24576,
  total_bytes: 60817408,
  mounted_by: ["sb_0123456789abcdef"],
};
const FILE = { path: "/a.txt", name: "a.txt", type: "file", size: 2, mtime: "2026-01-02T03:04:05.000Z", mode: "0644" };
const SANDBOX = {
  id: "sb_0123456789abcdef",
  status: "running",
  volumes: [{ id: VOLUME.id, name: "data", path: "/mnt/data", read_only: true }],
};

interface Sent {
  method: string;
  path: string;
  query: Record<string, string>;
  body: unknown;
}

/** A fetch that answers as the daemon would and keeps what it was sent. */
function recording(): { fetch: typeof fetch; sent: Sent[] } {
  const sent: Sent[] = [];
  const json = (status: number, body: unknown): Response =>
    new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
  const recorder: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    const method = init?.method ?? "GET";
    let body: unknown = undefined;
    if (typeof init?.body === "string") body = JSON.parse(init.body);
    else if (init?.body instanceof Uint8Array) body = new TextDecoder().decode(init.body);
    const path = url.pathname;
    sent.push({ method, path, query: Object.fromEntries(url.searchParams), body });
    if (path === "/v1/sandboxes") return json(201, SANDBOX);
    if (path === "/v1/volumes") return method === "GET" ? json(200, { volumes: [VOLUME] }) : json(201, VOLUME);
    if (method === "DELETE") return new Response(null, { status: 204 });
    if (path.endsWith("/files/content") && method === "GET") return new Response("hi");
    if (path.endsWith("/files") && method === "GET") return json(200, { path: "/", entries: [FILE], truncated: false });
    if (path.endsWith("/files/stat") && url.searchParams.get("path") === "/missing") {
      return json(404, { error: { code: "not_found", message: "no" } });
    }
    if (path.includes("/files")) return json(201, FILE);
    return json(200, VOLUME);
  };
  return { fetch: recorder, sent };
}

test("the volume routes, the files of a volume and the mounts of a sandbox", async () => {
  const { fetch, sent } = recording();
  const where = { url: "http://sandstream.test", apiKey: API_KEY, fetch };
  const volumes = new Volumes(where);
  const vol = await volumes.create("data");
  assert.ok(vol instanceof Volume);
  const info: VolumeInfo = {
    id: VOLUME.id,
    name: "data",
    tenant: null,
    sizeMb: 64,
    createdAt: VOLUME.created_at,
    usedBytes: VOLUME.used_bytes,
    totalBytes: VOLUME.total_bytes,
    mountedBy: VOLUME.mounted_by,
  };
  assert.deepEqual(vol.info, info);
  assert.equal(vol.id, VOLUME.id);
  await volumes.create("small", { sizeMb: 16 });
  assert.deepEqual((await volumes.list()).map((v) => v.name), ["data"]);
  await volumes.get("data");
  assert.deepEqual(await vol.refresh(), info);
  assert.equal((await vol.files.write("/a.txt", "hi", { mode: 0o600 })).path, "/a.txt");
  assert.equal(await vol.files.readText("/a.txt", { user: "root" }), "hi");
  assert.deepEqual((await vol.files.list("/")).map((f) => f.name), ["a.txt"]);
  assert.equal(await vol.files.exists("/missing"), false);
  await vol.files.mkdir("/d");
  await vol.files.move("/a.txt", "/d/a.txt");
  await vol.files.remove("/d", { recursive: true });
  assert.equal("watch" in vol.files, false);
  await vol.delete();
  await volumes.delete("a/b");
  const sb = await Sandbox.create({
    ...where,
    volumes: [{ name: "data", path: "/mnt/data", readOnly: true }, { name: "vol_1", path: "/mnt/other" }],
  });
  assert.deepEqual(sb.info.volumes, [{ id: VOLUME.id, name: "data", path: "/mnt/data", readOnly: true }]);

  const files = `/v1/volumes/${VOLUME.id}/files`;
  assert.deepEqual(sent, [
    { method: "POST", path: "/v1/volumes", query: {}, body: { name: "data" } },
    { method: "POST", path: "/v1/volumes", query: {}, body: { name: "small", size_mb: 16 } },
    { method: "GET", path: "/v1/volumes", query: {}, body: undefined },
    { method: "GET", path: "/v1/volumes/data", query: {}, body: undefined },
    { method: "GET", path: `/v1/volumes/${VOLUME.id}`, query: {}, body: undefined },
    { method: "PUT", path: `${files}/content`, query: { path: "/a.txt", parents: "1", mode: "0600" }, body: "hi" },
    { method: "GET", path: `${files}/content`, query: { path: "/a.txt", user: "root" }, body: undefined },
    { method: "GET", path: files, query: { path: "/" }, body: undefined },
    { method: "GET", path: `${files}/stat`, query: { path: "/missing" }, body: undefined },
    { method: "POST", path: `${files}/mkdir`, query: {}, body: { path: "/d", parents: true } },
    { method: "POST", path: `${files}/move`, query: {}, body: { from: "/a.txt", to: "/d/a.txt", overwrite: false } },
    { method: "DELETE", path: files, query: { path: "/d", recursive: "1" }, body: undefined },
    { method: "DELETE", path: `/v1/volumes/${VOLUME.id}`, query: {}, body: undefined },
    { method: "DELETE", path: "/v1/volumes/a%2Fb", query: {}, body: undefined },
    {
      method: "POST",
      path: "/v1/sandboxes",
      query: {},
      body: {
        volumes: [
          { name: "data", path: "/mnt/data", read_only: true },
          { name: "vol_1", path: "/mnt/other", read_only: false },
        ],
      },
    },
  ]);
});

test("a sandbox the daemon reports without volumes has none", async () => {
  const { fetch } = recording();
  const sb = await Sandbox.connect("sb_1", { url: "http://sandstream.test", fetch });
  assert.deepEqual(sb.info.volumes, []);
});

describe("against the daemon", () => {
  const canMount = existsSync("/dev/loop-control");
  const skip = canMount ? false : "volumes are loop-mounted: this machine has no /dev/loop-control";
  let daemon: Daemon;
  let volumes: Volumes;
  const unique = (prefix: string): string => `${prefix}-${randomBytes(4).toString("hex")}`;

  before(async () => {
    daemon = await useDaemon();
    volumes = new Volumes();
  });

  after(async () => {
    await daemon?.stop();
  });

  test("a volume outlives its sandboxes", { skip }, async () => {
    const vol = await volumes.create(unique("ts"), { sizeMb: 64 });
    try {
      assert.match(vol.id, /^vol_/);
      assert.equal(vol.info.sizeMb, 64);
      assert.equal(vol.info.tenant, null);
      const { usedBytes, totalBytes } = vol.info;
      assert.ok(usedBytes !== null && totalBytes !== null, JSON.stringify(vol.info));
      assert.ok(usedBytes < totalBytes && totalBytes <= 64 << 20, JSON.stringify(vol.info));
      assert.deepEqual(vol.info.mountedBy, []);
      assert.equal((await volumes.get(vol.name)).id, vol.id);
      assert.ok((await volumes.list()).some((v) => v.id === vol.id));
      await assert.rejects(volumes.create(vol.name, { sizeMb: 16 }), ConflictError);
      await assert.rejects(volumes.create(unique("tiny"), { sizeMb: 8 }), InvalidRequestError);

      // Its files without a sandbox: the sandbox files' calls, `/` the volume's top.
      assert.equal((await vol.files.write("notes/a.txt", "from the api")).path, "/notes/a.txt");
      assert.equal(await vol.files.readText("/notes/a.txt"), "from the api");
      assert.equal((await vol.files.mkdir("/d/e")).type, "directory");
      await vol.files.move("/notes/a.txt", "/d/a.txt");
      assert.equal((await vol.files.stat("/d/a.txt")).size, "from the api".length);
      assert.equal(await vol.files.exists("/notes/a.txt"), false);
      await assert.rejects(vol.files.read("/../volume.img"), InvalidRequestError);
      await assert.rejects(vol.files.read("/missing"), NotFoundError);
      assert.equal((await vol.files.write("/by-root", "r", { user: "root" })).path, "/by-root");

      // Mounted by two sandboxes at once, one read-only: one filesystem, the user's files.
      const writer = await Sandbox.create({ volumes: [{ name: vol.name, path: "/mnt/data" }] });
      const reader = await Sandbox.create({ volumes: [{ name: vol.id, path: "/data", readOnly: true }] });
      try {
        assert.deepEqual(writer.info.volumes, [{ id: vol.id, name: vol.name, path: "/mnt/data", readOnly: false }]);
        assert.deepEqual(reader.info.volumes, [{ id: vol.id, name: vol.name, path: "/data", readOnly: true }]);
        assert.equal((await writer.exec("stat -c '%u %a' /mnt/data")).stdout, "1000 755\n");
        assert.equal((await writer.exec("stat -c %u /mnt/data/by-root")).stdout, "0\n");
        await writer.exec("echo hi > /mnt/data/b.txt");
        assert.equal(await vol.files.readText("/b.txt"), "hi\n");
        assert.equal((await reader.exec("cat /data/b.txt; stat -c %u /data/b.txt")).stdout, "hi\n1000\n");
        const denied = await reader.exec("echo no > /data/b.txt");
        assert.notEqual(denied.exitCode, 0);
        assert.match(denied.stderr, /Read-only file system/);
        assert.deepEqual(new Set((await vol.refresh()).mountedBy), new Set([writer.id, reader.id]));
        await assert.rejects(vol.delete(), (error: unknown) => {
          assert.ok(error instanceof ConflictError);
          assert.ok(error.message.includes(writer.id) || error.message.includes(reader.id), error.message);
          return true;
        });
      } finally {
        await writer.kill();
        await reader.kill();
      }
      assert.deepEqual((await vol.refresh()).mountedBy, []);
      assert.equal(await vol.files.readText("/b.txt"), "hi\n");
    } finally {
      await volumes.delete(vol);
    }
    await assert.rejects(volumes.get(vol.id), NotFoundError);
    await assert.rejects(
      Sandbox.create({ volumes: [{ name: vol.name, path: "/mnt/data" }] }),
      (error: unknown) => error instanceof InvalidRequestError && error.message.includes(vol.name),
    );
  });

  test("a tenant's volumes count against its quota", { skip }, async () => {
    const admin = new Admin();
    const name = unique("tsvq");
    const tenant = await admin.createTenant(name, { volumeStorageMb: 100 });
    assert.equal(tenant.quotas.volumeStorageMb, 100);
    const mine = new Volumes({ apiKey: (await admin.createKey(name)).key });
    const first = await mine.create("first", { sizeMb: 64 });
    assert.equal(first.info.tenant, name);
    await assert.rejects(
      mine.create("second", { sizeMb: 64 }),
      (error: unknown) => error instanceof QuotaExceededError && /volume_storage_mb/.test(error.message),
    );
    assert.deepEqual((await mine.list()).map((v) => v.name), ["first"]);
    const theirs = await volumes.create(unique("admins"), { sizeMb: 16 });
    try {
      await assert.rejects(mine.get(theirs.id), NotFoundError);
    } finally {
      await theirs.delete();
    }
    await mine.delete("first");
    await (await mine.create("second", { sizeMb: 64 })).delete();
    await admin.deleteTenant(name);
  });
});
