# unasync: async only
"""`AsyncSandbox`: a sandbox on a sandstream server, for asyncio. Its lifecycle lives here; each
other surface (commands, processes, files, sessions, code contexts, templates, ports, access)
in a module of its own, joined here into one class."""
# unasync: sync only
# """`Sandbox`: a sandbox on a sandstream server. Its lifecycle lives here; each other surface
# (commands, processes, files, sessions, code contexts, templates, ports, access) in a module of
# its own, joined here into one class."""
# unasync: end

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, overload

import httpx

from .._core import (
    ClientConfig,
    create_sandbox_call,
    get_sandbox_call,
    list_sandboxes_call,
    auto_pause_body,
    check_auto_pause,
    metrics_call,
    pause_sandbox_call,
    resume_sandbox_call,
    sandbox_body,
    update_network_call,
    update_sandbox_call,
)
from ..errors import NotFound
from ..interpreter import CodeContext
from ..models import Egress, Limits, Network, SandboxInfo, SandboxMetrics, VolumeMount
from ..sessions import create_session_call
from ..templates import fork_call
from .access import _AsyncAccess
from .api import _AsyncApi
from .commands import _AsyncCommands
from .files import AsyncFiles
from .interpreter import _AsyncInterpreter
from .ports import _AsyncPorts
from .processes import AsyncProcesses
from .sessions import AsyncSession
from .templates import _AsyncTemplates


class AsyncSandbox(_AsyncCommands, _AsyncInterpreter, _AsyncTemplates, _AsyncPorts, _AsyncAccess):
    # unasync: async only
    """A sandbox on a sandstream server, for asyncio; see `sandstream.Sandbox`.

    `async with await AsyncSandbox.create() as sb:` deletes the sandbox on exit.
    """
    # unasync: sync only
    # """A sandbox on a sandstream server.
    #
    # Create one with `Sandbox.create()` or attach to an existing one with `Sandbox.connect()`.
    # Used as a context manager, the sandbox is deleted on exit. The server is `base_url`, else
    # `SANDSTREAM_URL`, else http://127.0.0.1:8080; the key is `api_key`, else
    # `SANDSTREAM_API_KEY`.
    # """
    # unasync: end

    def __init__(self, info: SandboxInfo, api: _AsyncApi) -> None:
        self._info = info
        self._api = api
        self._killed = False
        self.processes = AsyncProcesses(self)
        self.files = AsyncFiles(self)
        self._default_contexts: dict[str, CodeContext] = {}

    @classmethod
    async def create(
        cls,
        template: str = "base",
        *,
        env: Mapping[str, str] | None = None,
        timeout: int | None = None,
        cwd: str | None = None,
        limits: Limits | Mapping[str, int] | None = None,
        memory_mb: int | None = None,
        pids: int | None = None,
        cpu_percent: int | None = None,
        disk_mb: int | None = None,
        open_files: int | None = None,
        network: Network | Egress | Mapping[str, Any] | None = None,
        volumes: Sequence[VolumeMount | Mapping[str, Any]] | None = None,
        metadata: Mapping[str, str] | None = None,
        tenant: str | None = None,
        auto_resume: bool | None = None,
        auto_pause: int | None = None,
        auto_pause_mode: str | None = None,
        on_timeout: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        config: ClientConfig | None = None,
    ) -> AsyncSandbox:
        """Creates a sandbox. `timeout` is its time to live in seconds (server default if None).
        `network`: "loopback" (the server's default), "none", "egress" (every public address
        and name) or `Egress(allow=[...], deny=[...])` for egress under a policy; a server
        without egress raises `InvalidRequest`. `volumes`: volumes to mount (see `Volumes`),
        each a `VolumeMount(name, path, read_only=False)` or a dict of those keys, `name` a
        volume's name or id (an unknown one raises `InvalidRequest` naming it). `tenant` (the
        admin key only) makes it for that tenant, within its quotas; a tenant's key makes its
        own. `auto_resume=False`: a request for it while paused raises `SandboxPaused` instead
        of resuming it. `auto_pause=N`: it pauses itself once nothing has asked anything of it
        (no request, no open stream or terminal) for N seconds, the way `auto_pause_mode` says
        ("freeze", the server's default, or "checkpoint"; see `pause()`); a mode without
        `auto_pause` raises `ValueError`. `on_timeout="pause"`: its TTL pauses it instead of
        deleting it."""
        check_auto_pause(auto_pause, auto_pause_mode)
        api = _AsyncApi(config or ClientConfig.resolve(base_url, api_key), http_client)
        body = sandbox_body(
            template,
            env,
            timeout,
            cwd,
            limits,
            metadata,
            {
                "memory_mb": memory_mb,
                "pids": pids,
                "cpu_percent": cpu_percent,
                "disk_mb": disk_mb,
                "open_files": open_files,
            },
            network,
            volumes,
        )
        if tenant is not None:
            body["tenant"] = tenant
        if auto_resume is not None:
            body["auto_resume"] = auto_resume
        if auto_pause is not None:
            body["auto_pause"] = auto_pause_body(auto_pause, auto_pause_mode)
        if on_timeout is not None:
            body["on_timeout"] = on_timeout
        try:
            info = await api.call(create_sandbox_call(body))
        except BaseException:
            await api.aclose()
            raise
        return cls(info, api)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        config: ClientConfig | None = None,
    ) -> AsyncSandbox:
        """Attaches to an existing sandbox; raises `NotFound` if there is none with this id."""
        api = _AsyncApi(config or ClientConfig.resolve(base_url, api_key), http_client)
        try:
            info = await api.call(get_sandbox_call(sandbox_id))
        except BaseException:
            await api.aclose()
            raise
        return cls(info, api)

    @staticmethod
    async def list(
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> list[SandboxInfo]:
        """Lists the server's sandboxes, oldest first (a tenant's key: its own)."""
        api = _AsyncApi(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return await api.call(list_sandboxes_call())
        finally:
            await api.aclose()

    @property
    def info(self) -> SandboxInfo:
        """The sandbox as last fetched; `refresh()` fetches it again."""
        return self._info

    async def refresh(self) -> SandboxInfo:
        """Fetches the sandbox's current state."""
        self._info = await self._api.call(get_sandbox_call(self.id))
        return self._info

    async def pause(self, mode: str = "freeze") -> SandboxInfo:
        """Pauses the sandbox, and its process timeouts and time to live stop counting.
        `mode="freeze"`: every process stops where it is, its memory kept. `mode="checkpoint"`:
        its processes, their memory and its files are written to disk (with CRIU) and the
        processes end, freeing their memory; `resume()` restores them where they were, with the
        same pids, and their output streams go on. A server without CRIU, or a sandbox it
        cannot checkpoint (one with volumes or egress, or made from an image or a snapshot),
        raises `RouteNotImplemented` and the sandbox runs on. Any later request for it (a
        command, a file, a terminal) resumes it first, unless it was created with
        `auto_resume=False`. Pausing a paused sandbox returns it as it is; `info.pause_mode`
        says how it is paused."""
        self._info = await self._api.call(pause_sandbox_call(self.id, mode))
        return self._info

    async def set_lifecycle(
        self,
        *,
        auto_pause: int | None = None,
        auto_pause_mode: str | None = None,
        on_timeout: str | None = None,
        auto_resume: bool | None = None,
    ) -> SandboxInfo:
        """Changes how the sandbox pauses: `auto_pause` idle seconds (0: never) with
        `auto_pause_mode` ("freeze" or "checkpoint"; not given: "freeze", whatever it was),
        `on_timeout` ("pause" or "kill"), `auto_resume`; what is not given stays as it is. A
        mode without `auto_pause` raises `ValueError`."""
        check_auto_pause(auto_pause, auto_pause_mode)
        body: dict[str, Any] = {}
        if auto_pause is not None:
            body["auto_pause"] = auto_pause_body(auto_pause, auto_pause_mode)
        if on_timeout is not None:
            body["on_timeout"] = on_timeout
        if auto_resume is not None:
            body["auto_resume"] = auto_resume
        self._info = await self._api.call(update_sandbox_call(self.id, body))
        return self._info

    async def update_network(self, network: Network | Egress | Mapping[str, Any]) -> SandboxInfo:
        """Gives the sandbox new egress rules, in place of those it had: "egress" (every public
        address and name), `Egress(allow=[...], deny=[...])` or a dict sent as it is
        (`{"egress": {"allow": [...]}}`), checked as at create (`InvalidRequest` naming a bad
        rule). From the answer on, new connections and DNS answers follow the new rules; the
        sandbox's open connections are cut, so a host just denied is unreachable at once, and
        the addresses its names had opened are closed until they resolve again. The new rules
        outlive a daemon restart. Only a sandbox made with egress can change them, and only to
        other egress rules (`Conflict` otherwise; to cut everything, `Egress(allow=[])`). A
        paused sandbox is resumed first (`SandboxPaused` with `auto_resume=False`)."""
        self._info = await self._api.call(update_network_call(self.id, network))
        return self._info

    async def resume(self) -> SandboxInfo:
        """Resumes a paused sandbox where it stopped; a running one is returned as it is."""
        self._info = await self._api.call(resume_sandbox_call(self.id))
        return self._info

    async def metrics(self, start: datetime | float | None = None,
                      end: datetime | float | None = None) -> SandboxMetrics:
        """The sandbox's CPU, memory and disk use over time: the samples the server took (every
        `interval_seconds`, 5 by default) between `start` and `end` (datetimes or Unix seconds;
        None: no bound), oldest first, with its CPU count, memory limit and disk size. Reading
        them does not resume a paused sandbox. The server keeps them in memory, a bounded series
        per sandbox: a daemon restart starts them afresh."""
        return await self._api.call(metrics_call(self.id, start, end))

    async def kill(self) -> None:
        """Deletes the sandbox: every process is killed and its files freed. Idempotent."""
        if self._killed:
            return
        try:
            await self._api.request("DELETE", self._path)
        except NotFound:
            pass
        finally:
            self._killed = True
            await self._api.aclose()

    async def close(self) -> None:
        """Closes the HTTP connections without deleting the sandbox."""
        await self._api.aclose()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.kill()

    async def create_session(self, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                             id: str | None = None) -> AsyncSession:
        # unasync: async only
        """Starts a persistent shell session; see `Sandbox.create_session`."""
        # unasync: sync only
        # """Starts a persistent shell session (`cd` and `export` persist between its commands)."""
        # unasync: end
        return AsyncSession(self, await self._api.call(create_session_call(self._path, env, cwd, id)))

    @overload
    async def fork(self, name: str | None = None, *, memory: bool | None = None,
                   count: None = None) -> AsyncSandbox: ...

    @overload
    async def fork(self, name: str | None = None, *, memory: bool | None = None,
                   count: int) -> builtins.list[AsyncSandbox]: ...

    async def fork(self, name: str | None = None, *, memory: bool | None = None,
                   count: int | None = None) -> AsyncSandbox | builtins.list[AsyncSandbox]:
        """New sandboxes made from this one as it is now, with its env, cwd, limits, network,
        time to live and metadata: one, or a list of `count` (1 to 32).

        `memory=True` (the default): the sandbox is checkpointed with CRIU while it runs and
        each fork restored from that checkpoint, so its running processes and code contexts go
        on in each fork where they were (the same process and context ids; the default context
        of `run_code` carries over, its variables kept); this sandbox runs on. No template is
        made. A server without CRIU, or a sandbox it cannot checkpoint (one with volumes or
        egress, or made from an image or a files snapshot), raises `RouteNotImplemented`.

        `memory=False`: a snapshot of its files only, as template `name` (or a generated
        `fork-...`), and the forks made from it; no process runs on. Giving `name` without
        `memory` means `memory=False`, since only a fork of files makes a template; `name` with
        `memory=True` raises `InvalidRequest`.

        A paused sandbox is resumed first (`SandboxPaused` with `auto_resume=False`)."""
        if memory is None:
            memory = name is None
        infos = await self._api.call(fork_call(self._path, name, memory, count),
                                     timeout=self._api.config.stream_timeout())
        forks = [self._forked(info, memory) for info in infos]
        return forks if count is not None else forks[0]

    def _forked(self, info: SandboxInfo, memory: bool) -> AsyncSandbox:
        """A handle of a fork: with memory, the same default code contexts (their ids)."""
        fork = type(self)(info, _AsyncApi(self._api.config, None))
        if memory:
            fork._default_contexts = dict(self._default_contexts)
        return fork

    async def browser_url(self, port: int, ttl_seconds: int | None = 3600) -> str:
        """A URL that opens the server on `port` in a browser tab: the port is exposed, a token
        of scope `port:N` made for `ttl_seconds`, and `Port.browser_url` given that token, never
        the key (a URL ends up in histories, logs and `Referer` headers)."""
        exposed = await self.expose_port(port)
        token = await self.create_token([f"port:{exposed.port}"], ttl_seconds)
        assert token.token is not None
        return exposed.browser_url(token.token)

