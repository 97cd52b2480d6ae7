"""`AsyncMemwovenStore`: `MemwovenStore` for async code, shaped like LangGraph's async stores (`AsyncSqliteStore`,
`AsyncPostgresStore`): `await store.setup()`, `await store.start_ttl_sweeper()`, `await store.stop_ttl_sweeper()`.

The operations are the same object's: `abatch` and the `a`-methods run through the contracts' async twins, and
the sync API (`batch`, `get`, ...) works too, from sync code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from langgraph.store.base import Op, Result

from langgraph.store.memwoven.base import MemwovenStore

__all__ = ["AsyncMemwovenStore"]


class AsyncMemwovenStore(MemwovenStore):
    """A `MemwovenStore` whose `setup` and TTL sweeper methods are coroutines (a task of the running loop).

    As in LangGraph's async stores, the sync API called on a thread that runs an event loop raises
    `asyncio.InvalidStateError` (it would block the loop): use the `a`-methods there, the sync ones from other
    threads.
    """

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run operations from sync code (not from the thread of a running event loop: use `abatch` there)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return super().batch(ops)
        raise asyncio.InvalidStateError(
            "synchronous calls to AsyncMemwovenStore from an event loop's thread would block it; "
            "use the async methods (await store.aget(...)) or call from another thread"
        )

    async def setup(self) -> None:  # type: ignore[override]
        """Create the storage (tables) now rather than on first use; idempotent."""
        await self.asetup()

    async def start_ttl_sweeper(  # type: ignore[override]
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Run `asweep_ttl` every `sweep_interval_minutes` (default: the TTL config's) as a task of this loop."""
        return await self.astart_ttl_sweeper(sweep_interval_minutes)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Cancel the sweeper task; True once it has stopped, False if `timeout` ran out first."""
        return await self.astop_ttl_sweeper(timeout)
