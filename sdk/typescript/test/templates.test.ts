// Templates against the real daemon: an image archive imported, a sandbox made from it, a
// snapshot and a fork, listing and deleting, and a bad archive refused.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import { ConflictError, InvalidRequestError, NotFoundError, Sandbox } from "sandstream";

import { useDaemon, type Daemon } from "./helpers.js";

// The integration tests' small images, built in memory by their Python helper.
const IMAGES = fileURLToPath(new URL("../../../../tests/integration", import.meta.url));

function archive(expr: string): Uint8Array {
  const script = `import sys; sys.path.insert(0, ${JSON.stringify(IMAGES)}); import images; ` +
    `sys.stdout.buffer.write(${expr})`;
  return new Uint8Array(execFileSync("python3", ["-c", script], { maxBuffer: 64 << 20 }));
}

let daemon: Daemon;

before(async () => {
  daemon = await useDaemon();
});

after(async () => {
  await daemon?.stop();
});

test("an image becomes a template; a sandbox of it is snapshotted and forked", async () => {
  const t = await Sandbox.importTemplate("ts-tiny", archive("images.tiny_image().oci_archive()"));
  assert.equal(t.kind, "image");
  assert.equal(t.user, "app");
  assert.equal(t.layersCount, 2);
  assert.ok((await Sandbox.listTemplates()).some((x) => x.name === "ts-tiny"));
  assert.deepEqual(await Sandbox.getTemplate("ts-tiny"), t);

  const sb = await Sandbox.create({ template: "ts-tiny" });
  try {
    assert.equal((await sb.exec("id -u; pwd")).stdout, "1234\n/app\n");
    await sb.exec("echo kept > /home/app/f");
    const snap = await sb.snapshot("ts-snap");
    assert.equal(snap.kind, "snapshot");
    assert.equal(snap.source, sb.id);
    const forked = await sb.fork({ name: "ts-fork" });
    try {
      assert.equal((await forked.exec("cat /home/app/f")).stdout, "kept\n");
    } finally {
      await forked.kill();
    }
    await assert.rejects(Sandbox.deleteTemplate("ts-tiny"), ConflictError);
  } finally {
    await sb.kill();
  }
  for (const name of ["ts-fork", "ts-snap", "ts-tiny"]) await Sandbox.deleteTemplate(name);
  await assert.rejects(Sandbox.getTemplate("ts-tiny"), NotFoundError);
});

test("a bad archive is refused, naming what is wrong", async () => {
  await assert.rejects(
    Sandbox.importTemplate("ts-bad", archive("images.tiny_image().oci_archive(corrupt_layer=True)")),
    (error: unknown) => error instanceof InvalidRequestError && /digest/.test(error.message),
  );
  await assert.rejects(Sandbox.getTemplate("ts-bad"), NotFoundError);
});
