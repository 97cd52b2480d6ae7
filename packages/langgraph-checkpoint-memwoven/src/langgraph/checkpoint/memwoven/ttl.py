"""What the checkpointer (`MemwovenSaver`) and the store (`langgraph.store.memwoven`) share about TTLs: minutes
(LangGraph's unit) to seconds, and the sweeper that runs an object's `sweep_ttl` / `asweep_ttl` on a schedule (a
daemon thread, or a task of the running loop)."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from concurrent.futures import Future

from typing_extensions import Self

from memwoven import InvalidInputError
from memwoven.contracts import MAX_TTL

__all__ = ["DEFAULT_SWEEP_MINUTES", "TTLSweeper", "minutes_to_seconds"]

DEFAULT_SWEEP_MINUTES = 5.0
"""How often a sweeper sweeps unless told otherwise, as LangGraph's own stores and savers."""

_SECONDS_PER_MINUTE = 60.0
logger = logging.getLogger(__name__)


def minutes_to_seconds(minutes: float | None, what: str) -> float | None:
    """`minutes` in seconds (None stays None); `InvalidInputError` unless a positive number of seconds up to
    memwoven's `MAX_TTL` (about 317 years: an expiry every backend can represent)."""
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not 0 < minutes < math.inf:
        raise InvalidInputError(f"{what} must be a positive number of minutes or None, got {minutes!r:.80}")
    if minutes * _SECONDS_PER_MINUTE > MAX_TTL:
        raise InvalidInputError(
            f"{what} must be at most {MAX_TTL / _SECONDS_PER_MINUTE:.0f} minutes, got {minutes!r:.80}"
        )
    return float(minutes) * _SECONDS_PER_MINUTE


class TTLSweeper:
    """`start_ttl_sweeper` / `stop_ttl_sweeper` and their async twins, as LangGraph's stores name them, for an
    object with `sweep_ttl()` / `asweep_ttl()` and a default interval (`_sweep_seconds`, None: no sweeping); and
    its context managers (``with`` / ``async with``), which stop the sweepers and then `close()` / `aclose()`.

    A sweep that fails (a server restarting, say) is logged and the next one runs on schedule, as in LangGraph's
    stores: one failure never ends the sweeping."""

    _sweep_seconds: float | None = None
    _sweeper: threading.Thread | None = None
    _sweeper_stop: threading.Event | None = None
    _asweeper: asyncio.Task[None] | None = None

    def sweep_ttl(self) -> int:
        """Delete what has expired; how many things were deleted (the class using the sweeper defines it)."""
        raise NotImplementedError

    async def asweep_ttl(self) -> int:
        """Async twin of `sweep_ttl`."""
        raise NotImplementedError

    def _interval(self, sweep_interval_minutes: float | None) -> float | None:
        return minutes_to_seconds(sweep_interval_minutes, "sweep_interval_minutes") or self._sweep_seconds

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Future[None]:
        """Run `sweep_ttl` every `sweep_interval_minutes` (default: the TTL config's) in a daemon thread, until
        `stop_ttl_sweeper` (or the returned future is cancelled); the future completes when it stops."""
        seconds = self._interval(sweep_interval_minutes)
        done: Future[None] = Future()
        if seconds is None:
            done.set_result(None)  # nothing to sweep on a schedule, as LangGraph's stores do
            return done
        if self._sweeper is not None and self._sweeper.is_alive() and self._sweeper_stop is not None:
            running = self._sweeper_stop  # as LangGraph's stores: a future that stops the running sweeper if cancelled
            done.add_done_callback(lambda future: running.set() if future.cancelled() else None)
            return done
        stop = self._sweeper_stop = threading.Event()
        done.add_done_callback(lambda future: stop.set() if future.cancelled() else None)

        def loop() -> None:
            try:
                while not stop.wait(seconds):
                    self._sweep_logged()
            finally:
                if not done.done():  # cancelled: done already
                    done.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="memwoven-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return done

    def _sweep_logged(self) -> None:
        try:
            removed = self.sweep_ttl()
        except Exception:
            logger.exception("TTL sweep failed; the next one runs on schedule")
        else:
            logger.debug("TTL sweep removed %d", removed)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True once it has stopped (or none ran), False if `timeout` ran out first."""
        return self._stop_sweeper_thread(timeout)

    def _stop_sweeper_thread(self, timeout: float | None = None) -> bool:
        if self._sweeper_stop is not None:
            self._sweeper_stop.set()
        if self._sweeper is None:
            return True
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    async def astart_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Run `asweep_ttl` every `sweep_interval_minutes` (default: the TTL config's) as a task of this loop."""
        seconds = self._interval(sweep_interval_minutes)

        async def loop() -> None:
            while seconds is not None:
                await asyncio.sleep(seconds)
                try:
                    removed = await self.asweep_ttl()
                except Exception:
                    logger.exception("TTL sweep failed; the next one runs in %.0f s", seconds)
                else:
                    logger.debug("TTL sweep removed %d", removed)

        if self._asweeper is None or self._asweeper.done():
            self._asweeper = asyncio.create_task(loop())
        return self._asweeper

    async def astop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Cancel the sweeper task; True once it has stopped (or none ran), False if `timeout` ran out first."""
        task, self._asweeper = self._asweeper, None
        if task is None:
            return True
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)

    async def _astop_sweepers(self) -> None:
        """Stop both sweepers (leaving ``async with``)."""
        await self.astop_ttl_sweeper()
        self._stop_sweeper_thread()

    def close(self) -> None:
        """Release what the object holds (the class using the sweeper defines it)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Async twin of `close`."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop_sweeper_thread()
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._astop_sweepers()
        await self.aclose()
