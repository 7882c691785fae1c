// Seed 000 "Handle errors" (TypeScript); the build stand-in fails with exit code 2.
import { Sandbox, parseSSEStream, type ExecEvent } from "sandstream";

const sandbox = await Sandbox.connect(process.env["SANDBOX_ID"]!);

const stream = await sandbox.execStream('echo "compiling"; echo "error TS2304" >&2; exit 2');

for await (const event of parseSSEStream<ExecEvent>(stream)) {
  switch (event.type) {
    case 'stdout':
      console.log(event.data);
      break;

    case 'error':
      throw new Error(`Build failed: ${event.error}`);

    case 'complete':
      if (event.exitCode !== 0) {
        throw new Error(`Build failed with exit code ${event.exitCode}`);
      }
      break;
  }
}
