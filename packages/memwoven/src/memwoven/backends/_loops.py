"""What the backends that keep one async client (or engine) per event loop share.

A loop's client lives as long as the loop: each is paired with a *lifetime*, an async generator suspended while the
loop runs, which the loop finalizes (closing the client) when it shuts down its async generators.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Protocol

__all__ = ["PerLoop", "end_this_loops_lifetime"]


class PerLoop(Protocol):
    """What serves one event loop: whatever it holds, and its lifetime (None once finalized or never started)."""

    lifetime: AsyncGenerator[None, None] | None


async def end_this_loops_lifetime(loops: Mapping[asyncio.AbstractEventLoop, PerLoop]) -> None:
    """Finalize the running loop's lifetime now (closing its client), once even under concurrent calls."""
    mine = loops.get(asyncio.get_running_loop())
    if mine is not None and mine.lifetime is not None:
        lifetime, mine.lifetime = mine.lifetime, None
        await lifetime.aclose()
