// Seed 001 "TypeScript: the same shape, async", as written; `cd /work && npm test` is replaced
// by a local stand-in that writes to stdout and stderr.
import { Sandbox } from "sandstream";

await using sb = await Sandbox.create({ template: "base" });

const exitCode = await sb.execStream('cd /tmp && echo "ok 1 - adds"; echo "deprecation warning" >&2; echo "ok 2 - subtracts"', {
  onStdout: (chunk) => process.stdout.write(chunk),
  onStderr: (chunk) => process.stderr.write(chunk),
});

if (exitCode !== 0) throw new Error("tests failed: " + exitCode);
