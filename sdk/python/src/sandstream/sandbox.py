"""The sync client under its first module name: `from sandstream.sandbox import Sandbox` keeps
working. It lives in `_sync/` (generated from `_async/`), one module per surface; import it from
`sandstream`."""

from ._sync.access import Admin
from ._sync.files import Files
from ._sync.processes import Process, Processes
from ._sync.sandbox import Sandbox
from ._sync.sessions import Session

__all__ = ["Admin", "Files", "Process", "Processes", "Sandbox", "Session"]
