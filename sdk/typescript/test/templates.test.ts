// Templates against the real daemon: an image archive imported, a sandbox made from it, a
// snapshot and a fork of its files, listing and deleting, and a bad archive refused. Forks and
// snapshots with memory: forks.test.ts.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import {
  BadGatewayError,
  ConflictError,
  InvalidRequestError,
  NotFoundError,
  NotImplementedError,
  Sandbox,
} from "sandstream";

import { API_KEY, startDaemon, useDaemon, type Daemon } from "./helpers.js";

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
    assert.equal(snap.memory, false);
    // An image's sandbox cannot be checkpointed: only its files can be forked (a name says so).
    await assert.rejects(sb.fork(), (error: unknown) => error instanceof NotImplementedError && /image/.test(error.message));
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

test("an image pulled from a registry is a template", async () => {
  // The integration tests' registry (docker-registry on 127.0.0.1 behind token auth), started by
  // their Python helper, which prints its host and the credentials and stays until stdin closes.
  const script = [
    "import sys, tempfile, pathlib",
    `sys.path.insert(0, ${JSON.stringify(IMAGES)})`,
    "import images, registry",
    "d = pathlib.Path(tempfile.mkdtemp())",
    "token = registry.TokenService(d, 'ts-user', 'ts-pass')",
    "r = registry.Registry(d / 'registry', d / 'storage', token=token)",
    "plain = registry.Registry(d / 'plain', d / 'storage')",
    "plain.push('tiny', '1', images.tiny_image())",
    "print(r.host, token.url.split('/')[2], flush=True)",
    "sys.stdin.read()",
    "r.close(); plain.close(); token.close()",
  ].join("\n");
  // The checkout's test environment has what the helper needs (httpx).
  const python = fileURLToPath(new URL("../../../../.venv/bin/python", import.meta.url));
  const helper = spawn(python, ["-c", script], { stdio: ["pipe", "pipe", "inherit"] });
  try {
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: helper.stdout! }).once("line", resolve);
      helper.once("exit", (code) => reject(new Error(`the registry helper exited (${code})`)));
    });
    const [host, tokenHost] = line.split(" ");
    const daemon = await startDaemon(["--registry-plain-http", `${host},${tokenHost}`]);
    try {
      const where = { url: daemon.url, apiKey: API_KEY };
      await assert.rejects(
        Sandbox.pullTemplate("ts-anon", `${host}/tiny:1`, where),
        (error: unknown) => error instanceof BadGatewayError && /401/.test(error.message),
      );
      const t = await Sandbox.pullTemplate("ts-pulled", `${host}/tiny:1`, {
        ...where,
        auth: { username: "ts-user", password: "ts-pass" },
      });
      assert.equal(t.kind, "image");
      assert.equal(t.source, `${host}/tiny:1`);
      const sb = await Sandbox.create({ template: "ts-pulled", ...where });
      try {
        assert.equal((await sb.exec("id -u; pwd")).stdout, "1234\n/app\n");
      } finally {
        await sb.kill();
      }
    } finally {
      await daemon.stop();
    }
  } finally {
    helper.stdin!.end();
  }
});
