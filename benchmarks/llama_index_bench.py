"""LlamaIndex through llama-index-memwoven, against LlamaIndex's own stores on the same data.

`set_messages` of 1,000 messages on a SQLite file: `MemwovenChatStore` over `SQLChatMemory` against
`SQLAlchemyChatStore`. The latter has only an async API, so both are timed through their async `set_messages`
(`aset_messages` for `MemwovenChatStore`), each call run to completion on one event loop, each on a fresh key,
the two stores taking turns.
Then the top-10 `query` at N x 384: `MemwovenVectorStore` over `InMemoryVectorMemory` against `SimpleVectorStore`.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from harness import Report, Timing, measure
from vector_search import _corpus

from llama_index.storage.chat_store.memwoven import MemwovenChatStore
from llama_index.vector_stores.memwoven import MemwovenVectorStore
from memwoven import InMemoryVectorMemory
from memwoven.backends.sql import SQLChatMemory


def _chat_messages(count: int) -> list[Any]:
    from llama_index.core.llms import ChatMessage

    return [
        ChatMessage(
            role="user" if i % 2 == 0 else "assistant",
            content=f"message number {i}: " + "lorem ipsum dolor sit amet " * 4,
        )
        for i in range(count)
    ]


def _set_messages(
    loop: asyncio.AbstractEventLoop,
    stores: list[tuple[Callable[[str, list[Any]], Awaitable[None]], Callable[[str], Awaitable[list[Any]]]]],
    messages: list[Any],
    runs: int,
) -> list[Timing]:
    """Time `write(fresh key, messages)` for each (write, read) pair, the stores taking turns so that a change in
    the machine's load falls on both; checks first that a write reads back as it was written."""
    for write, read in stores:
        key = uuid.uuid4().hex
        loop.run_until_complete(write(key, messages))
        assert loop.run_until_complete(read(key)) == messages, "the chat store did not read back what it wrote"
    samples: list[list[float]] = [[] for _ in stores]
    for _ in range(runs):
        for (write, _read), times in zip(stores, samples):
            key = uuid.uuid4().hex
            start = time.perf_counter()
            loop.run_until_complete(write(key, messages))
            times.append(time.perf_counter() - start)
    return [Timing(statistics.median(times), min(times), max(times), runs) for times in samples]


def chat(report: Report, *, count: int = 1_000, runs: int = 10) -> None:
    """Add the `set_messages` rows and the ≥ 20x target to `report`."""
    from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
    from sqlalchemy.ext.asyncio import create_async_engine

    messages = _chat_messages(count)
    loop = asyncio.new_event_loop()
    try:
        with tempfile.TemporaryDirectory() as directory:
            memory = SQLChatMemory(f"sqlite:///{Path(directory) / 'memwoven.db'}")
            ours = MemwovenChatStore(memory)
            theirs_url = f"sqlite+aiosqlite:///{Path(directory) / 'llama_index.db'}"
            engine = create_async_engine(theirs_url)
            theirs = SQLAlchemyChatStore("bench", async_database_uri=theirs_url, async_engine=engine)
            try:
                mine, other = _set_messages(
                    loop,
                    [(ours.aset_messages, ours.aget_messages), (theirs.set_messages, theirs.get_messages)],
                    messages,
                    runs,
                )
            finally:
                loop.run_until_complete(memory.aclose())
                memory.close()
                loop.run_until_complete(engine.dispose())
    finally:
        loop.close()
    name = f"LlamaIndex set_messages, {count:,} messages (SQLite, async)"
    report.add(name, "MemwovenChatStore over SQLChatMemory", mine, "1.0")
    speedup = other.median / mine.median
    report.add(name, "SQLAlchemyChatStore (llama-index-core)", other, f"memwoven is {speedup:.1f}x faster")
    report.target(f"{name}: speed-up over SQLAlchemyChatStore", speedup, 20, True)


def query(report: Report, *, count: int, dimension: int = 384) -> None:
    """Add the vector store `query` rows and the ≥ 100x target to `report`."""
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores import SimpleVectorStore, VectorStoreQuery

    ids, vectors, queries = _corpus(count, dimension)
    nodes = [TextNode(id_=i, text=i, embedding=v) for i, v in zip(ids, vectors.tolist())]
    ours = MemwovenVectorStore(InMemoryVectorMemory(dimension=dimension))
    for start in range(0, count, 10_000):
        ours.add(nodes[start : start + 10_000])
    theirs = SimpleVectorStore()
    theirs.add(nodes)
    del nodes
    request = VectorStoreQuery(query_embedding=queries[0].tolist(), similarity_top_k=10)
    expected = ours.query(request)
    got = theirs.query(request)
    assert got.ids == expected.ids, "SimpleVectorStore and MemwovenVectorStore disagree on the top 10"
    assert np.allclose(got.similarities or [], expected.similarities or [], atol=1e-5)
    mine = measure(lambda: ours.query(request), runs=50, warmup=3)
    other = measure(lambda: theirs.query(request), runs=5)
    name = f"LlamaIndex query top-10, {count:,}x{dimension}"
    report.add(name, "MemwovenVectorStore over InMemoryVectorMemory", mine, "1.0")
    speedup = other.median / mine.median
    report.add(name, "SimpleVectorStore (llama-index-core)", other, f"memwoven is {speedup:.0f}x faster")
    report.target(f"{name}: speed-up over SimpleVectorStore", speedup, 100, True)


def run(report: Report, *, count: int, runs: int = 10) -> None:
    """Both LlamaIndex benchmarks: `set_messages` (`runs` calls each) and `query` at `count` x 384."""
    chat(report, runs=runs)
    query(report, count=count)
