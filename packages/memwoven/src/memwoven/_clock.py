"""The clocks expiry is measured with, in one place: tests move them forward instead of sleeping.

Backends call them through the module (``_clock.monotonic()``), so a test can replace them. Expiry that another
clock decides is not covered: a file session's age comes from its modification time, a Redis key's from the server.
"""

from __future__ import annotations

import time

__all__ = ["monotonic", "wall_ms"]


def monotonic() -> float:
    """Seconds on a clock that never goes back (in-process deadlines)."""
    return time.monotonic()


def wall_ms() -> int:
    """Milliseconds since the Unix epoch (expiry times stored in a database, shared by every process)."""
    return time.time_ns() // 1_000_000
