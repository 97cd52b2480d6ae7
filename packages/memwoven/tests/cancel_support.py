"""What the cancellation tests of the chat backends with an update lock (SQL, file) share."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from memwoven import Message
from memwoven.testing import turn


async def cancel_a_locked_update(memory: Any, other: Any) -> tuple[list[Message], bool, float]:
    """`memory`'s locked `aupdate` of session "s" (saved as turn 0 first), cancelled while its coroutine `change`
    waits; then `other`'s locked update adding turn 2. Returns what `other` reads after it, whether `change` was
    cancelled, and how long `other`'s update took (it waits for the session's lock the first one held)."""
    await memory.asave("s", [turn(0)])
    entered, cancelled = asyncio.Event(), []

    async def change(messages: list[Message]) -> list[Message]:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return [*messages, turn(1)]

    task = asyncio.ensure_future(memory._aupdate_locked("s", change))
    await entered.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the cancelled update returned")
    started = time.monotonic()
    await asyncio.wait_for(other._aupdate_locked("s", lambda messages: [*messages, turn(2)]), 10)
    took = time.monotonic() - started
    return await other.aload("s"), bool(cancelled), took
