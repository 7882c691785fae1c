// The driver programs, kept here as source text: they are passed on the interpreter's command
// line, so nothing needs to be installed in or copied into a sandbox.
//
// Protocol: requests are JSON lines on stdin ({"id", "code", "env"}: env for that cell only).
// Everything the cell prints goes to the real stdout/stderr untouched; driver messages are
// "\x1e<token>:<json>\n" on stdout (ready, result, done) and "\x1e<token>:sync <id>\n" on stderr
// after each cell, so the daemon knows both pipes are drained up to the cell's end. The token is
// the first line on stdin, never in the environment (a process of the sandbox could read that from
// /proc/<pid>/environ).
#include "service/context_drivers.h"

namespace sandstream {

const std::string_view kPythonDriver = R"DRIVER(
import ast, asyncio, base64, io, json, linecache, os, signal, sys, traceback, types, warnings

_requests = os.fdopen(os.dup(0), "rb")
_marker = b"\x1e" + _requests.readline().strip() + b":"
_proto = os.dup(1)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
os.environ.setdefault("MPLBACKEND", "Agg")
warnings.filterwarnings("ignore", message=".*(non-interactive|non-GUI backend).*")
_in_cell = False
_loop = asyncio.new_event_loop()
_main = types.ModuleType("__main__")
sys.modules["__main__"] = _main
_ns = _main.__dict__
_ns["__builtins__"] = __builtins__


def _send(msg):
    data = _marker + json.dumps(msg).encode() + b"\n"
    while data:
        data = data[os.write(_proto, data):]


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _on_sigint(signum, frame):
    if _in_cell:
        raise KeyboardInterrupt


signal.signal(signal.SIGINT, _on_sigint)

_MIME = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
         ("_repr_svg_", "image/svg+xml"), ("_repr_png_", "image/png"),
         ("_repr_jpeg_", "image/jpeg"), ("_repr_latex_", "text/latex"),
         ("_repr_json_", "application/json"))
_DATA = "application/vnd.sandstream.data+json"
_CHART = "application/vnd.sandstream.chart+json"


def _bundle(value):
    data = {}
    if not isinstance(value, type):
        for method, mime in _MIME:
            fn = getattr(value, method, None)
            if not callable(fn):
                continue
            try:
                out = fn()
            except Exception:
                continue
            if isinstance(out, tuple):
                out = out[0]
            if out is None:
                continue
            if isinstance(out, bytes):
                out = base64.b64encode(out).decode()
            data[mime] = out
        # A table's columns as lists: what a client plots or tabulates without parsing HTML.
        # pandas writes a missing value as null (JSON has no NaN); a large table goes without.
        to_json = getattr(value, "to_json", None)
        if type(value).__name__ == "DataFrame" and callable(to_json) and value.size <= 100000:
            try:
                split = json.loads(to_json(orient="split", date_format="iso"))
                rows = split["data"]
                data[_DATA] = {str(c): [r[i] for r in rows] for i, c in enumerate(split["columns"])}
            except Exception:
                pass
    try:
        data["text/plain"] = repr(value)
    except Exception as e:
        data["text/plain"] = "<unprintable %s: %s>" % (type(value).__name__, e)
    return data


def display(*objs):
    _flush()
    for obj in objs:
        _send({"type": "result", "data": _bundle(obj), "is_main_result": False})


_ns["display"] = display


def _figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        data = {"image/png": base64.b64encode(buf.getvalue()).decode(), "text/plain": repr(fig)}
        chart = _chart_of(fig)
        if chart is not None:
            data[_CHART] = chart
        _send({"type": "result", "is_main_result": False, "data": data})
    plt.close("all")


def _run(cell_id, code):
    global _in_cell
    name = "<cell-%d>" % cell_id
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        _in_cell = True
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        for node, mode in ((tree, "exec"), (last, "eval")):
            if node is None:
                continue
            compiled = compile(node, name, mode, flags=flags)
            value = eval(compiled, _ns)
            if compiled.co_flags & 0x80:  # CO_COROUTINE: the cell used top-level await
                value = _loop.run_until_complete(value)
        _in_cell = False
        _flush()
        _figures()
        if last is not None and value is not None:
            _ns["_"] = value
            _send({"type": "result", "data": _bundle(value), "is_main_result": True})
        return None
    except BaseException as e:
        _in_cell = False
        _flush()
        tb = e.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(e), e, tb))
        try:
            _figures()
        except Exception:
            pass
        return {"name": type(e).__name__, "value": str(e), "traceback": text}


_send({"type": "ready", "version": sys.version.split()[0]})
def _restore_env(saved):
    """Undoes a cell's own variables (os.environ as it was before them)."""
    for name, value in saved.items():
        try:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        except Exception:
            pass


for _line in _requests:
    _req = json.loads(_line)
    _env = _req.get("env") or {}
    _saved = {name: os.environ.get(name) for name in _env}
    try:
        os.environ.update(_env)
        _error = _run(_req["id"], _req["code"])
    except Exception as e:  # an environment the OS refuses: the cell's error, not the driver's
        _error = {"name": type(e).__name__, "value": str(e), "traceback": ""}
    finally:
        _restore_env(_saved)
    _flush()
    os.write(2, _marker + b"sync %d\n" % _req["id"])
    _send({"type": "done", "id": _req["id"], "error": _error})
)DRIVER";

const std::string_view kNodeDriver = R"DRIVER(
"use strict";
{  // A block: the driver's own names (fs, vm, ...) stay out of the cells' global scope.
const fs = require("fs");
const util = require("util");
const vm = require("vm");
const readline = require("readline");
let marker = null;  // "\x1e<token>:", from the first line on stdin
globalThis.require = require;
// A TypeScript context (argv "typescript"): each cell's types are stripped before it runs, by
// the TypeScript compiler found first (a project's, a global one, Debian's node-typescript).
// Loaded with the first cell, so that a context without one still starts, and says why.
const typescript = process.argv.includes("typescript");
// Its imports become require calls (CommonJS), which write `exports`: a cell's own.
if (typescript) {
  globalThis.exports = {};
  globalThis.module = { exports: globalThis.exports };
}
let ts = null;
function compiler() {
  if (ts !== null) return ts;
  for (const where of ["typescript", "/usr/share/nodejs/typescript", "/usr/lib/node_modules/typescript",
                       "/usr/local/lib/node_modules/typescript"]) {
    try { ts = require(where); return ts; } catch (e) { /* the next */ }
  }
  const e = new Error("no TypeScript compiler in this sandbox: install the typescript package " +
                      "(npm i -g typescript, or Debian's node-typescript) in its template");
  e.name = "TypeScriptUnavailable";
  throw e;
}
function stripTypes(code, id) {
  const t = compiler();
  const out = t.transpileModule(code, {
    compilerOptions: { target: t.ScriptTarget.ES2022, module: t.ModuleKind.CommonJS,
                       esModuleInterop: true, isolatedModules: true },
    fileName: `cell-${id}.ts`, reportDiagnostics: true });
  const problems = (out.diagnostics || []).filter((d) => d.category === t.DiagnosticCategory.Error);
  if (problems.length > 0) {
    const d = problems[0];
    const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
    const e = new SyntaxError(t.flattenDiagnosticMessageText(d.messageText, "\n") +
                              (where ? ` (line ${where.line + 1}, column ${where.character + 1})` : ""));
    e.stack = `SyntaxError: ${e.message}\n    at <cell-${id}>`;
    throw e;
  }
  return out.outputText;
}
function writeAll(fd, text) {
  const data = Buffer.from(text);
  for (let off = 0; off < data.length;) off += fs.writeSync(fd, data, off);
}
function send(msg) { writeAll(1, marker + JSON.stringify(msg) + "\n"); }
function bundle(value) {
  const data = { "text/plain": util.inspect(value) };
  if (value && typeof value === "object" && typeof value.toHTML === "function") {
    try { data["text/html"] = String(value.toHTML()); } catch (e) { /* plain text only */ }
  }
  return data;
}
globalThis.display = (...values) => {
  for (const v of values) send({ type: "result", data: bundle(v), is_main_result: false });
};
// A cell that uses top-level await runs as the REPL runs it: rewritten into an async function
// whose declarations stay global and which returns the completion value. Null: no await.
let rewrite = null;
try { rewrite = require("internal/repl/await").processTopLevelAwait; } catch (e) { /* none */ }
function topLevelAwait(code) {
  if (rewrite === null || !code.includes("await")) return null;
  try { new vm.Script(code); return null; } catch (e) { if (!(e instanceof SyntaxError)) throw e; }
  return rewrite(code);
}
// Outside a cell SIGINT is ignored; inside one, breakOnSigint turns it into an exception.
process.on("SIGINT", () => {});
// A cell's own variables, set for it and undone after.
function applyEnv(env, saved) {
  for (const [name, value] of Object.entries(env || {})) {
    saved[name] = Object.prototype.hasOwnProperty.call(process.env, name) ? process.env[name] : undefined;
    process.env[name] = value;
  }
}
function restoreEnv(saved) {
  for (const [name, value] of Object.entries(saved)) {
    try {
      if (value === undefined) delete process.env[name]; else process.env[name] = value;
    } catch (e) { /* as it was, as far as the OS lets it be */ }
  }
}
async function run(req) {
  let error = null;
  const saved = {};
  try {
    applyEnv(req.env, saved);
    const options = { filename: `<cell-${req.id}>`, breakOnSigint: true };
    let value;
    const code = typescript ? stripTypes(req.code, req.id) : req.code;
    const awaiting = topLevelAwait(code);
    if (awaiting === null) {
      value = vm.runInThisContext(code, options);
      if (value && typeof value.then === "function") value = await value;
    } else {
      // The rewrite returns {value} only when the cell ends with an expression.
      value = (await vm.runInThisContext(awaiting, options))?.value;
    }
    if (value !== undefined) send({ type: "result", data: bundle(value), is_main_result: true });
  } catch (e) {
    const isError = e instanceof Error;
    error = {
      name: isError ? e.name : typeof e,
      value: isError ? e.message : String(e),
      traceback: isError && e.stack ? e.stack : String(e),
    };
  } finally {
    restoreEnv(saved);
  }
  writeAll(2, marker + "sync " + req.id + "\n");
  send({ type: "done", id: req.id, error });
}
let queue = Promise.resolve();
const lines = readline.createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (marker === null) {
    marker = "\x1e" + line.trim() + ":";
    return;
  }
  const req = JSON.parse(line);
  queue = queue.then(() => run(req));
});
lines.on("close", () => { queue.then(() => process.exit(0)); });
send({ type: "ready", version: process.version });
}
)DRIVER";

}  // namespace sandstream
