// The sandstream console: sign in with the API key, manage sandboxes (pause them in memory or to
// disk, resume them, fork them with their running processes), open a terminal
// (exec/pty over a WebSocket, drawn by xterm.js), run a command and watch its stdout and stderr
// arrive live (exec/stream), list processes and follow their logs, expose ports and open them in
// a new tab. Talks only to the daemon that served it. The key lives in sessionStorage (never
// localStorage) and goes only into Authorization headers: every URL the browser opens with
// ?access_token= (terminal WebSocket, port preview) carries a short-lived token of that sandbox.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";

const $ = (id) => document.getElementById(id);
// Consoles before this one kept the key in localStorage, where it outlived the tab.
localStorage.removeItem("sandstream.key");
const state = { key: sessionStorage.getItem("sandstream.key") || "", sandbox: null, term: null,
                ws: null, terminalId: null, run: null, runProcess: null, logs: null };

// ---- API ----

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${state.key}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 204) return null;
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const err = new Error(data?.error?.message || `HTTP ${res.status}`);
    err.code = data?.error?.code;
    err.status = res.status;
    throw err;
  }
  return data;
}

// A token of the sandbox for `scopes` (read, exec, terminal, port:N), for a URL the browser opens
// itself: a URL ends up in histories and logs, so it never carries the key.
async function scopedToken(sandboxId, scopes, ttlSeconds) {
  return api("POST", `/v1/sandboxes/${sandboxId}/tokens`, { scopes, ttl_seconds: ttlSeconds });
}

function revokeToken(sandboxId, token) {
  api("DELETE", `/v1/sandboxes/${sandboxId}/tokens/${token.id}`).catch(() => {});
}

// Reads a text/event-stream response, calling onEvent(name, data) per event.
async function readEvents(res, onEvent) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(event, JSON.parse(data.join("\n")));
    }
  }
}

function showError(where, err) { $(where).textContent = err ? `${err.code || "error"}: ${err.message}` : ""; }

// ---- sign in ----

async function signIn(key) {
  state.key = key;
  try {
    await api("GET", "/v1/sandboxes");
  } catch (err) {
    state.key = "";
    sessionStorage.removeItem("sandstream.key");
    showError("sign-in-error", err);
    return;
  }
  sessionStorage.setItem("sandstream.key", key);
  showError("sign-in-error", null);
  $("sign-in").hidden = true;
  $("console").hidden = false;
  $("sign-out").hidden = false;
  await Promise.all([refreshSandboxes(), refreshTemplates()]);
}

$("sign-in-form").addEventListener("submit", (e) => {
  e.preventDefault();
  signIn($("api-key").value.trim());
});

$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem("sandstream.key");
  location.reload();
});

// ---- sandboxes ----

// The new-sandbox form offers every ready template the key may use (built in, directories,
// imported images, snapshots), by kind.
async function refreshTemplates() {
  try {
    const { templates } = await api("GET", "/v1/templates");
    const select = $("create-template");
    const chosen = select.value || "base";
    select.replaceChildren();
    for (const t of templates) {
      if (t.status !== "ready") continue;
      const option = document.createElement("option");
      option.value = t.name;
      option.textContent = t.kind === "base" || t.kind === "directory" ? t.name : `${t.name} (${t.kind})`;
      select.append(option);
    }
    select.value = templates.some((t) => t.name === chosen) ? chosen : "base";
  } catch (err) {
    showError("console-error", err);
  }
}

async function refreshSandboxes() {
  try {
    const { sandboxes } = await api("GET", "/v1/sandboxes");
    const rows = $("sandbox-rows");
    rows.replaceChildren();
    for (const sb of sandboxes) {
      const tr = document.createElement("tr");
      tr.dataset.id = sb.id;
      if (state.sandbox?.id === sb.id) tr.className = "selected";
      for (const text of [sb.id, sb.template, stateText(sb), sb.created_at.replace("T", " ").slice(0, 19),
                          sb.processes_running, networkText(sb)]) {
        const td = document.createElement("td");
        td.textContent = String(text);
        tr.append(td);
      }
      if (sb.paused_at) tr.children[2].title = `paused since ${sb.paused_at.replace("T", " ").slice(0, 19)}`;
      const actions = document.createElement("td");
      actions.append(button("Open", () => openSandbox(sb), "open-sandbox"));
      // Paused: its processes stopped where they are; Resume (or any use) lets them go on.
      if (sb.status === "paused") {
        actions.append(" ", button("Resume", () => lifecycleStep(tr, sb.id, "resume"), "resume-sandbox",
                                   "its processes go on where they stopped"));
      } else if (sb.status === "running") {
        actions.append(" ", button("Pause", () => lifecycleStep(tr, sb.id, "pause", "freeze"), "pause-sandbox",
                                   "stop its processes where they are, their memory kept"),
                       " ", button("Pause to disk", () => lifecycleStep(tr, sb.id, "pause", "checkpoint"),
                                   "checkpoint-sandbox",
                                   "write its processes and memory to disk and free the memory"),
                       " ", forkControl(tr, sb));
      }
      actions.append(" ", button("Delete", () => deleteSandbox(tr, sb.id), "delete-sandbox"));
      tr.append(actions);
      rows.append(tr);
    }
    showError("console-error", null);
  } catch (err) {
    showError("console-error", err);
  }
}

// The status, a paused one with its pause_mode: "paused (in memory)" (freeze) or "paused (to
// disk)" (checkpoint).
function stateText(sb) {
  if (sb.status !== "paused") return sb.status;
  if (sb.pause_mode === "checkpoint") return "paused (to disk)";
  if (sb.pause_mode === "freeze") return "paused (in memory)";
  return "paused";
}

// A count (1 to 32, 1 at first) and Fork: that many new sandboxes with the source's running
// processes and code contexts (the source runs on).
function forkControl(tr, sb) {
  const form = document.createElement("form");
  form.className = "fork-form";
  const count = document.createElement("input");
  Object.assign(count, { type: "number", min: "1", max: "32", step: "1", value: "1", required: true,
                         className: "fork-count", title: "how many forks (1 to 32)" });
  count.setAttribute("aria-label", `how many forks of ${sb.id}`);
  const fork = document.createElement("button");
  Object.assign(fork, { type: "submit", textContent: "Fork", className: "fork-sandbox",
                        title: "new sandboxes with its running processes and memory; it runs on" });
  form.append(count, fork);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const n = count.valueAsNumber;
    sandboxAction(tr, `forking ${sb.id}...`, async () => {
      const { sandboxes } = await api("POST", `/v1/sandboxes/${sb.id}/fork`, { count: n });
      return `${sb.id} forked: ${sandboxes.map((f) => f.id).join(", ")}`;
    });
  });
  return form;
}

// "loopback", "none", or "egress ADDRESS allow=... deny=..." (no allow=: every public address).
function networkText(sb) {
  const e = sb.egress;
  if (!e) return sb.network ?? "";
  const parts = ["egress"];
  if (e.address) parts.push(e.address);
  if (e.allow) parts.push(`allow=${e.allow.join(",")}`);
  if (e.deny?.length) parts.push(`deny=${e.deny.join(",")}`);
  return parts.join(" ");
}

// Rules typed as a list separated by commas or spaces.
function rules(id) { return $(id).value.split(/[\s,]+/).filter(Boolean); }

// The request's `network`: omitted for loopback, the server's default.
function networkRequest() {
  const mode = $("create-network").value;
  if (mode !== "egress") return mode === "loopback" ? undefined : mode;
  const allow = rules("create-allow");
  const deny = rules("create-deny");
  if (!allow.length && !deny.length) return "egress";
  const policy = {};
  if (allow.length) policy.allow = allow;
  if (deny.length) policy.deny = deny;
  return { egress: policy };
}

$("create-network").addEventListener("change", () => {
  const egress = $("create-network").value === "egress";
  $("create-allow").hidden = !egress;
  $("create-deny").hidden = !egress;
});

function button(label, onClick, className, title) {
  const b = document.createElement("button");
  b.textContent = label;
  if (className) b.className = className;
  if (title) b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

$("create-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const body = { template: $("create-template").value };
  const ttl = Number($("create-ttl").value);
  if (ttl > 0) body.ttl_seconds = ttl;
  const network = networkRequest();
  if (network !== undefined) body.network = network;
  showStatus("");
  try {
    const sb = await api("POST", "/v1/sandboxes", body);
    await refreshSandboxes();
    openSandbox(sb);
  } catch (err) {
    showError("console-error", err);
  }
});

function showStatus(text) { $("console-status").textContent = text; }

// Runs `step` for the sandbox of row `tr` (its controls off meanwhile, `progress` shown, the last
// error cleared), then shows the list as the daemon has it now, then what the step said: its
// error (a 501 for what cannot be checkpointed, say) goes after the refresh, which clears it.
async function sandboxAction(tr, progress, step) {
  const controls = tr.querySelectorAll("button, input");
  for (const c of controls) c.disabled = true;
  showStatus(progress);
  showError("console-error", null);
  let done = "";
  let error = null;
  try {
    done = (await step()) || "";
  } catch (err) {
    error = err;
  }
  await refreshSandboxes();
  showStatus(done);
  if (error) showError("console-error", error);
  for (const c of controls) c.disabled = false;
}

// pause (mode freeze or checkpoint) or resume.
function lifecycleStep(tr, id, step, mode) {
  const doing = step === "resume" ? "resuming" : mode === "checkpoint" ? "pausing to disk" : "pausing";
  return sandboxAction(tr, `${doing} ${id}...`, async () => {
    await api("POST", `/v1/sandboxes/${id}/${step}`, mode ? { mode } : undefined);
  });
}

function deleteSandbox(tr, id) {
  if (state.sandbox?.id === id) closeSandbox();
  return sandboxAction(tr, `deleting ${id}...`, async () => {
    await api("DELETE", `/v1/sandboxes/${id}`);
  });
}

function openSandbox(sb) {
  closeSandbox();
  state.sandbox = sb;
  $("sandbox").hidden = false;
  $("sandbox-title").textContent = sb.id;
  for (const tr of $("sandbox-rows").children) tr.className = tr.dataset.id === sb.id ? "selected" : "";
  selectTab("terminal");
}

function closeSandbox() {
  disconnectTerminal();
  state.run?.abort();
  state.logs?.abort();
  state.term?.dispose();
  state.term = null;
  state.terminalId = null;
  state.sandbox = null;
  $("sandbox").hidden = true;
}

function selectTab(name) {
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.dataset.tab === name);
  for (const body of document.querySelectorAll(".tab-body")) body.hidden = body.id !== `tab-${name}`;
  if (name === "terminal") openTerminal();
  if (name === "processes") refreshProcesses();
  if (name === "ports") refreshPorts();
}
for (const t of document.querySelectorAll(".tab")) t.addEventListener("click", () => selectTab(t.dataset.tab));

// ---- terminal ----

const fit = new FitAddon();
const encoder = new TextEncoder();

// A terminal's connection lasts as long as its token; when it expires the terminal (which outlives
// its connections) is reattached with a new one.
const TERMINAL_TOKEN_SECONDS = 900;
const PREVIEW_TOKEN_SECONDS = 3600;

function wsUrl(path, token, params) {
  const q = new URLSearchParams({ ...params, access_token: token });
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}?${q}`;
}

function openTerminal() {
  if (!state.term) {
    state.term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false,
                                theme: { background: "#000000" } });
    state.term.loadAddon(fit);
    state.term.open($("terminal"));
    state.term.onData((data) => {
      if (state.ws?.readyState === WebSocket.OPEN) state.ws.send(encoder.encode(data));
    });
    state.term.onResize(({ rows, cols }) => {
      if (state.ws?.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ type: "resize", rows, cols }));
    });
  }
  fit.fit();
  if (!state.ws) connectTerminal();
  state.term.focus();
}

async function connectTerminal() {
  const term = state.term;
  const sandboxId = state.sandbox.id;
  // Holds the place of the socket while its token is made; closing it abandons the connection.
  const pending = { readyState: WebSocket.CONNECTING, send() {}, close() {} };
  state.ws = pending;
  $("terminal-status").textContent = "connecting...";
  $("terminal-reconnect").hidden = true;
  let token;
  try {
    token = await scopedToken(sandboxId, ["terminal"], TERMINAL_TOKEN_SECONDS);
  } catch (err) {
    if (state.ws !== pending) return;
    state.ws = null;
    $("terminal-status").textContent = `${err.code || "error"}: ${err.message}`;
    $("terminal-reconnect").hidden = false;
    return;
  }
  if (state.ws !== pending) {
    revokeToken(sandboxId, token);
    return;
  }
  const params = { rows: term.rows, cols: term.cols };
  if (state.terminalId) params.terminal_id = state.terminalId;
  // A reattached terminal replays its retained output: start from a clean screen.
  if (state.terminalId) term.reset();
  const ws = new WebSocket(wsUrl(`/v1/sandboxes/${sandboxId}/exec/pty`, token.token, params));
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  let exited = false;
  let expired = false;
  ws.onmessage = (ev) => {
    if (typeof ev.data !== "string") {
      term.write(new Uint8Array(ev.data));
      return;
    }
    const msg = JSON.parse(ev.data);
    if (msg.type === "start") {
      state.terminalId = msg.terminal_id;
      $("terminal-status").textContent = `terminal ${msg.terminal_id}`;
    } else if (msg.type === "exit") {
      exited = true;
      state.terminalId = null;
      term.write(`\r\n[exited: code ${msg.exit_code}, ${msg.reason}]\r\n`);
      $("terminal-status").textContent = `exited with code ${msg.exit_code}`;
    } else if (msg.type === "error" && msg.code === "unauthorized") {
      expired = true;
    } else if (msg.type === "error") {
      term.write(`\r\n[${msg.code}: ${msg.message}]\r\n`);
    }
  };
  ws.onclose = () => {
    revokeToken(sandboxId, token);
    if (state.ws !== ws) return;
    state.ws = null;
    if (expired && !exited && state.terminalId) {
      connectTerminal();
    } else if (!exited && state.terminalId) {
      $("terminal-status").textContent = `disconnected from ${state.terminalId}`;
      $("terminal-reconnect").hidden = false;
    }
  };
}

function disconnectTerminal() {
  const ws = state.ws;
  state.ws = null;
  ws?.close();
}

$("terminal-reconnect").addEventListener("click", () => connectTerminal());
$("terminal-new").addEventListener("click", () => {
  disconnectTerminal();
  state.terminalId = null;
  state.term.reset();
  connectTerminal();
  state.term.focus();
});
window.addEventListener("resize", () => { if (state.term && !$("tab-terminal").hidden) fit.fit(); });

// ---- run a command ----

function appendOutput(pre, text, stream) {
  const span = document.createElement("span");
  if (stream === "stderr") span.className = "stderr";
  span.textContent = text;
  pre.append(span);
  pre.scrollTop = pre.scrollHeight;
}

function gapText(gap) {
  return `\n[... ${gap.bytes ?? "some"} bytes not retained ...]\n`;
}

function describeExit(e) {
  return `exit code ${e.exit_code}${e.signal ? ` (${e.signal})` : ""}, ${e.reason}, ${e.duration_ms} ms`;
}

$("run-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const cmd = $("run-cmd").value;
  if (!cmd || state.run) return;
  const out = $("run-output");
  const status = $("run-status");
  out.replaceChildren();
  status.textContent = "running...";
  status.className = "";
  const controller = new AbortController();
  state.run = controller;
  $("run-button").disabled = true;
  $("run-cancel").disabled = false;
  try {
    const res = await fetch(`/v1/sandboxes/${state.sandbox.id}/exec/stream`, {
      method: "POST", signal: controller.signal,
      headers: { Authorization: `Bearer ${state.key}`, "Content-Type": "application/json",
                 Accept: "text/event-stream" },
      // The page reads what it started: a page behind holds the command back, losing nothing.
      body: JSON.stringify({ cmd, timeout_seconds: 3600, flow: "wait" }),
    });
    if (!res.ok) {
      const data = await res.json().catch(() => null);
      throw Object.assign(new Error(data?.error?.message || `HTTP ${res.status}`), { code: data?.error?.code });
    }
    await readEvents(res, (event, data) => {
      if (event === "start") state.runProcess = data.process_id;
      else if (event === "stdout" || event === "stderr") appendOutput(out, data.chunk, event);
      else if (event === "exit") {
        status.textContent = describeExit(data);
        status.className = data.exit_code === 0 ? "status-ok" : "status-bad";
      } else if (event === "gap") appendOutput(out, gapText(data), "stderr");
      else if (event === "error") {
        status.textContent = `${data.code}: ${data.message}`;
        status.className = "status-bad";
      }
    });
  } catch (err) {
    if (err.name !== "AbortError") {
      status.textContent = `${err.code || "error"}: ${err.message}`;
      status.className = "status-bad";
    }
  } finally {
    state.run = null;
    state.runProcess = null;
    $("run-button").disabled = false;
    $("run-cancel").disabled = true;
  }
});

$("run-cancel").addEventListener("click", () => {
  // Stopping kills the process (its exit then ends the stream), not just this view of it.
  if (state.runProcess) {
    api("DELETE", `/v1/sandboxes/${state.sandbox.id}/processes/${state.runProcess}`).catch(() => null);
  }
});

// ---- processes and their logs ----

async function refreshProcesses() {
  if (!state.sandbox) return;
  const rows = $("process-rows");
  try {
    const { processes } = await api("GET", `/v1/sandboxes/${state.sandbox.id}/processes`);
    rows.replaceChildren();
    for (const p of processes) {
      const tr = document.createElement("tr");
      for (const text of [p.id, p.cmd || p.argv.join(" "), p.status, p.exit_code ?? ""]) {
        const td = document.createElement("td");
        td.textContent = String(text);
        tr.append(td);
      }
      const td = document.createElement("td");
      td.append(button("Logs", () => followLogs(p)));
      if (p.status === "running") td.append(" ", button("Kill", async () => {
        await api("DELETE", `/v1/sandboxes/${state.sandbox.id}/processes/${p.id}`).catch(() => null);
        refreshProcesses();
      }));
      tr.append(td);
      rows.append(tr);
    }
  } catch (err) {
    showError("console-error", err);
  }
}
$("processes-refresh").addEventListener("click", refreshProcesses);

async function followLogs(p) {
  state.logs?.abort();
  const controller = new AbortController();
  state.logs = controller;
  const out = $("logs-output");
  out.replaceChildren();
  $("logs-title").textContent = `${p.id}: ${p.cmd || p.argv.join(" ")}`;
  try {
    // A follower skips (the daemon's default): watching a process never holds it back, and
    // what this page falls behind on is shown as a gap.
    const res = await fetch(`/v1/sandboxes/${state.sandbox.id}/processes/${p.id}/logs?follow=1`, {
      headers: { Authorization: `Bearer ${state.key}` }, signal: controller.signal });
    if (!res.ok) {
      const data = await res.json().catch(() => null);
      throw new Error(data?.error?.message || `HTTP ${res.status}`);
    }
    await readEvents(res, (event, data) => {
      if (event === "stdout" || event === "stderr") appendOutput(out, data.chunk, event);
      else if (event === "exit") appendOutput(out, `\n[${describeExit(data)}]\n`, data.exit_code === 0 ? "stdout" : "stderr");
      else if (event === "gap") appendOutput(out, gapText(data), "stderr");
      else if (event === "error") appendOutput(out, `\n[${data.code}: ${data.message}]\n`, "stderr");
    });
  } catch (err) {
    if (err.name !== "AbortError") appendOutput(out, `\n[${err.message}]\n`, "stderr");
  }
}

// ---- exposed ports ----

// The preview (host form) opened with a token of scope port:N, made when the link is clicked: the
// daemon answers 302 and keeps the token in an HttpOnly cookie of that host alone, so the page's
// own scripts never see it. The tab is opened at once, while the click still allows a popup.
async function openPreview(sandboxId, port) {
  const tab = window.open("", "_blank");
  if (!tab) return;
  tab.opener = null;
  try {
    const token = await scopedToken(sandboxId, [`port:${port.port}`], PREVIEW_TOKEN_SECONDS);
    tab.location.replace(`${port.url}?access_token=${encodeURIComponent(token.token)}`);
  } catch (err) {
    tab.close();
    showError("ports-error", err);
  }
}

async function refreshPorts() {
  if (!state.sandbox) return;
  const rows = $("port-rows");
  try {
    const { ports } = await api("GET", `/v1/sandboxes/${state.sandbox.id}/ports`);
    rows.replaceChildren();
    for (const p of ports) {
      const tr = document.createElement("tr");
      tr.dataset.port = String(p.port);
      for (const text of [p.port, p.url, p.created_at.replace("T", " ").slice(0, 19)]) {
        const td = document.createElement("td");
        td.textContent = String(text);
        tr.append(td);
      }
      const td = document.createElement("td");
      const open = document.createElement("a");
      open.className = "open-port";
      open.textContent = "Open";
      open.href = p.url;
      open.target = "_blank";
      open.rel = "noopener";
      const sandboxId = state.sandbox.id;
      open.addEventListener("click", (e) => {
        e.preventDefault();
        openPreview(sandboxId, p);
      });
      const close = button("Close", async () => {
        try {
          await api("DELETE", `/v1/sandboxes/${state.sandbox.id}/ports/${p.port}`);
          await refreshPorts();
        } catch (err) {
          showError("ports-error", err);
        }
      });
      close.className = "close-port";
      td.append(open, " ", close);
      tr.append(td);
      rows.append(tr);
    }
    showError("ports-error", null);
  } catch (err) {
    showError("ports-error", err);
  }
}
$("ports-refresh").addEventListener("click", refreshPorts);

$("port-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  try {
    await api("POST", `/v1/sandboxes/${state.sandbox.id}/ports`, { port: Number($("port-number").value) });
    $("port-number").value = "";
    await refreshPorts();
  } catch (err) {
    showError("ports-error", err);
  }
});

if (state.key) signIn(state.key);
