"""What cancelling an async call does to the work it started (shared by the backends).

Work that must not be cut off halfway (a database transaction, the release of a lock) runs in a task of its own
(`finished_first`): a cancellation of the caller does not interrupt it; the caller waits for it to end, then raises
`CancelledError`. Work that runs in a worker thread (`in_thread`), or a transaction awaiting a caller's coroutine
(an update's `change`), carries a `Cancellation` (`current()`): cancelling the caller cancels the coroutine it is
awaiting and marks it abandoned, and the work checks the mark before it writes (`check`): it then raises
`Abandoned`, which rolls back what it began and releases what it holds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["Abandoned", "Cancellation", "awaited", "current", "finished_first", "in_thread"]

logger = logging.getLogger("memwoven.cancel")

R = TypeVar("R")


class Abandoned(Exception):
    """Raised inside work whose caller was cancelled, before it writes: what it began is rolled back."""


class Cancellation:
    """Shared by one call and the work it started (on the loop, or in a worker thread): `cancel`, on the loop,
    marks the work abandoned and cancels the caller's awaitable it is awaiting, if any."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._abandoned = threading.Event()
        self._awaiting: asyncio.Future[Any] | concurrent.futures.Future[Any] | None = None

    @property
    def abandoned(self) -> bool:
        return self._abandoned.is_set()

    def cancel(self) -> None:
        """The caller was cancelled: abandon the work (called on the loop)."""
        self._abandoned.set()
        awaiting = self._awaiting
        if awaiting is not None:
            awaiting.cancel()

    def check(self) -> None:
        """Raise `Abandoned` if the caller was cancelled (work calls this before it writes)."""
        if self._abandoned.is_set():
            raise Abandoned("the caller was cancelled")

    @contextmanager
    def watching(self, future: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> Iterator[None]:
        """Cancel `future` (the caller's awaitable the work awaits) if the caller is cancelled while the block runs;
        its cancellation then raises `Abandoned`."""
        self._awaiting = future
        try:
            if self.abandoned:
                future.cancel()
            yield
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            if not self.abandoned:
                raise
            raise Abandoned("the caller was cancelled") from None
        finally:
            self._awaiting = None

    def await_from_thread(self, awaitable: Awaitable[R]) -> R:
        """Await `awaitable` on the caller's loop from the worker thread running the work."""
        future = asyncio.run_coroutine_threadsafe(awaited(awaitable), self.loop)
        with self.watching(future):
            return future.result()


_CURRENT: contextvars.ContextVar[Cancellation | None] = contextvars.ContextVar("memwoven_cancellation", default=None)


def current() -> Cancellation | None:
    """The `Cancellation` of the work running here (None: sync code, or work that need not check)."""
    return _CURRENT.get()


async def awaited(awaitable: Awaitable[R]) -> R:
    """`awaitable` as a coroutine (what `run_coroutine_threadsafe` takes)."""
    return await awaitable


async def finished_first(
    work: Callable[[Cancellation], Coroutine[Any, Any, R]], loop: asyncio.AbstractEventLoop | None = None
) -> R:
    """Run `work(cancellation)` in a task of its own (`current()` there is the cancellation) and return its result.

    If the caller is cancelled meanwhile, the task is not: `cancellation.cancel()` tells it, the caller waits for it
    to end (further cancellations do not cut the wait short), then raises `CancelledError`.
    """
    cancellation = Cancellation(loop or asyncio.get_running_loop())

    async def running() -> R:
        _CURRENT.set(cancellation)  # the task's own copy of the context
        return await work(cancellation)

    task = asyncio.ensure_future(running())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if task.done() and task.cancelled():  # the task itself was cancelled (the loop is shutting down)
            raise
        cancellation.cancel()
        while not task.done():
            try:
                await asyncio.wait((task,))
            except asyncio.CancelledError:
                continue
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            if not isinstance(error, Abandoned):
                logger.warning("work of a cancelled call failed after the cancellation: %r", error)
        raise


async def in_thread(function: Callable[..., R], *args: Any, executor: Executor | None = None) -> R:
    """`function(*args)` in a worker thread, where `current()` is its `Cancellation`. A cancelled caller raises
    `CancelledError` at once; the thread finds its work abandoned when it next checks (before it writes)."""
    loop = asyncio.get_running_loop()
    cancellation = Cancellation(loop)
    context = contextvars.copy_context()
    context.run(_CURRENT.set, cancellation)
    try:
        return await loop.run_in_executor(executor, context.run, function, *args)
    except asyncio.CancelledError:
        cancellation.cancel()
        raise
