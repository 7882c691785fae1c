// The console in headless Chromium (Debian's /usr/bin/chromium via playwright-core) against a
// real sandstreamd serving web/dist: sign in with the key, create a sandbox, type into its
// terminal and read the answer, run a command and see its first line before it ends, expose a
// port and open the page a sandbox serves on it through its preview host (and see that a page
// from a port's path form, on the console's origin, can neither register a service worker nor
// frame the console), ask for a sandbox's network, pause a sandbox in memory and to disk and
// resume it, fork one with its running processes (and see the daemon's refusal of a fork or a
// pause to disk of a sandbox that cannot be checkpointed); and through all of it, no URL the browser
// requests carries the key (scoped tokens go in ?access_token=) and the key stays out of
// localStorage. Leaves a screenshot in test-artifacts/console.png.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const CHROMIUM = "/usr/bin/chromium";
const API_KEY = "testkey";
const WINDOW = 1 << 20;
const WEB_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const REPO_DIR = path.resolve(WEB_DIR, "..");
const ARTIFACTS = path.join(REPO_DIR, "test-artifacts");

let daemon;
let daemonUrl;
let browser;
let page;
const scratch = [];
// Every URL the browser requested, in any page of the context (tabs the console opens too),
// WebSocket handshakes included.
const requested = [];

// A GET sent byte for byte: fetch() would normalize the dot segments away.
function rawGet(target) {
  const { hostname, port } = new URL(daemonUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => {
      socket.end(`GET ${target} HTTP/1.1\r\nHost: ${hostname}\r\nConnection: close\r\n\r\n`);
    });
    let answer = "";
    socket.setEncoding("utf8");
    socket.on("data", (d) => { answer += d; });
    socket.on("end", () => resolve(answer));
    socket.on("error", reject);
  });
}

async function startDaemon() {
  const binary = process.env.SANDSTREAM_BIN ?? path.join(REPO_DIR, "build/dev/bin/sandstreamd");
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "sandstream-web-"));
  scratch.push(dataDir);
  // A small log window, so a page that fell behind it would lose output (see the flow test).
  // No egress: a request for it is checked in full, then refused, and nothing is set up on
  // this machine's network (egress is tested in tests/integration/test_egress.py).
  const child = spawn(binary, ["--listen", "127.0.0.1:0", "--data-dir", dataDir,
                               "--web-dir", path.join(WEB_DIR, "dist"),
                               "--log-window-bytes", String(WINDOW), "--egress-pool", "none"], {
    env: { ...process.env, SANDSTREAM_API_KEY: API_KEY },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const logTail = [];
  createInterface({ input: child.stderr }).on("line", (line) => {
    logTail.push(line);
    if (logTail.length > 200) logTail.shift();
  });
  child.once("exit", (code, signal) => {
    if (code !== 0 && signal !== "SIGTERM") {
      process.stderr.write(`sandstreamd exited (${code}, ${signal}):\n${logTail.join("\n")}\n`);
    }
  });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${binary} did not start in 20 s`)), 20_000);
    child.once("error", (e) => reject(e));
    createInterface({ input: child.stdout }).on("line", (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
  return { child, url };
}

before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y chromium`);
  assert.ok(existsSync(path.join(WEB_DIR, "dist/index.html")), "web/dist is missing: npm run build");
  ({ child: daemon, url: daemonUrl } = await startDaemon());
  const profile = mkdtempSync(path.join(os.tmpdir(), "sandstream-chromium-"));
  scratch.push(profile);
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run"],
    viewport: { width: 1200, height: 900 },
  });
  browser.on("request", (r) => requested.push(r.url()));
  const recordSockets = (p) => p.on("websocket", (ws) => requested.push(ws.url()));
  browser.on("page", recordSockets);
  for (const p of browser.pages()) recordSockets(p);
  page = browser.pages()[0] ?? (await browser.newPage());
});

after(async () => {
  if (page) {
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, "console.png"), fullPage: true }).catch(() => {});
  }
  await browser?.close();
  if (daemon && daemon.exitCode === null) {
    const exited = new Promise((resolve) => daemon.once("exit", resolve));
    daemon.kill("SIGTERM");
    await exited;
  }
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

test("the console is served without a CDN and refuses paths outside its directory", async () => {
  const index = await fetch(`${daemonUrl}/`);
  assert.equal(index.status, 200);
  assert.match(index.headers.get("content-type"), /text\/html/);
  const html = await index.text();
  assert.doesNotMatch(html, /https?:\/\//, "the page loads nothing from elsewhere");
  assert.equal((await fetch(`${daemonUrl}/app.js`)).status, 200);
  for (const p of ["/..%2f..%2fetc%2fpasswd", "/%2e%2e", "/../../etc/passwd", "/.hidden",
                   "/assets/..%2fpackage.json", "/assets/../../../etc/passwd"]) {
    const answer = await rawGet(p);
    assert.match(answer, /^HTTP\/1\.1 404 /, p);
    assert.match(answer, /"code":"not_found"/, p);
  }
});

test("sign in, create a sandbox, type into its terminal, watch a command run live", async () => {
  await page.goto(`${daemonUrl}/`);
  // A copy left in localStorage by an older console is cleared.
  await page.evaluate((key) => localStorage.setItem("sandstream.key", key), API_KEY);
  await page.reload();
  assert.equal(await page.evaluate(() => localStorage.getItem("sandstream.key")), null);

  await page.fill("#api-key", "wrong");
  await page.click("#sign-in-form button");
  await page.waitForSelector("#sign-in-error:has-text('unauthorized')");

  await page.fill("#api-key", API_KEY);
  await page.click("#sign-in-form button");
  await page.waitForSelector("#console:not([hidden])");
  assert.equal(await page.evaluate(() => sessionStorage.getItem("sandstream.key")), API_KEY);
  assert.equal(await page.evaluate(() => localStorage.length), 0, "nothing in localStorage");
  // The new-sandbox form lists the daemon's templates, base chosen.
  await page.waitForSelector("#create-template option[value=code-interpreter]", { state: "attached" });
  assert.equal(await page.inputValue("#create-template"), "base");

  await page.click("#create-sandbox");
  await page.waitForSelector("#sandbox-rows tr.selected");
  const sandboxId = await page.textContent("#sandbox-title");
  assert.match(sandboxId, /^sb_/);
  await page.waitForSelector("#terminal-status:has-text('terminal term_')");
  const pty = requested.filter((u) => new URL(u).pathname === `/v1/sandboxes/${sandboxId}/exec/pty`);
  assert.equal(pty.length, 1, "one terminal connection");
  assert.match(new URL(pty[0]).searchParams.get("access_token"), /^sst_/, "a scoped token");
  const tokens = (await call("GET", `/v1/sandboxes/${sandboxId}/tokens`)).tokens;
  assert.deepEqual(tokens.map((t) => t.scopes), [["terminal"]]);

  await page.click("#terminal");
  await page.keyboard.type("echo console-$((6*7))\n");
  await page.waitForFunction(() => document.querySelector(".xterm-rows")?.textContent.includes("console-42"),
                             null, { timeout: 15_000 });

  await page.click(".tab[data-tab=run]");
  await page.fill("#run-cmd", "echo first; sleep 2; echo second >&2");
  const started = Date.now();
  await page.click("#run-button");
  await page.waitForSelector("#run-output span:has-text('first')", { timeout: 10_000 });
  const firstAt = Date.now() - started;
  assert.equal(await page.textContent("#run-status"), "running...", "still running when the first line shows");
  assert.ok(firstAt < 1800, `the first line took ${firstAt} ms, so it was not live`);
  await page.waitForSelector("#run-output span.stderr:has-text('second')", { timeout: 15_000 });
  await page.waitForSelector("#run-status:has-text('exit code 0')");
  assert.ok(Date.now() - started >= 2000, "the command's end came after its sleep");

  await page.click(".tab[data-tab=processes]");
  await page.waitForSelector("#process-rows tr:has-text('echo first')");
  await page.click(".tab[data-tab=terminal]");
  await page.waitForFunction(() => document.querySelector(".xterm-rows")?.textContent.includes("console-42"));
});

test("the run view gets every byte of a command that outpaces it", async () => {
  // Four windows' worth, printed as fast as the command can: the page's stream waits.
  const line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n";
  const size = 4 * WINDOW;
  await page.click(".tab[data-tab=run]");
  await page.fill("#run-cmd", `yes ${line.slice(0, -1)} | head -c ${size}`);
  const [request] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith("/exec/stream")),
    page.click("#run-button"),
  ]);
  assert.equal(JSON.parse(request.postData()).flow, "wait");
  await page.waitForSelector("#run-status:has-text('exit code 0')", { timeout: 60_000 });
  const { length, whole, gaps } = await page.evaluate((line) => {
    const text = document.querySelector("#run-output").textContent;
    return { length: text.length,
             whole: text === line.repeat(Math.ceil(text.length / line.length)).slice(0, text.length),
             gaps: document.querySelectorAll("#run-output span.stderr").length };
  }, line);
  assert.equal(gaps, 0, "no gap was shown");
  assert.equal(length, size);
  assert.ok(whole, "the output is the command's, in order");
});

// A site served by `python3 -m http.server` in a sandbox: a page whose stylesheet and script are
// relative paths, so they load only if the page is reached at the root of its own host.
const SITE = {
  "index.html": `<!doctype html><html><head><title>preview</title><link rel="stylesheet" href="style.css">
</head><body><h1 id="title">hello from the sandbox</h1><p id="asset">asset not loaded</p>
<script src="js/app.js"></script></body></html>
`,
  "style.css": "h1 { color: rgb(0, 128, 128); }\n",
  "js/app.js": `document.getElementById("asset").textContent = "asset loaded";\n`,
};

async function call(method, p, body) {
  const headers = { Authorization: `Bearer ${API_KEY}` };
  const init = { method, headers };
  if (typeof body === "string") {
    init.body = body;
  } else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(`${daemonUrl}${p}`, init);
  const text = await res.text();
  assert.ok(res.ok, `${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

// A sandbox serving SITE on `port`, listening before this returns.
async function servingSandbox(port) {
  const sb = await call("POST", "/v1/sandboxes", {});
  for (const [name, text] of Object.entries(SITE)) {
    await call("PUT", `/v1/sandboxes/${sb.id}/files/content?path=/workspace/site/${name}`, text);
  }
  await call("POST", `/v1/sandboxes/${sb.id}/processes`, {
    argv: ["python3", "-m", "http.server", String(port), "--bind", "127.0.0.1", "--directory", "/workspace/site"],
  });
  await call("GET", `/v1/sandboxes/${sb.id}/ports/${port}/wait?timeout_seconds=20`);
  return sb;
}

// Reads what the site's page shows once its script has run.
async function siteSeen(p) {
  await p.waitForFunction(() => document.getElementById("asset")?.textContent === "asset loaded",
                          null, { timeout: 15_000 });
  return p.evaluate(() => ({
    title: document.getElementById("title").textContent,
    color: getComputedStyle(document.getElementById("title")).color,
    cookie: document.cookie,
  }));
}

test("a page in a sandbox opens through the preview host, its relative assets with it", async () => {
  const sb = await servingSandbox(8000);
  try {
    const port = await call("POST", `/v1/sandboxes/${sb.id}/ports`, { port: 8000 });
    const listen = new URL(daemonUrl).port;
    assert.equal(port.url, `http://8000-${sb.id}.localhost:${listen}/`);
    const preview = await browser.newPage();
    try {
      const token = await call("POST", `/v1/sandboxes/${sb.id}/tokens`, { scopes: ["port:8000"] });
      const response = await preview.goto(`${port.url}?access_token=${token.token}`);
      assert.equal(response.status(), 200);
      // The token went into the host's HttpOnly cookie and left the address bar.
      assert.equal(preview.url(), port.url);
      const seen = await siteSeen(preview);
      assert.equal(seen.title, "hello from the sandbox");
      assert.equal(seen.color, "rgb(0, 128, 128)", "the relative stylesheet applied");
      assert.doesNotMatch(seen.cookie, /sandstream_preview/, "the page's scripts cannot read the key");
    } finally {
      await preview.close();
    }
  } finally {
    await call("DELETE", `/v1/sandboxes/${sb.id}`);
  }
});

test("the ports tab exposes a port, opens it in a new tab and closes it", async () => {
  const sb = await servingSandbox(8000);
  try {
    await page.goto(`${daemonUrl}/`);
    await page.waitForSelector("#console:not([hidden])");
    await page.click(`#sandbox-rows tr[data-id="${sb.id}"] .open-sandbox`);
    await page.click(".tab[data-tab=ports]");
    await page.fill("#port-number", "8000");
    await page.click("#port-expose");
    const row = `#port-rows tr[data-port="8000"]`;
    await page.waitForSelector(row);
    const listen = new URL(daemonUrl).port;
    const url = `http://8000-${sb.id}.localhost:${listen}/`;
    assert.equal(await page.textContent(`${row} td:nth-child(2)`), url);
    const link = page.locator(`${row} a.open-port`);
    // The link holds no credential: a click makes a token of port:8000 and opens it with that.
    assert.equal(await link.getAttribute("href"), url);
    assert.equal(await link.getAttribute("target"), "_blank");
    assert.equal(await link.getAttribute("rel"), "noopener");

    const [opened] = await Promise.all([browser.waitForEvent("page"), link.click()]);
    try {
      const seen = await siteSeen(opened);
      assert.equal(seen.title, "hello from the sandbox");
      assert.equal(opened.url(), url);
      assert.equal(await opened.evaluate(() => window.opener), null, "noopener");
    } finally {
      await opened.close();
    }
    const scopes = (await call("GET", `/v1/sandboxes/${sb.id}/tokens`)).tokens.map((t) => t.scopes);
    assert.deepEqual(scopes.filter((s) => s[0].startsWith("port:")), [["port:8000"]]);
    const opens = requested.filter((u) => u.startsWith(`${url}?access_token=`));
    assert.equal(opens.length, 1);
    assert.match(new URL(opens[0]).searchParams.get("access_token"), /^sst_/);

    await page.click(`${row} .close-port`);
    await page.waitForSelector(row, { state: "detached" });
    assert.deepEqual((await call("GET", `/v1/sandboxes/${sb.id}/ports`)).ports, []);
    await page.fill("#port-number", "70000");
    // Past the field's own check, to see the daemon's refusal shown.
    await page.evaluate(() => document.getElementById("port-form").dispatchEvent(
      new SubmitEvent("submit", { cancelable: true })));
    await page.waitForSelector("#ports-error:has-text('invalid_request')");
  } finally {
    await call("DELETE", `/v1/sandboxes/${sb.id}`);
  }
});

// A site whose page, reached through a port's path form (on the API's and the console's
// origin), tries what a hostile one would: register a service worker for the whole origin (its
// server allows that scope) and frame the console.
const HOSTILE_SERVER = `
from http.server import SimpleHTTPRequestHandler as H, ThreadingHTTPServer as S
class W(H):
    def end_headers(self):
        self.send_header("Service-Worker-Allowed", "/")
        super().end_headers()
S(("127.0.0.1", 8001), W).serve_forever()
`;
const HOSTILE_SITE = {
  "index.html": `<!doctype html><html><head><title>hostile</title></head><body>
<p id="sw">pending</p><iframe id="console" src="/"></iframe>
<script>
(async () => {
  const out = document.getElementById("sw");
  try {
    await navigator.serviceWorker.register("sw.js" + location.search, { scope: "/" });
    out.textContent = "registered";
  } catch (e) {
    out.textContent = "refused: " + e;
  }
})();
</script></body></html>
`,
  "sw.js": "self.addEventListener('fetch', () => {});\n",
};

test("a page from a port's path form can neither register a service worker nor frame the console", async () => {
  const sb = await call("POST", "/v1/sandboxes", {});
  try {
    for (const [name, text] of Object.entries(HOSTILE_SITE)) {
      await call("PUT", `/v1/sandboxes/${sb.id}/files/content?path=/workspace/hostile/${name}`, text);
    }
    await call("POST", `/v1/sandboxes/${sb.id}/processes`,
               { argv: ["python3", "-c", HOSTILE_SERVER], cwd: "/workspace/hostile" });
    await call("GET", `/v1/sandboxes/${sb.id}/ports/8001/wait?timeout_seconds=20`);
    await call("POST", `/v1/sandboxes/${sb.id}/ports`, { port: 8001 });
    const token = await call("POST", `/v1/sandboxes/${sb.id}/tokens`, { scopes: ["port:8001"] });
    const hostile = await browser.newPage();
    try {
      const url = `${daemonUrl}/v1/sandboxes/${sb.id}/ports/8001/index.html?access_token=${token.token}`;
      assert.equal((await hostile.goto(url)).status(), 200);
      await hostile.waitForFunction(() => document.getElementById("sw").textContent !== "pending",
                                    null, { timeout: 15_000 });
      assert.match(await hostile.textContent("#sw"), /^refused/);
      const frame = hostile.frames().find((f) => f !== hostile.mainFrame());
      assert.ok(frame, "the page has its frame");
      // Loaded, or refused (an error page); either way done within this.
      await frame.waitForLoadState("load", { timeout: 10_000 }).catch(() => {});
      const signIn = await frame.locator("#api-key").count().catch(() => 0);
      assert.equal(signIn, 0, `the console loaded in a frame of the page (${frame.url()})`);
    } finally {
      await hostile.close();
    }
    assert.equal(browser.serviceWorkers().length, 0, "no worker runs");
    const api = await browser.newPage();
    try {
      await api.goto(`${daemonUrl}/`);
      const registered = await api.evaluate(async () => (await navigator.serviceWorker.getRegistrations()).length);
      assert.equal(registered, 0, "no worker is registered on the API's origin");
    } finally {
      await api.close();
    }
  } finally {
    await call("DELETE", `/v1/sandboxes/${sb.id}`);
  }
});

test("the new sandbox form asks for a network, and the list shows it", async () => {
  await page.goto(`${daemonUrl}/`);
  await page.waitForSelector("#console:not([hidden])");
  assert.ok(await page.isHidden("#create-allow"), "the rules show only for egress");
  await page.selectOption("#create-network", "egress");
  await page.fill("#create-allow", "pypi.org, *.github.com 198.18.0.0/15");
  await page.fill("#create-deny", "203.0.113.7");
  const [request] = await Promise.all([
    page.waitForRequest((r) => r.method() === "POST" && new URL(r.url()).pathname === "/v1/sandboxes"),
    page.click("#create-sandbox"),
  ]);
  assert.deepEqual(JSON.parse(request.postData()).network,
                   { egress: { allow: ["pypi.org", "*.github.com", "198.18.0.0/15"], deny: ["203.0.113.7"] } });
  await page.waitForSelector("#console-error:has-text('egress_pool')");

  await page.selectOption("#create-network", "none");
  assert.ok(await page.isHidden("#create-allow"));
  const before = new Set((await call("GET", "/v1/sandboxes")).sandboxes.map((sb) => sb.id));
  await page.click("#create-sandbox");
  await page.waitForSelector("#sandbox-rows tr.selected");
  const id = await page.textContent("#sandbox-title");
  assert.ok(!before.has(id));
  assert.equal((await call("GET", `/v1/sandboxes/${id}`)).network, "none");
  assert.equal(await page.textContent(`#sandbox-rows tr[data-id="${id}"] td:nth-child(6)`), "none");
  assert.equal(await page.textContent("#console-error"), "");
  // Pause and resume from the list: the state column follows the daemon's.
  const row = `#sandbox-rows tr[data-id="${id}"]`;
  assert.equal(await page.textContent(`${row} td:nth-child(3)`), "running");
  await page.click(`${row} .pause-sandbox`);
  await page.waitForSelector(`${row} .resume-sandbox`);
  assert.equal(await page.textContent(`${row} td:nth-child(3)`), "paused (in memory)");
  assert.equal((await call("GET", `/v1/sandboxes/${id}`)).pause_mode, "freeze");
  await page.click(`${row} .resume-sandbox`);
  await page.waitForSelector(`${row} .pause-sandbox`);
  assert.equal((await call("GET", `/v1/sandboxes/${id}`)).status, "running");
  await page.click(`#sandbox-rows tr[data-id="${id}"] .delete-sandbox`);
  await page.waitForSelector(`#sandbox-rows tr[data-id="${id}"]`, { state: "detached" });
});

// A sandbox running `sleep 1000` (its process's id too), shown in the console's list.
async function sleepingSandbox(body = {}) {
  const sb = await call("POST", "/v1/sandboxes", body);
  const proc = await call("POST", `/v1/sandboxes/${sb.id}/processes`, { argv: ["sleep", "1000"] });
  await page.goto(`${daemonUrl}/`);
  await page.waitForSelector(`#sandbox-rows tr[data-id="${sb.id}"]`);
  return { sb, proc, row: `#sandbox-rows tr[data-id="${sb.id}"]` };
}

async function runningProcess(sandboxId, processId) {
  const p = await call("GET", `/v1/sandboxes/${sandboxId}/processes/${processId}`);
  assert.equal(p.status, "running", `${processId} in ${sandboxId}: ${JSON.stringify(p)}`);
}

test("pause to disk shows the mode, and resume brings the sandbox back running", async () => {
  const { sb, proc, row } = await sleepingSandbox();
  try {
    const [request] = await Promise.all([
      page.waitForRequest((r) => new URL(r.url()).pathname === `/v1/sandboxes/${sb.id}/pause`),
      page.click(`${row} .checkpoint-sandbox`),
    ]);
    assert.deepEqual(JSON.parse(request.postData()), { mode: "checkpoint" });
    await page.waitForSelector(`${row} .resume-sandbox`, { timeout: 60_000 });
    assert.equal(await page.textContent(`${row} td:nth-child(3)`), "paused (to disk)");
    assert.equal(await page.locator(`${row} .pause-sandbox, ${row} .fork-sandbox`).count(), 0,
                 "a paused sandbox offers Resume alone");
    const paused = await call("GET", `/v1/sandboxes/${sb.id}`);
    assert.equal(paused.status, "paused");
    assert.equal(paused.pause_mode, "checkpoint");
    assert.ok(paused.paused_at);
    assert.equal(await page.textContent("#console-error"), "");

    await page.click(`${row} .resume-sandbox`);
    await page.waitForSelector(`${row} .checkpoint-sandbox`, { timeout: 60_000 });
    assert.equal(await page.textContent(`${row} td:nth-child(3)`), "running");
    const resumed = await call("GET", `/v1/sandboxes/${sb.id}`);
    assert.equal(resumed.status, "running");
    assert.equal(resumed.pause_mode, null);
    await runningProcess(sb.id, proc.id);
    assert.equal(await page.textContent("#console-error"), "");
  } finally {
    await call("DELETE", `/v1/sandboxes/${sb.id}`);
  }
});

test("fork with a count adds that many running sandboxes with the source's process", async () => {
  const { sb, proc, row } = await sleepingSandbox();
  const before = new Set((await call("GET", "/v1/sandboxes")).sandboxes.map((s) => s.id));
  let forks = [];
  try {
    assert.equal(await page.inputValue(`${row} .fork-count`), "1", "one fork unless asked");
    await page.fill(`${row} .fork-count`, "2");
    const [response] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === `/v1/sandboxes/${sb.id}/fork`,
                           { timeout: 120_000 }),
      page.click(`${row} .fork-sandbox`),
    ]);
    assert.deepEqual(JSON.parse(response.request().postData()), { count: 2 });
    assert.equal(response.status(), 201);
    forks = (await response.json()).sandboxes.map((f) => f.id);
    assert.equal(forks.length, 2);
    for (const id of forks) {
      assert.ok(!before.has(id));
      await page.waitForSelector(`#sandbox-rows tr[data-id="${id}"]`);
      assert.equal(await page.textContent(`#sandbox-rows tr[data-id="${id}"] td:nth-child(3)`), "running");
      assert.equal((await call("GET", `/v1/sandboxes/${id}`)).status, "running");
      await runningProcess(id, proc.id);
    }
    await page.waitForSelector(`#console-status:has-text('${sb.id} forked: ${forks.join(", ")}')`);
    assert.equal(await page.textContent("#console-error"), "");
    // The source runs on, its process with it.
    assert.equal((await call("GET", `/v1/sandboxes/${sb.id}`)).status, "running");
    await runningProcess(sb.id, proc.id);
    const after = (await call("GET", "/v1/sandboxes")).sandboxes.map((s) => s.id);
    assert.equal(after.filter((id) => !before.has(id)).length, 2, "two new sandboxes, no more");
  } finally {
    for (const id of [...forks, sb.id]) await call("DELETE", `/v1/sandboxes/${id}`);
  }
});

test("a fork or a pause to disk of a sandbox that cannot be checkpointed shows the daemon's reason", async () => {
  const volume = `web-${Date.now().toString(36)}`;
  await call("POST", "/v1/volumes", { name: volume, size_mb: 16 });
  let sb;
  try {
    let row;
    ({ sb, row } = await sleepingSandbox({ volumes: [{ name: volume, path: "/mnt/data" }] }));
    const before = (await call("GET", "/v1/sandboxes")).sandboxes.map((s) => s.id).sort();
    const error = "#console-error";
    const [response] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === `/v1/sandboxes/${sb.id}/fork`),
      page.click(`${row} .fork-sandbox`),
    ]);
    assert.equal(response.status(), 501);
    const reason = (await response.json()).error.message;
    assert.match(reason, /volumes/, "the daemon says why");
    // Shown once the list is back (the refresh after the step does not clear it).
    await page.waitForSelector(`${error}:has-text('not_implemented')`);
    assert.equal(await page.textContent(error), `not_implemented: ${reason}`);
    assert.equal(await page.textContent("#console-status"), "");
    assert.deepEqual((await call("GET", "/v1/sandboxes")).sandboxes.map((s) => s.id).sort(), before);
    assert.equal(await page.textContent(`${row} td:nth-child(3)`), "running");

    // A new step clears the error it left; the pause's own is shown in its place.
    const [pause] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === `/v1/sandboxes/${sb.id}/pause`),
      page.click(`${row} .checkpoint-sandbox`),
    ]);
    assert.equal(pause.status(), 501);
    const why = (await pause.json()).error.message;
    assert.match(why, /volumes/);
    await page.waitForSelector(`${error}:has-text('not_implemented')`);
    assert.equal(await page.textContent(error), `not_implemented: ${why}`);
    assert.equal(await page.textContent(`${row} td:nth-child(3)`), "running");
    assert.equal((await call("GET", `/v1/sandboxes/${sb.id}`)).status, "running");
  } finally {
    if (sb) await call("DELETE", `/v1/sandboxes/${sb.id}`);
    // The volume is free once the sandbox's mount is gone.
    for (let i = 0; ; i++) {
      const res = await fetch(`${daemonUrl}/v1/volumes/${volume}`,
                              { method: "DELETE", headers: { Authorization: `Bearer ${API_KEY}` } });
      if (res.status === 204 || res.status === 404 || i === 50) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
});

test("no URL the browser requested carries the key", () => {
  assert.ok(requested.length > 20, `only ${requested.length} requests recorded`);
  assert.ok(requested.some((u) => /access_token=sst_/.test(u)), "scoped tokens were used");
  const leaked = requested.filter((u) => u.includes(API_KEY) || u.includes(encodeURIComponent(API_KEY)));
  assert.deepEqual(leaked, []);
});
