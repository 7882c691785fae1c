# Generated from aio.py by sdk/python/scripts/unasync.py; do not edit. Edit aio.py, then run
# `python sdk/python/scripts/unasync.py` (`--check` tells whether this file is current).
"""The synchronous client: `Sandbox`, its background `Process` handles, and the resumable
event streams behind `exec_stream` and `Process.logs`."""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ._core import (
    WAIT_SLICE,
    Call,
    ChunkCallback,
    ClientConfig,
    Cursor,
    Dispatch,
    check_exec,
    command_body,
    connection_failed,
    create_sandbox_call,
    exec_call,
    exec_timeout,
    get_sandbox_call,
    list_processes_call,
    list_sandboxes_call,
    logs_params,
    new_idempotency_key,
    process_call,
    process_cursor,
    process_path,
    sandbox_body,
    sandbox_path,
    signal_body,
    start_process_call,
    stdin_params,
    wait_call,
)
from . import interpreter
from .access import (
    Key,
    Tenant,
    Token,
    create_key_call,
    create_tenant_call,
    create_token_call,
    delete_tenant_call,
    get_tenant_call,
    list_keys_call,
    list_tenants_call,
    list_tokens_call,
    revoke_key_call,
    revoke_token_call,
    set_quotas_call,
    usage_call,
)
from .errors import (
    ConnectionFailed,
    NotFound,
    SandboxError,
    SandstreamError,
    Timeout,
    error_from_response,
)
from .events import Error, Event, EventDecoder, Exit, SseParser
from .files import FileEvent, FileInfo, _FilesBase, watch_event
from .interpreter import CellRun, CodeContext, Execution, ExecutionError, Result
from .models import Egress, ExecResult, Flow, Limits, Network, ProcessInfo, SandboxInfo
from .ports import (
    Port,
    close_port_call,
    expose_port_call,
    get_port_call,
    list_ports_call,
    wait_port_call,
)
from .sessions import _SessionBase, create_session_call
from .templates import (
    ARCHIVE_HEADERS,
    Template,
    archive_chunks,
    delete_template_call,
    fork_call,
    get_template_call,
    import_template_call,
    list_templates_call,
    pull_template_call,
    snapshot_call,
)

T = TypeVar("T")
E = TypeVar("E")


class _Api:
    """One server: URL building, auth, error mapping and retries over an httpx.Client."""

    def __init__(self, config: ClientConfig, client: httpx.Client | None) -> None:
        self.config = config
        self._owns_client = client is None
        self.client = client if client is not None else httpx.Client(timeout=config.timeout())

    def url(self, path: str) -> str:
        return self.config.base_url + path

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Sends a request and returns its JSON body (None when empty); raises typed errors.

        With an `idempotency_key` a broken connection is retried: the server attaches the
        retry to what the first attempt started instead of doing it again.
        """
        all_headers = {**self.config.headers(), **(headers or {})}
        if idempotency_key is not None:
            all_headers["Idempotency-Key"] = idempotency_key
        failures = 0
        while True:
            try:
                response = self.client.request(
                    method,
                    self.url(path),
                    json=json,
                    content=content,
                    params=params,
                    headers=all_headers,
                    timeout=timeout or self.config.timeout(),
                )
                break
            except httpx.TransportError as exc:
                failures += 1
                if idempotency_key is None or failures > self.config.max_reconnects:
                    raise connection_failed(method, self.url(path), exc, idempotency_key) from exc
                time.sleep(self.config.backoff(failures))
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response.json() if response.content else None

    def call(
        self,
        call: Call[T],
        *,
        content: bytes | Iterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> T:
        """Sends a request described by the shared code and parses its answer."""
        data = self.request(
            call.method,
            call.path,
            json=call.json,
            params=call.params,
            content=content,
            headers=headers,
            timeout=timeout,
            idempotency_key=call.idempotency_key,
        )
        return call.parse(data)

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Iterator[httpx.Response]:
        """Opens a streamed response; an error status raises its typed error."""
        with self.client.stream(
            method,
            self.url(path),
            json=json,
            params=params,
            headers={**self.config.headers(), **(headers or {})},
            timeout=self.config.stream_timeout(),
        ) as response:
            if response.status_code >= 400:
                response.read()
                raise error_from_response(response.status_code, response.content)
            yield response

    def follow(
        self,
        cursor: Cursor[E],
        open_stream: Callable[[], Any],
        *,
        until_exit: bool = True,
        stopped: Callable[[], bool] = lambda: False,
        refused: Callable[[SandboxError], SandstreamError | None] = lambda _: None,
    ) -> Iterator[E]:
        """Yields a stream's events (a process's, a cell's), reconnecting after the last one
        seen when the stream drops.

        A stream that ends (or breaks) before its last event (`exit` or `error`) is resumed
        with `Last-Event-ID`; after `max_reconnects` attempts in a row without an event it
        raises `StreamLost`; a `204` answer (a follow resumed at or past its exit) ends it
        cleanly. `until_exit=False` is for non-following reads, which end early by design. An
        error answer to (re)opening the stream is raised as `refused` maps it, or as it is.
        """
        sent = False
        while not stopped():
            try:
                with open_stream() as response:
                    sent = True
                    # Its last event was delivered before: nothing more will come.
                    if response.status_code == 204:
                        return
                    parser = SseParser()
                    for chunk in response.iter_bytes():
                        for message in parser.feed(chunk):
                            for event in cursor.decoder.decode(message):
                                cursor.seen(event)
                                yield event
                                if stopped():
                                    return
                            if cursor.decoder.ended:
                                return
                if not until_exit:
                    return
                detail = "the stream ended without an exit event"
            except SandboxError as exc:
                replacement = refused(exc)
                if replacement is None:
                    raise
                raise replacement from exc
            except httpx.ConnectError as exc:
                if not sent:
                    raise ConnectionFailed(f"cannot reach {self.config.base_url}: {exc}") from exc
                detail = f"reconnecting failed ({exc})"
            except httpx.TransportError as exc:
                sent = True
                if stopped():
                    return
                detail = f"the connection broke ({type(exc).__name__}: {exc})"
            time.sleep(cursor.failed(detail, self.config))

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


class Sandbox:
    """A sandbox on a sandstream server.

    Create one with `Sandbox.create()` or attach to an existing one with `Sandbox.connect()`.
    Used as a context manager, the sandbox is deleted on exit. The server is `base_url`, else
    `SANDSTREAM_URL`, else http://127.0.0.1:8080; the key is `api_key`, else
    `SANDSTREAM_API_KEY`.
    """

    def __init__(self, info: SandboxInfo, api: _Api) -> None:
        self._info = info
        self._api = api
        self._killed = False
        self.processes = Processes(self)
        self.files = Files(self)
        self._default_contexts: dict[str, CodeContext] = {}

    @classmethod
    def create(
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
        metadata: Mapping[str, str] | None = None,
        tenant: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
        config: ClientConfig | None = None,
    ) -> Sandbox:
        """Creates a sandbox. `timeout` is its time to live in seconds (server default if None).
        `network`: "loopback" (the server's default), "none", "egress" (every public address
        and name) or `Egress(allow=[...], deny=[...])` for egress under a policy; a server
        without egress raises `InvalidRequest`. `tenant` (the admin key only) makes it for that
        tenant, within its quotas; a tenant's key makes its own."""
        api = _Api(config or ClientConfig.resolve(base_url, api_key), http_client)
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
        )
        if tenant is not None:
            body["tenant"] = tenant
        try:
            info = api.call(create_sandbox_call(body))
        except BaseException:
            api.close()
            raise
        return cls(info, api)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
        config: ClientConfig | None = None,
    ) -> Sandbox:
        """Attaches to an existing sandbox; raises `NotFound` if there is none with this id."""
        api = _Api(config or ClientConfig.resolve(base_url, api_key), http_client)
        try:
            info = api.call(get_sandbox_call(sandbox_id))
        except BaseException:
            api.close()
            raise
        return cls(info, api)

    @staticmethod
    def list(
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> list[SandboxInfo]:
        """Lists the server's sandboxes, oldest first (a tenant's key: its own)."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(list_sandboxes_call())
        finally:
            api.close()

    @staticmethod
    def import_template(
        name: str,
        archive: bytes | str | os.PathLike[str],
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> Template:
        """Makes template `name` from an image archive: an OCI image layout or a `docker save`
        tar, as bytes or the path of a file (streamed, never held whole). Every layer is checked
        against its digest and stored once; a bad archive raises `InvalidRequest` naming what
        is wrong. With a tenant's key the template is the tenant's own."""
        content = archive if isinstance(archive, bytes) else archive_chunks(archive)
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(import_template_call(name), content=content,
                            headers=ARCHIVE_HEADERS, timeout=api.config.stream_timeout())
        finally:
            api.close()

    @staticmethod
    def pull_template(
        name: str,
        image: str,
        *,
        username: str | None = None,
        password: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> Template:
        """Makes template `name` from `image` pulled from its registry
        (`host[:port]/repository[:tag][@sha256:...]`; Docker Hub when it names no host).
        `username` and `password` answer the registry's auth, for this pull only. Raises
        `NotFound` when the registry has no such image, `Forbidden` when the daemon's registry
        policy refuses it, `BadGateway` when the registry fails or refuses the credentials."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(pull_template_call(name, image, username, password),
                            timeout=api.config.stream_timeout())
        finally:
            api.close()

    @staticmethod
    def list_templates(
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> builtins.list[Template]:
        """The templates this key may use: built in, directories, images and snapshots."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(list_templates_call())
        finally:
            api.close()

    @staticmethod
    def get_template(
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> Template:
        """One template; `NotFound` if this key may not use one of that name."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(get_template_call(name))
        finally:
            api.close()

    @staticmethod
    def delete_template(
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        """Deletes an image or snapshot template; `Conflict` while a sandbox uses it."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            api.call(delete_template_call(name))
        finally:
            api.close()

    @staticmethod
    def usage(
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> Tenant:
        """What the key's tenant takes now, and its quotas (the admin key: its own sandboxes,
        `name` None, no quotas)."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(usage_call())
        finally:
            api.close()

    @property
    def id(self) -> str:
        """The sandbox id (`sb_...`)."""
        return self._info.id

    @property
    def info(self) -> SandboxInfo:
        """The sandbox as last fetched; `refresh()` fetches it again."""
        return self._info

    @property
    def _path(self) -> str:
        return sandbox_path(self.id)

    def refresh(self) -> SandboxInfo:
        """Fetches the sandbox's current state."""
        self._info = self._api.call(get_sandbox_call(self.id))
        return self._info

    def kill(self) -> None:
        """Deletes the sandbox: every process is killed and its files freed. Idempotent."""
        if self._killed:
            return
        try:
            self._api.request("DELETE", self._path)
        except NotFound:
            pass
        finally:
            self._killed = True
            self._api.close()

    def close(self) -> None:
        """Closes the HTTP connections without deleting the sandbox."""
        self._api.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | None = None,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        merge_stderr: bool = False,
        check: bool = False,
        session: str | None = None,
    ) -> ExecResult:
        """Runs a command to its end and returns its whole output and exit record.

        `cmd` as a string runs under `sh -c`; a sequence runs as argv. With `check=True` a
        non-zero exit raises `CommandFailed`. With `session` it runs in that shell session.
        """
        body = command_body(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            session=session,
            flow="wait",
        )
        timeout = exec_timeout(self._api.config, timeout_seconds)
        result = self._api.call(exec_call(self._path, body), timeout=timeout)
        return check_exec(result) if check else result

    def exec_events(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | None = None,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        merge_stderr: bool = False,
        idempotency_key: str | None = None,
        session: str | None = None,
    ) -> Iterator[Event]:
        """Runs a command and yields its events as they happen: `Start`, `Stdout`/`Stderr`
        chunks, then one `Exit` or `Error`.

        The stream waits (`flow="wait"`): while this reader is a window behind, the server holds
        the command back instead of dropping output, so a `Gap` comes only to a reader that
        takes nothing for the server's stall limit (300 s by default). A dropped connection is
        resumed after the last event seen; the command never runs twice (the request carries
        an `Idempotency-Key`).
        """
        body = command_body(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            session=session,
            flow="wait",
        )
        cursor = Cursor[Event](
            self.id, EventDecoder(), idempotency_key=idempotency_key or new_idempotency_key()
        )
        path = self._path + "/exec/stream"
        return self._api.follow(
            cursor,
            lambda: self._api.stream("POST", path, json=body, headers=cursor.resume_headers()),
        )

    def exec_stream(
        self,
        cmd: str | Sequence[str],
        on_stdout: ChunkCallback | None = None,
        on_stderr: ChunkCallback | None = None,
        *,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        merge_stderr: bool = False,
        check: bool = False,
        on_exit: Callable[[Exit], object] | None = None,
        session: str | None = None,
    ) -> int:
        """Runs a command, calling `on_stdout`/`on_stderr` with each chunk as it arrives, and
        returns the exit code.

        Chunks are not lines (see `LineBuffer`). A slow callback holds the command back, as a
        pipe would, instead of losing output (see `exec_events`). `on_exit` receives the whole
        exit record (reason, signal, duration). With `check=True` a non-zero exit raises
        `CommandFailed` carrying the tail of the output. A stream that cannot be resumed raises
        `StreamLost`; an infrastructure failure raises the server's error (e.g. `ShuttingDown`).
        """
        dispatch = Dispatch(on_stdout, on_stderr, check)
        events = self.exec_events(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            session=session,
        )
        for event in events:
            callback, text = dispatch.callback_for(event)
            if callback is not None and text:
                callback(text)
            if isinstance(event, Exit) and on_exit is not None:
                on_exit(event)
            if isinstance(event, (Exit, Error)):
                return dispatch.finish(event)
        raise dispatch.lost(self.id)

    def create_session(self, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                       id: str | None = None) -> Session:
        """Starts a persistent shell session (`cd` and `export` persist between its commands)."""
        return Session(self, self._api.call(create_session_call(self._path, env, cwd, id)))

    def create_code_context(self, language: str = "python", *, cwd: str | None = None,
                            env: Mapping[str, str] | None = None) -> CodeContext:
        """Starts a persistent interpreter: "python", "javascript" or "bash"."""
        return self._api.call(interpreter.create_context_call(self._path, language, cwd, env))

    def run_code(
        self,
        code: str,
        *,
        context: CodeContext | str | None = None,
        language: str = "python",
        on_stdout: Callable[[str], object] | None = None,
        on_stderr: Callable[[str], object] | None = None,
        on_result: Callable[[Result], object] | None = None,
        on_error: Callable[[ExecutionError], object] | None = None,
        timeout_seconds: float | None = None,
    ) -> Execution:
        """Runs a cell, streaming its output to the callbacks, and returns its `Execution`
        (`.results`, `.logs`, `.error`). Without `context`, one default context per language
        is created on first use and reused, so state persists between calls.

        A dropped connection is resumed after the last event seen: every event reaches the
        callbacks once and the cell runs once. Before the `start` event the request is retried
        with its `Idempotency-Key`; after it, the run is read again by its number. A run the
        context has forgotten by then (it keeps its last 32) raises `StreamLost`; it is never
        run again."""
        if context is None:
            context = self._default_contexts.get(language)
            if context is None:
                context = self._default_contexts[language] = self.create_code_context(language)
        run = CellRun(self.id, self._path, context, code, timeout_seconds, on_stdout=on_stdout,
                      on_stderr=on_stderr, on_result=on_result, on_error=on_error)

        def open_stream() -> Any:
            method, path, body, headers = run.request()
            return self._api.stream(method, path, json=body, headers=headers)

        events = self._api.follow(run.cursor, open_stream, refused=run.refused)
        for event in events:
            deliver = run.route(event)
            if deliver is not None:
                deliver()
        return run.finish()

    def list_code_contexts(self) -> builtins.list[CodeContext]:
        """The sandbox's code contexts."""
        return self._api.call(interpreter.list_contexts_call(self._path))

    def restart_code_context(self, context: CodeContext | str) -> CodeContext:
        """Restarts a context's interpreter (after a crash, or to clear its state)."""
        return self._api.call(interpreter.restart_context_call(self._path, context))

    def delete_code_context(self, context: CodeContext | str) -> None:
        """Stops a context's interpreter."""
        self._api.call(interpreter.delete_context_call(self._path, context))
        self._default_contexts = interpreter.forget_context(self._default_contexts, context)

    def snapshot(self, name: str) -> Template:
        """A template of this sandbox's files now (its template's layers and what it changed);
        its processes keep running, and each file is copied as it is when read. Only sandboxes
        made from an image or a snapshot can be snapshotted."""
        return self._api.call(snapshot_call(self._path, name),
                              timeout=self._api.config.stream_timeout())

    def fork(self, name: str | None = None) -> Sandbox:
        """A snapshot (template `name`, or a generated one) and a new sandbox made from it with
        this one's env, cwd, limits, network, time to live and metadata."""
        info = self._api.call(fork_call(self._path, name),
                              timeout=self._api.config.stream_timeout())
        return type(self)(info, _Api(self._api.config, None))

    def expose_port(self, port: int) -> Port:
        """Exposes a port of the sandbox through the daemon and returns it with its two URLs:
        `url` (the host form, for pages with absolute paths) and `path_url`. Exposing it again
        returns the same `Port`. A server on the sandbox's loopback is enough; requests to
        either URL need the API key."""
        return self._api.call(expose_port_call(self._path, port))

    def list_ports(self) -> builtins.list[Port]:
        """The sandbox's exposed ports."""
        return self._api.call(list_ports_call(self._path))

    def get_port(self, port: int) -> Port:
        """One exposed port; `NotFound` if it is not exposed."""
        return self._api.call(get_port_call(self._path, port))

    def close_port(self, port: int) -> None:
        """Stops exposing a port (`NotFound` if it was not); connections already relayed go on."""
        self._api.call(close_port_call(self._path, port))

    def create_token(self, scopes: Sequence[str], ttl_seconds: int | None = None) -> Token:
        """Makes a token that opens this sandbox alone, for `scopes` (`read`, `exec`,
        `terminal`, `files:read`, `files:write`, `port:N`), until `ttl_seconds` pass (the
        server's default: an hour; at most 7 days), it is revoked or the sandbox is deleted.
        Its secret, `token.token`, is shown this once. Needs a key, not a token."""
        return self._api.call(create_token_call(self._path, scopes, ttl_seconds))

    def list_tokens(self) -> builtins.list[Token]:
        """The sandbox's live tokens, without their secrets."""
        return self._api.call(list_tokens_call(self._path))

    def revoke_token(self, token: Token | str) -> None:
        """Revokes a token (or a token id); requests and streams made with it end."""
        self._api.call(revoke_token_call(self._path, token))

    def browser_url(self, port: int, ttl_seconds: int | None = 3600) -> str:
        """A URL that opens the server on `port` in a browser tab: the port is exposed, a token
        of scope `port:N` made for `ttl_seconds`, and `Port.browser_url` given that token, never
        the key (a URL ends up in histories, logs and `Referer` headers)."""
        exposed = self.expose_port(port)
        token = self.create_token([f"port:{exposed.port}"], ttl_seconds)
        assert token.token is not None
        return exposed.browser_url(token.token)

    def get_host(self, port: int) -> str:
        """The host that reaches `port` (`{port}-{id}.{preview_domain}:{daemon port}`), exposing
        the port first if it is not yet."""
        return self.expose_port(port).host

    def wait_for_port(self, port: int, timeout: float | None = 30.0) -> None:
        """Returns once something in the sandbox accepts connections on `port` (exposed or not);
        raises `Timeout` after `timeout` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            piece = min(left, WAIT_SLICE)
            try:
                self._api.call(
                    wait_port_call(self._path, port, piece),
                    timeout=httpx.Timeout(self._api.config.request_timeout + piece),
                )
                return
            except Timeout as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout(
                        f"nothing accepted connections on port {port} of sandbox {self.id} "
                        f"within {timeout:g} s",
                        status=exc.status,
                    ) from exc


class Processes:
    """The background processes of one sandbox: `sandbox.processes`."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def start(
        self,
        cmd: str | Sequence[str],
        *,
        id: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | None = None,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        merge_stderr: bool = False,
        log_window_bytes: int | None = None,
    ) -> Process:
        """Starts a command in the background and returns its handle.

        `id` is an optional caller-chosen process id (`Conflict` if in use). Without `stdin`
        the process's stdin stays open for `send_stdin`.
        """
        body = command_body(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            log_window_bytes=log_window_bytes,
        )
        if id is not None:
            body["id"] = id
        info = self._sandbox._api.call(start_process_call(self._sandbox._path, body))
        return Process(self._sandbox, info)

    def list(self, status: str | None = None) -> list[ProcessInfo]:
        """Lists the sandbox's processes; `status` is `running` or `exited` to filter."""
        return self._sandbox._api.call(list_processes_call(self._sandbox._path, status))

    def get(self, process_id: str) -> Process:
        """A handle to an existing process (running or ended); `NotFound` if unknown."""
        path = process_path(self._sandbox._path, process_id)
        return Process(self._sandbox, self._sandbox._api.call(process_call("GET", path)))


class Process:
    """A handle to a background process.

    `logs(follow=True)` yields its events; `disconnect()` stops reading (the process keeps
    running) and `reattach()` continues after the last event this handle saw.
    """

    def __init__(self, sandbox: Sandbox, info: ProcessInfo) -> None:
        self._sandbox = sandbox
        self._info = info
        self._cursor = process_cursor(sandbox.id, info.id)
        self._disconnected = False
        self._flow: Flow | None = None
        self._response: httpx.Response | None = None

    @property
    def id(self) -> str:
        """The process id."""
        return self._info.id

    @property
    def info(self) -> ProcessInfo:
        """The process as last fetched; `refresh()` fetches it again."""
        return self._info

    @property
    def last_event_id(self) -> int:
        """The sequence number of the last event this handle delivered (0: none yet)."""
        return self._cursor.last_seq

    @property
    def _path(self) -> str:
        return process_path(self._sandbox._path, self.id)

    def refresh(self) -> ProcessInfo:
        """Fetches the process's current state."""
        self._info = self._sandbox._api.call(process_call("GET", self._path))
        return self._info

    def logs(
        self,
        follow: bool = True,
        since: int | None = None,
        tail: int | None = None,
        flow: Flow | None = None,
    ) -> Iterator[Event]:
        """Yields the process's events: with `follow`, until its exit, resuming dropped
        connections; without, the events retained now.

        `since` starts after that sequence number (default: after the last event this handle
        saw, so a second call continues where the first stopped); `tail` starts with the last
        N chunks. `flow` paces a follow: `"skip"` (the server's default) never holds the
        process back, and a reader that falls a window behind gets a `Gap`; `"wait"` holds the
        process while this reader is a window behind, so every byte arrives, and keeps its
        place for the server's resume grace when the connection drops.
        """
        if since is not None and since != self._cursor.last_seq:
            self._cursor = process_cursor(self._sandbox.id, self.id, since)
        self._disconnected = False
        self._flow = flow

        @contextmanager
        def open_stream() -> Iterator[httpx.Response]:
            query = logs_params(follow, tail, self._cursor.last_seq, flow)
            with self._sandbox._api.stream(
                "GET", self._path + "/logs", params=query, headers=self._cursor.resume_headers()
            ) as response:
                # Kept so that disconnect(), called from another thread, can close it.
                self._response = response
                try:
                    yield response
                finally:
                    self._response = None

        return self._sandbox._api.follow(
            self._cursor, open_stream, until_exit=follow, stopped=lambda: self._disconnected
        )

    def reattach(self, flow: Flow | None = None) -> Iterator[Event]:
        """Follows the process again from the last event this handle delivered, with `flow` (by
        default the one the last `logs()` call used)."""
        return self.logs(follow=True, flow=flow or self._flow)

    def disconnect(self) -> None:
        """Stops reading the process's output; the process itself keeps running."""
        self._disconnected = True
        response = self._response
        if response is not None:
            response.close()

    def send_stdin(self, data: str | bytes, eof: bool = False) -> int:
        """Writes to the process's stdin (closing it after with `eof`); returns bytes written."""
        raw = data.encode() if isinstance(data, str) else data
        result = self._sandbox._api.request(
            "POST",
            self._path + "/stdin",
            content=raw,
            params=stdin_params(eof),
            headers={"Content-Type": "application/octet-stream"},
        )
        return int(result.get("written", len(raw))) if result else len(raw)

    def close_stdin(self) -> None:
        """Closes the process's stdin (it reads end-of-file)."""
        self.send_stdin(b"", eof=True)

    def signal(self, signal: str | int = "TERM", group: bool = True) -> ProcessInfo:
        """Sends a signal (`"TERM"`, `"SIGINT"`, `9`) to the process group (or only its leader)."""
        body = signal_body(signal, group)
        self._info = self._sandbox._api.call(process_call("POST", self._path + "/signal", body))
        return self._info

    def kill(self) -> ProcessInfo:
        """Kills the process group (TERM, grace, KILL) and returns the ended process."""
        self._info = self._sandbox._api.call(process_call("DELETE", self._path))
        return self._info

    def wait(self, timeout: float | None = None) -> ProcessInfo:
        """Blocks until the process exits and returns it; raises `Timeout` after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            piece = min(left, WAIT_SLICE)
            try:
                self._info = self._sandbox._api.call(
                    wait_call(self._path, piece),
                    timeout=httpx.Timeout(self._sandbox._api.config.request_timeout + piece),
                )
            except Timeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            return self._info


class Session(_SessionBase):
    """A shell session in a sandbox. `env`/`cwd` given to one command apply to it alone."""

    def __init__(self, sandbox: Sandbox, info: dict[str, Any]) -> None:
        super().__init__(sandbox._path, info)
        self._sandbox = sandbox

    def exec(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
             cwd: str | None = None, stdin: str | None = None,
             timeout_seconds: float | None = None, check: bool = False) -> ExecResult:
        """Runs a command in the session to its end."""
        return self._sandbox.exec(cmd, env=env, cwd=cwd, stdin=stdin,
                                  timeout_seconds=timeout_seconds, check=check, session=self.id)

    def exec_stream(self, cmd: str | Sequence[str], on_stdout: ChunkCallback | None = None,
                    on_stderr: ChunkCallback | None = None, *,
                    env: Mapping[str, str] | None = None, cwd: str | None = None,
                    timeout_seconds: float | None = None, check: bool = False) -> int:
        """Runs a command in the session, streaming its output; returns the exit code."""
        return self._sandbox.exec_stream(cmd, on_stdout, on_stderr, env=env, cwd=cwd,
                                         timeout_seconds=timeout_seconds, check=check,
                                         session=self.id)

    def refresh(self) -> dict[str, Any]:
        """The session as the server sees it now (`commands`, `busy`)."""
        self.info = self._sandbox._api.call(self._get())
        return self.info

    def delete(self) -> None:
        """Ends the session."""
        self._sandbox._api.call(self._delete())


class Files(_FilesBase):
    """File operations on one sandbox. Paths are absolute inside the sandbox, or relative to
    its working directory; they never reach outside it."""

    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__(sandbox._path)
        self._api = sandbox._api

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        url, params = self._read(path)
        with self._api.stream("GET", url, params=params) as response:
            return response.read()

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: str | bytes | Iterable[bytes], *, mode: str | int | None = None,
              parents: bool = True) -> FileInfo:
        """Creates or replaces a file. An iterable of bytes is streamed as it is produced.
        `mode` is octal ("0755" or 0o755); missing parent directories are created."""
        content = data.encode() if isinstance(data, str) else data
        return self._api.call(self._write(path, mode, parents), content=content,
                              timeout=self._api.config.stream_timeout())

    def list(self, path: str = ".") -> list[FileInfo]:
        """A directory's entries (symlinks are not followed)."""
        return self._api.call(self._list(path))

    def stat(self, path: str) -> FileInfo:
        """What `path` is (symlinks followed)."""
        return self._api.call(self._stat(path))

    def exists(self, path: str) -> bool:
        """Whether `path` exists."""
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path: str, *, parents: bool = True, mode: str | int | None = None) -> FileInfo:
        """Creates a directory (and its parents)."""
        return self._api.call(self._mkdir(path, parents, mode))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Deletes a file, a symlink or an (empty, unless `recursive`) directory."""
        self._api.call(self._remove(path, recursive))

    def move(self, source: str, destination: str, *, overwrite: bool = False) -> FileInfo:
        """Renames `source` to `destination`."""
        return self._api.call(self._move(source, destination, overwrite))

    def watch(self, path: str, *, recursive: bool = True) -> Iterator[FileEvent]:
        """Yields changes under the directory `path` until the caller stops iterating."""
        url, params = self._watch(path, recursive)
        with self._api.stream("GET", url, params=params) as response:
            parser = SseParser()
            for chunk in response.iter_bytes():
                for message in parser.feed(chunk):
                    event = watch_event(message)
                    if event is not None:
                        yield event


class Admin:
    """The admin key's API: tenants, their quotas and keys. The server is `base_url`, else
    `SANDSTREAM_URL`; the key is `api_key`, else `SANDSTREAM_API_KEY` (the daemon's own key: a
    tenant's key is `Forbidden` here). Used as a context manager, its connections close on exit.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        self._api = _Api(config or ClientConfig.resolve(base_url, api_key), http_client)

    def create_tenant(self, name: str, quotas: Mapping[str, int] | None = None) -> Tenant:
        """Creates a tenant (`Conflict` if it exists). `quotas`, 0 or absent meaning none:
        `sandboxes`, `running_processes`, `memory_mb`, `cpu_percent`, `disk_mb` (sums of its
        sandboxes' limits), `streams`, `requests_per_second`, `template_storage_mb` (its
        image and snapshot templates' sizes), `watches` (0: the daemon's default share)."""
        return self._api.call(create_tenant_call(name, quotas))

    def list_tenants(self) -> list[Tenant]:
        """Every tenant, with its usage."""
        return self._api.call(list_tenants_call())

    def get_tenant(self, name: str) -> Tenant:
        """A tenant, its quotas and usage; `NotFound` if there is none of that name."""
        return self._api.call(get_tenant_call(name))

    def set_quotas(self, name: str, quotas: Mapping[str, int] | None) -> Tenant:
        """Sets every quota of a tenant: absent ones become none. Holds at once."""
        return self._api.call(set_quotas_call(name, quotas))

    def delete_tenant(self, name: str) -> None:
        """Deletes a tenant and its keys; `Conflict` while it has sandboxes."""
        self._api.call(delete_tenant_call(name))

    def create_key(self, tenant: str) -> Key:
        """Makes a key of the tenant; its secret, `key.key` (`ssk_...`), is shown this once. To
        rotate a key, make a new one, move to it, and revoke the old one."""
        return self._api.call(create_key_call(tenant))

    def list_keys(self, tenant: str) -> list[Key]:
        """The tenant's keys, without the keys themselves."""
        return self._api.call(list_keys_call(tenant))

    def revoke_key(self, tenant: str, key: Key | str) -> None:
        """Revokes a key (or a key id); it opens nothing from now on."""
        self._api.call(revoke_key_call(tenant, key))

    def close(self) -> None:
        """Closes the HTTP connections."""
        self._api.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._api.close()
