// E2B's JS SDK against a real sandstreamd: its documented files calls, unmodified. What each
// call did is checked through sandstream's own /v1 API or a command, not the same call.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, test } from "node:test";

import { FileNotFoundError, FileType, FilesystemEventType } from "e2b";

import { HOME, startDaemon, waitUntil, withSandbox } from "./daemon.mjs";

let daemon;

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  await daemon?.stop();
});

test("write text, bytes and several files; read them back byte-exact", async () => {
  await withSandbox(async (sandbox) => {
    const id = sandbox.sandboxId;
    const info = await sandbox.files.write(`${HOME}/hello.txt`, "héllo e2b\n");
    assert.equal(info.path, `${HOME}/hello.txt`);
    assert.equal(info.name, "hello.txt");
    assert.deepEqual(await daemon.readFile(id, `${HOME}/hello.txt`), Buffer.from("héllo e2b\n"));
    assert.equal(await sandbox.files.read(`${HOME}/hello.txt`), "héllo e2b\n");

    const binary = new Uint8Array(256 * 64 + 3);
    for (let i = 0; i < binary.length - 3; i++) binary[i] = i % 256;
    await sandbox.files.write(`${HOME}/deep/er/blob.bin`, binary.buffer);
    assert.deepEqual(await daemon.readFile(id, `${HOME}/deep/er/blob.bin`), Buffer.from(binary));
    const sum = (await sandbox.commands.run(`sha256sum < ${HOME}/deep/er/blob.bin`)).stdout.split(" ")[0];
    assert.equal(sum, createHash("sha256").update(binary).digest("hex"));

    const other = Buffer.from([0, 1, 2, 0xfe, 0xff, 0, 0]);
    await daemon.writeFile(id, `${HOME}/other.bin`, other);
    const bytes = await sandbox.files.read(`${HOME}/other.bin`, { format: "bytes" });
    assert.ok(bytes instanceof Uint8Array);
    assert.deepEqual(Buffer.from(bytes), other);

    const infos = await sandbox.files.write([
      { path: `${HOME}/many/a.txt`, data: "first" },
      { path: `${HOME}/many/b.txt`, data: "second" },
    ]);
    assert.deepEqual(infos.map((i) => i.path).sort(), [`${HOME}/many/a.txt`, `${HOME}/many/b.txt`]);
    assert.equal((await sandbox.commands.run(`cat ${HOME}/many/a.txt ${HOME}/many/b.txt`)).stdout, "firstsecond");
    const owners = await sandbox.commands.run(`stat -c %U ${HOME}/hello.txt ${HOME}/deep/er/blob.bin`);
    assert.equal(owners.stdout, "user\nuser\n");
  });
});

test("reading a missing file is FileNotFoundError", async () => {
  await withSandbox(async (sandbox) => {
    await assert.rejects(sandbox.files.read(`${HOME}/no-such-file.txt`), (e) => {
      assert.ok(e instanceof FileNotFoundError, e);
      assert.match(e.message, /no-such-file\.txt/);
      return true;
    });
  });
});

test("list, exists and getInfo describe what is there", async () => {
  await withSandbox(async (sandbox) => {
    await daemon.exec(
      sandbox.sandboxId,
      `mkdir -p ${HOME}/tree/sub/subsub && printf abc > ${HOME}/tree/a.txt && ` +
        `echo b > ${HOME}/tree/sub/b.txt && echo c > ${HOME}/tree/sub/subsub/c.txt && ` +
        `chown -R 1000:1000 ${HOME}/tree`,
    );
    const top = await sandbox.files.list(`${HOME}/tree`);
    assert.deepEqual(top.map((e) => [e.name, e.type, e.path]).sort(), [
      ["a.txt", FileType.FILE, `${HOME}/tree/a.txt`],
      ["sub", FileType.DIR, `${HOME}/tree/sub`],
    ]);
    const two = await sandbox.files.list(`${HOME}/tree`, { depth: 2 });
    assert.deepEqual(two.map((e) => e.path).sort(), [
      `${HOME}/tree/a.txt`, `${HOME}/tree/sub`, `${HOME}/tree/sub/b.txt`, `${HOME}/tree/sub/subsub`,
    ]);
    assert.equal(await sandbox.files.exists(`${HOME}/tree/a.txt`), true);
    assert.equal(await sandbox.files.exists(`${HOME}/tree/nothing`), false);
    const info = await sandbox.files.getInfo(`${HOME}/tree/a.txt`);
    assert.equal(info.name, "a.txt");
    assert.equal(info.type, FileType.FILE);
    assert.equal(info.size, 3);
    assert.equal(info.owner, "user");
    assert.ok(info.modifiedTime instanceof Date);
    assert.ok(Math.abs(Date.now() - info.modifiedTime.getTime()) < 60_000, String(info.modifiedTime));
  });
});

test("makeDir, rename and remove act on the sandbox's files", async () => {
  await withSandbox(async (sandbox) => {
    const id = sandbox.sandboxId;
    assert.equal(await sandbox.files.makeDir(`${HOME}/newdir`), true);
    assert.equal(await daemon.statStatus(id, `${HOME}/newdir`), 200);
    assert.equal(await sandbox.files.makeDir(`${HOME}/newdir`), false);

    await daemon.writeFile(id, `${HOME}/old.txt`, Buffer.from("moved"));
    const entry = await sandbox.files.rename(`${HOME}/old.txt`, `${HOME}/newdir/new.txt`);
    assert.equal(entry.path, `${HOME}/newdir/new.txt`);
    assert.equal(entry.name, "new.txt");
    assert.equal(await daemon.statStatus(id, `${HOME}/old.txt`), 404);
    assert.deepEqual(await daemon.readFile(id, `${HOME}/newdir/new.txt`), Buffer.from("moved"));

    await sandbox.files.remove(`${HOME}/newdir`);
    assert.equal(await daemon.statStatus(id, `${HOME}/newdir`), 404);
    assert.equal(await sandbox.files.exists(`${HOME}/newdir/new.txt`), false);
  });
});

test("watchDir sees a write made by a command", async () => {
  await withSandbox(async (sandbox) => {
    assert.equal(await sandbox.files.makeDir(`${HOME}/watched`), true);
    const events = [];
    const handle = await sandbox.files.watchDir(`${HOME}/watched`, (e) => events.push(e));
    await sandbox.commands.run(`echo data > ${HOME}/watched/new.txt`);
    const sawWrite = () => events.some((e) => e.type === FilesystemEventType.WRITE);
    assert.equal(await waitUntil(sawWrite, 5_000), true, JSON.stringify(events));
    await handle.stop();
    const seen = events.map((e) => `${e.name} ${e.type}`);
    assert.ok(seen.includes(`new.txt ${FilesystemEventType.CREATE}`), seen.join(", "));
    assert.ok(seen.includes(`new.txt ${FilesystemEventType.WRITE}`), seen.join(", "));
  });
});
