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

    load, aload = twins(_load)  # `load` runs the steps with `run`, `aload` with `arun`

`twins` makes both methods from the one definition (the steps method's docstring is the public method's), through
the object's `Runner._run` / `Runner._arun`: a backend whose steps are its own operations (an SQL transaction, a
Redis script) overrides those two to execute them. A method that is plain sync code gets its async twin from
`async_twin`, which runs it in a worker thread (or directly, on an object that never blocks).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Concatenate, NamedTuple, ParamSpec, TypeVar

from memwoven.errors import InvalidInputError

__all__ = [
    "Call",
    "Invoke",
    "Runner",
    "Sleep",
    "Steps",
    "aexecute",
    "arun",
    "async_twin",
    "execute",
    "function_twins",
    "no_io",
    "run",
    "twin_name",
    "twins",
]

_T = TypeVar("_T")
_P = ParamSpec("_P")
_R = TypeVar("_R", bound="Runner")
Steps = Generator[Any, Any, _T]


_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})


# Steps are named tuples: an operation makes one per backend call, and a tuple is built several times faster than
# a frozen dataclass (a default `load` on the in-memory backend went from ~0.9 to ~2.9 µs with dataclasses).
class Call(NamedTuple):
    """Call `target.<method>(*args, **kwargs)`, or its async twin (``a<method>``; ``_a<name>`` for ``_<name>``)."""

    target: Any
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = _NO_KWARGS


class Sleep(NamedTuple):
    """Pause for `seconds` (`time.sleep`, or `asyncio.sleep` off the thread)."""

    seconds: float


class Invoke(NamedTuple):
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
        return await getattr(step.target, twin_name(name))(*step.args, **step.kwargs)
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
            # The operation decides what a failed step means; a cancellation or an interrupt reaches it too, so
            # its cleanup steps run, as a `finally` block would in plain code.
            except BaseException as error:  # noqa: BLE001
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
            # The operation decides what a failed step means; a cancellation or an interrupt reaches it too, so
            # its cleanup steps run, as a `finally` block would in plain code.
            except BaseException as error:  # noqa: BLE001
                step = steps.throw(error)
            else:
                step = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def twin_name(name: str) -> str:
    """The name of the async twin of the method `name`: ``a<name>``, ``_a<name>`` for ``_<name>``."""
    return "_a" + name[1:] if name.startswith("_") else "a" + name


class Runner:
    """An object whose operations are steps: `twins` runs them through `_run` / `_arun`, which a backend overrides
    to execute its own kind of step (falling back to `execute` / `aexecute` for the others)."""

    _blocking: ClassVar[bool] = True
    """Whether the sync methods block (I/O, or CPU work like a vector scan): `async_twin` then runs them in a
    worker thread, off the event loop. An object whose methods never block sets False."""

    def _run(self, steps: Steps[_T]) -> _T:
        """Drive `steps` from sync code."""
        return run(steps)

    async def _arun(self, steps: Steps[_T]) -> _T:
        """Drive `steps` from async code."""
        return await arun(steps)

    async def _off_loop(self, method: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run a sync callable from async code: in a worker thread, or directly if this object never blocks."""
        if not self._blocking:
            return method(*args, **kwargs)
        return await asyncio.to_thread(method, *args, **kwargs)


def _public_name(steps: Callable[..., Any]) -> str:
    """``_load`` -> ``load``; ``_update_locked_steps`` -> ``_update_locked``."""
    name = steps.__name__
    return name.removesuffix("_steps") if name.endswith("_steps") and name != "_steps" else name.removeprefix("_")


def _named(function: Callable[..., Any], owner: Callable[..., Any], name: str, doc: str | None) -> None:
    function.__name__ = name
    function.__qualname__ = owner.__qualname__.rsplit(".", 1)[0] + "." + name if "." in owner.__qualname__ else name
    function.__module__ = owner.__module__
    function.__doc__ = doc
    function.__signature__ = _signature(owner)  # type: ignore[attr-defined]  # for inspect and help()


def _signature(steps: Callable[..., Any]) -> inspect.Signature:
    """The signature of `steps` with the result it returns (``Steps[X]`` -> ``X``) as the return annotation."""
    signature = inspect.signature(steps)
    result = signature.return_annotation
    if isinstance(result, str) and result.startswith("Steps[") and result.endswith("]"):
        signature = signature.replace(return_annotation=result[len("Steps[") : -1])
    return signature


def twins(
    steps: Callable[Concatenate[_R, _P], Steps[_T]],
    *,
    name: str | None = None,
    async_name: str | None = None,
) -> tuple[Callable[Concatenate[_R, _P], _T], Callable[Concatenate[_R, _P], Coroutine[Any, Any, _T]]]:
    """The sync method and its async twin, both running the one steps method: ``load, aload = twins(_load)``.

    The sync method is named after `steps` (``_load`` -> ``load``, ``_trim_steps`` -> ``_trim``) and has its
    docstring; the async one is its `twin_name`. `name` / `async_name` name them when a framework's names do not
    follow that rule (``__call__`` and ``acall``, ``add`` and ``async_add``).
    """

    def method(self: _R, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self._run(steps(self, *args, **kwargs))

    async def amethod(self: _R, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await self._arun(steps(self, *args, **kwargs))

    name = name or _public_name(steps)
    _named(method, steps, name, steps.__doc__)
    _named(amethod, steps, async_name or twin_name(name), f"Async twin of `{name}`.")
    return method, amethod


def function_twins(
    steps: Callable[_P, Steps[_T]],
) -> tuple[Callable[_P, _T], Callable[_P, Coroutine[Any, Any, _T]]]:
    """`twins` for a module function: ``trim, atrim = function_twins(_trim)``, running the steps with `run` and
    `arun` (named and documented as `twins` names them)."""

    def function(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return run(steps(*args, **kwargs))

    async def afunction(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await arun(steps(*args, **kwargs))

    name = _public_name(steps)
    _named(function, steps, name, steps.__doc__)
    _named(afunction, steps, twin_name(name), f"Async twin of `{name}`.")
    return function, afunction


def no_io(function: Callable[_P, _T]) -> Callable[_P, Steps[_T]]:
    """The steps of code that needs no executor (in-process work that never blocks, like a dict behind a lock):
    it runs when driven, by `run` or `arun` alike, and yields no step. For a backend implementing step hooks."""

    @functools.wraps(function)
    def steps(*args: _P.args, **kwargs: _P.kwargs) -> Steps[_T]:
        yield from ()  # no step; being a generator, the work runs when driven, not when called
        return function(*args, **kwargs)

    return steps


def async_twin(method: Callable[Concatenate[_R, _P], _T]) -> Callable[Concatenate[_R, _P], Coroutine[Any, Any, _T]]:
    """The async twin of a sync method that is plain code (``aclose = async_twin(close)``): it calls the object's
    own method of that name (so an override is used) through `Runner._off_loop`."""
    name = method.__name__

    async def amethod(self: _R, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        bound: Callable[_P, _T] = getattr(self, name)
        return await self._off_loop(bound, *args, **kwargs)

    public = name.strip("_") if name.startswith("__") else name
    _named(amethod, method, twin_name(public), f"Async twin of `{name}`.")
    return amethod
