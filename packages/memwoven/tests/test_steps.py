"""The step engine: one driver for sync and async, failures and cancellations thrown into the operation, and the
methods `twins` / `function_twins` / `async_twin` generate."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from memwoven._steps import (
    Call,
    Invoke,
    Runner,
    Sleep,
    Steps,
    arun,
    async_twin,
    function_twins,
    run,
    twin_name,
    twins,
)
from memwoven.errors import InvalidInputError


class Lock:
    """A step target whose async twins park until released (to cancel an operation in the middle)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.release = asyncio.Event()
        self.working = asyncio.Event()

    def acquire(self) -> None:
        self.events.append("acquire")

    async def aacquire(self) -> None:
        self.events.append("acquire")

    def work(self) -> str:
        self.events.append("work")
        return "done"

    async def awork(self) -> str:
        self.events.append("work")
        self.working.set()
        await self.release.wait()
        return "done"

    def unlock(self) -> None:
        self.events.append("unlock")

    async def aunlock(self) -> None:
        self.events.append("unlock")


def locked(lock: Lock) -> Steps[str]:
    yield Call(lock, "acquire")
    try:
        result: str = yield Call(lock, "work")
    finally:
        yield Call(lock, "unlock")
    return result


class Failing:
    def fail(self) -> None:
        raise KeyError("boom")

    async def afail(self) -> None:
        raise KeyError("boom")


def recovering() -> Steps[str]:
    try:
        yield Call(Failing(), "fail")
    except KeyError as error:
        return f"recovered from {error}"
    return "not reached"


def test_sync_and_async_drive_the_same_steps() -> None:
    lock = Lock()
    assert run(locked(lock)) == "done"
    assert lock.events == ["acquire", "work", "unlock"]

    async def main() -> str:
        lock.release.set()
        return await arun(locked(lock))

    lock.events.clear()
    assert asyncio.run(main()) == "done"
    assert lock.events == ["acquire", "work", "unlock"]


def test_a_failed_step_is_thrown_into_the_operation() -> None:
    assert run(recovering()) == "recovered from 'boom'"
    assert asyncio.run(arun(recovering())) == "recovered from 'boom'"


def test_a_cancelled_operation_still_runs_its_cleanup_steps() -> None:
    lock = Lock()

    async def main() -> None:
        task = asyncio.create_task(arun(locked(lock)))
        await lock.working.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert lock.events == ["acquire", "work", "unlock"]


def test_sleep_and_invoke_steps() -> None:
    def steps(function: Any) -> Steps[Any]:
        yield Sleep(0)
        return (yield Invoke(function, (2,)))

    async def double(value: int) -> int:
        return value * 2

    assert run(steps(lambda value: value + 1)) == 3
    assert asyncio.run(arun(steps(double))) == 4
    assert asyncio.run(arun(steps(lambda value: value + 1))) == 3
    with pytest.raises(InvalidInputError, match="is async"):
        run(steps(double))  # a coroutine function from sync code: a typed error, and no "never awaited" warning


def test_twin_names() -> None:
    assert twin_name("load") == "aload"
    assert twin_name("_update_locked") == "_aupdate_locked"


class Counter(Runner):
    _blocking = False

    def __init__(self) -> None:
        self.value = 0
        self.threads: set[int] = set()

    def _add(self, amount: int, *, times: int = 1) -> Steps[int]:
        """Add `amount`, `times` times; return the new value."""
        for _ in range(times):
            yield Sleep(0)
            self.value += amount
        return self.value

    add, aadd = twins(_add)

    def reset(self) -> None:
        """Back to zero."""
        self.threads.add(threading.get_ident())
        self.value = 0

    areset = async_twin(reset)


class BlockingCounter(Counter):
    _blocking = True

    def reset(self) -> None:
        """An override: the generated twin calls this one."""
        super().reset()
        self.value = -1


def test_twins_are_named_documented_and_typed_like_the_steps_method() -> None:
    counter = Counter()
    assert counter.add(2, times=3) == 6
    assert asyncio.run(counter.aadd(1)) == 7
    assert (Counter.add.__name__, Counter.aadd.__name__, Counter.areset.__name__) == ("add", "aadd", "areset")
    assert Counter.add.__qualname__ == "Counter.add"
    assert Counter.add.__doc__ == "Add `amount`, `times` times; return the new value."
    assert Counter.aadd.__doc__ == "Async twin of `add`."
    assert str(inspect.signature(counter.aadd)) == "(amount: 'int', *, times: 'int' = 1) -> 'int'"
    assert inspect.iscoroutinefunction(Counter.aadd)
    assert not inspect.iscoroutinefunction(Counter.add)


def test_async_twin_runs_the_objects_own_method_off_the_loop_when_it_blocks() -> None:
    loop_thread = threading.get_ident()
    quick, blocking = Counter(), BlockingCounter()
    asyncio.run(quick.areset())
    asyncio.run(blocking.areset())
    assert quick.threads == {loop_thread}  # never blocks: called on the loop
    assert blocking.threads
    assert loop_thread not in blocking.threads
    assert blocking.value == -1  # the override ran


def _scaled(value: int, *, by: int = 2) -> Steps[int]:
    """Scale `value`."""
    yield Sleep(0)
    return value * by


scaled, ascaled = function_twins(_scaled)


def test_function_twins() -> None:
    assert scaled(3) == 6
    assert asyncio.run(ascaled(3, by=3)) == 9
    assert (scaled.__name__, ascaled.__name__, scaled.__doc__) == ("scaled", "ascaled", "Scale `value`.")
