"""The value types the API returns: sandboxes, processes, buffered exec results, resource
metrics, the volumes a sandbox mounts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

# How a reader of a process's output paces it. "wait": when the server's window is full of
# output this reader has not taken, the process is held back (it blocks in write(2), as on a
# pipe), so nothing is lost. "skip": the process is never held; a reader that falls behind the
# window gets a `Gap` naming what it missed.
Flow = Literal["wait", "skip"]

# What a sandbox can reach. "loopback" (the server's default): its own loopback only; "none": not
# even that; "egress": loopback and every public address and name. `Egress` narrows "egress" to
# a policy.
Network = Literal["none", "loopback", "egress"]


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _auto_pause(data: dict[str, Any]) -> dict[str, Any]:
    """A sandbox's `auto_pause` object; empty when it is null (off)."""
    value = data.get("auto_pause")
    return value if isinstance(value, dict) else {}


def _auto_pause_mode(data: dict[str, Any]) -> str | None:
    """How a sandbox pauses itself when idle: its `auto_pause.mode` ("freeze" when the server
    leaves it out); None when it never does."""
    auto_pause = _auto_pause(data)
    if _opt_int(auto_pause.get("idle_seconds")) is None:
        return None
    return _opt_str(auto_pause.get("mode")) or "freeze"


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


@dataclass(frozen=True)
class Limits:
    """Resource limits of a sandbox; `None` leaves a limit to the server's default."""

    memory_mb: int | None = None
    pids: int | None = None
    cpu_percent: int | None = None
    disk_mb: int | None = None
    open_files: int | None = None

    def to_json(self) -> dict[str, int]:
        """The request form: only the limits that were set."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> Limits:
        """Parses the `limits` object of a sandbox."""
        data = data if isinstance(data, dict) else {}
        return cls(**{k: _opt_int(data.get(k)) for k in cls.__dataclass_fields__})


def _rules(value: Any, name: str) -> tuple[str, ...]:
    # A str is a Sequence[str] too: "pypi.org" must not become nine one-letter rules.
    if isinstance(value, str):
        raise TypeError(f"Egress.{name} is a list of rules, not a string: [{value!r}]")
    return tuple(str(rule) for rule in value)


@dataclass(frozen=True)
class Egress:
    """Egress under a policy: as `network=` it asks for a sandbox that reaches only what the
    policy allows; as `SandboxInfo.egress` it is the policy the server holds, with the
    sandbox's addresses.

    Rules are IPv4 addresses (`203.0.113.7`), prefixes (`198.18.0.0/15`), names (`pypi.org`)
    and name patterns (`*.github.com`: every name under it but not itself; `*`: every name).
    `allow=None`: every public address and name; a list: only these. `deny` wins over `allow`.
    Private, loopback and link-local ranges, the host and other sandboxes stay out of reach
    unless an allow rule names them.
    """

    allow: Sequence[str] | None = None
    deny: Sequence[str] = ()
    # Set by the server, ignored in a request: the sandbox's address, and the host's end of
    # its link, where its DNS resolver answers.
    address: str | None = None
    gateway: str | None = None

    def __post_init__(self) -> None:
        if self.allow is not None:
            object.__setattr__(self, "allow", _rules(self.allow, "allow"))
        object.__setattr__(self, "deny", _rules(self.deny, "deny"))

    def to_json(self) -> dict[str, Any]:
        """The request form, `{"egress": {"allow": [...], "deny": [...]}}`."""
        policy: dict[str, Any] = {}
        if self.allow is not None:
            policy["allow"] = list(self.allow)
        if self.deny:
            policy["deny"] = list(self.deny)
        return {"egress": policy}

    @classmethod
    def from_json(cls, data: Any) -> Egress | None:
        """Parses the `egress` object of a sandbox; `None` for null."""
        if not isinstance(data, dict):
            return None
        allow = data.get("allow")
        return cls(
            allow=None if allow is None else [str(rule) for rule in allow],
            deny=[str(rule) for rule in data.get("deny") or []],
            address=_opt_str(data.get("address")),
            gateway=_opt_str(data.get("gateway")),
        )


@dataclass(frozen=True)
class VolumeMount:
    """A volume mounted into a sandbox: as `volumes=` of `Sandbox.create` it asks for volume
    `name` (a name or an id) at `path`; as `SandboxInfo.volumes` it is the mount the sandbox
    has, with the volume's `id`."""

    name: str
    path: str  # absolute inside the sandbox; not `/`, nor under /proc, /sys or /dev
    read_only: bool = False
    id: str | None = None  # set by the server, ignored in a request

    def to_json(self) -> dict[str, Any]:
        """The request form, `{"name", "path", "read_only"}`."""
        return {"name": self.name, "path": self.path, "read_only": self.read_only}

    @classmethod
    def from_json(cls, data: Any) -> VolumeMount:
        """Parses one entry of a sandbox's `volumes`."""
        data = data if isinstance(data, dict) else {}
        return cls(name=str(data.get("name", "")), path=str(data.get("path", "")),
                   read_only=data.get("read_only") is True, id=_opt_str(data.get("id")))


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the server describes it."""

    id: str
    template: str
    status: str
    created_at: str | None
    expires_at: str | None
    ttl_seconds: int | None
    env: dict[str, str]
    cwd: str
    limits: Limits
    network: str
    egress: Egress | None
    metadata: dict[str, str]
    processes_running: int
    tenant: str | None = None  # its owner; None: the admin's own
    # While paused: since when and how ("freeze": its processes stopped where they are, in
    # memory; "checkpoint": written to disk and ended); `status` is then "paused".
    paused_at: str | None = None
    pause_mode: str | None = None
    auto_resume: bool = True  # a request for it while paused resumes it
    # It pauses itself after this many idle seconds (None: never), and at its TTL when
    # `on_timeout` is "pause" (else it is deleted then).
    auto_pause_seconds: int | None = None
    # How it pauses itself when idle: "freeze" or "checkpoint" (None: it never does).
    auto_pause_mode: str | None = None
    on_timeout: str = "kill"
    volumes: tuple[VolumeMount, ...] = ()  # the volumes it mounts, as asked at create

    @property
    def paused(self) -> bool:
        """Whether the sandbox is paused (its processes stopped where they are)."""
        return self.status == "paused"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SandboxInfo:
        """Parses a Sandbox object."""
        return cls(
            id=str(data["id"]),
            template=str(data.get("template", "")),
            status=str(data.get("status", "")),
            created_at=_opt_str(data.get("created_at")),
            expires_at=_opt_str(data.get("expires_at")),
            ttl_seconds=_opt_int(data.get("ttl_seconds")),
            env=dict(data.get("env") or {}),
            cwd=str(data.get("cwd", "")),
            limits=Limits.from_json(data.get("limits")),
            network=str(data.get("network", "")),
            egress=Egress.from_json(data.get("egress")),
            metadata=dict(data.get("metadata") or {}),
            processes_running=_opt_int(data.get("processes_running")) or 0,
            tenant=_opt_str(data.get("tenant")),
            paused_at=_opt_str(data.get("paused_at")),
            pause_mode=_opt_str(data.get("pause_mode")),
            auto_resume=bool(data.get("auto_resume", True)),
            auto_pause_seconds=_opt_int(_auto_pause(data).get("idle_seconds")),
            auto_pause_mode=_auto_pause_mode(data),
            on_timeout=str(data.get("on_timeout") or "kill"),
            volumes=tuple(VolumeMount.from_json(v) for v in data.get("volumes") or []),
        )


@dataclass(frozen=True)
class ProcessInfo:
    """A process as the server describes it; the exit fields are `None` while it runs."""

    id: str
    sandbox_id: str
    cmd: str | None
    argv: list[str]
    status: str
    pid: int | None
    started_at: str | None
    ended_at: str | None
    exit_code: int | None
    signal: str | None
    reason: str | None
    duration_ms: int | None
    stdout_bytes: int
    stderr_bytes: int
    next_seq: int
    keep_awake: bool = False  # while it runs, its sandbox does not pause itself when idle

    @property
    def running(self) -> bool:
        """Whether the process has not exited yet."""
        return self.status == "running"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessInfo:
        """Parses a Process object."""
        return cls(
            id=str(data["id"]),
            sandbox_id=str(data.get("sandbox_id", "")),
            cmd=_opt_str(data.get("cmd")),
            argv=[str(a) for a in data.get("argv") or []],
            status=str(data.get("status", "")),
            pid=_opt_int(data.get("pid")),
            started_at=_opt_str(data.get("started_at")),
            ended_at=_opt_str(data.get("ended_at")),
            exit_code=_opt_int(data.get("exit_code")),
            signal=_opt_str(data.get("signal")),
            reason=_opt_str(data.get("reason")),
            duration_ms=_opt_int(data.get("duration_ms")),
            stdout_bytes=_opt_int(data.get("stdout_bytes")) or 0,
            stderr_bytes=_opt_int(data.get("stderr_bytes")) or 0,
            next_seq=_opt_int(data.get("next_seq")) or 0,
            keep_awake=data.get("keep_awake") is True,
        )


@dataclass(frozen=True)
class ExecResult:
    """The outcome of a buffered `exec`: the whole output and the exit record."""

    stdout: str
    stderr: str
    exit_code: int
    reason: str
    signal: str | None = None
    duration_ms: int | None = None
    truncated: bool = False
    process_id: str | None = None
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)

    @property
    def ok(self) -> bool:
        """Whether the command exited with code 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class MetricSample:
    """One sample of a sandbox's resource use, taken by the server every `interval_seconds`."""

    timestamp: str  # when it was taken, RFC 3339 in UTC with milliseconds
    cpu_used_pct: float  # share of the sandbox's CPUs used since the previous sample, 0 to 100
    memory_used_bytes: int  # memory charged to it, its inactive file cache aside
    memory_cache_bytes: int  # its file cache
    disk_used_bytes: int  # what its writable root filesystem holds

    @property
    def time(self) -> datetime:
        """`timestamp` as an aware datetime (UTC)."""
        return datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricSample:
        """Parses one entry of `samples`."""
        return cls(
            timestamp=str(data.get("timestamp", "")),
            cpu_used_pct=_float(data.get("cpu_used_pct")),
            memory_used_bytes=_opt_int(data.get("memory_used_bytes")) or 0,
            memory_cache_bytes=_opt_int(data.get("memory_cache_bytes")) or 0,
            disk_used_bytes=_opt_int(data.get("disk_used_bytes")) or 0,
        )


@dataclass(frozen=True)
class SandboxMetrics:
    """A sandbox's CPU, memory and disk use over time (`Sandbox.metrics()`), with what each is
    out of. The server keeps a bounded series per sandbox in memory: the older half is merged
    pairwise once it holds 720 samples, and a daemon restart starts it afresh."""

    sandbox_id: str
    interval_seconds: float  # how often the server samples
    cpu_count: float  # its CPU limit in CPUs (cpu_percent / 100)
    memory_total_bytes: int  # its memory limit
    disk_total_bytes: int | None  # its filesystem's size; None before the first sample
    samples: tuple[MetricSample, ...]  # oldest first

    @property
    def latest(self) -> MetricSample | None:
        """The newest sample, or None when there is none (yet, or in the window asked for)."""
        return self.samples[-1] if self.samples else None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SandboxMetrics:
        """Parses the answer of `GET /v1/sandboxes/{id}/metrics`."""
        return cls(
            sandbox_id=str(data.get("sandbox_id", "")),
            interval_seconds=_float(data.get("interval_seconds")),
            cpu_count=_float(data.get("cpu_count")),
            memory_total_bytes=_opt_int(data.get("memory_total_bytes")) or 0,
            disk_total_bytes=_opt_int(data.get("disk_total_bytes")),
            samples=tuple(MetricSample.from_json(s) for s in data.get("samples") or []),
        )
