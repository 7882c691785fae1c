// A sandbox's network: the request each form of `network` sends, the `egress` of a sandbox as
// the model reads it, and the daemon's refusal passed on as InvalidRequestError. Egress itself
// needs a host set up for it (tests/integration/test_egress.py builds one in namespaces of its
// own), so the requests for egress here go to a daemon without it, which checks them in full
// and then refuses them.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  ConflictError,
  InvalidRequestError,
  NotFoundError,
  Sandbox,
  type Egress,
  type NetworkOption,
  type NetworkUpdate,
} from "sandstream";

import { API_KEY, startDaemon, type Daemon } from "./helpers.js";

let daemon: Daemon;
let withoutEgress: Daemon;

before(async () => {
  [daemon, withoutEgress] = await Promise.all([startDaemon(), startDaemon(["--egress-pool", "none"])]);
});

after(async () => {
  await Promise.all([daemon?.stop(), withoutEgress?.stop()]);
});

/** A fetch that keeps the body of each sandbox asked for, then asks `answer` or the network. */
function recording(answer?: () => Response): { fetch: typeof fetch; bodies: unknown[] } {
  const bodies: unknown[] = [];
  const recorder: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.pathname === "/v1/sandboxes" && init?.method === "POST") {
      bodies.push(JSON.parse(String(init.body)));
      if (answer) return answer();
    }
    return await fetch(input, init);
  };
  return { fetch: recorder, bodies };
}

const SANDBOX = {
  id: "sb_0123456789abcdef",
  template: "base",
  status: "running",
  created_at: "2025-01-01T00:00:00Z",
  expires_at: null,
  ttl_seconds: 0,
  env: {},
  cwd: "/workspace",
  limits: { memory_mb: 512, pids: 256, cpu_percent: 100, disk_mb: 256, open_files: 1024 },
  metadata: {},
  processes_running: 0,
};

test("the model reads egress, and a held policy makes another sandbox like it", async () => {
  const held: Egress = {
    allow: ["pypi.org", "*.pythonhosted.org", "198.18.0.0/15"],
    deny: ["203.0.113.7"],
    address: "10.200.0.15",
    gateway: "10.200.0.14",
  };
  const canned = recording(
    () => new Response(JSON.stringify({ ...SANDBOX, network: "egress", egress: held }), {
      status: 201,
      headers: { "Content-Type": "application/json" },
    }),
  );
  const sandbox = await Sandbox.create({
    url: "http://127.0.0.1:9",
    apiKey: API_KEY,
    fetch: canned.fetch,
    network: { egress: { allow: ["pypi.org"], deny: ["203.0.113.7"] } },
  });
  assert.equal(sandbox.info.network, "egress");
  assert.deepEqual(sandbox.info.egress, held);
  const again = sandbox.info.egress!;
  await Sandbox.create({ url: "http://127.0.0.1:9", apiKey: API_KEY, fetch: canned.fetch, network: { egress: again } });
  assert.deepEqual(canned.bodies, [
    { network: { egress: { allow: ["pypi.org"], deny: ["203.0.113.7"] } } },
    // Only the rules: the daemon refuses fields of a policy it does not know.
    { network: { egress: { allow: ["pypi.org", "*.pythonhosted.org", "198.18.0.0/15"], deny: ["203.0.113.7"] } } },
  ]);
  const open = recording(
    () => new Response(JSON.stringify({ ...SANDBOX, network: "egress",
                                        egress: { allow: null, deny: [], address: null, gateway: null } }),
                       { status: 201, headers: { "Content-Type": "application/json" } }),
  );
  const opened = await Sandbox.create({ url: "http://127.0.0.1:9", apiKey: API_KEY, fetch: open.fetch, network: "egress" });
  assert.deepEqual(opened.info.egress, { allow: null, deny: [], address: null, gateway: null });
});

test("loopback and none need no egress", async () => {
  const options = { url: daemon.url, apiKey: API_KEY };
  const loopback = await Sandbox.create(options);
  const none = await Sandbox.create({ ...options, network: "none" });
  try {
    assert.equal(loopback.info.network, "loopback");
    assert.equal(loopback.info.egress, null);
    assert.equal(none.info.network, "none");
    assert.equal(none.info.egress, null);
  } finally {
    await Promise.all([loopback.kill(), none.kill()]);
  }
});

test("a daemon without egress refuses it by name, whatever the form", async () => {
  const cases: Array<[NetworkOption, unknown]> = [
    ["egress", "egress"],
    [{ egress: true }, { egress: true }],
    [
      { egress: { allow: ["pypi.org", "*.github.com", "198.18.0.0/15"], deny: ["203.0.113.7"] } },
      { egress: { allow: ["pypi.org", "*.github.com", "198.18.0.0/15"], deny: ["203.0.113.7"] } },
    ],
    [{ egress: { allow: null } }, { egress: { allow: null } }],
    [{ egress: {} }, { egress: {} }],
  ];
  for (const [network, wire] of cases) {
    const { fetch, bodies } = recording();
    await assert.rejects(Sandbox.create({ url: withoutEgress.url, apiKey: API_KEY, fetch, network }), (error) => {
      assert.ok(error instanceof InvalidRequestError);
      assert.equal(error.status, 400);
      assert.match(error.message, /egress_pool/);
      return true;
    });
    assert.deepEqual(bodies, [{ network: wire }]);
  }
  assert.deepEqual(await Sandbox.list({ url: withoutEgress.url, apiKey: API_KEY }), []);
});

test("a bad policy is refused before anything else, naming the rule", async () => {
  const cases: Array<[NetworkOption, RegExp]> = [
    [{ egress: { allow: ["10.0.0.1/8"] } }, /10\.0\.0\.0\/8/],
    [{ egress: { deny: ["bad name!"] } }, /bad name!/],
    ["wan" as NetworkOption, /network/],
  ];
  for (const [network, words] of cases) {
    await assert.rejects(
      Sandbox.create({ url: withoutEgress.url, apiKey: API_KEY, network }),
      (error) => error instanceof InvalidRequestError && words.test(error.message),
    );
  }
});

test("updateNetwork sends each form as the daemon's network and keeps the answer", async () => {
  const held: Egress = { allow: ["files.pypi.org"], deny: ["pypi.org"], address: "10.200.0.15", gateway: "10.200.0.14" };
  const sent: Array<[string, string, unknown]> = [];
  const canned: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    sent.push([init?.method ?? "GET", url.pathname, init?.body === undefined ? undefined : JSON.parse(String(init.body))]);
    return new Response(JSON.stringify({ ...SANDBOX, network: "egress", egress: held }), {
      status: init?.method === "POST" ? 201 : 200,
      headers: { "Content-Type": "application/json" },
    });
  };
  const sandbox = await Sandbox.create({ url: "http://127.0.0.1:9", apiKey: API_KEY, fetch: canned, network: "egress" });
  const path = `/v1/sandboxes/${SANDBOX.id}/network`;
  const cases: Array<[NetworkUpdate, unknown]> = [
    [{ allow: ["files.pypi.org"], deny: ["pypi.org"] }, { egress: { allow: ["files.pypi.org"], deny: ["pypi.org"] } }],
    [{ allow: [] }, { egress: { allow: [] } }],
    [{ allow: null }, { egress: { allow: null } }],
    ["egress", "egress"],
    [{ egress: true }, { egress: true }],
    [{ egress: { deny: ["evil.test"] } }, { egress: { deny: ["evil.test"] } }],
    // What the daemon says of a sandbox goes back as its rules only.
    [held, { egress: { allow: ["files.pypi.org"], deny: ["pypi.org"] } }],
  ];
  for (const [network, wire] of cases) {
    sent.length = 0;
    const info = await sandbox.updateNetwork(network);
    assert.deepEqual(sent, [["PATCH", path, wire]]);
    assert.equal(info, sandbox.info);
    assert.deepEqual(info.egress, held);
  }
});

test("updateNetwork of a sandbox without egress is a conflict; a bad rule is named first", async () => {
  // Changing the rules of a sandbox with egress needs a host set up for it:
  // tests/integration/test_egress.py.
  const sandbox = await Sandbox.create({ url: withoutEgress.url, apiKey: API_KEY });
  try {
    // "loopback" is no NetworkUpdate; sent anyway, the daemon refuses it.
    const forms: NetworkUpdate[] = ["egress", { allow: ["pypi.org"] }, { allow: [] }, "loopback" as unknown as NetworkUpdate];
    for (const network of forms) {
      await assert.rejects(sandbox.updateNetwork(network), (error) => {
        assert.ok(error instanceof ConflictError, String(error));
        assert.equal(error.status, 409);
        return true;
      });
    }
    await assert.rejects(
      sandbox.updateNetwork({ allow: ["10.0.0.1/8"] }),
      (error) => error instanceof InvalidRequestError && /10\.0\.0\.0\/8/.test(error.message),
    );
    const info = await sandbox.refresh();
    assert.equal(info.network, "loopback");
    assert.equal(info.egress, null);
  } finally {
    await sandbox.kill();
  }
  await assert.rejects(sandbox.updateNetwork("egress"), (error) => error instanceof NotFoundError);
});
