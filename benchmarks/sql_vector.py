"""Exact search at N x 384 from a second process right after a write, on SQLVectorMemory (PostgreSQL or SQLite).

The writer process stores one document; then the reader process (a separate SQLVectorMemory) searches, which
first pulls that one change into its cached matrix. Compared with InMemoryVectorMemory on the same data, given the
same write and searched with the same query in the same round, alternately first and second: interleaved, so that
load from other processes on the machine hits both sides alike.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from harness import Report, Timing
from vector_search import _corpus, _memwoven

from memwoven import SQLVectorMemory, VectorDocument


def _reader(url: str, prefix: str, queries: Any, pipe: Connection) -> None:
    """The second process: search whenever told to, and send back how long each search took."""
    memory = SQLVectorMemory(url, table_prefix=prefix, collection="bench")
    memory.search(queries[0], top_k=10)  # the first search loads the whole collection
    pipe.send("ready")
    while (index := pipe.recv()) is not None:
        start = time.perf_counter()
        hits = memory.search(queries[index % len(queries)], top_k=10)
        pipe.send((time.perf_counter() - start, hits[0].document.id))
    memory.close()


def run(report: Report, *, url: str, count: int, runs: int = 30) -> None:
    """Add the second-process search row and the ≤1.2x in-memory target to `report`."""
    ids, vectors, queries = _corpus(count, 384)
    prefix = f"mwbench_{uuid.uuid4().hex[:8]}_"
    writer = SQLVectorMemory(url, table_prefix=prefix, collection="bench", dimension=384)
    memory = _memwoven(ids, vectors)
    label = url.split(":", 1)[0]
    try:
        for start in range(0, count, 5_000):
            writer.store(
                VectorDocument(id=i, content=i, embedding=v)
                for i, v in zip(ids[start : start + 5_000], vectors[start : start + 5_000])
            )
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(target=_reader, args=(url, prefix, queries, theirs))
        process.start()
        assert ours.recv() == "ready"
        second: list[float] = []
        local: list[float] = []
        rng = np.random.default_rng(3)

        def remote(index: int) -> None:
            ours.send(index)
            seconds, _ = ours.recv()
            second.append(seconds)

        def in_memory(index: int) -> None:
            start = time.perf_counter()
            memory.search(queries[index % len(queries)], top_k=10)
            local.append(time.perf_counter() - start)

        for index in range(runs):
            document = VectorDocument(id=f"new-{index}", content="new", embedding=rng.standard_normal(384))
            writer.store([document])
            memory.store([document])
            for search in (remote, in_memory) if index % 2 == 0 else (in_memory, remote):
                search(index)
        ours.send(None)
        process.join(60)
    finally:
        writer.drop_tables()
        writer.close()
    ours_timing = _timing(second)
    baseline = _timing(local)
    name = f"search top-10 after a write, {count:,}x384"
    report.add(name, "memwoven InMemoryVectorMemory", baseline, "1.0")
    ratio = ours_timing.median / baseline.median
    report.add(name, f"SQLVectorMemory ({label}), second process", ours_timing, f"{ratio:.2f}x")
    report.target(f"{name}: SQLVectorMemory ({label}) from a second process / in-memory", ratio, 1.2, False)


def _timing(samples: list[float]) -> Timing:
    return Timing(float(np.median(samples)), min(samples), max(samples), len(samples))
