// Builds the console into dist/: app.js bundled with xterm.js by esbuild, the page and the
// stylesheets copied beside it. No CDN: everything the page loads comes from sandstreamd.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, "dist");
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });

await build({
  entryPoints: [join(here, "src/app.js")],
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  sourcemap: true,
  outfile: join(dist, "app.js"),
  logLevel: "warning",
});
copyFileSync(join(here, "src/index.html"), join(dist, "index.html"));
copyFileSync(join(here, "src/app.css"), join(dist, "app.css"));
copyFileSync(join(here, "node_modules/@xterm/xterm/css/xterm.css"), join(dist, "xterm.css"));
console.log("built", dist);
