"""Backends for the store tests (ours and LangGraph's in third_party/langgraph/): in-memory, SQLite (files under
the test's tmp_path), PostgreSQL and MariaDB (tables under a table prefix of their own, dropped after the test).

A test that takes `memwoven_backend` (LangGraph's copied tests, through `pytestmark = usefixtures(...)`) runs once
per backend; a module narrows that with `MEMWOVEN_BACKENDS` (every test) or `BACKENDS_FOR` (per test
name). `EXCLUDED` in a module maps test names to the reason they are skipped. Server tests skip when the server
is unreachable, and fail under MEMWOVEN_REQUIRE_SERVICES=1 (`memwoven_test_support`).

`clock` moves memwoven's expiry clocks forward instead of sleeping (the store's and the saver's TTL tests).
"""

from __future__ import annotations

import inspect
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lg_store_support import OPEN

import memwoven._clock as _clock
from langgraph.store.memwoven import MemwovenStore
from memwoven import InMemoryItemMemory, InMemoryVectorMemory, ItemMemory, SQLItemMemory, SQLVectorMemory, VectorMemory
from memwoven_test_support import mysql_url, postgres_url, unique_name

HERE = Path(__file__).parent
KINDS = ["memory", "sqlite", "postgresql", "mariadb"]
SERVERS = {"postgresql": postgres_url, "mariadb": mysql_url}


@dataclass
class Backend:
    """Where one test's stores live; `open` gives a `MemwovenStore` (the same `conn` reopens the same storage)."""

    kind: str
    tmp_path: Path
    url: str = ""
    memories: list[ItemMemory | VectorMemory] = field(default_factory=list)
    storage: dict[str, tuple[str, str]] = field(default_factory=dict)  # conn -> (sqlite URL or prefix, collection)
    in_memory: dict[str, tuple[ItemMemory, dict[str, VectorMemory]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind in SERVERS:
            self.url = SERVERS[self.kind]()

    def items_and_vectors(self, conn: str, index: Any) -> tuple[ItemMemory, VectorMemory | None]:
        distance = (index or {}).get("distance_type", "cosine")
        metric = "cosine" if distance == "cosine" else "dot"
        dimension = None if index is None else index["dims"] + (1 if distance == "l2" else 0)
        shared = conn != ":memory:"
        if self.kind == "memory":
            items, collections = self.in_memory.get(conn) if shared and conn in self.in_memory else (None, {})
            if items is None:
                items = InMemoryItemMemory()
                if shared:
                    self.in_memory[conn] = (items, collections)
            vectors = None
            if index is not None:
                vectors = collections.setdefault(
                    f"{metric}{dimension}", InMemoryVectorMemory(dimension=dimension, metric=metric)
                )  # type: ignore[arg-type]
            return items, vectors
        if conn in self.storage and shared:
            where, collection = self.storage[conn]
        else:
            where = (
                f"sqlite:///{self.tmp_path / unique_name('store')}.db"
                if self.kind == "sqlite"
                else unique_name("lg") + "_"
            )
            collection = unique_name("c")
            self.storage[conn] = (where, collection)
        url, options = (where, {}) if self.kind == "sqlite" else (self.url, {"table_prefix": where})
        items = SQLItemMemory(url, **options)
        self.memories.append(items)
        vectors = None
        if index is not None:
            vectors = SQLVectorMemory(
                url, collection=f"{collection}_{metric}{dimension}", dimension=dimension, metric=metric, **options
            )  # type: ignore[arg-type]
            self.memories.append(vectors)
        return items, vectors

    def open(self, cls: type[MemwovenStore], conn: str = ":memory:", **options: Any) -> MemwovenStore:
        items, vectors = self.items_and_vectors(conn, options.get("index"))
        return cls(items, vectors=vectors, **options)

    def close(self) -> None:
        for memory in self.memories:
            if self.kind in SERVERS:
                memory.drop_tables()  # type: ignore[union-attr]
            memory.close()


class Clock:
    """Moves memwoven's expiry clocks (`memwoven._clock`, in-memory and SQL backends) forward instead of sleeping."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        monotonic, wall_ms = _clock.monotonic, _clock.wall_ms
        monkeypatch.setattr(_clock, "monotonic", lambda: monotonic() + self.offset)
        monkeypatch.setattr(_clock, "wall_ms", lambda: wall_ms() + round(self.offset * 1000))

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "memwoven_backend" not in metafunc.fixturenames:
        return
    kinds = getattr(metafunc.module, "BACKENDS_FOR", {}).get(
        metafunc.function.__name__, getattr(metafunc.module, "MEMWOVEN_BACKENDS", KINDS)
    )
    params = [pytest.param(kind, marks=pytest.mark.service) if kind in SERVERS else kind for kind in kinds]
    metafunc.parametrize("memwoven_backend", params, indirect=True)


@pytest.fixture
def memwoven_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    backend = Backend(request.param, tmp_path)
    OPEN.append(backend.open)
    try:
        yield backend
    finally:
        OPEN.remove(backend.open)
        backend.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in item.path.parents:
            continue
        module = getattr(item, "module", None)
        excluded = getattr(module, "EXCLUDED", {})
        name = item.originalname if isinstance(item, pytest.Function) else item.name
        if name in excluded:
            item.add_marker(pytest.mark.skip(reason=excluded[name]))


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Generator[None, Any, None]:
    """LangGraph's tests leave `async def` tests unmarked (they run pytest-asyncio's auto mode; the workspace runs
    strict mode): mark them here."""
    outcome = yield
    result = outcome.get_result()
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            item.add_marker(pytest.mark.asyncio)
