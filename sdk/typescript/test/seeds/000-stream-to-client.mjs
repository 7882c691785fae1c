// Seed 000 "Stream to client" (JavaScript): the Worker-style handler as written; the sandbox
// comes from Sandbox.connect and the command is a local stand-in for `npm run build`.
import { Sandbox } from "sandstream";

export default {
	async fetch(request, env) {
		const sandbox = await Sandbox.connect(env.SANDBOX_ID);

		const stream = await sandbox.execStream('echo "> build"; sleep 1; echo "built"');

		return new Response(stream, {
			headers: {
				"Content-Type": "text/event-stream",
				"Cache-Control": "no-cache",
			},
		});
	},
};
