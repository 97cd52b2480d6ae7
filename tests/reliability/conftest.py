"""Fixtures of the reliability suite: fresh stores on every backend, and the zygote that forks writer processes.

Everything runs on loopback: the shared test servers (PostgreSQL 5432, MariaDB 3306, Redis 6379) only ever see
tables and keys under a prefix unique to one test, removed afterwards; tests that stop a server start their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_processes import Zygote
from reliability_stores import Store, fresh_store


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    """The warm interpreter that forks writers (spawned once per test session)."""
    process = Zygote()
    yield process
    process.close()


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh store of the kind the test is parametrized with (`kind`), cleaned up afterwards."""
    with fresh_store(request.param, tmp_path) as where:
        yield where
