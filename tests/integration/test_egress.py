"""Egress under a policy, against an "internet" the tests build: network namespaces for the
host the daemon runs in and for an upstream with an HTTP server on many addresses and a DNS
server (egress_upstream.py). No packet leaves this machine, and forwarding is turned on only
in the test's own host namespace; the daemon is reached through a Unix socket relayed into it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import API_KEY, Daemon, assert_error, create_sandbox, run, wait_until

HERE = Path(__file__).parent
HOST_ADDRESS = "192.0.2.2"      # an address of the daemon's host, with a service on :8081
UPLINK_HOST = "203.0.113.1"     # the host's side of its uplink: what the upstream sees
UPSTREAM_ADDRESSES = ["198.18.0.53", "198.18.1.10", "198.18.1.11", "198.18.1.20", "198.18.1.21",
                      "198.18.1.30", "198.18.3.1", "198.18.5.1", "10.99.0.1"]

PROBE = r'''
import socket, sys
def tcp(host, port):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, int(port)))
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return "error " + (e.strerror or str(e))
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return "ok " + data.decode(errors="replace").split("\r\n\r\n", 1)[-1].strip()
def dns(name, family="4"):
    fam = socket.AF_INET6 if family == "6" else socket.AF_INET
    try:
        return "addr " + socket.getaddrinfo(name, 80, fam, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as e:
        return "gai %d" % e.errno
def tcpdns(server, name):
    # One A query over TCP, by hand: rcode and the first address of the answer.
    import struct
    q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    q += struct.pack("!HH", 1, 1)
    s = socket.create_connection((server, 53), timeout=3)
    s.sendall(struct.pack("!H", len(q)) + q)
    n = struct.unpack("!H", s.recv(2))[0]
    m = b""
    while len(m) < n:
        m += s.recv(n - len(m))
    rcode, ancount = m[3] & 15, struct.unpack("!H", m[6:8])[0]
    return "rcode %d answers %d %s" % (rcode, ancount, socket.inet_ntoa(m[-4:]) if ancount else "")
kind, *args = sys.argv[1:]
print({"tcp": tcp, "dns": dns, "tcpdns": tcpdns}[kind](*args))
'''


def sh(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr}"


class EgressLab:
    """A host namespace (with the daemon) and an upstream namespace, linked by a veth pair."""

    def __init__(self, root: Path, extra_args: list[str] | None = None):
        self.name = f"sse{secrets.token_hex(3)}"
        self.host = f"{self.name}h"
        self.upstream = f"{self.name}u"
        self.root = root
        self.extra_args = extra_args or []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.daemon: Daemon | None = None

    def in_ns(self, ns: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{ns}", "--"]

    def up(self) -> None:
        sh("ip", "netns", "add", self.host)
        sh("ip", "netns", "add", self.upstream)
        for ns in (self.host, self.upstream):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "uplink", "netns", self.host, "type", "veth", "peer", "name",
           "downlink", "netns", self.upstream)
        sh("ip", "-n", self.host, "addr", "add", f"{UPLINK_HOST}/24", "dev", "uplink")
        sh("ip", "-n", self.host, "link", "set", "uplink", "up")
        sh("ip", "-n", self.host, "route", "add", "default", "via", "203.0.113.2")
        sh("ip", "-n", self.host, "addr", "add", f"{HOST_ADDRESS}/32", "dev", "lo")
        sh("ip", "-n", self.upstream, "addr", "add", "203.0.113.2/24", "dev", "downlink")
        sh("ip", "-n", self.upstream, "link", "set", "downlink", "up")
        for a in UPSTREAM_ADDRESSES:
            sh("ip", "-n", self.upstream, "addr", "add", f"{a}/32", "dev", "lo")
        self.spawn(self.upstream, [sys.executable, str(HERE / "egress_upstream.py")])
        self.spawn(self.host, [sys.executable, str(HERE / "egress_upstream.py"), HOST_ADDRESS, "8081"])
        for ns, port in ((self.upstream, ":80 "), (self.host, ":8081 ")):
            assert wait_until(lambda: port in self.output(ns, "ss", "-ltnH"), 10), f"{ns}{port}"
        assert wait_until(lambda: ":53 " in self.output(self.upstream, "ss", "-lunH"), 10)

    def spawn(self, ns: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([*self.in_ns(ns), *cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def start_daemon(self, data_dir: Path, args: list[str] | None = None) -> Daemon:
        d = Daemon(data_dir, ["--egress-pool", "10.200.0.0/16", "--egress-dns", "198.18.0.53",
                              *self.extra_args, *(args or [])],
                   {}, self.root / f"{self.name}-{data_dir.name}.log",
                   wrapper=self.in_ns(self.host), listen="0.0.0.0:0")
        d.start()
        sock = self.root / f"{self.name}-{data_dir.name}-{d.port}.sock"
        relay = self.spawn(self.host, [sys.executable, str(HERE / "netns_relay.py"), str(sock),
                                       str(d.port)])
        assert relay.stdout is not None and relay.stdout.readline().strip() == b"ready"
        d.uds = sock
        self.daemon = d
        return d

    def output(self, ns: str, *cmd: str) -> str:
        return subprocess.run([*self.in_ns(ns), *cmd], capture_output=True, text=True).stdout

    def ns_output(self, *cmd: str) -> str:
        return self.output(self.host, *cmd)

    def down(self) -> None:
        if self.daemon is not None and self.daemon.alive():
            with contextlib.suppress(AssertionError):
                self.daemon.stop(timeout=15)
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 9)
            p.wait(5)
        for ns in (self.host, self.upstream):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressLab]:
    root = tmp_path_factory.mktemp("egress")
    lab = EgressLab(root)
    try:
        lab.up()
        lab.start_daemon(root / "data")
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def c(lab: EgressLab) -> Iterator[httpx.Client]:
    assert lab.daemon is not None
    with lab.daemon.client() as client:
        yield client


@pytest.fixture
def make(c: httpx.Client) -> Iterator[Any]:
    made: list[str] = []

    def create(network: Any, **body: Any) -> dict[str, Any]:
        sb = create_sandbox(c, network=network, **body)
        made.append(sb["id"])
        return sb

    yield create
    for sid in made:
        c.delete(f"/v1/sandboxes/{sid}")


def probe(c: httpx.Client, sb: dict[str, Any], *args: str) -> str:
    r = run(c, sb["id"], argv=["python3", "-c", PROBE, *args], timeout_seconds=20)
    assert r["exit_code"] == 0, r
    return str(r["stdout"]).strip()


def test_loopback_and_none_have_no_way_out(c: httpx.Client, make: Any) -> None:
    loopback = make("loopback")
    assert probe(c, loopback, "tcp", "198.18.1.10", "80") == "error Network is unreachable"
    interfaces = "import socket; print(*[name for _, name in socket.if_nameindex()])"
    assert run(c, loopback["id"], argv=["python3", "-c", interfaces])["stdout"].split() == ["lo"]
    none = make("none")
    assert probe(c, none, "tcp", "127.0.0.1", "80") == "error Network is unreachable"
    assert probe(c, none, "tcp", "198.18.1.10", "80") == "error Network is unreachable"
    egress = make("egress")
    assert run(c, egress["id"], argv=["python3", "-c", interfaces])["stdout"].split() == \
        ["lo", "eth0"]


def test_cidr_policy_through_nat(c: httpx.Client, make: Any, lab: EgressLab) -> None:
    sb = make({"egress": {"allow": ["198.18.1.0/24"], "deny": ["198.18.1.30"]}})
    assert sb["network"] == "egress"
    egress = sb["egress"]
    assert egress["allow"] == ["198.18.1.0/24"] and egress["deny"] == ["198.18.1.30"]
    resolv = run(c, sb["id"], cmd="cat /etc/resolv.conf")["stdout"]
    assert f"nameserver {egress['gateway']}" in resolv
    # Allowed, and seen by the upstream as the host: masqueraded (it has no route back).
    assert probe(c, sb, "tcp", "198.18.1.10", "80") == f"ok upstream 198.18.1.10 saw {UPLINK_HOST}"
    assert probe(c, sb, "tcp", "198.18.1.30", "80") == "refused"   # denied beats allowed
    assert probe(c, sb, "tcp", "198.18.5.1", "80") == "refused"    # not listed
    assert probe(c, sb, "tcp", "198.18.0.53", "53") == "refused"   # the upstream DNS directly
    assert probe(c, sb, "tcp", "10.99.0.1", "80") == "refused"     # private
    assert probe(c, sb, "tcp", HOST_ADDRESS, "8081") == "refused"  # the host's own service
    assert lab.daemon is not None
    for host in (egress["gateway"], HOST_ADDRESS, UPLINK_HOST):   # the API, on every address
        assert probe(c, sb, "tcp", host, str(lab.daemon.port)) == "refused"
    # No names in the allow list: none resolve.
    assert probe(c, sb, "dns", "pypi.org") == "gai -2"


def test_names_resolve_only_when_allowed_and_open_their_answers(c: httpx.Client,
                                                                 make: Any) -> None:
    sb = make({"egress": {"allow": ["pypi.org", "*.github.com", "*.pypi.org"],
                          "deny": ["evil.pypi.org", "198.18.3.0/24"]}})
    # Not open before the sandbox resolves it.
    assert probe(c, sb, "tcp", "198.18.1.10", "80") == "refused"
    assert probe(c, sb, "dns", "pypi.org") == "addr 198.18.1.10"
    assert probe(c, sb, "tcp", "pypi.org", "80") == "ok upstream 198.18.1.10 saw 203.0.113.1"
    # The upstream leaves www.github.com at its CNAME: the resolver follows it and opens the
    # target's address, though the apex itself is not allowed.
    assert probe(c, sb, "dns", "www.github.com") == "addr 198.18.1.20"
    assert probe(c, sb, "tcp", "www.github.com", "80").startswith("ok upstream 198.18.1.20")
    assert probe(c, sb, "dns", "github.com") == "gai -2"
    assert probe(c, sb, "dns", "evil.test") == "gai -2"
    assert probe(c, sb, "dns", "evil.pypi.org") == "gai -2"            # a deny pattern wins
    # An allowed name does not open a private or denied address.
    assert probe(c, sb, "dns", "private.pypi.org") == "addr 10.99.0.1"
    assert probe(c, sb, "tcp", "10.99.0.1", "80") == "refused"
    assert probe(c, sb, "dns", "denied.pypi.org") == "addr 198.18.3.1"
    assert probe(c, sb, "tcp", "198.18.3.1", "80") == "refused"
    # Over TCP too.
    gateway = sb["egress"]["gateway"]
    assert probe(c, sb, "tcpdns", gateway, "pypi.org") == "rcode 0 answers 1 198.18.1.10"
    assert probe(c, sb, "tcpdns", gateway, "evil.test") == "rcode 3 answers 0"
    # IPv4 only: AAAA has no answer.
    assert probe(c, sb, "dns", "pypi.org", "6").startswith("gai ")
    # A pin is the sandbox's own.
    other = make({"egress": {"allow": ["files.pypi.org"]}})
    assert probe(c, other, "tcp", "198.18.1.10", "80") == "refused"
    metrics = c.get("/metrics").text
    for outcome in ("answered", "refused", "empty"):
        assert f'sandstream_dns_queries_total{{outcome="{outcome}"}}' in metrics, metrics
    assert "sandstream_sandboxes_egress 2" in metrics


FLOOD = r'''
import socket, struct, sys, time
q = struct.pack("!HHHHHH", 9, 0x0100, 1, 0, 0, 0) + b"\x04pypi\x03org\x00" + struct.pack("!HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
end = time.monotonic() + float(sys.argv[2])
sent = 0
while time.monotonic() < end:
    try:
        s.sendto(q, (sys.argv[1], 53)); sent += 1
    except BlockingIOError:
        time.sleep(0.001)
    try:
        while s.recv(512): pass
    except BlockingIOError:
        pass
print(sent)
'''


def test_a_query_flood_is_bounded_and_hurts_no_neighbour(c: httpx.Client, make: Any) -> None:
    flooder = make({"egress": {"allow": ["pypi.org"]}})
    neighbour = make({"egress": {"allow": ["pypi.org"]}})
    r = c.post(f"/v1/sandboxes/{flooder['id']}/processes",
               json={"id": "flood", "argv": ["python3", "-c", FLOOD,
                                             flooder["egress"]["gateway"], "4"]})
    assert r.status_code == 201, r.text
    time.sleep(0.5)
    # While it floods: the neighbour resolves and connects, and the daemon answers promptly.
    for _ in range(5):
        started = time.monotonic()
        assert probe(c, neighbour, "tcp", "pypi.org", "80").startswith("ok upstream 198.18.1.10")
        assert time.monotonic() - started < 3
    logs = c.get(f"/v1/sandboxes/{flooder['id']}/processes/flood/logs?follow=1", timeout=30)
    assert logs.status_code == 200
    assert 'sandstream_dns_queries_total{outcome="dropped"}' in c.get("/metrics").text


def test_open_egress_reaches_public_addresses_only(c: httpx.Client, make: Any) -> None:
    sb = make("egress")
    assert sb["egress"]["allow"] is None
    assert probe(c, sb, "tcp", "198.18.5.1", "80").startswith("ok upstream 198.18.5.1")
    assert probe(c, sb, "dns", "evil.test") == "addr 198.18.1.30"
    assert probe(c, sb, "tcp", "10.99.0.1", "80") == "refused"
    assert probe(c, sb, "tcp", HOST_ADDRESS, "8081") == "refused"
    named = make({"egress": {"allow": ["10.99.0.0/16", f"{HOST_ADDRESS}/32"]}})
    assert probe(c, named, "tcp", "10.99.0.1", "80").startswith("ok upstream 10.99.0.1")
    assert probe(c, named, "tcp", HOST_ADDRESS, "8081").startswith("ok")


def test_sandboxes_cannot_reach_each_other(c: httpx.Client, make: Any) -> None:
    a = make("egress")
    b = make({"egress": {"allow": ["10.0.0.0/8"]}})   # even naming the pool's range
    r = c.post(f"/v1/sandboxes/{a['id']}/processes",
               json={"argv": ["python3", "-m", "http.server", "9000"]})
    assert r.status_code == 201, r.text
    time.sleep(0.5)
    assert probe(c, a, "tcp", "127.0.0.1", "9000").startswith("ok")
    assert probe(c, b, "tcp", a["egress"]["address"], "9000") == "refused"


def test_bad_policies_are_refused(c: httpx.Client) -> None:
    for network, words in [
        ({"egress": {"allow": ["10.0.0.1/8"]}}, "10.0.0.0/8"),
        ({"egress": {"allow": ["1.2.3.4/33"]}}, "prefix length"),
        ({"egress": {"allow": ["bad name!"]}}, "bad name!"),
        ({"egress": {"allow": "pypi.org"}}, "array"),
        ({"egress": {"allow": [], "block": []}}, "block"),
        ({"egress": 1}, "network"),
        ("wan", "network"),
    ]:
        err = assert_error(c.post("/v1/sandboxes", json={"network": network}), 400,
                           "invalid_request")
        assert words in err["message"], (network, err)


def test_delete_leaves_no_link_table_or_pin(c: httpx.Client, lab: EgressLab) -> None:
    assert shutil.which("nft"), "nft (Debian's nftables) reads the tables back"
    ids = []
    for _ in range(5):
        sb = create_sandbox(c, network={"egress": {"allow": ["pypi.org"]}})
        probe(c, sb, "dns", "pypi.org")
        ids.append(sb["id"])
    for sid in ids:
        assert c.delete(f"/v1/sandboxes/{sid}").status_code == 204
    assert wait_until(lambda: "ss-" not in lab.ns_output("ip", "-br", "link"), 5), \
        lab.ns_output("ip", "-br", "link")
    assert " ss_" not in lab.ns_output("nft", "list", "tables")


def test_restart_keeps_egress_and_dns(tmp_path: Path) -> None:
    lab = EgressLab(tmp_path)
    try:
        lab.up()
        d = lab.start_daemon(tmp_path / "data", ["--teardown-on-exit", "false"])
        with d.client() as c:
            sb = create_sandbox(c, network={"egress": {"allow": ["pypi.org"]}})
            assert probe(c, sb, "tcp", "pypi.org", "80").startswith("ok")
        d.stop()
        d = lab.start_daemon(tmp_path / "data", ["--teardown-on-exit", "true"])
        with d.client() as c:
            assert c.get(f"/v1/sandboxes/{sb['id']}").json()["status"] == "running"
            assert probe(c, sb, "dns", "pypi.org") == "addr 198.18.1.10"
            assert probe(c, sb, "tcp", "pypi.org", "80").startswith("ok")
            assert c.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
    finally:
        lab.down()


def test_egress_is_refused_when_the_daemon_has_none(daemon_factory: Any) -> None:
    d = daemon_factory(args=["--egress-pool", "none"])
    with d.client() as c:
        err = assert_error(c.post("/v1/sandboxes", json={"network": "egress"}), 400,
                           "invalid_request")
        assert "egress_pool" in err["message"]


# --- Changing the rules of a running sandbox (PATCH /v1/sandboxes/{id}/network) ---------------

# Opens a connection to HOST:80 and says so, then sends its request on it once /tmp/go exists:
# prints the upstream's answer, or how the connection failed.
HOLD = r'''
import os, socket, sys, time
s = socket.create_connection((sys.argv[1], 80), timeout=5)
print("connected", flush=True)
while not os.path.exists("/tmp/go"):
    time.sleep(0.05)
try:
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    print("ok " + data.decode(errors="replace").split("\r\n\r\n", 1)[-1].strip() if data else "eof")
except ConnectionResetError:
    print("reset")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error " + (e.strerror or str(e)))
'''


def update(c: httpx.Client, sandbox_id: str, network: Any) -> httpx.Response:
    return c.patch(f"/v1/sandboxes/{sandbox_id}/network", json=network)


def updated(c: httpx.Client, sb: dict[str, Any], network: Any) -> dict[str, Any]:
    """PATCH .../network; asserts 200 and returns the sandbox it answers."""
    r = update(c, sb["id"], network)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    assert answer["id"] == sb["id"] and answer["network"] == "egress", answer
    # Its addresses stay; GET says what the answer said.
    assert (answer["egress"]["address"], answer["egress"]["gateway"]) == \
        (sb["egress"]["address"], sb["egress"]["gateway"]), answer
    assert c.get(f"/v1/sandboxes/{sb['id']}").json()["egress"] == answer["egress"]
    return answer


def rules(sb: dict[str, Any]) -> tuple[Any, Any]:
    return sb["egress"]["allow"], sb["egress"]["deny"]


def hold(c: httpx.Client, sb: dict[str, Any], host: str) -> None:
    """Starts HOLD in the sandbox (process `hold-HOST`) and waits for its connection to open."""
    r = c.post(f"/v1/sandboxes/{sb['id']}/processes",
               json={"id": f"hold-{host}", "argv": ["python3", "-c", HOLD, host]})
    assert r.status_code == 201, r.text

    def out() -> str:
        return str(c.get(f"/v1/sandboxes/{sb['id']}/processes/hold-{host}/logs").json()["stdout"])

    assert wait_until(lambda: "connected" in out(), 10), out()


def release(c: httpx.Client, sb: dict[str, Any], *hosts: str) -> list[str]:
    """Lets each HOLD send its request; what each got."""
    run(c, sb["id"], cmd="touch /tmp/go")
    got = []
    for host in hosts:
        path = f"/v1/sandboxes/{sb['id']}/processes/hold-{host}"
        r = c.get(f"{path}/wait", params={"timeout_seconds": 20})
        assert r.status_code == 200, r.text
        logs = c.get(f"{path}/logs").json()
        assert r.json()["exit_code"] == 0, logs
        got.append(str(logs["stdout"]).split("connected", 1)[1].strip())
    return got


def test_update_network_denies_at_once_even_an_open_connection(c: httpx.Client,
                                                               make: Any) -> None:
    a, b, kept = "198.18.1.10", "198.18.1.11", "198.18.1.20"
    sb = make({"egress": {"allow": [a, kept]}})
    assert probe(c, sb, "tcp", a, "80") == f"ok upstream {a} saw {UPLINK_HOST}"
    assert probe(c, sb, "tcp", b, "80") == "refused"
    hold(c, sb, a)
    hold(c, sb, kept)
    got = updated(c, sb, {"egress": {"allow": [b, kept], "deny": [a]}})
    assert got["status"] == "running"
    assert rules(got) == ([b, kept], [a])
    # The connection opened before the change is cut: its request after it gets a reset. One to
    # a host still allowed is judged anew, and allowed.
    assert release(c, sb, a, kept) == ["reset", f"ok upstream {kept} saw {UPLINK_HOST}"]
    assert probe(c, sb, "tcp", a, "80") == "refused"
    assert probe(c, sb, "tcp", b, "80") == f"ok upstream {b} saw {UPLINK_HOST}"
    # "egress" and {"egress": true}: every public address and name, the private ranges still not.
    for network in ("egress", {"egress": True}):
        got = updated(c, sb, network)
        assert rules(got) == (None, [])
        assert probe(c, sb, "tcp", a, "80").startswith(f"ok upstream {a}")
        assert probe(c, sb, "tcp", "198.18.5.1", "80").startswith("ok upstream 198.18.5.1")
        assert probe(c, sb, "dns", "evil.test") == "addr 198.18.1.30"
        assert probe(c, sb, "tcp", "10.99.0.1", "80") == "refused"
        assert probe(c, sb, "tcp", HOST_ADDRESS, "8081") == "refused"
    # An empty allow list: nothing at all.
    got = updated(c, sb, {"egress": {"allow": []}})
    assert rules(got) == ([], [])
    assert probe(c, sb, "tcp", a, "80") == "refused"
    assert probe(c, sb, "dns", "pypi.org") == "gai -2"


def test_update_network_changes_the_names_and_drops_their_openings(c: httpx.Client,
                                                                    make: Any) -> None:
    sb = make({"egress": {"allow": ["pypi.org", "github.com"]}})
    assert probe(c, sb, "dns", "pypi.org") == "addr 198.18.1.10"
    assert probe(c, sb, "tcp", "pypi.org", "80").startswith("ok upstream 198.18.1.10")
    assert probe(c, sb, "dns", "github.com") == "addr 198.18.1.20"
    assert probe(c, sb, "dns", "files.pypi.org") == "gai -2"
    got = updated(c, sb, {"egress": {"allow": ["files.pypi.org", "github.com"],
                                     "deny": ["pypi.org"]}})
    assert rules(got) == (["files.pypi.org", "github.com"], ["pypi.org"])
    # The denied name no longer resolves, over UDP or TCP, and what it opened is closed.
    assert probe(c, sb, "dns", "pypi.org") == "gai -2"
    assert probe(c, sb, "tcpdns", sb["egress"]["gateway"], "pypi.org") == "rcode 3 answers 0"
    assert probe(c, sb, "tcp", "198.18.1.10", "80") == "refused"
    # Every opening of the old rules went: github.com's address too, until it resolves again.
    assert probe(c, sb, "tcp", "198.18.1.20", "80") == "refused"
    assert probe(c, sb, "dns", "github.com") == "addr 198.18.1.20"
    assert probe(c, sb, "tcp", "198.18.1.20", "80").startswith("ok upstream 198.18.1.20")
    # The newly allowed name resolves and connects.
    assert probe(c, sb, "dns", "files.pypi.org") == "addr 198.18.1.11"
    assert probe(c, sb, "tcp", "files.pypi.org", "80").startswith("ok upstream 198.18.1.11")


def test_update_network_refusals_change_nothing(c: httpx.Client, make: Any) -> None:
    sb = make({"egress": {"allow": ["pypi.org"], "deny": ["198.18.3.0/24"]}})
    # Checked as at create: 400 naming what is wrong.
    for network, words in [
        ({"egress": {"allow": ["10.0.0.1/8"]}}, "10.0.0.0/8"),
        ({"egress": {"allow": ["1.2.3.4/33"]}}, "prefix length"),
        ({"egress": {"allow": ["bad name!"]}}, "bad name!"),
        ({"egress": {"deny": ["bad name!"]}}, "bad name!"),
        ({"egress": {"allow": "pypi.org"}}, "array"),
        ({"egress": {"allow": [], "block": []}}, "block"),
        ({"egress": {"allow": [f"198.18.{i // 256}.{i % 256}" for i in range(257)]}}, "256"),
    ]:
        err = assert_error(update(c, sb["id"], network), 400, "invalid_request")
        assert words in err["message"], (network, err)
    for network in ({"egress": 1}, "wan", 7):
        assert_error(update(c, sb["id"], network), 400, "invalid_request")
    # A body that is not JSON, or says it is something else, whatever its shape.
    for body in ('"egress"', '{"egress": {}}'):
        r = c.patch(f"/v1/sandboxes/{sb['id']}/network", content=body,
                    headers={"Content-Type": "text/plain"})
        assert_error(r, 415, "unsupported_media_type")
    for body in ('"egress', "[1,"):
        r = c.patch(f"/v1/sandboxes/{sb['id']}/network", content=body,
                    headers={"Content-Type": "application/json"})
        assert_error(r, 400, "invalid_json")
    # A mode without egress: the mode is fixed at create.
    for network in ("loopback", "none", {"egress": False}):
        assert_error(update(c, sb["id"], network), 409, "conflict")
    after = c.get(f"/v1/sandboxes/{sb['id']}").json()
    assert after["egress"] == sb["egress"]
    assert probe(c, sb, "dns", "pypi.org") == "addr 198.18.1.10"
    assert not [e for e in c.get(f"/v1/sandboxes/{sb['id']}/events").json()["events"]
                if e["type"] == "sandbox.network_updated"]
    # A sandbox made without egress cannot be given it.
    for mode in ("loopback", "none"):
        other = make(mode)
        for network in ("egress", {"egress": {"allow": ["pypi.org"]}}, {"egress": {"allow": []}}):
            assert_error(update(c, other["id"], network), 409, "conflict")
        again = c.get(f"/v1/sandboxes/{other['id']}").json()
        assert again["network"] == mode and again["egress"] is None
    assert_error(update(c, "sb_0000000000000000", "egress"), 404, "not_found")
    # A key's to change, not a scoped token's.
    r = c.post(f"/v1/sandboxes/{sb['id']}/tokens", json={"scopes": ["read", "exec"]})
    assert r.status_code == 201, r.text
    assert_error(c.patch(f"/v1/sandboxes/{sb['id']}/network", json="egress",
                         headers={"Authorization": f"Bearer {r.json()['token']}"}), 403, "forbidden")


def test_update_network_of_a_paused_sandbox(c: httpx.Client, make: Any) -> None:
    sb = make({"egress": {"allow": ["pypi.org"]}})
    assert c.post(f"/v1/sandboxes/{sb['id']}/pause", json={}).json()["status"] == "paused"
    got = updated(c, sb, {"egress": {"allow": ["files.pypi.org"]}})
    assert got["status"] == "running", got   # resumed first, like any request
    assert probe(c, sb, "dns", "files.pypi.org") == "addr 198.18.1.11"
    fixed = make({"egress": {"allow": ["pypi.org"]}}, auto_resume=False)
    assert c.post(f"/v1/sandboxes/{fixed['id']}/pause", json={}).json()["status"] == "paused"
    assert_error(update(c, fixed["id"], "egress"), 409, "paused")
    still = c.get(f"/v1/sandboxes/{fixed['id']}").json()
    assert still["status"] == "paused" and still["egress"] == fixed["egress"]
    assert c.post(f"/v1/sandboxes/{fixed['id']}/resume").status_code == 200


def test_update_network_is_journaled(c: httpx.Client, make: Any) -> None:
    sb = make("egress")
    updated(c, sb, {"egress": {"deny": ["evil.test"]}})
    updated(c, sb, {"egress": {"allow": ["pypi.org"]}})
    events = c.get(f"/v1/sandboxes/{sb['id']}/events").json()["events"]
    changes = [e for e in events if e["type"] == "sandbox.network_updated"]
    assert len(changes) == 2, events
    assert events.index(changes[0]) > 0   # after sandbox.created
    assert all(e["seq"] and e["time"] for e in changes), changes


def test_restart_keeps_the_updated_rules(tmp_path: Path) -> None:
    lab = EgressLab(tmp_path)
    try:
        lab.up()
        d = lab.start_daemon(tmp_path / "data", ["--teardown-on-exit", "false"])
        with d.client() as c:
            sb = create_sandbox(c, network={"egress": {"allow": ["pypi.org"]}})
            assert probe(c, sb, "tcp", "pypi.org", "80").startswith("ok")
            got = updated(c, sb, {"egress": {"allow": ["files.pypi.org"],
                                             "deny": ["pypi.org"]}})
        d.stop()
        d = lab.start_daemon(tmp_path / "data", ["--teardown-on-exit", "true"])
        with d.client() as c:
            after = c.get(f"/v1/sandboxes/{sb['id']}").json()
            assert after["status"] == "running" and after["egress"] == got["egress"], after
            assert probe(c, sb, "dns", "pypi.org") == "gai -2"
            assert probe(c, sb, "tcp", "198.18.1.10", "80") == "refused"
            assert probe(c, sb, "dns", "files.pypi.org") == "addr 198.18.1.11"
            assert probe(c, sb, "tcp", "files.pypi.org", "80").startswith("ok upstream 198.18.1.11")
            # The journal is the running daemon's (a restart begins it with sandbox.restored).
            types = [e["type"] for e in c.get(f"/v1/sandboxes/{sb['id']}/events").json()["events"]]
            assert "sandbox.restored" in types, types
            assert c.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
    finally:
        lab.down()


# --- E2B's network rules, mapped onto sandstream's -----------------------------------------

E2B_KEY = {"X-API-KEY": API_KEY}


def e2b_create(e: httpx.Client, made: list[str], **body: Any) -> dict[str, Any]:
    r = e.post("/v2/sandboxes", json={"templateID": "base", **body}, headers=E2B_KEY)
    assert r.status_code == 201, r.text
    made.append(r.json()["sandboxID"])
    return {"id": r.json()["sandboxID"]}


def v1(c: httpx.Client, sb: dict[str, Any]) -> dict[str, Any]:
    got: dict[str, Any] = c.get(f"/v1/sandboxes/{sb['id']}").json()
    return got


def test_e2b_network_rules_map_onto_egress(lab: EgressLab, c: httpx.Client) -> None:
    """E2B's allowOut and denyOut, at create and through PUT /sandboxes/{id}/network, become
    sandstream's rules: with 0.0.0.0/0 denied, only allowOut (and the other denials); without,
    every public address but denyOut. An allowOut inside a denied prefix, which would win on
    E2B, is refused."""
    assert lab.daemon is not None
    made: list[str] = []
    with lab.daemon.client(key=None) as e:
        try:
            only = e2b_create(e, made, network={"allowOut": ["198.18.1.0/24"],
                                                "denyOut": ["0.0.0.0/0", "198.18.1.30"]})
            assert v1(c, only)["network"] == "egress"
            assert rules(v1(c, only)) == (["198.18.1.0/24"], ["198.18.1.30"])
            assert probe(c, only, "tcp", "198.18.1.10", "80").startswith("ok upstream 198.18.1.10")
            assert probe(c, only, "tcp", "198.18.1.30", "80") == "refused"
            assert probe(c, only, "tcp", "198.18.5.1", "80") == "refused"
            assert e.get(f"/sandboxes/{only['id']}", headers=E2B_KEY).json()[
                "allowInternetAccess"] is True
            # allowInternetAccess false with allowOut: allowOut only.
            named = e2b_create(e, made, allowInternetAccess=False,
                               network={"allowOut": ["pypi.org"]})
            assert rules(v1(c, named)) == (["pypi.org"], [])
            assert probe(c, named, "dns", "pypi.org") == "addr 198.18.1.10"
            assert probe(c, named, "dns", "github.com") == "gai -2"
            # No 0.0.0.0/0: every public address but denyOut; allowOut adds nothing.
            sb = e2b_create(e, made, allowInternetAccess=True,
                            network={"allowOut": ["pypi.org"], "denyOut": ["198.18.5.0/24"]})
            assert rules(v1(c, sb)) == (None, ["198.18.5.0/24"])
            assert probe(c, sb, "tcp", "198.18.5.1", "80") == "refused"
            assert probe(c, sb, "tcp", "198.18.1.20", "80").startswith("ok upstream 198.18.1.20")
            # The same without allowInternetAccess (E2B's SDK sends none unless told).
            unsaid = e2b_create(e, made, network={"allowOut": ["pypi.org"],
                                                  "denyOut": ["198.18.5.0/24"]})
            assert rules(v1(c, unsaid)) == (None, ["198.18.5.0/24"])

            def put(sandbox_id: str, body: Any) -> httpx.Response:
                return e.put(f"/sandboxes/{sandbox_id}/network", json=body, headers=E2B_KEY)

            r = put(sb["id"], {"allowOut": ["198.18.1.11"], "denyOut": ["0.0.0.0/0"]})
            assert r.status_code == 204 and not r.content, r.text
            assert rules(v1(c, sb)) == (["198.18.1.11"], [])
            assert probe(c, sb, "tcp", "198.18.1.11", "80").startswith("ok upstream 198.18.1.11")
            assert probe(c, sb, "tcp", "198.18.1.20", "80") == "refused"
            assert put(sb["id"], {"allowOut": ["198.18.1.11"],
                                  "denyOut": ["198.18.1.10"]}).status_code == 204
            assert rules(v1(c, sb)) == (None, ["198.18.1.10"])
            assert probe(c, sb, "tcp", "198.18.1.20", "80").startswith("ok upstream 198.18.1.20")
            assert put(sb["id"], {}).status_code == 204
            assert rules(v1(c, sb)) == (None, [])
            # No internet and no rules: a running sandbox keeps egress that reaches nothing.
            assert put(sb["id"], {"allowInternetAccess": False}).status_code == 204
            assert rules(v1(c, sb)) == ([], [])
            assert v1(c, sb)["network"] == "egress"
            assert probe(c, sb, "tcp", "198.18.1.20", "80") == "refused"
            assert put(sb["id"], {}).status_code == 204
            assert rules(v1(c, sb)) == (None, [])
            # What sandstream cannot do: an allowOut inside a denied prefix.
            for body in ({"allowOut": ["198.18.3.1"], "denyOut": ["198.18.3.0/24"]},
                         {"allowOut": ["198.18.3.128/25"], "denyOut": ["198.18.0.0/16"]}):
                r = put(sb["id"], body)
                assert r.status_code == 400 and r.json()["code"] == 400, (body, r.text)
                assert body["allowOut"][0] in r.json()["message"], r.text
            r = put(sb["id"], {"allowOut": ["bad name!"], "denyOut": ["0.0.0.0/0"]})
            assert r.status_code == 400 and "bad name!" in r.json()["message"], r.text
            assert rules(v1(c, sb)) == (None, [])
            types = [x["type"] for x in c.get(f"/v1/sandboxes/{sb['id']}/events").json()["events"]]
            assert types.count("sandbox.network_updated") == 5, types
            # A sandbox without the internet has no egress to change; an unknown one is a 404.
            closed = e2b_create(e, made, allowInternetAccess=False)
            assert v1(c, closed)["network"] == "loopback"
            r = put(closed["id"], {"allowOut": ["pypi.org"], "denyOut": ["0.0.0.0/0"]})
            assert r.status_code == 409 and r.json()["code"] == 409, r.text
            r = put("sb_0000000000000000", {})
            assert r.status_code == 404 and r.json()["code"] == 404, r.text
            r = put(sb["id"], {"allowOut": "pypi.org"})
            assert r.status_code == 400, r.text
        finally:
            for sid in made:
                c.delete(f"/v1/sandboxes/{sid}")


class TcpRelay:
    """127.0.0.1:<port> in the tests' own namespace, relayed to a Unix socket: the lab's daemon
    for E2B's SDK, which takes a URL."""

    def __init__(self, path: Path):
        self.path = path
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(str(self.path))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()


def test_e2b_sdk_network_and_update_network(lab: EgressLab, c: httpx.Client,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """E2B's Python SDK: `Sandbox.create(network=...)` and `update_network(...)`, their effect
    seen through sandstream's own API and in the sandbox."""
    from e2b import ALL_TRAFFIC, Sandbox, SandboxException

    assert lab.daemon is not None and lab.daemon.uds is not None
    relay = TcpRelay(lab.daemon.uds)
    url = f"http://127.0.0.1:{relay.port}"
    monkeypatch.setenv("E2B_API_URL", url)
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    for name in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    try:
        sbx = Sandbox.create(network={"allow_out": ["pypi.org"], "deny_out": [ALL_TRAFFIC]})
        sb = {"id": sbx.sandbox_id}
        try:
            assert rules(v1(c, sb)) == (["pypi.org"], [])
            assert probe(c, sb, "tcp", "pypi.org", "80").startswith("ok upstream 198.18.1.10")
            assert probe(c, sb, "tcp", "198.18.1.11", "80") == "refused"
            sbx.update_network({"allow_out": ["198.18.1.11"],
                                "deny_out": lambda ctx: [ctx.all_traffic]})
            assert rules(v1(c, sb)) == (["198.18.1.11"], [])
            assert probe(c, sb, "tcp", "198.18.1.11", "80").startswith("ok upstream 198.18.1.11")
            assert probe(c, sb, "dns", "pypi.org") == "gai -2"
            assert probe(c, sb, "tcp", "198.18.1.10", "80") == "refused"
            Sandbox.update_network(sbx.sandbox_id, {"deny_out": ["198.18.1.11"]})
            assert rules(v1(c, sb)) == (None, ["198.18.1.11"])
            assert probe(c, sb, "tcp", "198.18.1.11", "80") == "refused"
            assert probe(c, sb, "tcp", "198.18.1.10", "80").startswith("ok upstream 198.18.1.10")
            with pytest.raises(SandboxException, match="400"):
                sbx.update_network({"allow_out": ["198.18.3.1"], "deny_out": ["198.18.3.0/24"]})
            assert rules(v1(c, sb)) == (None, ["198.18.1.11"])
            # envd through the same URL: the sandbox's own view.
            assert sbx.commands.run("echo hi").stdout == "hi\n"
        finally:
            sbx.kill()
        closed = Sandbox.create(allow_internet_access=False, network={"allow_out": ["pypi.org"]})
        try:
            assert rules(v1(c, {"id": closed.sandbox_id})) == (["pypi.org"], [])
        finally:
            closed.kill()
        plain = Sandbox.create(allow_internet_access=False)
        try:
            with pytest.raises(SandboxException, match="409"):
                plain.update_network({"allow_out": ["pypi.org"], "deny_out": [ALL_TRAFFIC]})
        finally:
            plain.kill()
    finally:
        relay.close()
