// Exposed ports against the real daemon: `python3 -m http.server` in a sandbox, waited for,
// exposed, and fetched through the daemon by path and by host; closing; the errors.

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";

import {
  BadGatewayError,
  InvalidRequestError,
  NotFoundError,
  Sandbox,
  TimeoutError,
  apiError,
  previewUrl,
  type Port,
} from "sandstream";

import { API_KEY, useDaemon, type Daemon } from "./helpers.js";

const PAGE = "<!doctype html><title>site</title><link rel=stylesheet href=style.css><h1>hello port</h1>\n";
const STYLE = "h1 { color: teal }\n";

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

/** A GET to the daemon's own address with the given Host header (the name need not resolve). */
function getWithHost(
  host: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  const options = { host: "127.0.0.1", port: daemon.port, path, headers: { ...headers, Host: host } };
  return new Promise((resolve, reject) => {
    const request = http.get(options, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    request.on("error", reject);
  });
}

test("expose, wait, fetch by path and by host, list, close", async () => {
  await sandbox.files.write("/workspace/site/index.html", PAGE);
  await sandbox.files.write("/workspace/site/style.css", STYLE);
  await sandbox.startProcess(
    ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/site"],
    { processId: "web" },
  );
  await sandbox.waitForPort(8000, { timeoutSeconds: 20 });
  const port: Port = await sandbox.exposePort(8000);
  assert.equal(port.port, 8000);
  assert.equal(port.url, `http://8000-${sandbox.id}.localhost:${daemon.port}/`);
  assert.equal(port.pathUrl, `${daemon.url}/v1/sandboxes/${sandbox.id}/ports/8000/`);
  assert.match(port.createdAt, /^\d{4}-\d\d-\d\dT/);
  assert.equal(previewUrl(port, "k/y"), `${port.url}?access_token=k%2Fy`);

  const auth = { Authorization: `Bearer ${API_KEY}` };
  const page = await fetch(port.pathUrl, { headers: auth });
  assert.equal(page.status, 200);
  assert.equal(await page.text(), PAGE);
  const css = await fetch(`${port.pathUrl}style.css?access_token=${API_KEY}`);
  assert.equal(css.status, 200);
  assert.equal(await css.text(), STYLE);

  const host = new URL(port.url).host;
  assert.deepEqual(await getWithHost(host, "/style.css", auth), { status: 200, body: STYLE });
  assert.equal((await getWithHost(host, "/")).status, 401);

  assert.deepEqual(await sandbox.exposePort(8000), port);
  assert.deepEqual(await sandbox.listPorts(), [port]);
  assert.deepEqual(await sandbox.getPort(8000), port);
  await sandbox.closePort(8000);
  assert.deepEqual(await sandbox.listPorts(), []);
  await assert.rejects(sandbox.getPort(8000), NotFoundError);
  await assert.rejects(sandbox.closePort(8000), NotFoundError);
  assert.equal((await fetch(port.pathUrl, { headers: auth })).status, 404);
});

test("waitForPort times out; nothing listening is bad_gateway; bad numbers are refused", async () => {
  const started = Date.now();
  await assert.rejects(sandbox.waitForPort(9, { timeoutSeconds: 0.5 }), (error: unknown) => {
    assert.ok(error instanceof TimeoutError);
    assert.equal(error.status, 408);
    assert.match(error.message, /port 9 .* within 0.5 s/);
    return true;
  });
  assert.ok(Date.now() - started < 5000);

  const port = await sandbox.exposePort(9);
  const answer = await fetch(port.pathUrl, { headers: { Authorization: `Bearer ${API_KEY}` } });
  assert.equal(answer.status, 502);
  const { error } = (await answer.json()) as { error: { code: string; message: string } };
  assert.ok(apiError(error.code, error.message, answer.status) instanceof BadGatewayError);
  await sandbox.closePort(9);

  await assert.rejects(sandbox.exposePort(0), InvalidRequestError);
  await assert.rejects(sandbox.exposePort(65536), InvalidRequestError);
  await assert.rejects(sandbox.getPort(1.5), TypeError);
});
