// Seed 000 "Stream to client" (TypeScript): the Worker-style handler as written; the sandbox
// comes from Sandbox.connect and the command is a local stand-in for `npm run build`.
import { Sandbox } from "sandstream";

interface Env {
  SANDBOX_ID: string;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const sandbox = await Sandbox.connect(env.SANDBOX_ID);

    const stream = await sandbox.execStream('echo "> build"; sleep 1; echo "built"');

    return new Response(stream, {
      headers: {
        'Content-Type': 'text/event-stream',
        'Cache-Control': 'no-cache'
      }
    });
  }
};
