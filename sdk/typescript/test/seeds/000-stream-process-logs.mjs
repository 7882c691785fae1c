// Seed 000 "Stream process logs" (JavaScript); `node server.js` is replaced by a shell
// stand-in that prints the same readiness line.
import { Sandbox, parseSSEStream } from "sandstream";

const sandbox = await Sandbox.connect(globalThis.process.env.SANDBOX_ID);

const process = await sandbox.startProcess('echo "booting"; sleep 0.5; echo "Server listening on :8080"; sleep 600');

const logStream = await sandbox.streamProcessLogs(process.id);

for await (const log of parseSSEStream(logStream)) {
	console.log(log.data);

	if (log.data.includes("Server listening")) {
		console.log("Server is ready");
		break;
	}
}
