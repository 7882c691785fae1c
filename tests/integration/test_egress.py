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
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import Daemon, assert_error, create_sandbox, run, wait_until

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

    def create(network: Any) -> dict[str, Any]:
        sb = create_sandbox(c, network=network)
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
