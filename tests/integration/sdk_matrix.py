"""Records which public methods of E2B's Python SDKs each test calls, for the compatibility matrix.

Inert unless SANDSTREAM_SDK_MATRIX names a file. Then, as pytest configures, the public methods
of `e2b`'s and `e2b_code_interpreter`'s sandbox classes (and of the sub-APIs their `commands`,
`files`, `pty` and `git` properties lead to, and of the handles those return) are wrapped; each
call a test makes itself (not the calls the SDK makes inside its own methods) is noted against
the test, and at the end of the session every test that called something is appended to the file
as one JSON line with its outcome, with what was collected of each test file and each SDK's
public methods. `tests/compat/matrix.py` turns the file into docs/compatibility-matrix.md.

The wrappers pass every call through unchanged (arguments, result, exception, sync or async) and
are removed when pytest unconfigures. A name missing from an installed version is skipped.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.metadata
import inspect
import json
import os
import threading
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ENV = "SANDSTREAM_SDK_MATRIX"
REPO = Path(__file__).resolve().parents[2]

# sdk key (the generator's), distribution (for its version), package, top-level classes.
SDKS = [
    ("e2b-python", "e2b", "e2b",
     ["Sandbox", "AsyncSandbox", "CommandHandle", "AsyncCommandHandle", "WatchHandle",
      "AsyncWatchHandle", "AsyncCommandInputHandle", "Volume", "AsyncVolume"]),
    ("e2b-code-interpreter-python", "e2b-code-interpreter", "e2b_code_interpreter",
     ["Sandbox", "AsyncSandbox"]),
]
# The properties of a class that lead to a sub-API, listed as `Sandbox.commands.run`.
SUB_APIS = ["commands", "files", "pty", "git"]

# Inside a wrapped call: the calls it makes are the SDK's own, not the test's.
_inside = contextvars.ContextVar("sdk_matrix_inside", default=False)


class _Entry:
    def __init__(self, sdk: str, label: str, methods: set[str]) -> None:
        self.sdk = sdk
        self.label = label
        self.methods = methods


class Recorder:
    """The registry of wrapped classes, the calls of the running test, the finished tests."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.entries: dict[type, _Entry] = {}
        self.inventory: dict[str, dict[str, Any]] = {}
        self.restore: list[tuple[type, str, Any]] = []
        self.current: str | None = None
        self.calls: dict[tuple[str, str], bool] = {}
        self.outcome = "passed"
        self.tests: list[dict[str, Any]] = []
        self.items: dict[str, tuple[str, str]] = {}
        self.collected: dict[str, int] = {}
        self.ran: dict[str, int] = {}
        self.deselected: set[str] = set()
        self.labels: dict[tuple[type, str], tuple[str, str] | None] = {}

    # --- the registry -------------------------------------------------------------------------

    def discover(self) -> None:
        for sdk, dist, package, roots in SDKS:
            try:
                module = importlib.import_module(package)
                version = importlib.metadata.version(dist)
            except Exception:  # not installed: nothing of it to record
                continue
            labels: list[str] = []
            for root in roots:
                cls = getattr(module, root, None)
                if inspect.isclass(cls):
                    self._register(sdk, package, cls, root, labels, depth=0)
            self.inventory[sdk] = {"kind": "inventory", "sdk": sdk, "version": version,
                                   "methods": sorted(set(labels))}

    def _register(self, sdk: str, package: str, cls: type, label: str, labels: list[str],
                  depth: int) -> None:
        if cls in self.entries:
            return
        methods = set()
        for name in dir(cls):
            if name.startswith("_"):
                continue
            owner, value = _defined(cls, name)
            if owner is None or not _in_package(owner, package):
                continue
            if isinstance(value, property):
                if name in SUB_APIS and depth == 0:
                    sub = _returned_class(value)
                    if sub is not None and _in_package(sub, package):
                        self._register(sdk, package, sub, f"{label}.{name}", labels, depth + 1)
                continue
            if _is_method(value):
                methods.add(name)
        self.entries[cls] = _Entry(sdk, label, methods)
        labels.extend(f"{label}.{m}" for m in methods)

    def install(self) -> None:
        wrapped: set[tuple[type, str]] = set()
        for cls, entry in list(self.entries.items()):
            for name in entry.methods:
                owner, value = _defined(cls, name)
                if owner is None or (owner, name) in wrapped:
                    continue
                wrapped.add((owner, name))
                replacement = self._wrap_attribute(owner, name, value)
                if replacement is not None:
                    self.restore.append((owner, name, value))
                    setattr(owner, name, replacement)

    def uninstall(self) -> None:
        for owner, name, value in reversed(self.restore):
            setattr(owner, name, value)
        self.restore.clear()

    def label(self, cls: type, name: str) -> tuple[str, str] | None:
        """(sdk, "Class.method") of `name` called on `cls`: the first registered class of its MRO
        that lists it, so a method of a shared base is named after the class it was called on."""
        if (cls, name) not in self.labels:
            found = None
            for klass in getattr(cls, "__mro__", ()):
                entry = self.entries.get(klass)
                if entry is not None and name in entry.methods:
                    found = entry.sdk, f"{entry.label}.{name}"
                    break
            self.labels[(cls, name)] = found
        return self.labels[(cls, name)]

    # --- wrapping -----------------------------------------------------------------------------

    def _wrap_attribute(self, owner: type, name: str, value: Any) -> Any:
        if inspect.isfunction(value):
            return self._wrap_function(value, name, lambda args: type(args[0]) if args else owner)
        if isinstance(value, classmethod):
            func = self._wrap_function(value.__func__, name,
                                       lambda args: args[0] if args else owner)
            return classmethod(func)
        if isinstance(value, staticmethod):
            return staticmethod(self._wrap_function(value.__func__, name, lambda args: owner))
        if hasattr(type(value), "__get__"):
            return _RecordingDescriptor(self, value, name)
        return None

    def _wrap_function(self, func: Callable[..., Any], name: str,
                       owner_of: Callable[[tuple[Any, ...]], Any]) -> Callable[..., Any]:
        recorder = self

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                key = recorder.enter(owner_of(args), name)
                if key is None:
                    return await func(*args, **kwargs)
                token = _inside.set(True)
                try:
                    result = await func(*args, **kwargs)
                finally:
                    _inside.reset(token)
                recorder.returned(key)
                return result
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = recorder.enter(owner_of(args), name)
            if key is None:
                return func(*args, **kwargs)
            token = _inside.set(True)
            try:
                result = func(*args, **kwargs)
            finally:
                _inside.reset(token)
            if inspect.iscoroutine(result):
                # A sync callable giving a coroutine (an async class_method_variant): the call
                # is made when it is awaited.
                return recorder.awaited(result, key)
            recorder.returned(key)
            return result
        return wrapper

    async def awaited(self, coroutine: Any, key: tuple[str, str]) -> Any:
        token = _inside.set(True)
        try:
            result = await coroutine
        finally:
            _inside.reset(token)
        self.returned(key)
        return result

    def wrap_bound(self, bound: Callable[..., Any], owner: Any, name: str) -> Callable[..., Any]:
        """A bound callable from another descriptor (e2b's class_method_variant), wrapped."""
        return self._wrap_function(bound, name, lambda args: owner)

    # --- recording ----------------------------------------------------------------------------

    def enter(self, owner: Any, name: str) -> tuple[str, str] | None:
        """The call's (sdk, label) when it is a test's own call to record; notes it as made."""
        if _inside.get():
            return None
        try:
            key = self.label(owner, name) if isinstance(owner, type) else None
        except TypeError:  # an unhashable owner: not a class of ours
            key = None
        if key is None:
            return None
        with self.lock:
            if self.current is not None:
                self.calls.setdefault(key, False)
        return key

    def returned(self, key: tuple[str, str]) -> None:
        with self.lock:
            if self.current is not None and key in self.calls:
                self.calls[key] = True

    def start_test(self, nodeid: str) -> None:
        with self.lock:
            self.current = nodeid
            self.calls = {}
            self.outcome = "passed"

    def report(self, report: pytest.TestReport) -> None:
        if report.nodeid != self.current:
            return
        if getattr(report, "wasxfail", None) is not None:
            self.outcome = "skipped"  # an expected failure proves nothing of the methods
        elif report.failed:
            self.outcome = "failed"
        elif report.skipped and self.outcome == "passed":
            self.outcome = "skipped"

    def finish_test(self, nodeid: str) -> None:
        with self.lock:
            current, calls, outcome = self.current, self.calls, self.outcome
            self.current, self.calls = None, {}
        file, test = self.items.get(nodeid, (nodeid.split("::", 1)[0], nodeid))
        self.ran[file] = self.ran.get(file, 0) + 1
        if current != nodeid or not calls:
            return
        self.tests.append({
            "kind": "test", "file": file, "test": test, "outcome": outcome,
            "calls": sorted([sdk, label, ok] for (sdk, label), ok in calls.items()),
        })

    def write(self, session: pytest.Session) -> None:
        partial = _node_id_files(session.config)
        stopped = bool(session.shouldstop or session.shouldfail)
        lines: list[dict[str, Any]] = list(self.inventory.values())
        for file in sorted(self.collected):
            why = None
            if file in partial:
                why = "only some of its tests were named"
            elif file in self.deselected:
                why = "tests deselected (-k, -m or --deselect)"
            elif stopped or self.ran.get(file, 0) < self.collected[file]:
                why = "the session stopped before all its tests ran"
            lines.append({"kind": "file", "runner": "pytest", "file": file, "filtered": why})
        lines.extend(self.tests)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))

    # --- pytest hooks: a test is what runs between its logstart and its logfinish -------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.items = {item.nodeid: _ids(item) for item in items}
        self.collected = {}
        for file, _ in self.items.values():
            self.collected[file] = self.collected.get(file, 0) + 1

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.update(_ids(item)[0] for item in items)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.start_test(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.report(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.finish_test(nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.write(session)

    def pytest_unconfigure(self) -> None:
        self.uninstall()


class _RecordingDescriptor:
    """Stands in for a descriptor that is neither a function nor a class/static method: what it
    gives is wrapped, the rest of it is the original's."""

    def __init__(self, recorder: Recorder, original: Any, name: str) -> None:
        self._recorder = recorder
        self._original = original
        self._name = name
        self.__doc__ = getattr(original, "__doc__", None)
        self.__wrapped__ = original

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        got = self._original.__get__(obj, objtype)
        if not callable(got):
            return got
        owner = type(obj) if obj is not None else objtype
        return self._recorder.wrap_bound(got, owner, self._name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._original, attr)


def _defined(cls: type, name: str) -> tuple[type | None, Any]:
    """The class of `cls`'s MRO that defines `name`, and the raw attribute (not bound)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return (None, None) if klass is object else (klass, vars(klass)[name])
    return None, None


def _in_package(cls: type, package: str) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module == package or module.startswith(package + ".")


def _is_method(value: Any) -> bool:
    if inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
        return True
    if inspect.isclass(value) or isinstance(value, property):
        return False
    # A descriptor of the SDK's own that gives a callable (e2b's class_method_variant, and the
    # DualMethod of Volume.get_info and Volume.list: a class form and an instance form).
    return hasattr(type(value), "__get__") and (
        callable(getattr(value, "method", None)) or callable(getattr(value, "_instance_fn", None)))


def _returned_class(prop: property) -> type | None:
    try:
        hint = typing.get_type_hints(prop.fget).get("return") if prop.fget else None
    except Exception:
        return None
    return hint if inspect.isclass(hint) else None


def _repo_path(path: Path) -> str:
    """`path` relative to the checkout, as the generator names the suites' files."""
    path = path.resolve()
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return path.as_posix()


def _ids(item: pytest.Item) -> tuple[str, str]:
    """(file, test id) of an item, the file relative to the checkout whatever pytest's rootdir."""
    file = _repo_path(Path(str(item.path)))
    _, _, rest = item.nodeid.partition("::")
    return file, f"{file}::{rest}" if rest else file


def _node_id_files(config: pytest.Config) -> set[str]:
    """The files named with `::` on the command line: only some of their tests were asked for."""
    return {_repo_path(Path(config.invocation_params.dir) / arg.split("::", 1)[0])
            for arg in config.args if "::" in arg}


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if not path or config.pluginmanager.has_plugin("sdk_matrix_recorder"):
        return
    recorder = Recorder(Path(path))
    recorder.discover()
    recorder.install()
    config.pluginmanager.register(recorder, "sdk_matrix_recorder")
