"""A clock for tests of expiry (see the `clock` fixture in conftest.py)."""

from __future__ import annotations

import time


class Clock:
    """The clocks expiry is measured with (`memwoven._clock`), moved forward by `advance` instead of sleeping."""

    def __init__(self) -> None:
        self.offset = 0.0

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass."""
        self.offset += seconds

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000 + round(self.offset * 1000)
