// Example: a Node `http` server (no framework) that runs a command in a sandbox and pipes
// execStream's SSE straight into its own response, chunk by chunk, plus a page that shows the
// output as it arrives. Run: SANDSTREAM_URL=... SANDSTREAM_API_KEY=... node server.mjs

import { readFile } from "node:fs/promises";
import http from "node:http";

import { Sandbox } from "sandstream";

const command = process.env.STREAM_CMD ?? "for i in 1 2 3 4 5; do echo \"step $i/5\"; sleep 1; done";
const page = await readFile(new URL("./index.html", import.meta.url));
const sandbox = await Sandbox.create({ template: "base" });

// The seed's Worker handler: execStream's stream becomes the body. The page names its build
// (idempotencyKey), so an EventSource reconnecting with Last-Event-ID resumes the same run
// instead of starting the command again.
async function build(buildId, lastEventId) {
  const stream = await sandbox.execStream(command, { idempotencyKey: buildId, lastEventId });
  return new Response(stream, {
    headers: {
      "Content-Type": "text/event-stream",
      "Cache-Control": "no-cache",
    },
  });
}

// Serves a web Response through Node's http: each body chunk is written as soon as it is read.
async function send(response, res) {
  res.writeHead(response.status, Object.fromEntries(response.headers));
  res.flushHeaders();
  res.socket?.setNoDelay(true);
  const reader = response.body.getReader();
  res.on("close", () => reader.cancel().catch(() => {}));
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      res.write(value);
    }
  } catch (error) {
    // The sandbox stream failed without an exit (StreamInterruptedError): tell the page.
    const data = JSON.stringify({ type: "error", error: String(error?.message ?? error), code: "stream_lost" });
    res.write(`event: error\ndata: ${data}\n\n`);
  }
  res.end();
}

const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url ?? "/", "http://localhost");
    const buildId = url.searchParams.get("id") ?? "";
    if (req.method === "GET" && url.pathname === "/") {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" }).end(page);
    } else if (req.method === "GET" && url.pathname === "/build" && /^[A-Za-z0-9-]{8,64}$/.test(buildId)) {
      const lastEventId = req.headers["last-event-id"];
      await send(await build(`build-${buildId}`, typeof lastEventId === "string" ? lastEventId : undefined), res);
    } else {
      res.writeHead(404, { "Content-Type": "text/plain" }).end("not found\n");
    }
  } catch (error) {
    if (!res.headersSent) res.writeHead(502, { "Content-Type": "text/plain" });
    res.end(`sandstream: ${error?.message ?? error}\n`);
  }
});

async function shutdown() {
  server.close();
  server.closeAllConnections();
  await sandbox.kill().catch(() => {});
  process.exit(0);
}
process.on("SIGINT", shutdown);
process.on("SIGTERM", shutdown);

server.listen(Number(process.env.PORT ?? 3000), process.env.HOST ?? "127.0.0.1", () => {
  const { address, port } = server.address();
  console.log(`stream-server listening on http://${address}:${port}`);
});
