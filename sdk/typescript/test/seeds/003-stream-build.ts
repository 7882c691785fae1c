// Seed 003 "Stream a build" (TypeScript); `pip install --quiet rich` is replaced by a local
// stand-in (no network). The seed quotes the script with JSON.stringify inside `sh -c`, where
// the outer shell expands `$(seq 1 5)` and `$i` before bash runs it (a syntax error on any
// sh -c service); the argv form passes the script to bash untouched.
import { Sandbox } from "sandstream";

// SANDSTREAM_API_KEY is read from the environment.
const sandbox = await Sandbox.create({ template: "code-interpreter" });

try {
  // Clone, install, build — output streams live instead of blocking until exit.
  const script = [
    "set -e",
    "echo '== installing =='; echo 'installed rich'",
    "echo '== building =='",
    "for i in $(seq 1 5); do echo \"step $i/5\"; sleep 1; done",
    "echo '== done =='",
  ].join("; ");

  const exitCode = await sandbox.execStream(["bash", "-lc", script], {
    onStdout: (chunk) => process.stdout.write(chunk),
    onStderr: (chunk) => process.stderr.write(chunk),
    timeoutSeconds: 300,
  });

  console.log(`\nbuild exited with code ${exitCode}`);
  if (exitCode !== 0) process.exit(exitCode);
} finally {
  await sandbox.kill();
}
