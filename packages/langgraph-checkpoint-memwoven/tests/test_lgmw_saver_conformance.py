"""LangGraph's checkpointer conformance suite (`langgraph-checkpoint-conformance`) against `MemwovenSaver` and
`AsyncMemwovenSaver` on every backend, and on SQLite through memwoven's encryption wrapper (values encrypted at
rest, ids hashed): every capability, required and optional, is detected and passes; with a `ttl` too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from saver_support import KINDS, cluster, item_memory, kind_params

from langgraph.checkpoint.memwoven import AsyncMemwovenSaver, MemwovenSaver
from memwoven_test_support import unique_name


@pytest.fixture(scope="module")
def cluster_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A private Redis Cluster, started only when a redis-cluster test runs."""
    with cluster() as url:
        yield url


@pytest.mark.asyncio
@pytest.mark.timeout(300)
@pytest.mark.parametrize("saver_class", [MemwovenSaver, AsyncMemwovenSaver])
@pytest.mark.parametrize("kind", kind_params([*KINDS, "encrypted-sqlite"]))
async def test_conformance(
    kind: str, saver_class: type[MemwovenSaver], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await conforms(kind, saver_class, tmp_path, request)


@pytest.mark.asyncio
@pytest.mark.timeout(300)
@pytest.mark.parametrize("saver_class", [MemwovenSaver, AsyncMemwovenSaver])
@pytest.mark.parametrize("kind", kind_params(["memory", "sqlite", "redis"]))
async def test_conformance_with_a_ttl(
    kind: str, saver_class: type[MemwovenSaver], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Thread records written with the checkpoints (compare-and-set) change nothing the protocol sees."""
    await conforms(kind, saver_class, tmp_path, request, ttl={"default_ttl": 60})


async def conforms(
    kind: str, saver_class: type[MemwovenSaver], tmp_path: Path, request: pytest.FixtureRequest, **options: Any
) -> None:
    cluster_url = request.getfixturevalue("cluster_url") if kind == "redis-cluster" else ""
    with item_memory(kind, tmp_path, cluster_url) as items:

        @checkpointer_test(name=f"{saver_class.__name__}-{kind}")
        async def factory() -> AsyncIterator[MemwovenSaver]:
            # a namespace per capability suite: each starts from an empty saver, as the suite expects
            async with saver_class(items, namespace=("lgcp", unique_name("suite")), **options) as saver:
                yield saver

        report = await validate(factory)
    failures = {
        name: result.failures
        for name, result in report.results.items()
        if not (result.detected and result.passed and result.tests_passed > 0)
    }
    assert not failures
    assert set(report.results) == {capability.value for capability in ALL_CAPABILITIES}
