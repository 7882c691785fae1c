# unasync: async only
"""Code contexts (persistent interpreters) of a sandbox and the cells run in them, for asyncio."""
# unasync: sync only
# """Code contexts (persistent interpreters) of a sandbox and the cells run in them."""
# unasync: end

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any

from .. import interpreter
from ..interpreter import CellRun, CodeContext, Execution, ExecutionError, Result
# unasync: async only
from .api import _AsyncSandboxSurface, _invoke
# unasync: sync only
# from .api import _SandboxSurface
# unasync: end


class _AsyncInterpreter(_AsyncSandboxSurface):
    """The code-context methods of `AsyncSandbox`; one default context per language."""

    _default_contexts: dict[str, CodeContext]

    async def create_code_context(self, language: str = "python", *, cwd: str | None = None,
                                  env: Mapping[str, str] | None = None) -> CodeContext:
        """Starts a persistent interpreter: "python", "javascript", "typescript" or "bash"."""
        return await self._api.call(interpreter.create_context_call(self._path, language, cwd, env))

    async def run_code(
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
        # unasync: async only
        """Runs a cell, streaming its output to the callbacks, and returns its `Execution`;
        see `Sandbox.run_code`."""
        # unasync: sync only
        # """Runs a cell, streaming its output to the callbacks, and returns its `Execution`
        # (`.results`, `.logs`, `.error`). Without `context`, one default context per language
        # is created on first use and reused, so state persists between calls.
        #
        # A dropped connection is resumed after the last event seen: every event reaches the
        # callbacks once and the cell runs once. Before the `start` event the request is retried
        # with its `Idempotency-Key`; after it, the run is read again by its number. A run the
        # context has forgotten by then (it keeps its last 32) raises `StreamLost`; it is never
        # run again."""
        # unasync: end
        if context is None:
            context = self._default_contexts.get(language)
            if context is None:
                context = self._default_contexts[language] = await self.create_code_context(language)
        run = CellRun(self.id, self._path, context, code, timeout_seconds, on_stdout=on_stdout,
                      on_stderr=on_stderr, on_result=on_result, on_error=on_error)

        def open_stream() -> Any:
            method, path, body, headers = run.request()
            return self._api.stream(method, path, json=body, headers=headers)

        events = self._api.follow(run.cursor, open_stream, refused=run.refused)
        async for event in events:
            deliver = run.route(event)
            if deliver is not None:
                await _invoke(deliver)
        return run.finish()

    async def list_code_contexts(self) -> builtins.list[CodeContext]:
        """The sandbox's code contexts."""
        return await self._api.call(interpreter.list_contexts_call(self._path))

    async def restart_code_context(self, context: CodeContext | str) -> CodeContext:
        """Restarts a context's interpreter (after a crash, or to clear its state)."""
        return await self._api.call(interpreter.restart_context_call(self._path, context))

    async def delete_code_context(self, context: CodeContext | str) -> None:
        """Stops a context's interpreter."""
        await self._api.call(interpreter.delete_context_call(self._path, context))
        self._default_contexts = interpreter.forget_context(self._default_contexts, context)
