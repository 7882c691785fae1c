// Seed 000 "Stream command execution" (TypeScript), run as written: only the import, the way
// the sandbox is obtained and the command (a local stand-in for `npm run build`) changed.
import { Sandbox, parseSSEStream, type ExecEvent } from "sandstream";

const sandbox = await Sandbox.connect(process.env["SANDBOX_ID"]!);

const stream = await sandbox.execStream('echo "> build"; echo "warning: slow" >&2; echo "built in 1s"');

for await (const event of parseSSEStream<ExecEvent>(stream)) {
  switch (event.type) {
    case 'stdout':
      console.log(event.data);
      break;

    case 'stderr':
      console.error(event.data);
      break;

    case 'complete':
      console.log('Exit code:', event.exitCode);
      break;

    case 'error':
      console.error('Failed:', event.error);
      break;
  }
}
