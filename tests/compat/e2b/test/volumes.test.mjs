// E2B's JS SDK against a real sandstreamd: its Volume class (the control plane on /volumes with
// the API key, a volume's files on /volumecontent with the volume's token) and
// Sandbox.create({ volumeMounts }). The SDK sends a volume's files to E2B_VOLUME_API_URL only,
// so this file sets it to the daemon's URL too. What each call did is checked through
// sandstream's own /v1 API or a command in a sandbox, not the same call.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import {
  AuthenticationError,
  Sandbox,
  Volume,
  VolumeError,
  VolumeFileType,
  VolumeNotFoundError,
  VolumePathNotFoundError,
} from "e2b";

import { startDaemon } from "./daemon.mjs";

let daemon;

before(async () => {
  daemon = await startDaemon();
  process.env.E2B_VOLUME_API_URL = daemon.url;
});

after(async () => {
  await daemon?.stop();
});

function volumeName(prefix = "js") {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

async function v1Json(method, route) {
  const r = await daemon.v1(method, route);
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined };
}

async function v1Read(volumeId, filePath) {
  const r = await daemon.v1("GET", `/v1/volumes/${volumeId}/files/content?path=${encodeURIComponent(filePath)}`);
  if (r.status !== 200) throw new Error(`read ${filePath}: ${r.status} ${await r.text()}`);
  return Buffer.from(await r.arrayBuffer());
}

async function v1StatStatus(volumeId, filePath) {
  const r = await daemon.v1("GET", `/v1/volumes/${volumeId}/files/stat?path=${encodeURIComponent(filePath)}`);
  await r.arrayBuffer();
  return r.status;
}

// Runs `fn` with a volume made by Volume.create(), destroyed at its end (through /v1 too, in
// case the SDK's destroy is what failed).
async function withVolume(fn) {
  const volume = await Volume.create(volumeName());
  try {
    await fn(volume);
  } finally {
    await Volume.destroy(volume.volumeId).catch(() => {});
    await (await daemon.v1("DELETE", `/v1/volumes/${volume.volumeId}`)).arrayBuffer();
  }
}

test("Volume.create, list, getInfo, connect and destroy", async () => {
  const name = volumeName();
  const volume = await Volume.create(name);
  let destroyed;
  try {
    assert.ok(volume instanceof Volume);
    assert.match(volume.volumeId, /^vol_/);
    assert.equal(volume.name, name);
    assert.ok(typeof volume.token === "string" && volume.token.length > 0);
    const v1 = await v1Json("GET", `/v1/volumes/${volume.volumeId}`);
    assert.equal(v1.status, 200);
    assert.equal(v1.body.name, name);

    const listed = await Volume.list();
    assert.deepEqual(listed.filter((v) => v.volumeId === volume.volumeId), [{ volumeId: volume.volumeId, name }]);

    const info = await Volume.getInfo(volume.volumeId);
    assert.equal(info.volumeId, volume.volumeId);
    assert.equal(info.name, name);
    assert.ok(info.token);
    assert.equal(info.domain, undefined);

    const again = await Volume.connect(volume.volumeId);
    assert.equal(again.name, name);
    await again.writeFile("/by-connect.txt", "connected");
    assert.equal(await volume.readFile("/by-connect.txt"), "connected");
  } finally {
    destroyed = await Volume.destroy(volume.volumeId);
  }
  assert.equal(destroyed, true);
  assert.equal((await v1Json("GET", `/v1/volumes/${volume.volumeId}`)).status, 404);
  assert.equal(await Volume.destroy(volume.volumeId), false);
  await assert.rejects(Volume.getInfo(volume.volumeId), VolumeNotFoundError);
  assert.ok(!(await Volume.list()).some((v) => v.volumeId === volume.volumeId));
});

test("Volume.create refuses a name in use and a bad name", async () => {
  await withVolume(async (volume) => {
    await assert.rejects(Volume.create(volume.name), (e) => {
      assert.ok(e instanceof VolumeError, e);
      assert.match(e.message, /^409/);
      return true;
    });
    await assert.rejects(Volume.create("a/b"), (e) => {
      assert.ok(e instanceof VolumeError, e);
      assert.match(e.message, /^400/);
      return true;
    });
  });
});

test("writeFile and readFile: text, bytes, overwrite; seen through /v1", async () => {
  await withVolume(async (volume) => {
    const st = await volume.writeFile("/notes/a.txt", "héllo volume\n");
    assert.equal(st.path, "/notes/a.txt");
    assert.equal(st.name, "a.txt");
    assert.equal(st.type, VolumeFileType.FILE);
    assert.equal(st.size, Buffer.byteLength("héllo volume\n"));
    assert.equal(st.uid, 1000);
    assert.ok(st.mtime instanceof Date && Math.abs(Date.now() - st.mtime.getTime()) < 60_000, String(st.mtime));
    assert.deepEqual(await v1Read(volume.volumeId, "/notes/a.txt"), Buffer.from("héllo volume\n"));
    assert.equal(await volume.readFile("/notes/a.txt"), "héllo volume\n");

    const blob = new Uint8Array(256 * 64 + 2);
    for (let i = 0; i < blob.length - 2; i++) blob[i] = i % 256;
    await volume.writeFile("/blob.bin", blob.buffer);
    assert.deepEqual(await v1Read(volume.volumeId, "/blob.bin"), Buffer.from(blob));
    const bytes = await volume.readFile("/blob.bin", { format: "bytes" });
    assert.ok(bytes instanceof Uint8Array);
    assert.deepEqual(Buffer.from(bytes), Buffer.from(blob));

    const again = await volume.writeFile("/notes/a.txt", "short", { force: true });
    assert.equal(again.size, 5);
    assert.equal(await volume.readFile("/notes/a.txt"), "short");
  });
});

test("makeDir, list, getInfo, exists and remove", async () => {
  await withVolume(async (volume) => {
    await volume.writeFile("/tree/a.txt", "abc");
    const dir = await volume.makeDir("/tree/sub");
    assert.equal(dir.type, VolumeFileType.DIRECTORY);
    assert.equal(await v1StatStatus(volume.volumeId, "/tree/sub"), 200);
    const deep = await volume.makeDir("/p/q", { force: true });
    assert.equal(deep.path, "/p/q");

    const entries = await volume.list("/tree");
    assert.deepEqual(entries.map((e) => [e.name, e.type, e.path]).sort(), [
      ["a.txt", VolumeFileType.FILE, "/tree/a.txt"],
      ["sub", VolumeFileType.DIRECTORY, "/tree/sub"],
    ]);
    const info = await volume.getInfo("/tree/a.txt");
    assert.equal(info.size, 3);
    assert.equal(info.mode & 0o777, 0o644);
    assert.equal(await volume.exists("/tree/a.txt"), true);
    assert.equal(await volume.exists("/tree/nothing"), false);
    await assert.rejects(volume.getInfo("/tree/nothing"), VolumePathNotFoundError);
    await assert.rejects(volume.readFile("/tree/nothing"), VolumePathNotFoundError);

    await volume.remove("/tree/a.txt");
    assert.equal(await v1StatStatus(volume.volumeId, "/tree/a.txt"), 404);
    assert.equal(await volume.exists("/tree/a.txt"), false);
    await assert.rejects(volume.remove("/tree/a.txt"), VolumePathNotFoundError);
  });
});

test("updateMetadata changes a file's mode", async () => {
  await withVolume(async (volume) => {
    await volume.writeFile("/m.txt", "m");
    const changed = await volume.updateMetadata("/m.txt", { mode: 0o600 });
    assert.equal(changed.mode & 0o777, 0o600);
    const r = await daemon.v1("GET", `/v1/volumes/${volume.volumeId}/files/stat?path=%2Fm.txt`);
    assert.equal((await r.json()).mode, "0600");
    await assert.rejects(volume.updateMetadata("/missing.txt", { mode: 0o600 }), VolumePathNotFoundError);
  });
});

test("a wrong token reads nothing of a volume", async () => {
  await withVolume(async (volume) => {
    await volume.writeFile("/secret.txt", "only with the token");
    const bogus = new Volume(volume.volumeId, volume.name, "not-a-token");
    await assert.rejects(bogus.readFile("/secret.txt"), AuthenticationError);
    await assert.rejects(bogus.list("/"), AuthenticationError);
  });
});

test("Sandbox.create({ volumeMounts }) mounts the volume; its files outlive the sandbox", async () => {
  await withVolume(async (volume) => {
    await volume.writeFile("/f", "from the sdk");
    const sandbox = await Sandbox.create({ volumeMounts: { "/mnt/data": volume } });
    try {
      assert.equal((await sandbox.commands.run("cat /mnt/data/f")).stdout, "from the sdk");
      await sandbox.commands.run("echo from the sandbox > /mnt/data/g");
      assert.equal(await volume.readFile("/g"), "from the sandbox\n");
      assert.equal((await sandbox.commands.run("stat -c %u /mnt/data/g")).stdout, "1000\n");

      const info = await sandbox.getInfo();
      assert.deepEqual(info.volumeMounts, [{ name: volume.name, path: "/mnt/data" }]);
      const v1 = await v1Json("GET", `/v1/sandboxes/${sandbox.sandboxId}`);
      assert.deepEqual(v1.body.volumes, [
        { id: volume.volumeId, name: volume.name, path: "/mnt/data", read_only: false },
      ]);
      // Mounted: it cannot go.
      await assert.rejects(Volume.destroy(volume.volumeId), (e) => {
        assert.ok(e instanceof VolumeError, e);
        assert.match(e.message, /^409/);
        return true;
      });

      // By name, in a second sandbox at once: one filesystem.
      const second = await Sandbox.create({ volumeMounts: { "/data": volume.name } });
      try {
        assert.equal((await second.commands.run("cat /data/g")).stdout, "from the sandbox\n");
        await second.commands.run("echo two > /data/two");
        assert.equal((await sandbox.commands.run("cat /mnt/data/two")).stdout, "two\n");
      } finally {
        await second.kill();
      }
    } finally {
      await sandbox.kill();
    }
    assert.equal(await volume.readFile("/g"), "from the sandbox\n");
    assert.equal(await Volume.destroy(volume.volumeId), true);
    assert.equal(await Volume.destroy(volume.volumeId), false);
  });
});
