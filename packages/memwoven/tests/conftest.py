"""Fixtures shared by the core package's tests."""

from __future__ import annotations

import pytest
from clock_support import Clock

from memwoven import _clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Time under the test's control, for the backends whose expiry this process measures (in-memory, SQL)."""
    fake = Clock()
    monkeypatch.setattr(_clock, "monotonic", fake.monotonic)
    monkeypatch.setattr(_clock, "wall_ms", fake.wall_ms)
    return fake
