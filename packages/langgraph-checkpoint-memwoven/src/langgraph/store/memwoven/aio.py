"""`AsyncMemwovenStore`: `MemwovenStore` for async code, shaped like LangGraph's async stores (`AsyncSqliteStore`,
`AsyncPostgresStore`): made inside a running event loop, it gathers the concurrent `aget` / `aput` / `asearch` /
... calls of that loop into one `abatch` (LangGraph's `AsyncBatchedBaseStore`), and `setup()` and the TTL sweeper
methods are coroutines. Its sync API works from other threads (run on the store's loop) and raises
`asyncio.InvalidStateError` on the loop's own thread, where it would block the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.store.base.batch import AsyncBatchedBaseStore

from langgraph.store.memwoven.base import MemwovenStore
from memwoven import ItemMemory

__all__ = ["AsyncMemwovenStore"]


class AsyncMemwovenStore(AsyncBatchedBaseStore, MemwovenStore):
    """A `MemwovenStore` for one event loop: concurrent async calls batched, coroutine `setup` and sweeper."""

    def __init__(self, items: ItemMemory, **options: Any) -> None:
        """As `MemwovenStore(items, **options)`, from inside a running event loop (whose calls it batches)."""
        MemwovenStore.__init__(self, items, **options)
        # AsyncBatchedBaseStore.__init__ takes no arguments; these are the state it sets up.
        self._loop = asyncio.get_running_loop()
        self._aqueue = asyncio.Queue()
        self._task = None
        self._ensure_task()

    async def setup(self) -> None:  # type: ignore[override]
        """Create the storage (tables) now rather than on first use; idempotent."""
        await self.asetup()

    async def sweep_ttl(self) -> int:  # type: ignore[override]
        """Delete the expired items and the vectors no current item uses; returns how many items were deleted."""
        return await self.asweep_ttl()

    async def start_ttl_sweeper(  # type: ignore[override]
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Run `asweep_ttl` every `sweep_interval_minutes` (default: the TTL config's) as a task of this loop."""
        return await self.astart_ttl_sweeper(sweep_interval_minutes)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Cancel the sweeper task; True once it has stopped, False if `timeout` ran out first."""
        return await self.astop_ttl_sweeper(timeout)

    async def __aexit__(self, *exc_info: object) -> None:
        await super().__aexit__(*exc_info)
        if self._task is not None:
            self._task.cancel()
