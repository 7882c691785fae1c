// Fails when the modules under src/ import each other in a cycle, type-only imports included
// (a type cycle is a design cycle even when the compiled JavaScript has none). Reads the
// imports with the TypeScript compiler's parser; prints each cycle and exits 1.
// Usage: node scripts/check-cycles.mjs [SRC_DIR]

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const here = path.dirname(fileURLToPath(import.meta.url));
const srcDir = path.resolve(process.argv[2] ?? path.join(here, "..", "src"));

/** The modules of src/ that `file` imports or re-exports, as paths relative to src/. */
function importsOf(file) {
  const text = fs.readFileSync(path.join(srcDir, file), "utf8");
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const found = new Set();
  for (const statement of source.statements) {
    const specifier =
      (ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement)) && statement.moduleSpecifier;
    if (!specifier || !ts.isStringLiteral(specifier) || !specifier.text.startsWith(".")) continue;
    const target = path.normalize(path.join(path.dirname(file), specifier.text.replace(/\.js$/, ".ts")));
    found.add(target);
  }
  return [...found].sort();
}

const files = fs
  .readdirSync(srcDir, { recursive: true })
  .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
  .map((f) => path.normalize(f))
  .sort();
const graph = new Map(files.map((f) => [f, importsOf(f)]));

// Depth-first search; a back edge closes a cycle, reported once per set of modules.
const cycles = new Map();
const state = new Map(); // file -> "open" | "done"
const stack = [];
function visit(file) {
  state.set(file, "open");
  stack.push(file);
  for (const next of graph.get(file) ?? []) {
    if (!graph.has(next)) continue;
    if (state.get(next) === "open") {
      const cycle = [...stack.slice(stack.indexOf(next)), next];
      cycles.set([...new Set(cycle)].sort().join(","), cycle);
    } else if (!state.has(next)) {
      visit(next);
    }
  }
  stack.pop();
  state.set(file, "done");
}
for (const file of files) if (!state.has(file)) visit(file);

if (cycles.size > 0) {
  for (const cycle of cycles.values()) console.error(`import cycle: ${cycle.join(" -> ")}`);
  process.exit(1);
}
console.log(`check-cycles: ${files.length} modules under ${path.relative(process.cwd(), srcDir) || "."}, no import cycle`);
