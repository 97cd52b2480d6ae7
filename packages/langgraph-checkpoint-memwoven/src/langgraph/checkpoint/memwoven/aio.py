"""`AsyncMemwovenSaver`: `MemwovenSaver` shaped like LangGraph's async savers (`AsyncSqliteSaver`,
`AsyncPostgresSaver`): `setup()` is a coroutine. Its a-methods run on the item memory's async API; its sync ones
stay usable (from other threads; on the event loop's thread they would block it).
"""

from __future__ import annotations

from langgraph.checkpoint.memwoven.base import MemwovenSaver

__all__ = ["AsyncMemwovenSaver"]


class AsyncMemwovenSaver(MemwovenSaver):
    """A `MemwovenSaver` for async code: ``async with AsyncMemwovenSaver.from_url(url) as saver``."""

    async def setup(self) -> None:  # type: ignore[override]
        """Create the storage (tables) now rather than on first use; idempotent."""
        await self.asetup()
