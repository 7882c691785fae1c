"""sandstream: create sandboxes and run commands in them, watching their output live.

    from sandstream import Sandbox

    with Sandbox.create(template="base") as sb:
        code = sb.exec_stream("make test", on_stdout=lambda c: print(c, end="", flush=True))
"""

from ._core import ClientConfig
from .access import Key, Tenant, Token
from .errors import (
    BadGateway,
    CommandFailed,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InternalError,
    InvalidJson,
    InvalidRequest,
    MethodNotAllowed,
    NodeUnreachable,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    SandboxError,
    SandboxSetupFailed,
    SandstreamError,
    ShuttingDown,
    TooManyConnections,
    RequestHeaderTooLarge,
    RouteNotImplemented,
    SandboxPaused,
    StreamLost,
    Timeout,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
)
from .events import Error, Event, Exit, Gap, Start, Stderr, Stdout
from .helpers import AnsiStripper, LineBuffer, OutputDigest, strip_ansi
from .models import (
    Egress,
    ExecResult,
    Flow,
    Limits,
    MetricSample,
    Network,
    ProcessInfo,
    SandboxInfo,
    SandboxMetrics,
    VolumeMount,
)
from .templates import Template
from .volumes import VolumeInfo
from .files import FileEvent, FileInfo
from .interpreter import CodeContext, Execution, ExecutionError, Logs, Result
from .ports import Port
from ._async.access import AsyncAdmin
from ._async.files import AsyncFiles
from ._async.processes import AsyncProcess, AsyncProcesses
from ._async.sandbox import AsyncSandbox
from ._async.sessions import AsyncSession
from ._async.volumes import AsyncVolume, AsyncVolumeFiles, AsyncVolumes
from ._sync.access import Admin
from ._sync.files import Files
from ._sync.processes import Process, Processes
from ._sync.sandbox import Sandbox
from ._sync.sessions import Session
from ._sync.volumes import Volume, VolumeFiles, Volumes
from ._version import __version__

__all__ = [
    "Admin",
    "AnsiStripper",
    "AsyncAdmin",
    "AsyncFiles",
    "AsyncProcess",
    "AsyncProcesses",
    "AsyncSandbox",
    "AsyncSession",
    "AsyncVolume",
    "AsyncVolumeFiles",
    "AsyncVolumes",
    "BadGateway",
    "ClientConfig",
    "CodeContext",
    "CommandFailed",
    "Conflict",
    "ConnectionFailed",
    "Egress",
    "Error",
    "Event",
    "ExecResult",
    "Execution",
    "ExecutionError",
    "FileEvent",
    "FileInfo",
    "Files",
    "Forbidden",
    "Exit",
    "Flow",
    "Gap",
    "InternalError",
    "InvalidJson",
    "InvalidRequest",
    "Key",
    "LineBuffer",
    "Limits",
    "Logs",
    "MethodNotAllowed",
    "MetricSample",
    "Network",
    "NodeUnreachable",
    "NotFound",
    "OutputDigest",
    "PayloadTooLarge",
    "RequestHeaderTooLarge",
    "Port",
    "Process",
    "ProcessInfo",
    "Result",
    "Processes",
    "QuotaExceeded",
    "RouteNotImplemented",
    "SandboxPaused",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "SandboxMetrics",
    "Template",
    "SandboxSetupFailed",
    "SandstreamError",
    "Session",
    "ShuttingDown",
    "TooManyConnections",
    "Start",
    "Stderr",
    "Stdout",
    "StreamLost",
    "Tenant",
    "Timeout",
    "Token",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "Volume",
    "VolumeFiles",
    "VolumeInfo",
    "VolumeMount",
    "Volumes",
    "strip_ansi",
]
