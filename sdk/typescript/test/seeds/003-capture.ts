// Seed 003 "Capturing while streaming" (TypeScript); `python -u long_task.py` is replaced by a
// shell loop, and the sandbox around the snippet is created and killed here.
import { Sandbox } from "sandstream";

const sandbox = await Sandbox.create();
try {
  const buf: string[] = [];
  const exitCode = await sandbox.execStream("for i in 1 2 3; do echo \"task $i\"; sleep 0.2; done", {
    onStdout: (c) => {
      buf.push(c);
      process.stdout.write(c);
    },
  });
  const fullOutput = buf.join("");
  console.log(JSON.stringify({ exitCode, fullOutput }));
} finally {
  await sandbox.kill();
}
