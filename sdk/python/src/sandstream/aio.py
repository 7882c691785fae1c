"""The asyncio client under its first module name: `from sandstream.aio import AsyncSandbox`
keeps working. It lives in `_async/`, one module per surface; import it from `sandstream`."""

from ._async.access import AsyncAdmin
from ._async.files import AsyncFiles
from ._async.processes import AsyncProcess, AsyncProcesses
from ._async.sandbox import AsyncSandbox
from ._async.sessions import AsyncSession

__all__ = ["AsyncAdmin", "AsyncFiles", "AsyncProcess", "AsyncProcesses", "AsyncSandbox", "AsyncSession"]
