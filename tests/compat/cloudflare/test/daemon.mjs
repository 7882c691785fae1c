// A real sandstreamd for the tests (tests/compat/daemon.mjs), and a sandbox to point a
// SandboxClient at.
import { spawnDaemon } from "../../daemon.mjs";

export const API_KEY = "cf-compat-key";

export async function startDaemon() {
  const { url, stop } = await spawnDaemon({ apiKey: API_KEY, prefix: "cf" });
  return {
    url,
    async createSandbox(body = {}) {
      const r = await fetch(`${url}/v1/sandboxes`, {
        method: "POST",
        headers: { Authorization: `Bearer ${API_KEY}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (r.status !== 201) throw new Error(`create sandbox: ${r.status} ${await r.text()}`);
      return (await r.json()).id;
    },
    stop,
  };
}
