"""Root of a sandbox holds Docker's default capabilities in its own user namespace, without
no_new_privs: in a Debian template, apt and dpkg install a package whose maintainer script
creates a system user and hands it files, su switches users, root changes owners and reads
other users' files, and a setuid sudo works for the default user. The template is the Debian
root `scripts/install-deps test` builds with mmdebstrap; no network is used inside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import create_sandbox, run

TEMPLATES = Path("/var/cache/sandstream/templates")
DEBIAN = TEMPLATES / "debian"

# A package of one file, which its postinst gives to a system user the postinst creates.
BUILD_PACKAGE = r"""set -e
mkdir -p /tmp/hello/DEBIAN /tmp/hello/usr/share/hello
cat > /tmp/hello/DEBIAN/control <<'EOF'
Package: sandstream-hello
Version: 1.0
Architecture: all
Maintainer: sandstream <nobody@example.invalid>
Description: a file owned by a system user of its own
EOF
cat > /tmp/hello/DEBIAN/postinst <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  getent passwd hellod >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin hellod
  chown -R hellod:hellod /usr/share/hello
  chmod 0600 /usr/share/hello/greeting
fi
EOF
chmod 0755 /tmp/hello/DEBIAN/postinst
echo hello > /tmp/hello/usr/share/hello/greeting
dpkg-deb --root-owner-group --build /tmp/hello /tmp/hello.deb >/dev/null
"""


def sh(c: httpx.Client, sandbox_id: str, cmd: str, **body: Any) -> str:
    r = run(c, sandbox_id, cmd=cmd, timeout_seconds=120, **body)
    assert r["exit_code"] == 0, r
    return str(r["stdout"])


@pytest.fixture
def debian(daemon_factory: Any) -> Any:
    if not (DEBIAN / "usr/bin/apt-get").exists():
        pytest.skip(f"no Debian root at {DEBIAN}: `scripts/install-deps test` builds it with "
                    "mmdebstrap")
    d = daemon_factory(args=["--templates-dir", str(TEMPLATES)])
    with d.client(timeout=150) as c:
        sb = create_sandbox(c, template="debian", limits={"memory_mb": 512})
        yield c, sb["id"]
        c.delete(f"/v1/sandboxes/{sb['id']}")


def test_root_installs_a_package_that_creates_its_user(debian: Any) -> None:
    c, sid = debian
    sh(c, sid, BUILD_PACKAGE)
    # apt drops to _apt (setgroups, setuid), dpkg chowns, the postinst runs useradd.
    r = run(c, sid, cmd="apt-get install -y /tmp/hello.deb", user="root", timeout_seconds=120)
    assert r["exit_code"] == 0, r
    assert "Setting up sandstream-hello (1.0)" in r["stdout"], r
    assert sh(c, sid, "dpkg-query -W -f '${Status}' sandstream-hello", user="root") == \
        "install ok installed"
    assert sh(c, sid, "stat -c '%U:%G %a' /usr/share/hello/greeting", user="root") == \
        "hellod:hellod 600\n"
    # Root reads the 0600 file of another user (DAC_OVERRIDE); that user is not root's.
    assert sh(c, sid, "cat /usr/share/hello/greeting", user="root") == "hello\n"
    denied = run(c, sid, cmd="cat /usr/share/hello/greeting")
    assert denied["exit_code"] != 0 and "Permission denied" in denied["stderr"], denied


def test_root_switches_users_and_changes_owners(debian: Any) -> None:
    c, sid = debian
    assert sh(c, sid, "su -s /bin/sh -c id nobody", user="root") == \
        "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\n"
    assert sh(c, sid, "touch /tmp/f && chown 1234:4321 /tmp/f && stat -c %u:%g /tmp/f",
              user="root") == "1234:4321\n"
    assert sh(c, sid, "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", user="root") == \
        "CapEff:\t00000000a80425fb\nNoNewPrivs:\t0\n"


def test_a_setuid_sudo_works_for_the_default_user(debian: Any) -> None:
    c, sid = debian
    sh(c, sid, "useradd -u 1000 -M -d /workspace -s /bin/sh user && "
               "echo 'user ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/user && "
               "chmod 0440 /etc/sudoers.d/user", user="root")
    assert sh(c, sid, "id -un; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status") == \
        "user\nCapEff:\t0000000000000000\nNoNewPrivs:\t0\n"
    assert sh(c, sid, "sudo -n id -u; sudo -n grep ^CapEff /proc/self/status") == \
        "0\nCapEff:\t00000000a80425fb\n"
    # A setuid binary gains no more than the bounding set: root's set, never SYS_ADMIN.
    assert sh(c, sid, "sudo -n grep ^CapBnd /proc/self/status") == "CapBnd:\t00000000a80425fb\n"
