"""Run one test body against the sync API or the async twins of a backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import pytest

MODES = ("sync", "async")
_M = TypeVar("_M")


class StorageHooks(Generic[_M]):
    """The hooks a contract suite's subclass overrides to reach storage beyond the one object under test."""

    def reopen(self, memory: _M) -> _M | None:
        """Return a second object over the same storage, or None if storage is private to the object."""
        return None

    @contextmanager
    def neighbour(self, memory: _M) -> Iterator[_M | None]:
        """A memory on the same storage whose prefix, namespace or collection name starts with this one's
        (CM8: prefixes and names are boundaries), removed afterwards; None if the backend has no such option."""
        yield None

    @pytest.fixture
    def stopped_clock(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """`time.time_ns`, which versions come from, stands still for the test (as a coarse clock does between two
        writes, or a test's frozen one)."""
        frozen = time.time_ns()
        monkeypatch.setattr(time, "time_ns", lambda: frozen)

    @pytest.fixture
    def other(self, memory: Driver) -> Iterator[Driver]:
        """A second object over the same storage as `memory`, driven the same way (skips if `reopen` gives none)."""
        second = self.reopen(memory.target)
        if second is None:
            pytest.skip(f"{type(memory.target).__name__} keeps its data private to one object")
        with driving(second, "async" if memory.is_async else "sync", memory.loop) as driver:
            yield driver


class Driver:
    """Calls `target.name(...)` in sync mode, or runs `target.aname(...)` to completion in async mode.

    A contract test is written once against the driver and runs in both modes; in async mode every call goes
    through the backend's async twin on one event loop kept for the whole test.
    """

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.target = target
        self.loop = loop

    @property
    def is_async(self) -> bool:
        """True when calls go through the async twins."""
        return self.loop is not None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self.loop is None:
            return getattr(self.target, name)  # type: ignore[no-any-return]
        twin = getattr(self.target, "a" + name)
        loop = self.loop
        return lambda *args, **kwargs: loop.run_until_complete(twin(*args, **kwargs))

    def run(self, coroutine: Any) -> Any:
        """Run a coroutine on this driver's loop (async mode only)."""
        assert self.loop is not None
        return self.loop.run_until_complete(coroutine)


@contextmanager
def driving(target: Any, mode: str, loop: asyncio.AbstractEventLoop | None = None) -> Iterator[Driver]:
    """A driver over `target` for `mode`, closing the target (with the matching close) afterwards.

    In async mode the driver runs on `loop` if given (left open), else on a new loop closed at the end.
    """
    if mode == "sync":
        try:
            yield Driver(target)
        finally:
            target.close()
        return
    own_loop = loop is None
    running = loop or asyncio.new_event_loop()
    try:
        yield Driver(target, running)
    finally:
        try:
            running.run_until_complete(target.aclose())
        finally:
            if own_loop:
                running.close()
