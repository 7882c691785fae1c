"""Many nodes behind gateways, on one machine: etcd (Debian's etcd-server), three nodes
registering there, two stateless gateways routing by the node a sandbox id names.

All of it in network namespaces the test makes: a "lab" namespace with a bridge, etcd and the
gateways (on its loopback), and a namespace per node, its veth on the lab's bridge
(10.251.0.0/24). The tests themselves run in the lab namespace (their thread enters it), so
nothing here touches this machine's own network. The nodes run real sandboxes.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

import images
from helpers import API_KEY, BIN, Daemon, assert_error, run, wait_until
from registry import Registry
from sse import SseEvent, assert_contiguous, chunks_of, iter_sse, read_events

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
# Forks with memory need CRIU (scripts/install-criu).
CRIU = Path("/var/cache/sandstream/criu-4.2.1/sbin/criu")


LAB_NET = "10.251.0"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr}"


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class Lab:
    """The namespaces: the lab's (bridge, etcd, gateways, the tests) and one per node."""

    def __init__(self) -> None:
        self.prefix = f"ssg{secrets.token_hex(3)}"
        self.lab = f"{self.prefix}lab"
        self.namespaces: list[str] = []
        self.addresses: dict[str, str] = {}
        self._home: int | None = None

    def up(self) -> None:
        sh("ip", "netns", "add", self.lab)
        self.namespaces.append(self.lab)
        sh("ip", "-n", self.lab, "link", "set", "lo", "up")
        sh("ip", "-n", self.lab, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.lab, "addr", "add", f"{LAB_NET}.1/24", "dev", "br0")
        sh("ip", "-n", self.lab, "link", "set", "br0", "up")

    def add_node(self, node_id: str) -> str:
        """A namespace for `node_id`, on the bridge; its address."""
        ns = f"{self.prefix}{node_id}"
        address = f"{LAB_NET}.{10 + len(self.addresses)}"
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
           f"v{node_id}", "netns", self.lab)
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.lab, "link", "set", f"v{node_id}", "master", "br0", "up")
        self.addresses[node_id] = address
        return address

    def wrapper(self, node_id: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.prefix}{node_id}", "--"]

    def link(self, node_id: str, up: bool) -> None:
        """Plugs the node's cable in or pulls it out (its side of the veth)."""
        sh("ip", "-n", f"{self.prefix}{node_id}", "link", "set", "eth0", "up" if up else "down")

    def enter(self) -> None:
        """This thread, and what it starts from now on, into the lab's namespace."""
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.lab}", os.O_RDONLY)
        try:
            setns(target)
        finally:
            os.close(target)

    def leave(self) -> None:
        if self._home is not None:
            setns(self._home)
            os.close(self._home)
            self._home = None

    def down(self) -> None:
        self.leave()
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Etcd:
    """One etcd member on the lab's loopback and bridge, its data in `data_dir` (kept across
    restarts)."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.bridge_url = f"http://{LAB_NET}.1:{self.client_port}"  # the nodes'
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not Path(ETCD).exists():
            pytest.fail("etcd not found: scripts/install-deps test installs etcd-server")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "test", "--data-dir", str(self.data_dir),
             "--listen-client-urls", f"{self.url},{self.bridge_url}",
             "--advertise-client-urls", self.bridge_url,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-cluster", f"test=http://127.0.0.1:{self.peer_port}"],
            stdout=log, stderr=log, start_new_session=True)
        log.close()

        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
            return False

        if not wait_until(healthy, 20, 0.1):
            self.stop()
            pytest.fail(f"etcd did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Cluster:
    """etcd, nodes and gateways in `lab` (entered); every process stopped at the end."""

    def __init__(self, root: Path, lab: Lab) -> None:
        self.root = root
        self.lab = lab
        self.etcd = Etcd(root / "etcd", root / "etcd.log")
        self.nodes: dict[str, Daemon] = {}
        self.gateways: list[Daemon] = []
        self.registry: Registry | None = None

    def start_registry(self) -> None:
        """A registry on the lab's bridge holding tiny:1, which the nodes may pull from."""
        self.registry = Registry(self.root / "registry", self.root / "registry-storage",
                                 address=f"{LAB_NET}.1")
        self.registry.push("tiny", "1", images.tiny_image())

    def start_node(self, node_id: str) -> Daemon:
        """A node in a namespace of its own, on the lab's bridge."""
        address = self.lab.add_node(node_id)
        pulls = ["--registry-plain-http", self.registry.host] if self.registry else []
        d = Daemon(self.root / node_id,
                   ["--node-id", node_id, "--etcd", self.etcd.bridge_url, *pulls],
                   {}, self.root / f"{node_id}.log", wrapper=self.lab.wrapper(node_id),
                   listen=f"{address}:0")
        d.start()
        self.nodes[node_id] = d
        return d

    def start_gateway(self, *args: str) -> Daemon:
        n = len(self.gateways)
        d = Daemon(self.root / f"gateway{n}", ["--role", "gateway",
                                               *(args or ("--etcd", self.etcd.url))],
                   {}, self.root / f"gateway{n}.log")
        d.start()
        self.gateways.append(d)
        return d

    def nodes_seen(self, gateway: Daemon) -> dict[str, dict[str, Any]]:
        body = httpx.get(f"{gateway.url}/healthz", timeout=5).json()
        assert body["role"] == "gateway", body
        return {n["id"]: n for n in body["nodes"]}

    def wait_seen(self, gateway: Daemon, up: set[str], down: frozenset[str] = frozenset(),
                  within: float = 20) -> None:
        def ok() -> bool:
            seen = self.nodes_seen(gateway)
            return (all(seen.get(n, {}).get("up") for n in up)
                    and all(not seen[n]["up"] for n in down if n in seen))
        assert wait_until(ok, within, 0.1), self.nodes_seen(gateway)

    def stop(self) -> None:
        for d in [*self.gateways, *self.nodes.values()]:
            if d.alive():
                with contextlib.suppress(AssertionError):
                    d.stop(timeout=15)
        for d in self.nodes.values():
            d.stop_leftover_lxcfs()
        self.etcd.stop()
        if self.registry:
            self.registry.close()


def client_of(d: Daemon, **kw: Any) -> httpx.Client:
    return httpx.Client(base_url=d.url, headers={"Authorization": f"Bearer {API_KEY}"},
                        **{"timeout": 30, **kw})


def node_of(sandbox_id: str) -> str:
    assert sandbox_id.startswith("sb_") and sandbox_id.count("_") == 2, sandbox_id
    return sandbox_id.split("_")[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    lab = Lab()
    try:
        lab.up()
        lab.enter()
        c = Cluster(tmp_path_factory.mktemp("cluster"), lab)
        try:
            c.etcd.start()
            c.start_registry()
            for node in ("n1", "n2", "n3"):
                c.start_node(node)
            for _ in range(2):
                g = c.start_gateway()
                c.wait_seen(g, {"n1", "n2", "n3"})
            yield c
        finally:
            c.stop()
    finally:
        lab.down()


def create_on(c: httpx.Client, node: str, made: list[str], tries: int = 40,
              **body: Any) -> str:
    """Creates sandboxes through `c` until one lands on `node`; every one made is in `made`."""
    for _ in range(tries):
        r = c.post("/v1/sandboxes", json=body)
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
        if node_of(made[-1]) == node:
            return made[-1]
    seen = httpx.get(f"{c.base_url}/healthz", timeout=5).json()["nodes"]
    raise AssertionError(f"no sandbox landed on {node} in {tries} creates: {made}; "
                         f"the gateway sees {seen}")


def test_sandboxes_spread_and_every_route_works_through_either_gateway(cluster: Cluster) -> None:
    g1, g2 = (client_of(g) for g in cluster.gateways[:2])
    made = []
    for i in range(9):
        r = (g1 if i % 2 else g2).post("/v1/sandboxes", json={"metadata": {"n": str(i)}})
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
    nodes = {node_of(s) for s in made}
    assert nodes == {"n1", "n2", "n3"}, made
    try:
        listed = g1.get("/v1/sandboxes").json()
        assert set(made) <= {s["id"] for s in listed["sandboxes"]}
        assert listed["unreachable_nodes"] == []
        # E2B's list, in its own shape, merged the same way.
        e2b = httpx.get(f"{cluster.gateways[1].url}/v2/sandboxes", headers={"X-API-KEY": API_KEY},
                        timeout=10)
        assert e2b.status_code == 200, e2b.text
        assert set(made) <= {s["sandboxID"] for s in e2b.json()}
        for sid in made[:3]:
            for g in (g1, g2):
                assert g.get(f"/v1/sandboxes/{sid}").json()["id"] == sid
                out = run(g, sid, cmd="hostname; echo hi")
                assert out["stdout"] == f"{sid}\nhi\n", out
            # Files up through one gateway, down through the other.
            payload = bytes(range(256)) * 4096
            r = g1.put(f"/v1/sandboxes/{sid}/files/content",
                       params={"path": "/workspace/blob"}, content=payload)
            assert r.status_code in (200, 201, 204), r.text
            r = g2.get(f"/v1/sandboxes/{sid}/files/content", params={"path": "/workspace/blob"})
            assert r.status_code == 200 and r.content == payload
            # A stream arrives as it is written, not at the end.
            with g2.stream("POST", f"/v1/sandboxes/{sid}/exec/stream",
                           json={"cmd": "echo a; sleep 1; echo b"}) as resp:
                assert resp.status_code == 200
                events = read_events(resp)
            outs = [e for e in events if e.event == "stdout"]
            assert [e.json()["chunk"] for e in outs] == ["a\n", "b\n"]
            assert outs[1].t - outs[0].t > 0.7, "the first chunk waited for the second"
            assert events[-1].event == "exit" and events[-1].json()["exit_code"] == 0
        # Errors come from the node that holds the sandbox, as they would from it directly.
        assert_error(g1.get(f"/v1/sandboxes/{made[0]}/processes/proc_0000000000000000"), 404,
                     "not_found")
        assert_error(httpx.get(f"{cluster.gateways[0].url}/v1/sandboxes/{made[0]}"), 401,
                     "unauthorized")
        assert_error(httpx.get(f"{cluster.gateways[0].url}/v1/sandboxes"), 401, "unauthorized")
        assert_error(httpx.post(f"{cluster.gateways[0].url}/v1/sandboxes", json={}), 401,
                     "unauthorized")
        # An id that names no node is nobody's; one naming a node never seen is not a 404.
        assert_error(g1.get("/v1/sandboxes/sb_0123456789abcdef"), 404, "not_found")
        body = assert_error(g1.get("/v1/sandboxes/sb_n9_0123456789abcdef"), 503,
                            "node_unreachable")
        assert "n9" in body["message"]
        # What each node holds on its own is not changed through a gateway.
        assert_error(g1.delete("/v1/sandboxes"), 501, "not_implemented")
    finally:
        for sid in made:
            g1.delete(f"/v1/sandboxes/{sid}")
    assert not {s["id"] for s in g2.get("/v1/sandboxes").json()["sandboxes"]} & set(made)


class Wire:
    """One client connection, read and written by hand: what a kept-alive client sees."""

    def __init__(self, d: Daemon) -> None:
        host, port = d.url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.rest = b""

    def send(self, method: str, target: str, body: bytes = b"", **headers: str) -> bytes:
        fields = {"Host": "gateway", "Authorization": f"Bearer {API_KEY}",
                  "Content-Length": str(len(body)), **headers}
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(
            f"{k.replace('_', '-')}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        return head.encode() + body

    def _fill(self) -> bool:
        got = self.sock.recv(65536)
        self.rest += got
        return bool(got)

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The next response: its status, fields (lower-case names) and body (by its length)."""
        while b"\r\n\r\n" not in self.rest:
            assert self._fill(), f"the connection ended before a response: {self.rest!r}"
        head, self.rest = self.rest.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        fields = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        length = int(fields.get("content-length", "0"))
        while len(self.rest) < length:
            assert self._fill(), "the connection ended inside a body"
        body, self.rest = self.rest[:length], self.rest[length:]
        return int(lines[0].split()[1]), fields, body

    def closed(self) -> bool:
        """Whether the gateway ends the connection (within the socket's timeout), once the
        rest of what it sent is read."""
        try:
            while self._fill():
                pass
            return True
        except TimeoutError:
            return False


def test_a_gateway_keeps_a_clients_connection_between_exchanges(cluster: Cluster) -> None:
    g = client_of(cluster.gateways[0])
    sid = g.post("/v1/sandboxes", json={}).json()["id"]
    try:
        w = Wire(cluster.gateways[0])
        # One after another on one connection, each answered whole with its length.
        for _ in range(3):
            w.sock.sendall(w.send("GET", f"/v1/sandboxes/{sid}"))
            status, fields, body = w.answer()
            assert status == 200 and json.loads(body)["id"] == sid
            assert fields.get("connection", "").lower() != "close", fields
        # Pipelined: an exec with its body and a read, in one write; answers in order.
        exec_body = json.dumps({"cmd": "printf one"}).encode()
        w.sock.sendall(w.send("POST", f"/v1/sandboxes/{sid}/exec", exec_body,
                              Content_Type="application/json") +
                       w.send("GET", f"/v1/sandboxes/{sid}"))
        status, _, body = w.answer()
        assert status == 200 and json.loads(body)["stdout"] == "one", body
        status, _, body = w.answer()
        assert status == 200 and json.loads(body)["id"] == sid
        # A body the node refuses (not JSON) is answered, and the connection still serves.
        w.sock.sendall(w.send("POST", f"/v1/sandboxes/{sid}/exec", b"{nope",
                              Content_Type="application/json"))
        status, _, body = w.answer()
        assert status == 400 and json.loads(body)["error"]["code"] == "invalid_json", body
        # An answer in chunks (a stream) ends its connection: its end is the node's to say.
        w.sock.sendall(w.send("POST", f"/v1/sandboxes/{sid}/exec/stream", exec_body,
                              Content_Type="application/json"))
        while b"event: exit" not in w.rest:
            assert w._fill(), w.rest
        head = w.rest.split(b"\r\n\r\n", 1)[0].lower()
        assert b"connection: close" in head and b"transfer-encoding: chunked" in head, head
        assert w.closed()
        w.sock.close()
        # Asked to close, it closes after the answer.
        w = Wire(cluster.gateways[0])
        w.sock.sendall(w.send("GET", f"/v1/sandboxes/{sid}", Connection="close"))
        status, fields, _ = w.answer()
        assert status == 200 and fields["connection"].lower() == "close"
        assert w.closed()
        w.sock.close()
        # A client that leaves while its answer is made does not hold the gateway.
        before = metric(cluster.gateways[0], "sandstream_gateway_connections_open")
        w = Wire(cluster.gateways[0])
        w.sock.sendall(w.send("POST", f"/v1/sandboxes/{sid}/exec",
                              json.dumps({"cmd": "sleep 20"}).encode(),
                              Content_Type="application/json"))
        time.sleep(0.5)
        assert metric(cluster.gateways[0], "sandstream_gateway_connections_open") >= before + 1
        # The client's end (a FIN, as a close sends) is seen, and the gateway closes its side
        # well before the node's answer: this connection's own end, which no other connection
        # of the shared cluster (the gauge counts them all) can hide or fake.
        w.sock.shutdown(socket.SHUT_WR)
        w.sock.settimeout(8)
        started = time.monotonic()
        assert w.closed() and time.monotonic() - started < 8, w.rest
        w.sock.close()
        # The SDK's client keeps one connection for many calls.
        before = metric(cluster.gateways[0], "sandstream_gateway_connections_open")
        with client_of(cluster.gateways[0]) as kept:
            for _ in range(20):
                assert run(kept, sid, cmd="true")["exit_code"] == 0
            assert metric(cluster.gateways[0], "sandstream_gateway_connections_open") <= before + 2
    finally:
        g.delete(f"/v1/sandboxes/{sid}")


def metric(d: Daemon, name: str) -> float:
    text = httpx.get(f"{d.url}/metrics", headers=bearer(API_KEY), timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in {text}")


def test_the_sdk_and_the_cli_point_at_a_gateway_as_at_a_node(cluster: Cluster) -> None:
    from sandstream import Sandbox

    gw = cluster.gateways[1]
    out: list[str] = []
    err: list[str] = []
    with Sandbox.create(base_url=gw.url, api_key=API_KEY) as sb:
        assert node_of(sb.id) in cluster.nodes
        code = sb.exec_stream("for i in 1 2 3; do echo $i; sleep 0.05; done; echo oops >&2",
                              on_stdout=out.append, on_stderr=err.append)
        assert code == 0 and "".join(out) == "1\n2\n3\n" and "".join(err) == "oops\n"
        sb.files.write("/workspace/note.txt", "through the gateway")
        assert sb.files.read_text("/workspace/note.txt") == "through the gateway"
    cli = os.environ.get("SANDSTREAM_CLI", str(Path(BIN).with_name("sandstream")))
    env = {**os.environ, "SANDSTREAM_URL": gw.url, "SANDSTREAM_API_KEY": API_KEY}
    r = subprocess.run([cli, "run", "--", "sh", "-c", "echo via-cli; exit 3"], env=env,
                       capture_output=True, timeout=60)
    assert r.returncode == 3 and r.stdout == b"via-cli\n", r


# Run in a process of its own: E2B's SDK keeps its HTTP client's threads for the life of the
# process, in the network namespace they were made in, and the gateways live in the lab's.
E2B_SIGNED_URLS = """
import json, sys
from e2b import Sandbox
boxes, nodes = [], set()
while len(nodes) < 2 and len(boxes) < 12:
    boxes.append(Sandbox.create())
    boxes[-1].files.write("/tmp/mine.txt", boxes[-1].sandbox_id)
    nodes.add(boxes[-1].sandbox_id.split("_")[1])
last = boxes[-1]
json.dump({"ids": [b.sandbox_id for b in boxes],
           "downloads": [b.download_url("/tmp/mine.txt") for b in boxes],
           "upload": last.upload_url("/tmp/up.bin"),
           "expired": last.download_url("/tmp/mine.txt", use_signature_expiration=-10)},
          sys.stdout)
"""


def test_e2bs_signed_file_urls_find_their_sandbox_through_a_gateway(cluster: Cluster) -> None:
    """E2B's download_url and upload_url name no sandbox (a browser sends no header): the
    gateway asks every node which of its sandboxes signed one, and sends it there."""
    gw = cluster.gateways[0]
    env = {**os.environ, "E2B_API_URL": gw.url, "E2B_SANDBOX_URL": gw.url, "E2B_API_KEY": API_KEY}
    for name in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
        env.pop(name, None)
    made = subprocess.run([sys.executable, "-c", E2B_SIGNED_URLS], env=env, capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    urls = json.loads(made.stdout)
    g = client_of(gw)
    try:
        assert len({node_of(sid) for sid in urls["ids"]}) >= 2, urls["ids"]
        bare = httpx.Client(timeout=30)
        for sid, url in zip(urls["ids"], urls["downloads"]):
            r = bare.get(url)
            assert r.status_code == 200 and r.text == sid, r.text
        last = urls["ids"][-1]
        r = bare.post(urls["upload"], files={"file": ("up.bin", b"\x00up\xff")})
        assert r.status_code == 200, r.text
        r = g.get(f"/v1/sandboxes/{last}/files/content", params={"path": "/tmp/up.bin"})
        assert r.status_code == 200 and r.content == b"\x00up\xff", r.text
        # Altered, it matches no sandbox; expired, every node says so: E2B's error shape.
        r = bare.get(urls["downloads"][-1].replace("mine.txt", "up.bin"))
        assert r.status_code == 401 and "matches no sandbox" in r.json()["message"], r.text
        r = bare.get(urls["expired"])
        assert r.status_code == 401 and "expired" in r.json()["message"], r.text
    finally:
        for sid in urls["ids"]:
            g.delete(f"/v1/sandboxes/{sid}")


def test_a_gateway_has_metrics_of_its_own(cluster: Cluster) -> None:
    gw = cluster.gateways[0]
    g = client_of(gw)
    sid = g.post("/v1/sandboxes", json={}).json()["id"]
    try:
        assert run(g, sid, cmd="echo counted")["stdout"] == "counted\n"
        assert_error(httpx.get(f"{gw.url}/metrics", timeout=10), 401, "unauthorized")
        r = g.get("/metrics")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = {}
        for line in r.text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        for node in ("n1", "n2", "n3"):
            assert samples[f'sandstream_gateway_node_up{{node="{node}"}}'] == 1
        assert samples['sandstream_gateway_nodes{state="up"}'] >= 3
        assert samples["sandstream_gateway_membership_available"] == 1
        assert samples['sandstream_gateway_requests_total{route="sandbox"}'] >= 1
        assert samples['sandstream_gateway_requests_total{route="create"}'] >= 1
        assert samples[f'sandstream_gateway_placements_total{{node="{node_of(sid)}"}}'] >= 1
        assert samples['sandstream_gateway_relayed_bytes_total{direction="to_client"}'] > 0
        assert samples['sandstream_gateway_refusals_total{code="unauthorized"}'] >= 1
        assert samples["sandstream_gateway_connections_open"] >= 1
    finally:
        g.delete(f"/v1/sandboxes/{sid}")


def test_preview_and_terminal_through_a_gateway(cluster: Cluster) -> None:
    gw = cluster.gateways[0]
    g = client_of(gw)
    sid = g.post("/v1/sandboxes", json={}).json()["id"]
    try:
        g.post(f"/v1/sandboxes/{sid}/processes",
               json={"cmd": "mkdir -p site && echo page-of-$(hostname) > site/index.html && "
                             "cd site && exec python3 -m http.server 8000"})
        r = g.get(f"/v1/sandboxes/{sid}/ports/8000/wait", params={"timeout_seconds": 20})
        assert r.status_code == 200, r.text
        assert g.post(f"/v1/sandboxes/{sid}/ports", json={"port": 8000}).status_code in (200, 201)
        # The host form: {port}-{id}.localhost, at the gateway's own address.
        host = f"8000-{sid}.localhost:{gw.port}"
        r = g.get("/index.html", headers={"Host": host})
        assert r.status_code == 200 and r.text == f"page-of-{sid}\n", r.text
        # And the path form.
        r = g.get(f"/v1/sandboxes/{sid}/ports/8000/index.html")
        assert r.status_code == 200 and r.text == f"page-of-{sid}\n"
        # A WebSocket upgrade passes through: the terminal echoes what it is sent.
        url = f"ws://127.0.0.1:{gw.port}/v1/sandboxes/{sid}/exec/pty?access_token={API_KEY}"
        with connect(url, open_timeout=10) as ws:
            ws.send(b"echo term-$((6*7))\n")
            seen = ""
            deadline = time.monotonic() + 10
            while "term-42" not in seen and time.monotonic() < deadline:
                frame = ws.recv(timeout=10)
                seen += frame if isinstance(frame, str) else frame.decode(errors="replace")
            assert "term-42" in seen, seen
    finally:
        g.delete(f"/v1/sandboxes/{sid}")


def test_a_stream_cut_with_its_gateway_resumes_through_another(cluster: Cluster) -> None:
    gw = cluster.start_gateway()
    cluster.wait_seen(gw, {"n1", "n2", "n3"})
    g_first, g_other = client_of(gw), client_of(cluster.gateways[1])
    sid = g_other.post("/v1/sandboxes", json={}).json()["id"]
    n = 60
    cmd = f"i=0; while [ $i -lt {n} ]; do echo line $i; i=$((i+1)); sleep 0.03; done"
    key = {"Idempotency-Key": f"gw-resume-{sid}"}
    url = f"/v1/sandboxes/{sid}/exec/stream"
    try:
        first: list[SseEvent] = []
        with g_first.stream("POST", url, json={"cmd": cmd}, headers=key) as r:
            assert r.status_code == 200
            for e in iter_sse(r):
                assert isinstance(e, SseEvent)
                first.append(e)
                if sum(ev.event == "stdout" for ev in first) >= 5:
                    gw.kill()  # the gateway dies mid-stream
                    break
        assert first[-1].event == "stdout"
        with g_other.stream("POST", url, json={"cmd": cmd},
                            headers={**key, "Last-Event-ID": str(first[-1].id)}) as r:
            assert r.status_code == 200
            second = read_events(r)
        events = first + second
        assert_contiguous(events)
        assert chunks_of(events) == "".join(f"line {i}\n" for i in range(n))
        assert events[-1].event == "exit"
    finally:
        g_other.delete(f"/v1/sandboxes/{sid}")


def test_pause_resume_and_fork_through_a_gateway_stay_on_the_sandboxs_node(
        cluster: Cluster) -> None:
    g1, g2 = (client_of(g) for g in cluster.gateways[:2])
    sid = g1.post("/v1/sandboxes", json={}).json()["id"]
    made = [sid]
    try:
        r = g1.post(f"/v1/sandboxes/{sid}/pause", json={"mode": "freeze"})
        assert r.status_code == 200 and r.json()["status"] == "paused", r.text
        assert g2.get(f"/v1/sandboxes/{sid}").json()["status"] == "paused"
        # A request through the other gateway wakes it where it is.
        r = g2.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "echo awake > /workspace/f; cat /workspace/f"})
        assert r.status_code == 200 and r.json()["stdout"] == "awake\n", r.text
        assert g1.post(f"/v1/sandboxes/{sid}/pause", json={}).json()["status"] == "paused"
        assert g2.post(f"/v1/sandboxes/{sid}/resume").json()["status"] == "running"
        # A fork lands on its source's node, with its files.
        r = g1.post(f"/v1/sandboxes/{sid}/fork", json={"memory": False})
        assert r.status_code == 201, r.text
        fork = r.json()
        made.append(fork["id"])
        assert node_of(fork["id"]) == node_of(sid)
        r = g2.post(f"/v1/sandboxes/{fork['id']}/exec", json={"cmd": "cat /workspace/f"})
        assert r.status_code == 200 and r.json()["stdout"] == "awake\n", r.text
        g1.delete(f"/v1/sandboxes/{fork['id']}")
        assert g1.delete(f"/v1/templates/{fork['template']}").status_code == 204
        if CRIU.exists():
            # Forks with memory too: on its node, with its running process, each reached
            # through either gateway.
            sleeper = g1.post(f"/v1/sandboxes/{sid}/processes", json={"cmd": "sleep 600"}).json()
            r = g2.post(f"/v1/sandboxes/{sid}/fork", json={"count": 2})
            assert r.status_code == 201, r.text
            forks = [f["id"] for f in r.json()["sandboxes"]]
            made.extend(forks)
            for f in forks:
                assert node_of(f) == node_of(sid)
                r = g1.get(f"/v1/sandboxes/{f}/processes/{sleeper['id']}")
                assert r.status_code == 200 and r.json()["status"] == "running", r.text
    finally:
        for m in made:
            g1.delete(f"/v1/sandboxes/{m}")


def test_a_volume_lives_on_one_node_and_its_sandboxes_are_placed_there(cluster: Cluster) -> None:
    g1, g2 = (client_of(g) for g in cluster.gateways[:2])
    made: list[str] = []
    volumes: list[str] = []
    try:
        # Made on one node, which its id names: everything about it goes there.
        r = g1.post("/v1/volumes", json={"name": "gw-data", "size_mb": 16})
        assert r.status_code == 201, r.text
        vol = r.json()
        volumes.append(vol["id"])
        home = node_of_volume(vol["id"])
        assert home in cluster.nodes
        r = g2.put(f"/v1/volumes/{vol['id']}/files/content", params={"path": "/hello"},
                   content=b"from the gateway")
        assert r.status_code == 201, r.text
        listed = g2.get("/v1/volumes").json()
        assert [v["id"] for v in listed["volumes"]] == [vol["id"]], listed
        assert listed["unreachable_nodes"] == []
        # A sandbox that mounts it, named by its name or its id, lands on its node, every time.
        for name in ("gw-data", vol["id"], "gw-data"):
            r = g1.post("/v1/sandboxes",
                        json={"volumes": [{"name": name, "path": "/mnt/data"}]})
            assert r.status_code == 201, r.text
            made.append(r.json()["id"])
            assert node_of(made[-1]) == home, (made[-1], home)
            r = g2.post(f"/v1/sandboxes/{made[-1]}/exec", json={"cmd": "cat /mnt/data/hello"})
            assert r.status_code == 200 and r.json()["stdout"] == "from the gateway", r.text
        # Its E2B face goes there too.
        e2b = httpx.Client(base_url=cluster.gateways[0].url, headers={"X-API-KEY": API_KEY},
                           timeout=30)
        r = e2b.get(f"/volumes/{vol['id']}")
        assert r.status_code == 200 and r.json()["name"] == "gw-data", r.text
        assert [v["volumeID"] for v in e2b.get("/volumes").json()] == [vol["id"]]
        # A name through a gateway: no node named, so only an id reaches it.
        r = g1.get("/v1/volumes/gw-data")
        assert r.status_code == 404 and "by its id" in r.json()["error"]["message"], r.text
        r = g1.delete(f"/v1/volumes/{vol['id']}")
        assert r.status_code == 409 and made[0] in r.json()["error"]["message"], r.text
    finally:
        for m in made:
            g1.delete(f"/v1/sandboxes/{m}")
        for v in volumes:
            assert g1.delete(f"/v1/volumes/{v}").status_code == 204


def node_of_volume(volume_id: str) -> str:
    assert volume_id.startswith("vol_") and volume_id.count("_") == 2, volume_id
    return volume_id.split("_")[1]


def test_a_node_killed_answers_503_and_comes_back_with_its_sandboxes(cluster: Cluster) -> None:
    g1, g2 = (client_of(g) for g in cluster.gateways[:2])
    cluster.wait_seen(cluster.gateways[0], {"n1", "n2", "n3"})
    made: list[str] = []
    try:
        on_n3 = create_on(g1, "n3", made)
        assert run(g1, on_n3, cmd="echo kept > /workspace/mark")["exit_code"] == 0
        cluster.nodes["n3"].kill()
        for g in (g1, g2):
            body = assert_error(g.get(f"/v1/sandboxes/{on_n3}"), 503, "node_unreachable")
            assert "n3" in body["message"] and on_n3 in body["message"]
        # New sandboxes still go somewhere alive, at once (a refused connection moves on).
        for _ in range(4):
            r = g2.post("/v1/sandboxes", json={})
            assert r.status_code == 201, r.text
            made.append(r.json()["id"])
            assert node_of(made[-1]) != "n3"
        listed = g1.get("/v1/sandboxes").json()
        assert listed["unreachable_nodes"] == ["n3"]
        # Its lease lapses: the gateways see it down.
        cluster.wait_seen(cluster.gateways[0], set(), frozenset({"n3"}), within=20)
        # Started again on its data, it takes its sandboxes back, and the gateways route to it.
        cluster.nodes["n3"].start()
        for gw in cluster.gateways[:2]:
            cluster.wait_seen(gw, {"n3"})
        for g in (g1, g2):
            assert run(g, on_n3, cmd="cat /workspace/mark")["stdout"] == "kept\n"
    finally:
        for sid in made:
            g1.delete(f"/v1/sandboxes/{sid}")


def test_a_node_cut_off_answers_503_and_is_back_when_its_link_is(cluster: Cluster) -> None:
    g1, g2 = (client_of(g) for g in cluster.gateways[:2])
    cluster.wait_seen(cluster.gateways[0], {"n1", "n2", "n3"})
    made: list[str] = []
    try:
        on_n2 = create_on(g1, "n2", made)
        assert run(g1, on_n2, cmd="echo before > /workspace/mark")["exit_code"] == 0
        cluster.lab.link("n2", up=False)  # alive, but nobody reaches it, nor it etcd
        for g in (g1, g2):
            body = assert_error(g.get(f"/v1/sandboxes/{on_n2}"), 503, "node_unreachable")
            assert "n2" in body["message"], body
        # Creates go elsewhere at once: a gateway that still lists n2 (its lease has not lapsed)
        # and tries it first gives up on it within its connect timeout (5 s), not the node's
        # whole answer time.
        for _ in range(3):
            started = time.monotonic()
            r = g2.post("/v1/sandboxes", json={})
            assert r.status_code == 201, r.text
            assert time.monotonic() - started < 15, "a create waited on the cut-off node"
            made.append(r.json()["id"])
            assert node_of(made[-1]) != "n2"
        # Its lease lapses: the gateways stop placing there.
        for gw in cluster.gateways[:2]:
            cluster.wait_seen(gw, set(), frozenset({"n2"}), within=20)
        cluster.lab.link("n2", up=True)
        # It registers again by itself; its sandboxes never stopped.
        for gw in cluster.gateways[:2]:
            cluster.wait_seen(gw, {"n2"}, within=20)
        for g in (g1, g2):
            assert run(g, on_n2, cmd="cat /workspace/mark")["stdout"] == "before\n"
    finally:
        cluster.lab.link("n2", up=True)
        for sid in made:
            g1.delete(f"/v1/sandboxes/{sid}")


def test_a_node_added_is_used(cluster: Cluster) -> None:
    g = client_of(cluster.gateways[0])
    cluster.start_node("n4")
    cluster.wait_seen(cluster.gateways[0], {"n4"})
    made: list[str] = []
    try:
        sid = create_on(g, "n4", made)
        assert run(g, sid, cmd="hostname")["stdout"] == f"{sid}\n"
    finally:
        for sid in made:
            g.delete(f"/v1/sandboxes/{sid}")
        cluster.nodes["n4"].stop()
    # Stopped, it leaves etcd: the gateways see it go within their next read.
    for gw in cluster.gateways[:2]:
        cluster.wait_seen(gw, set(), frozenset({"n4"}), within=5)


def test_templates_are_pulled_listed_and_deleted_on_every_node(cluster: Cluster) -> None:
    assert cluster.registry is not None
    g = client_of(cluster.gateways[0])
    nodes = ["n1", "n2", "n3"]
    image = f"{cluster.registry.host}/tiny:1"
    r = g.post("/v1/templates", json={"name": "tiny", "image": image}, timeout=180)
    assert r.status_code == 201, r.text
    assert sorted(r.json()["nodes"]) == nodes and "failed_nodes" not in r.json(), r.json()
    assert r.json()["source"] == image
    # Every node has it now: pulled again under its name, every node says so.
    assert_error(g.post("/v1/templates", json={"name": "tiny", "image": image}, timeout=60),
                 409, "conflict")
    # Listed once, found through either gateway.
    listed = [t["name"] for t in g.get("/v1/templates").json()["templates"]]
    assert listed.count("tiny") == 1, listed
    g2 = client_of(cluster.gateways[1])
    assert g2.get("/v1/templates/tiny").json()["source"] == image
    # A node that joins later pulls it by itself, from the registry it came from.
    n6 = cluster.start_node("n6")
    try:
        assert wait_until(lambda: httpx.get(f"{n6.url}/v1/templates/tiny", headers=bearer(API_KEY),
                                            timeout=10).status_code == 200, 30, 0.3)
    finally:
        n6.stop()
    for gw in cluster.gateways[:2]:
        cluster.wait_seen(gw, set(), frozenset({"n6"}), within=5)
    # Its sandboxes, on every node, see the image.
    made: list[str] = []
    try:
        on = {node: create_on(g, node, made, template="tiny") for node in nodes}
        for sid in on.values():
            assert run(g, sid, cmd="id -u")["stdout"] == "1234\n"
        # Not deleted where a sandbox uses it: that node's 409, saying where it did go.
        for sid in made:
            if sid != on["n1"]:
                g.delete(f"/v1/sandboxes/{sid}")
        r = g.delete("/v1/templates/tiny")
        body = assert_error(r, 409, "conflict")
        assert "in use" in body["message"] or "sandbox" in body["message"], body
        assert r.headers["x-sandstream-done-nodes"] == "n2, n3"
        g.delete(f"/v1/sandboxes/{on['n1']}")
        made = []
        assert g.delete("/v1/templates/tiny").status_code == 204
        assert_error(g.get("/v1/templates/tiny"), 404, "not_found")
        # Deleted everywhere, it is out of the cluster's catalog: no node pulls it back.
        time.sleep(6)
        assert_error(g.get("/v1/templates/tiny"), 404, "not_found")
    finally:
        for sid in made:
            g.delete(f"/v1/sandboxes/{sid}")


def node_events(r: httpx.Response) -> list[SseEvent]:
    assert r.status_code == 200, r.read()
    assert r.headers["content-type"].startswith("text/event-stream")
    return [e for e in iter_sse(r) if isinstance(e, SseEvent)]


def test_an_archive_and_a_pulls_progress_go_to_every_node(cluster: Cluster) -> None:
    assert cluster.registry is not None
    g = client_of(cluster.gateways[0], timeout=120)
    nodes = ["n1", "n2", "n3"]
    tar = {"Content-Type": "application/x-tar"}
    im = images.Image([images.layer_tar(images.system_layer(user="boxed", uid=2100) +
                                        [images.Entry("boxed", b"from an archive\n")])],
                      user="boxed", tag="boxed:1")
    archive = im.oci_archive()
    # Its length known: every node gets the archive as the gateway reads it, and imports it.
    r = g.post("/v1/templates", params={"name": "boxed"}, content=archive, headers=tar)
    assert r.status_code == 201, r.text
    assert sorted(r.json()["nodes"]) == nodes and "failed_nodes" not in r.json(), r.json()
    # Again under its name, large: every node refuses before reading it, and the refusal
    # reaches the client whole (the rest of the body is read and dropped, not reset).
    body = assert_error(g.post("/v1/templates", params={"name": "boxed"},
                               content=archive + bytes(16 << 20), headers=tar), 409, "conflict")
    assert "boxed" in body["message"], body
    for name in nodes:
        got = httpx.get(f"{cluster.nodes[name].url}/v1/templates/boxed", headers=bearer(API_KEY), timeout=10)
        assert got.status_code == 200 and got.json()["tags"] == ["boxed:1"], got.text
    # Sent in chunks, with its progress asked for: every node's, tagged, then one template.
    pieces = [archive[i:i + 3000] for i in range(0, len(archive), 3000)]
    with g.stream("POST", "/v1/templates", params={"name": "boxed-2"}, content=iter(pieces),
                  headers={**tar, "Accept": "text/event-stream"}) as r:
        events = node_events(r)
    assert events[-1].event == "template", events
    last = json.loads(events[-1].data)
    assert last["name"] == "boxed-2" and sorted(last["nodes"]) == nodes, last
    progress = [json.loads(e.data) for e in events if e.event == "progress"]
    assert {p["node"] for p in progress} == set(nodes), progress
    # Made on every node: a sandbox of it on each, once the gateway sees it in every node's
    # record (placement prefers the nodes whose record has the template, and a loaded machine
    # republishes a record a moment after the import).
    def seen_everywhere() -> bool:
        told = httpx.get(f"{cluster.gateways[0].url}/healthz", headers=bearer(API_KEY),
                         timeout=10).json()["nodes"]
        return all("boxed-2" in n.get("templates", []) for n in told if n["id"] in nodes)
    assert wait_until(seen_everywhere, 30, 0.2)
    made: list[str] = []
    try:
        for node in nodes:
            sid = create_on(g, node, made, template="boxed-2")
            assert run(g, sid, cmd="cat /boxed; id -u")["stdout"] == "from an archive\n2100\n"
    finally:
        for sid in made:
            g.delete(f"/v1/sandboxes/{sid}")
    # Not an archive: every node says so, and the answer is theirs.
    body = assert_error(g.post("/v1/templates", params={"name": "junk"}, content=b"not a tar",
                               headers=tar), 400, "invalid_request")
    assert "archive" in body["message"] or "tar" in body["message"], body
    with g.stream("POST", "/v1/templates", params={"name": "junk"}, content=b"not a tar" * 100,
                  headers={**tar, "Accept": "text/event-stream"}) as r:
        events = node_events(r)
    assert events[-1].event == "error", events
    assert json.loads(events[-1].data)["error"]["code"] == "invalid_request", events[-1]
    assert_error(g.get("/v1/templates/junk"), 404, "not_found")
    # A pull's progress, through the other gateway: every node's, then the template.
    g2 = client_of(cluster.gateways[1], timeout=180)
    image = f"{cluster.registry.host}/tiny:1"
    with g2.stream("POST", "/v1/templates", json={"name": "tiny-ev", "image": image},
                   headers={"Accept": "text/event-stream"}) as r:
        events = node_events(r)
    assert events[-1].event == "template", events
    assert sorted(json.loads(events[-1].data)["nodes"]) == nodes, events[-1]
    assert {json.loads(e.data)["node"] for e in events if e.event == "progress"} == set(nodes)
    for name in ("boxed", "boxed-2", "tiny-ev"):
        assert g.delete(f"/v1/templates/{name}").status_code == 204
        assert_error(g.get(f"/v1/templates/{name}"), 404, "not_found")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_tenants_keys_and_quotas_hold_across_nodes(cluster: Cluster) -> None:
    g1, g2 = (client_of(g) for g in cluster.gateways[:2])
    nodes = [cluster.nodes[n] for n in ("n1", "n2", "n3")]
    r = g1.post("/v1/admin/tenants", json={"name": "acme", "quotas": {"sandboxes": 3}})
    assert r.status_code == 201, r.text
    assert_error(g2.post("/v1/admin/tenants", json={"name": "acme"}), 409, "conflict")
    made = g2.post("/v1/admin/tenants/acme/keys")
    assert made.status_code == 201, made.text
    key, key_id = made.json()["key"], made.json()["id"]
    mine: list[str] = []
    try:
        # The key opens every node at once (one that has not read it yet reads it then).
        for node in nodes:
            r = httpx.get(f"{node.url}/v1/sandboxes", headers=bearer(key), timeout=10)
            assert r.status_code == 200, (node.url, r.text)
        # A sandbox on each node, made there directly: the quota of 3 is full across them.
        for node in nodes:
            r = httpx.post(f"{node.url}/v1/sandboxes", headers=bearer(key), json={}, timeout=30)
            assert r.status_code == 201, r.text
            mine.append(r.json()["id"])
        assert sorted(node_of(s) for s in mine) == ["n1", "n2", "n3"]
        t1 = httpx.Client(base_url=cluster.gateways[0].url, headers=bearer(key), timeout=30)
        body = assert_error(t1.post("/v1/sandboxes", json={}), 429, "quota_exceeded")
        assert "sandboxes 3" in body["message"] and "every node" in body["message"], body
        for node in nodes:
            r = httpx.post(f"{node.url}/v1/sandboxes", headers=bearer(key), json={}, timeout=30)
            assert_error(r, 429, "quota_exceeded")
        # Every node, and so either gateway, counts the tenant's sandboxes on all of them.
        for node in nodes:
            assert wait_until(lambda node=node: httpx.get(
                f"{node.url}/v1/usage", headers=bearer(key),
                timeout=10).json()["usage"]["sandboxes"] == 3, 5, 0.1), node.url
        assert g2.get("/v1/admin/tenants/acme").json()["usage"]["sandboxes"] == 3
        listed = {s["id"] for s in t1.get("/v1/sandboxes").json()["sandboxes"]}
        assert listed == set(mine)
        # Not deleted while it has sandboxes, whichever node is asked.
        body = assert_error(httpx.delete(f"{nodes[0].url}/v1/admin/tenants/acme",
                                         headers=bearer(API_KEY), timeout=10), 409, "conflict")
        assert "sandbox" in body["message"], body
        # One given back on n3: there is room again, on another node.
        on_n3 = next(s for s in mine if node_of(s) == "n3")
        assert t1.delete(f"/v1/sandboxes/{on_n3}").status_code == 204
        mine.remove(on_n3)

        def create_on_n1() -> bool:
            r = httpx.post(f"{nodes[0].url}/v1/sandboxes", headers=bearer(key), json={},
                           timeout=30)
            if r.status_code == 201:
                mine.append(r.json()["id"])
            return r.status_code == 201

        assert wait_until(create_on_n1, 5, 0.1)
        assert_error(t1.post("/v1/sandboxes", json={}), 429, "quota_exceeded")
        # Quotas changed through one gateway hold on every node.
        r = g2.patch("/v1/admin/tenants/acme", json={"quotas": {"sandboxes": 4}})
        assert r.status_code == 200, r.text
        assert wait_until(lambda: httpx.post(
            f"{nodes[1].url}/v1/sandboxes", headers=bearer(key), json={},
            timeout=30).status_code == 201, 5, 0.2)
        mine.extend(s["id"] for s in t1.get("/v1/sandboxes").json()["sandboxes"]
                    if s["id"] not in mine)
        assert len(mine) == 4, mine
        # A key revoked through one gateway stops opening every node.
        assert g1.delete(f"/v1/admin/tenants/acme/keys/{key_id}").status_code == 204

        def refused_everywhere() -> bool:
            return all(httpx.get(f"{n.url}/v1/sandboxes", headers=bearer(key),
                                 timeout=10).status_code == 401 for n in nodes)

        assert wait_until(refused_everywhere, 5, 0.1)
    finally:
        for sid in mine:
            g1.delete(f"/v1/sandboxes/{sid}")
    # Gone from every node's count, it can be deleted.
    assert wait_until(lambda: g1.delete("/v1/admin/tenants/acme").status_code == 204, 10, 0.2)
    assert wait_until(lambda: g2.get("/v1/admin/tenants/acme").status_code == 404, 5, 0.1)


def test_a_node_that_joins_brings_its_tenants_and_keys(cluster: Cluster) -> None:
    # A node on its own first, with a tenant and a key of its own.
    address = cluster.lab.add_node("n5")
    alone = Daemon(cluster.root / "n5", [], {}, cluster.root / "n5.log",
                   wrapper=cluster.lab.wrapper("n5"), listen=f"{address}:0")
    alone.start()
    c = httpx.Client(base_url=alone.url, headers=bearer(API_KEY), timeout=30)
    assert c.post("/v1/admin/tenants", json={"name": "early",
                                              "quotas": {"sandboxes": 7}}).status_code == 201
    key = c.post("/v1/admin/tenants/early/keys").json()["key"]
    assert alone.stop() == 0
    # Started again in the cluster: its tenant and key are the cluster's, on every node.
    joined = Daemon(cluster.root / "n5", ["--node-id", "n5", "--etcd", cluster.etcd.bridge_url],
                    {}, cluster.root / "n5.log", wrapper=cluster.lab.wrapper("n5"),
                    listen=f"{address}:0")
    joined.start()
    try:
        g = client_of(cluster.gateways[0])
        assert wait_until(lambda: g.get("/v1/admin/tenants/early").status_code == 200, 10, 0.2)
        assert g.get("/v1/admin/tenants/early").json()["quotas"]["sandboxes"] == 7
        n1 = cluster.nodes["n1"]
        assert httpx.get(f"{n1.url}/v1/sandboxes", headers=bearer(key), timeout=10).status_code == 200
        # Deleted in the cluster, it does not come back with the node's next start.
        assert g.delete("/v1/admin/tenants/early").status_code == 204
        assert joined.stop() == 0
        joined.start()
        time.sleep(1.5)
        assert_error(g.get("/v1/admin/tenants/early"), 404, "not_found")
    finally:
        joined.stop()
    for gw in cluster.gateways[:2]:
        cluster.wait_seen(gw, set(), frozenset({"n5"}), within=5)


def test_etcd_stopped_and_started(cluster: Cluster) -> None:

    g = client_of(cluster.gateways[0])
    n1 = cluster.nodes["n1"]
    assert g.post("/v1/admin/tenants", json={"name": "calm"}).status_code == 201
    key = g.post("/v1/admin/tenants/calm/keys").json()["key"]
    sid = g.post("/v1/sandboxes", json={}).json()["id"]
    # n1 has read the key (a node reads one it does not know from etcd, which is about to go).
    assert httpx.get(f"{n1.url}/v1/sandboxes", headers=bearer(key), timeout=10).status_code == 200
    try:
        cluster.etcd.stop()
        # A tenant's new sandbox cannot be counted against its quotas: refused, saying why.
        # Its key, as last read, still opens the node.
        r = httpx.post(f"{n1.url}/v1/sandboxes", headers=bearer(key), json={}, timeout=30)
        body = assert_error(r, 503, "unavailable")
        assert "quotas cannot be counted" in body["message"] and "etcd" in body["message"], body
        assert httpx.get(f"{n1.url}/v1/sandboxes", headers=bearer(key),
                         timeout=10).status_code == 200

        def create_status() -> int:
            """A create's status; a sandbox it made is deleted at once."""
            r = g.post("/v1/sandboxes", json={})
            if r.status_code == 201:
                g.delete(f"/v1/sandboxes/{r.json()['id']}")
            return r.status_code

        assert wait_until(lambda: create_status() == 503, 15, 0.2)
        body = assert_error(g.post("/v1/sandboxes", json={}), 503, "unavailable")
        assert "etcd" in body["message"], body
        # What exists keeps working, through either gateway.
        for gw in cluster.gateways[:2]:
            assert run(client_of(gw), sid, cmd="echo up")["stdout"] == "up\n"
        cluster.etcd.start()
        assert wait_until(lambda: create_status() == 201, 30, 0.3)
        r = httpx.post(f"{n1.url}/v1/sandboxes", headers=bearer(key), json={}, timeout=30)
        assert r.status_code == 201, r.text
        assert g.delete(f"/v1/sandboxes/{r.json()['id']}").status_code == 204
    finally:
        g.delete(f"/v1/sandboxes/{sid}")
    assert wait_until(lambda: g.delete("/v1/admin/tenants/calm").status_code == 204, 10, 0.2)


def test_a_gateway_without_etcd_reads_its_nodes_health(cluster: Cluster) -> None:
    addresses = ",".join(cluster.nodes[n].url.removeprefix("http://") for n in ("n1", "n2", "n3"))
    gw = cluster.start_gateway("--gateway-nodes", addresses)
    cluster.wait_seen(gw, {"n1", "n2", "n3"})
    g = client_of(gw)
    made = []
    try:
        for _ in range(6):
            r = g.post("/v1/sandboxes", json={})
            assert r.status_code == 201, r.text
            made.append(r.json()["id"])
        assert len({node_of(s) for s in made}) >= 2, made
        assert run(g, made[0], cmd="echo ok")["stdout"] == "ok\n"
    finally:
        for sid in made:
            g.delete(f"/v1/sandboxes/{sid}")


def test_cluster_settings_are_checked_at_start(tmp_path: Path) -> None:
    def start(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=30,
                              env={"SANDSTREAM_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"})

    r = start("--role", "gateway")
    assert r.returncode == 2 and "a gateway needs etcd or gateway_nodes" in r.stderr, r.stderr
    r = start("--node-id", "Bad_Id")
    assert r.returncode == 2 and "node_id must be" in r.stderr, r.stderr
    r = start("--etcd", "http://127.0.0.1:2379")
    assert r.returncode == 2 and "needs a node_id" in r.stderr, r.stderr
    r = start("--role", "gateway", "--etcd", "https://etcd:2379")
    assert r.returncode == 2 and "etcd:" in r.stderr, r.stderr
    # Fixed nodes tell their records to the admin key alone: the gateway needs it.
    r = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--role", "gateway", "--gateway-nodes",
                        "127.0.0.1:1"], capture_output=True, text=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "gateway_nodes needs api_key" in r.stderr, r.stderr


# A port server that answers `GET /slow` with a whole response, then, a moment later, a second
# one the client never asked for; `GET /both` sends both at once. Its sw.js may widen a
# worker's scope to the whole origin, and has a policy of its own.
TWO_ANSWERS = r"""
import socket, threading, time
INJECTED = b"<script>alert('injected by sandbox')</script>"
SECOND = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (
    len(INJECTED), INJECTED)
def serve(c):
    try:
        request = c.recv(65536)
        if b" /sw.js" in request:
            body = b"self.addEventListener('fetch', () => {});"
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/javascript\r\n"
                      b"Service-Worker-Allowed: /\r\n"
                      b"Content-Security-Policy: default-src 'self'\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        elif b" /both" in request:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + SECOND)
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            time.sleep(1.5)
            c.sendall(SECOND)
    except OSError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000))
s.listen(16)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""


def serving_two_answers(g: httpx.Client) -> str:
    """A sandbox running TWO_ANSWERS on port 8000, exposed."""
    sid = g.post("/v1/sandboxes", json={}).json()["id"]
    r = g.post(f"/v1/sandboxes/{sid}/processes", json={"argv": ["python3", "-c", TWO_ANSWERS]})
    assert r.status_code in (200, 201), r.text
    r = g.get(f"/v1/sandboxes/{sid}/ports/8000/wait", params={"timeout_seconds": 20})
    assert r.status_code == 200, r.text
    assert g.post(f"/v1/sandboxes/{sid}/ports", json={"port": 8000}).status_code in (200, 201)
    return sid


def test_a_port_server_cannot_answer_a_clients_next_request(cluster: Cluster) -> None:
    """A port's answer is relayed to the length its head says, never past it: what a sandbox
    sends after that never reaches the client as the answer to its next request (an admin's,
    behind a proxy that pools connections); the connection is kept, or ends."""
    gw = cluster.gateways[0]
    g = client_of(gw)
    sid = serving_two_answers(g)
    try:
        for path in ("slow", "both"):
            w = Wire(gw)
            w.sock.sendall(w.send("GET", f"/v1/sandboxes/{sid}/ports/8000/{path}"))
            status, _, body = w.answer()
            assert (status, body) == (200, b"ok"), (path, status, body)
            w.sock.sendall(w.send("GET", "/v1/sandboxes"))
            try:
                status, _, body = w.answer()
            except AssertionError as e:
                assert "ended before a response" in str(e), e  # closed instead: as good
                assert b"injected" not in w.rest, w.rest
                continue
            assert b"injected" not in body, (path, body)
            assert status == 200 and sid in {s["id"] for s in json.loads(body)["sandboxes"]}, body
            # Nothing of the sandbox's second answer follows either.
            time.sleep(2)
            w.sock.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                w._fill()
            assert b"injected" not in w.rest, w.rest
            w.sock.close()
        # The one that came slowly kept its connection for the next request.
        w = Wire(gw)
        w.sock.sendall(w.send("GET", f"/v1/sandboxes/{sid}/ports/8000/slow"))
        assert w.answer()[2] == b"ok"
        w.sock.sendall(w.send("GET", f"/v1/sandboxes/{sid}"))
        status, _, body = w.answer()
        assert status == 200 and json.loads(body)["id"] == sid, body
        w.sock.close()
    finally:
        g.delete(f"/v1/sandboxes/{sid}")


def test_path_form_previews_run_in_an_opaque_origin(cluster: Cluster) -> None:
    """A port's path form is on the API's (and the console's) origin: its answers come with
    `Content-Security-Policy: sandbox` added to the sandbox's own and without
    Service-Worker-Allowed, from a node and from a gateway; the host form is its own origin
    and is passed as it is."""
    gw = cluster.gateways[0]
    g = client_of(gw)
    sid = serving_two_answers(g)
    try:
        node = cluster.nodes[node_of(sid)]
        for base in (gw.url, node.url):
            r = httpx.get(f"{base}/v1/sandboxes/{sid}/ports/8000/sw.js",
                          headers=bearer(API_KEY), timeout=10)
            assert r.status_code == 200 and r.text.startswith("self."), r.text
            assert "service-worker-allowed" not in r.headers, (base, r.headers)
            policies = r.headers.get_list("content-security-policy")
            assert "default-src 'self'" in policies, policies
            ours = [p for p in policies if p.startswith("sandbox")]
            assert len(ours) == 1 and "allow-same-origin" not in ours[0], policies
        r = g.get("/sw.js", headers={"Host": f"8000-{sid}.localhost:{gw.port}"})
        assert r.status_code == 200 and r.headers["service-worker-allowed"] == "/", r.headers
        assert r.headers.get_list("content-security-policy") == ["default-src 'self'"]
    finally:
        g.delete(f"/v1/sandboxes/{sid}")


def test_healthz_tells_node_records_to_the_admin_only(cluster: Cluster) -> None:
    """A node's record (its address, every tenant's template names) and a gateway's view of
    them are the admin's: without the key /healthz says who is up, nothing more."""
    node = cluster.nodes["n1"]
    bare = httpx.get(f"{node.url}/healthz", timeout=10)
    assert bare.status_code == 200, bare.text
    assert bare.json()["node"] == {"id": "n1"}, bare.text
    assert f"{LAB_NET}." not in bare.text and "code-interpreter" not in bare.text, bare.text
    told = httpx.get(f"{node.url}/healthz", headers=bearer(API_KEY), timeout=10).json()["node"]
    assert told["id"] == "n1" and "base" in told["templates"] and told["address"], told
    wrong = httpx.get(f"{node.url}/healthz", headers=bearer("not-the-key"), timeout=10)
    assert wrong.json()["node"] == {"id": "n1"}, wrong.text
    gw = cluster.gateways[0]
    bare = httpx.get(f"{gw.url}/healthz", timeout=10)
    assert bare.status_code == 200 and bare.json()["role"] == "gateway", bare.text
    for n in bare.json()["nodes"]:
        assert set(n) == {"id", "up"}, n
    assert f"{LAB_NET}." not in bare.text and "code-interpreter" not in bare.text, bare.text
    told = httpx.get(f"{gw.url}/healthz", headers=bearer(API_KEY), timeout=10).json()["nodes"]
    n1 = next(n for n in told if n["id"] == "n1")
    assert n1["address"] and "base" in n1["templates"] and "load" in n1, n1


def test_signed_url_lookups_are_rate_limited_by_address(cluster: Cluster) -> None:
    """A signed file URL without E2b-Sandbox-Id costs a call to every node: one address gets
    so many a second, then 429 in E2B's shape, until its bucket fills again."""
    gw = cluster.gateways[1]
    bare = httpx.Client(base_url=gw.url, timeout=10)
    target = "/files?path=/tmp/x&signature=v1_" + "0" * 43
    statuses = [bare.get(target).status_code for _ in range(40)]
    assert statuses[0] == 401 and 429 in statuses, statuses
    # A refusal's shape. The bucket refills a token every 100 ms, and a 401 (a call to every
    # node) can take that long on a loaded machine: the next request may pass, the one after
    # not.
    for _ in range(20):
        r = bare.get(target)
        if r.status_code == 429:
            break
    assert r.status_code == 429, r.text
    assert r.json()["code"] == 429 and "E2b-Sandbox-Id" in r.json()["message"], r.text
    time.sleep(2.5)  # full again, for the other tests from this address
    assert bare.get(target).status_code == 401


def test_a_gateway_reads_no_body_before_a_node_took_the_credential(cluster: Cluster) -> None:
    """A create's or a pull's body is read whole by the gateway: a credential no node takes is
    refused from the head, as a node would, before the client sends a byte of it."""
    gw = cluster.gateways[0]
    cases = [("/v1/sandboxes", {}, 401, "unauthorized"),
             ("/v1/sandboxes", {"Authorization": "Bearer sk_wrong"}, 401, "unauthorized"),
             ("/v1/templates", {"Authorization": "Bearer sk_wrong"}, 401, "unauthorized"),
             ("/v2/sandboxes", {"X-API-KEY": "sk_wrong"}, 401, None)]
    for target, headers, status, code in cases:
        w = Wire(gw)
        w.sock.settimeout(10)
        fields = {"Host": "gateway", "Content-Type": "application/json",
                  "Content-Length": "1048576", **headers}
        w.sock.sendall((f"POST {target} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n").encode())
        got, _, body = w.answer()  # with no body sent
        assert got == status, (target, got, body)
        error = json.loads(body)
        if code:
            assert error["error"]["code"] == code, error
        else:
            assert error["code"] == 401, error  # E2B's shape
        w.sock.close()
    # The right key still creates, through the same check.
    g = client_of(gw)
    r = g.post("/v1/sandboxes", json={})
    assert r.status_code == 201, r.text
    g.delete(f"/v1/sandboxes/{r.json()['id']}")


def hold(gw: Daemon, n: int, held: list[Wire]) -> None:
    """Adds `n` connections to `held`, each kept open between requests (relayed to a node; a
    gateway's own answers, a list, end their connection)."""
    for _ in range(n):
        w = Wire(gw)
        w.sock.sendall(w.send("GET", "/v1/usage"))
        assert w.answer()[0] == 200
        held.append(w)


def test_a_gateway_holds_max_connections(cluster: Cluster) -> None:
    """Past max_connections a new connection gets a 503 and is closed; those before it are
    served still."""
    gw = cluster.start_gateway("--etcd", cluster.etcd.url, "--max-connections", "3")
    cluster.wait_seen(gw, {"n1", "n2", "n3"})
    # The connections that looked are gone (counted: this one asking).
    assert wait_until(lambda: metric(gw, "sandstream_gateway_connections_open") == 1, 10, 0.1)
    held: list[Wire] = []
    try:
        hold(gw, 3, held)
        extra = Wire(gw)
        extra.sock.sendall(extra.send("GET", "/v1/sandboxes"))
        status, _, body = extra.answer()
        assert status == 503 and json.loads(body)["error"]["code"] == "too_many_connections", body
        assert extra.closed()
        extra.sock.close()
        for w in held:
            w.sock.sendall(w.send("GET", "/v1/usage"))
            assert w.answer()[0] == 200
    finally:
        for w in held:
            w.sock.close()
        gw.stop()


def test_a_gateway_past_max_connections_refuses_as_a_node_does(cluster: Cluster) -> None:
    """A node's limit (test_limits.py, test_connections_past_the_limit_get_503) on a gateway:
    each connection past max_connections is answered 503 too_many_connections at once with
    Connection: close, and a slot a closed connection frees serves again."""
    gw = cluster.start_gateway("--etcd", cluster.etcd.url, "--max-connections", "2")
    cluster.wait_seen(gw, {"n1", "n2", "n3"})
    assert wait_until(lambda: metric(gw, "sandstream_gateway_connections_open") == 1, 10, 0.1)
    held: list[Wire] = []
    refused: list[Wire] = []
    try:
        hold(gw, 2, held)
        for _ in range(5):
            w = Wire(gw)
            w.sock.sendall(w.send("GET", "/healthz"))
            refused.append(w)
        for w in refused:
            status, fields, body = w.answer()
            assert status == 503 and json.loads(body)["error"]["code"] == "too_many_connections", body
            assert fields.get("connection") == "close", fields
            assert w.closed()
        held.pop().sock.close()

        def served() -> bool:
            w = Wire(gw)
            try:
                w.sock.sendall(w.send("GET", "/v1/usage"))
                return w.answer()[0] == 200
            finally:
                w.sock.close()

        assert wait_until(served, 10, 0.1), "no slot came free after a connection closed"
    finally:
        for w in held + refused:
            w.sock.close()
        gw.stop()
