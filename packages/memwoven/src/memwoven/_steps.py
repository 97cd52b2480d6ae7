"""The step engine: an operation that does I/O is written once, as a generator of steps, and run by `run` (sync)
or `arun` (async).

A step is whatever the generator yields: a `Call` (a method of an object, whose async twin is ``a<method>``) or
a backend's own operation object. The driver hands each step to an executor, sends the result back into the
generator, or throws the executor's exception into it, so an operation can handle a failure (a creation race,
a conflict to retry) where it is written::

    def _load(self, session_id: str) -> Steps[list[Message]]:
        raw = yield Call(self.client, "get", (key_of(session_id),))
        return decode(raw)

    def load(self, session_id: str) -> list[Message]:
        return run(self._load(session_id))  # each Call through the sync method

    async def aload(self, session_id: str) -> list[Message]:
        return await arun(self._load(session_id))  # each Call through its async twin
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["Call", "Steps", "acall_method", "arun", "call_method", "run"]

_T = TypeVar("_T")
Steps = Generator[Any, Any, _T]


@dataclass(frozen=True)
class Call:
    """One step: call `target.<method>(*args, **kwargs)`, or its async twin ``a<method>``."""

    target: Any
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def call_method(call: Call) -> Any:
    """Execute a `Call` through the sync method."""
    return getattr(call.target, call.method)(*call.args, **call.kwargs)


async def acall_method(call: Call) -> Any:
    """Execute a `Call` through the async twin ``a<method>``."""
    return await getattr(call.target, "a" + call.method)(*call.args, **call.kwargs)


def run(steps: Steps[_T], execute: Callable[[Any], Any] = call_method) -> _T:
    """Drive `steps` to its result, each step through `execute` (its exception is thrown into `steps`)."""
    try:
        step = next(steps)
        while True:
            try:
                result = execute(step)
            except Exception as error:
                step = steps.throw(error)
            else:
                step = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun(steps: Steps[_T], execute: Callable[[Any], Awaitable[Any]] = acall_method) -> _T:
    """Drive `steps` to its result from async code, each step through the awaitable `execute`."""
    try:
        step = next(steps)
        while True:
            try:
                result = await execute(step)
            except Exception as error:
                step = steps.throw(error)
            else:
                step = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
