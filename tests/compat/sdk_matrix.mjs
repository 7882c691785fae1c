// Records which public methods of the SDKs under test each test calls, for the compatibility
// matrix (docs/compatibility-matrix.md, written by tests/compat/matrix.py). The compat suites'
// `npm test` loads it with `node --import`; it does nothing unless SANDSTREAM_SDK_MATRIX names a
// file and this is the process of a test file (node --test runs each file in a child of its own).
//
// Then the public methods of the packages' sandbox classes (e2b: Sandbox, what its `files`,
// `commands`, `pty` and `git` are, CommandHandle, WatchHandle, Volume; @e2b/code-interpreter: Sandbox;
// @cloudflare/sandbox: SandboxClient and its sub-clients), as the packages' own type declarations
// list them (private, protected and @internal members left out), are wrapped. A call a test makes
// itself is noted against it (calls made inside a wrapped call are the SDK's own and are not),
// and after each test one JSON line, its calls and whether it passed, is appended to the file.
// Classes a package does not export are wrapped when the first instance of them comes back from
// a wrapped call (a sandbox's sub-APIs, a command's handle). A wrapper is a Proxy that passes
// every call through unchanged: arguments, `this`, result, exception.
import { AsyncLocalStorage } from "node:async_hooks";
import { appendFileSync, existsSync, readFileSync, realpathSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const OUT = process.env.SANDSTREAM_SDK_MATRIX;
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

// The generator's key of each SDK, its package, the classes its table starts from, and how to
// reach the unexported classes before a test does (SandboxClient is built by the user with `new`,
// so its sub-clients are found on one built here: it opens no connection until it is called).
const SDKS = [
  { key: "e2b-js", pkg: "e2b", roots: ["Sandbox", "CommandHandle", "WatchHandle", "Volume"] },
  { key: "e2b-code-interpreter-js", pkg: "@e2b/code-interpreter", roots: ["Sandbox"] },
  {
    key: "cloudflare",
    pkg: "@cloudflare/sandbox",
    roots: ["SandboxClient"],
    probe: (m) => new m.SandboxClient({ baseUrl: "http://127.0.0.1:9" }),
  },
];

// Flags of `node --test` that run only some of a file's tests (the child gets them).
const FILTERS = ["--test-name-pattern", "--test-skip-pattern", "--test-only", "--test-shard"];

async function start() {
  const file = path.relative(REPO, realpathSync(process.argv[1])).split(path.sep).join("/");
  const filter = process.execArgv.find((arg) =>
    FILTERS.some((f) => arg === f || arg.startsWith(`${f}=`)),
  );
  const filtered = filter ? `node --test ${filter}` : null;
  const lines = [{ kind: "file", runner: "node", file, filtered }];

  const recorder = new Recorder();
  const require = createRequire(path.join(process.cwd(), "package.json"));
  for (const sdk of SDKS) {
    let entry;
    try {
      entry = require.resolve(sdk.pkg);
    } catch {
      continue; // not a dependency of this suite
    }
    const pkgDir = packageDir(entry, sdk.pkg);
    const pkgJson = JSON.parse(readFileSync(path.join(pkgDir, "package.json"), "utf8"));
    const declared = declaredClasses(pkgDir, pkgJson);
    const module = await import(pathToFileURL(realpathSync(entry)).href);
    const methods = recorder.add(sdk, declared, module);
    lines.unshift({ kind: "inventory", sdk: sdk.key, version: pkgJson.version, methods });
  }
  append(lines);

  const { afterEach, beforeEach } = await import("node:test");
  beforeEach((t) => {
    recorder.current = { test: `${file} > ${t.fullName ?? t.name}`, calls: new Map() };
  });
  afterEach((t) => {
    recorder.finish(file, t.passed === false ? "failed" : "passed");
  });
  // A test still running when the process ends (a crash, a hang cut short) did not pass.
  process.on("exit", () => recorder.finish(file, "failed"));

  function append(records) {
    if (records.length === 0) return;
    appendFileSync(OUT, records.map((r) => `${JSON.stringify(r)}\n`).join(""));
  }
  recorder.append = append;
}

class Recorder {
  constructor() {
    this.current = null; // { test, calls: Map(key -> [sdk, label, returned]) }
    this.inside = new AsyncLocalStorage(); // set inside a wrapped call
    this.protos = new Map(); // a class's prototype -> its table entry (instance methods)
    this.ctors = new Map(); // a class -> its table entry (static methods)
    this.pending = new Map(); // sdk key -> Map(class name -> entry) of classes not yet found
    this.wrapped = new WeakMap(); // object -> Set of its names already wrapped
    this.seen = new WeakSet(); // prototypes already looked through for classes
  }

  // Builds the table entries of one SDK from its declarations, wraps what the module exports;
  // returns the SDK's public methods by label.
  add(sdk, declared, module) {
    const labels = [];
    const pending = new Map();
    this.pending.set(sdk.key, pending);
    const entryOf = (className, label, depth) => {
      const members = flatten(declared, className);
      const methods = (isStatic) => {
        const of = members.filter((m) => m.kind === "method" && m.isStatic === isStatic);
        return new Set(of.map((m) => m.name));
      };
      const entry = {
        sdk: sdk.key,
        label,
        className,
        instance: methods(false),
        statics: methods(true),
        fields: new Map(),
      };
      for (const name of entry.instance) labels.push(`${label}.${name}`);
      for (const name of entry.statics) labels.push(`${label}.${name} (static)`);
      if (depth === 0) {
        for (const m of members) {
          if (m.kind === "field" && !m.isStatic && declared.has(m.type) && m.type !== className) {
            entry.fields.set(m.name, entryOf(m.type, `${label}.${m.name}`, depth + 1));
          }
        }
      }
      return entry;
    };
    for (const root of sdk.roots) {
      if (!declared.has(root)) continue;
      const entry = entryOf(root, root, 0);
      const exported = module[root];
      if (typeof exported === "function") this.bind(entry, exported);
      else pending.set(root, entry);
    }
    if (sdk.probe) {
      try {
        this.discover(sdk.probe(module), sdk.key);
      } catch {
        // its classes are found on the first instance a wrapped call returns, or not at all
      }
    }
    return [...new Set(labels)].sort();
  }

  // Wraps the methods of `entry` on class `ctor` (where each is defined: the class or a base).
  bind(entry, ctor) {
    if (this.ctors.get(ctor) === entry) return;
    this.ctors.set(ctor, entry);
    this.protos.set(ctor.prototype, entry);
    for (const name of entry.statics) this.wrap(ownerOf(ctor, name), name, true);
    for (const name of entry.instance) this.wrap(ownerOf(ctor.prototype, name), name, false);
  }

  wrap(owner, name, isStatic) {
    if (!owner) return;
    const done = this.wrapped.get(owner) ?? new Set();
    this.wrapped.set(owner, done);
    const desc = Object.getOwnPropertyDescriptor(owner, name);
    if (done.has(name) || !desc || typeof desc.value !== "function") return;
    done.add(name);
    const recorder = this;
    const proxy = new Proxy(desc.value, {
      apply(target, thisArg, args) {
        return recorder.call(target, thisArg, args, name, isStatic);
      },
    });
    Object.defineProperty(owner, name, { ...desc, value: proxy });
  }

  call(target, thisArg, args, name, isStatic) {
    if (this.inside.getStore()) return Reflect.apply(target, thisArg, args);
    const entry = this.entryOf(thisArg, name, isStatic);
    if (!entry) return Reflect.apply(target, thisArg, args);
    const label = isStatic ? `${entry.label}.${name} (static)` : `${entry.label}.${name}`;
    const test = this.current;
    const key = `${entry.sdk}\0${label}`;
    if (test && !test.calls.has(key)) test.calls.set(key, [entry.sdk, label, false]);
    const returned = (value) => {
      if (test) test.calls.get(key)[2] = true;
      this.discover(value, entry.sdk);
      return value;
    };
    const result = this.inside.run(true, () => Reflect.apply(target, thisArg, args));
    // A rejection goes on untouched: the promise given back rejects as the original does.
    if (result instanceof Promise) return result.then(returned);
    return returned(result);
  }

  // The entry that lists `name` for a call on `thisArg`: the first of its prototype chain (its
  // class chain for a static call), so a method of a shared base is named after the class used.
  entryOf(thisArg, name, isStatic) {
    if (thisArg === null || thisArg === undefined) return null;
    if (isStatic) {
      for (let c = thisArg; typeof c === "function"; c = Object.getPrototypeOf(c)) {
        const entry = this.ctors.get(c);
        if (entry?.statics.has(name)) return entry;
      }
      return null;
    }
    for (let p = Object.getPrototypeOf(thisArg); p; p = Object.getPrototypeOf(p)) {
      const entry = this.protos.get(p);
      if (entry?.instance.has(name)) return entry;
    }
    return null;
  }

  // Binds the classes of an object a wrapped call returned: its own (when its class was not
  // exported) and those of its sub-APIs.
  discover(value, sdkKey) {
    if (value === null || typeof value !== "object") return;
    const pending = this.pending.get(sdkKey);
    for (let p = Object.getPrototypeOf(value); p && p !== Object.prototype; p = protoOf(p)) {
      let entry = this.protos.get(p);
      const ctor = p.constructor;
      if (!entry && typeof ctor === "function" && pending?.has(ctor.name)) {
        entry = pending.get(ctor.name);
        pending.delete(ctor.name);
        this.bind(entry, ctor);
      }
      if (!entry || this.seen.has(value)) continue;
      for (const [field, sub] of entry.fields) {
        const got = value[field];
        if (got !== null && typeof got === "object" && typeof got.constructor === "function") {
          this.bind(sub, got.constructor);
        }
      }
    }
    this.seen.add(value);
  }

  finish(file, outcome) {
    const test = this.current;
    this.current = null;
    if (!test || test.calls.size === 0) return;
    const calls = [...test.calls.values()].sort((a, b) => (a.join("\0") < b.join("\0") ? -1 : 1));
    this.append([{ kind: "test", runner: "node", file, test: test.test, outcome, calls }]);
  }
}

const protoOf = Object.getPrototypeOf;

// Where `name` is an own property along `obj`'s prototype chain.
function ownerOf(obj, name) {
  for (let o = obj; o && o !== Object.prototype && o !== Function.prototype; o = protoOf(o)) {
    if (Object.prototype.hasOwnProperty.call(o, name)) return o;
  }
  return null;
}

function packageDir(entry, name) {
  for (let dir = path.dirname(entry); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const file = path.join(dir, "package.json");
    if (existsSync(file) && JSON.parse(readFileSync(file, "utf8")).name === name) return dir;
  }
  throw new Error(`no package.json of ${name} above ${entry}`);
}

// --- the packages' type declarations --------------------------------------------------------

// Map(class name -> { base, members: [{ name, kind: "method" | "field", isStatic, type }] }) of
// the classes the package's declaration files declare (its `types` and the files they import).
function declaredClasses(pkgDir, pkgJson) {
  const types = pkgJson.types ?? pkgJson.typings ?? pkgJson.exports?.["."]?.types;
  const classes = new Map();
  if (!types) return classes;
  const queue = [path.resolve(pkgDir, types)];
  const read = new Set();
  while (queue.length) {
    const file = queue.shift();
    if (read.has(file) || !existsSync(file)) continue;
    read.add(file);
    const text = readFileSync(file, "utf8");
    for (const [name, cls] of parseClasses(text)) if (!classes.has(name)) classes.set(name, cls);
    for (const m of text.matchAll(/\bfrom\s+["'](\.\.?\/[^"']+)["']/g)) {
      const spec = m[1].replace(/\.m?js$/, "");
      for (const ext of [".d.ts", ".d.mts"]) {
        queue.push(path.resolve(path.dirname(file), spec + ext));
      }
    }
  }
  return classes;
}

// Members of a class with those of its declared bases (a subclass's declaration wins).
function flatten(declared, className, seen = new Set()) {
  const cls = declared.get(className);
  if (!cls || seen.has(className)) return [];
  seen.add(className);
  const own = cls.members;
  const names = new Set(own.map((m) => `${m.isStatic}:${m.name}`));
  const inherited = cls.base ? flatten(declared, cls.base, seen) : [];
  return [...own, ...inherited.filter((m) => !names.has(`${m.isStatic}:${m.name}`))];
}

function parseClasses(text) {
  const classes = new Map();
  const head = /^(?:export\s+)?declare\s+(?:abstract\s+)?class\s+([\w$]+)/gm;
  for (const m of text.matchAll(head)) {
    const open = text.indexOf("{", m.index);
    if (open < 0) continue;
    const header = text.slice(m.index, open);
    const base = /\bextends\s+([\w$]+)/.exec(header)?.[1] ?? null;
    classes.set(m[1], { base, members: parseBody(text, open + 1) });
  }
  return classes;
}

// The members of a class body starting at `i` (just after its `{`): statements ended by `;` at
// the body's own depth, each with the doc comment just before it.
function parseBody(text, i) {
  const members = [];
  let depth = 0;
  let statement = "";
  let doc = "";
  while (i < text.length) {
    const c = text[i];
    if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      const stop = end < 0 ? text.length : end + 2;
      if (depth === 0 && statement.trim() === "") doc = text.slice(i, stop);
      i = stop;
      continue;
    }
    if (c === "/" && text[i + 1] === "/") {
      const end = text.indexOf("\n", i);
      i = end < 0 ? text.length : end;
      continue;
    }
    if (c === '"' || c === "'" || c === "`") {
      let j = i + 1;
      while (j < text.length && text[j] !== c) j += text[j] === "\\" ? 2 : 1;
      statement += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    if (c === "{" || c === "(" || c === "[") depth += 1;
    if (c === "}" || c === ")" || c === "]") {
      if (depth === 0) break; // the class's closing brace
      depth -= 1;
    }
    if (c === ";" && depth === 0) {
      const member = parseMember(statement, doc);
      if (member) members.push(member);
      statement = "";
      doc = "";
    } else {
      statement += c;
    }
    i += 1;
  }
  return members;
}

// modifiers, `get`/`set`, the name, `?`/`!`, then what follows: `(` or `<` a method, `:` a field.
const MODIFIERS = [
  "public", "private", "protected", "static", "readonly", "abstract", "declare", "override",
  "async", "accessor",
].join("|");
const MEMBER = new RegExp(
  `^((?:(?:${MODIFIERS})\\s+)*)(?:(get|set)\\s+(?=[\\w$]))?([\\w$]+)(\\?|!)?\\s*([(<:]|$)`,
);

function parseMember(statement, doc) {
  const s = statement.trim();
  const m = MEMBER.exec(s);
  if (!m) return null;
  const [, modifiers, accessor, name, , next] = m;
  if (/\b(private|protected)\b/.test(modifiers) || /@internal\b|@hidden\b/.test(doc)) return null;
  if (name === "constructor" || name.startsWith("_") || accessor) return null;
  const isStatic = /\bstatic\b/.test(modifiers);
  if (next === "(" || next === "<") return { name, kind: "method", isStatic };
  const type = /^[^:]*:\s*([\w$]+)\s*$/.exec(s)?.[1] ?? null;
  return { name, kind: "field", isStatic, type };
}

// Last: the classes above must be initialized before it runs.
if (OUT && process.env.NODE_TEST_CONTEXT && process.argv[1]) {
  await start();
}
