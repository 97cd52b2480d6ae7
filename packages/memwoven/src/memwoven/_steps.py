"""The step engine: an operation that does I/O is written once, as a generator of steps, and run by `run` (sync)
or `arun` (async).

A step is whatever the generator yields: a `Call` (a method of an object, whose async twin is ``a<method>``), a
`Sleep`, an `Invoke` of a user's callable (sync or async), or a backend's own operation object with its own
executor. The driver hands each step to the executor, sends the result back into the generator, or throws the
executor's exception into it, so an operation can handle a failure (a creation race, a conflict to retry) where
it is written::

    def _load(self, session_id: str) -> Steps[list[Message]]:
        raw = yield Call(self.client, "get", (key_of(session_id),))
        return decode(raw)

    def load(self, session_id: str) -> list[Message]:
        return run(self._load(session_id))  # each step through `execute`

    async def aload(self, session_id: str) -> list[Message]:
        return await arun(self._load(session_id))  # each step through `aexecute`
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memwoven.errors import InvalidInputError

__all__ = ["Call", "Invoke", "Sleep", "Steps", "aexecute", "arun", "execute", "run"]

_T = TypeVar("_T")
Steps = Generator[Any, Any, _T]


@dataclass(frozen=True)
class Call:
    """Call `target.<method>(*args, **kwargs)`, or its async twin (``a<method>``; ``_a<name>`` for ``_<name>``)."""

    target: Any
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    """Pause for `seconds` (`time.sleep`, or `asyncio.sleep` off the thread)."""

    seconds: float


@dataclass(frozen=True)
class Invoke:
    """Call a user's callable; from async code its result is awaited when it is awaitable."""

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()


def execute(step: Any) -> Any:
    """Execute a `Call`, `Sleep` or `Invoke` from sync code."""
    if isinstance(step, Call):
        return getattr(step.target, step.method)(*step.args, **step.kwargs)
    if isinstance(step, Sleep):
        time.sleep(step.seconds)
        return None
    if isinstance(step, Invoke):
        result = step.function(*step.args)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise InvalidInputError(f"{step.function!r} is async: use the async API (the a- methods)")
        return result
    raise TypeError(f"not a step: {step!r}")


async def aexecute(step: Any) -> Any:
    """Execute a `Call` (through its async twin), `Sleep` or `Invoke` from async code."""
    if isinstance(step, Call):
        name = step.method
        twin = "_a" + name[1:] if name.startswith("_") else "a" + name
        return await getattr(step.target, twin)(*step.args, **step.kwargs)
    if isinstance(step, Sleep):
        await asyncio.sleep(step.seconds)
        return None
    if isinstance(step, Invoke):
        result = step.function(*step.args)
        return await result if inspect.isawaitable(result) else result
    raise TypeError(f"not a step: {step!r}")


def run(steps: Steps[_T], executor: Callable[[Any], Any] = execute) -> _T:
    """Drive `steps` to its result, each step through `executor` (its exception is thrown into `steps`)."""
    try:
        step = next(steps)
        while True:
            try:
                result = executor(step)
            except Exception as error:  # noqa: BLE001 - the operation decides what a failed step means
                step = steps.throw(error)
            else:
                step = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun(steps: Steps[_T], executor: Callable[[Any], Awaitable[Any]] = aexecute) -> _T:
    """Drive `steps` to its result from async code, each step through the awaitable `executor`."""
    try:
        step = next(steps)
        while True:
            try:
                result = await executor(step)
            except Exception as error:  # noqa: BLE001 - the operation decides what a failed step means
                step = steps.throw(error)
            else:
                step = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
