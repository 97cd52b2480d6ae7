"""Fixtures shared by the core package's tests."""

from __future__ import annotations

import pytest
from clock_support import Clock
from sql_support import KINDS

from memwoven import _clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Time under the test's control, for the backends whose expiry this process measures (in-memory, SQL)."""
    fake = Clock()
    monkeypatch.setattr(_clock, "monotonic", fake.monotonic)
    monkeypatch.setattr(_clock, "wall_ms", fake.wall_ms)
    return fake


@pytest.fixture(params=KINDS)
def sql_kind(request: pytest.FixtureRequest) -> str:
    """Each SQL database a test runs on: "sqlite", and the servers "postgresql" and "mariadb"."""
    return request.param  # type: ignore[no-any-return]
