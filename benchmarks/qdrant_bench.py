"""QdrantVectorMemory on embedded Qdrant (`qdrant+local://`) against the same calls made directly on
`QdrantClient(path=...)`: bulk upsert into a new collection and top-10 search, at N x 384.

The raw side does what a user of the client would to store the same thing: create the collection, upsert
`PointStruct`s in batches of 256 (memwoven's default batch size) with a UUID per string id and the payload memwoven
writes (the id, the text, the metadata object and, Qdrant keeping cosine vectors normalized, each embedding's norm,
without which the embedding could not be given back); search with `query_points`,
asking for the payload and the vectors, which memwoven returns too. Each upsert starts from a new directory, on
tmpfs (/dev/shm) where there is one: local mode commits every point to SQLite, and on a disk the fsyncs, not the
code, would be what is measured.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from harness import Report, Timing
from vector_search import _corpus

from memwoven import VectorDocument
from memwoven.backends.qdrant import QdrantVectorMemory

BATCH = 256
RAM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class _Side:
    """One subject: a new directory and client per upsert; the last one filled answers the searches."""

    def __init__(self) -> None:
        self.directory: str | None = None
        self.store: Any = None

    def reset(self) -> None:
        self.close()
        self.directory = tempfile.mkdtemp(prefix="mwbench_qdrant_", dir=RAM)
        self.store = self.open(self.directory)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def open(self, directory: str) -> Any:
        raise NotImplementedError

    def upsert(self, ids: list[str], vectors: np.ndarray[Any, Any]) -> None:
        raise NotImplementedError

    def search(self, query: np.ndarray[Any, Any]) -> Callable[[], list[str]]:
        """The search call to time (its query prepared beforehand); it returns the ids of the top 10."""
        raise NotImplementedError


class _Memwoven(_Side):
    def open(self, directory: str) -> Any:
        return QdrantVectorMemory(f"qdrant+local://{directory}", collection="bench", batch_size=BATCH)

    def upsert(self, ids: list[str], vectors: np.ndarray[Any, Any]) -> None:
        self.store.store(VectorDocument(id=i, content=i, embedding=v) for i, v in zip(ids, vectors))

    def search(self, query: np.ndarray[Any, Any]) -> Callable[[], list[str]]:
        return lambda: [hit.document.id for hit in self.store.search(query, top_k=10)]


class _Raw(_Side):
    def open(self, directory: str) -> Any:
        from qdrant_client import QdrantClient

        return QdrantClient(path=directory)

    def upsert(self, ids: list[str], vectors: np.ndarray[Any, Any]) -> None:
        from qdrant_client import models

        config = models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
        self.store.create_collection("bench", vectors_config=config)
        for start in range(0, len(ids), BATCH):
            batch = vectors[start : start + BATCH]
            norms = np.linalg.norm(batch, axis=1).tolist()
            points = [
                models.PointStruct(
                    id=str(uuid.uuid5(uuid.NAMESPACE_URL, i)),
                    vector=v,
                    payload={"id": i, "content": i, "metadata": {}, "norm": n},
                )
                for i, v, n in zip(ids[start : start + BATCH], batch.tolist(), norms)
            ]
            self.store.upsert("bench", points=points, wait=True)

    def search(self, query: np.ndarray[Any, Any]) -> Callable[[], list[str]]:
        as_list = query.tolist()

        def call() -> list[str]:
            found = self.store.query_points("bench", query=as_list, limit=10, with_payload=True, with_vectors=True)
            return [point.payload["id"] for point in found.points]

        return call


def _upserts(sides: list[_Side], ids: list[str], vectors: np.ndarray[Any, Any], runs: int, warmup: int) -> list[Timing]:
    """Seconds per upsert of the whole corpus for each side, each into a new directory (opened untimed); the sides
    take turns, so that a change in the machine's load falls on both."""
    samples: list[list[float]] = [[] for _ in sides]
    for index in range(warmup + runs):
        for side, times in zip(sides, samples):
            side.reset()
            start = time.perf_counter()
            side.upsert(ids, vectors)
            if index >= warmup:
                times.append(time.perf_counter() - start)
    return [Timing(float(np.median(times)), min(times), max(times), runs) for times in samples]


def _searches(calls: list[Callable[[], list[str]]], runs: int, warmup: int) -> list[Timing]:
    """Seconds per call of each search, the calls taking turns (as the upserts do)."""
    samples: list[list[float]] = [[] for _ in calls]
    for index in range(warmup + runs):
        for call, times in zip(calls, samples):
            start = time.perf_counter()
            call()
            if index >= warmup:
                times.append(time.perf_counter() - start)
    return [Timing(float(np.median(times)), min(times), max(times), runs) for times in samples]


def run(report: Report, *, count: int, upsert_runs: int = 3, warmup: int = 1, search_runs: int = 20) -> None:
    """Add the upsert and search rows at `count` x 384 and the ≤ 1.10x overhead targets to `report`."""
    ids, vectors, queries = _corpus(count, 384)
    ours, theirs = _Memwoven(), _Raw()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Local mode is not recommended")  # above 20,000 points
            upsert_ours, upsert_theirs = _upserts([ours, theirs], ids, vectors, upsert_runs, warmup)
        search_ours, search_theirs = ours.search(queries[0]), theirs.search(queries[0])
        assert search_ours() == search_theirs(), "memwoven and the raw client disagree on the top 10"
        mine, other = _searches([search_ours, search_theirs], search_runs, warmup=2)
    finally:
        ours.close()
        theirs.close()
    where = "tmpfs" if RAM else "disk"
    for name, ours_timing, theirs_timing in (
        (f"Qdrant local ({where}) upsert {count:,}x384 in batches of {BATCH}", upsert_ours, upsert_theirs),
        (f"Qdrant local ({where}) search top-10, {count:,}x384", mine, other),
    ):
        ratio = ours_timing.median / theirs_timing.median
        report.add(name, "raw QdrantClient", theirs_timing, "1.0")
        report.add(name, "memwoven QdrantVectorMemory", ours_timing, f"{ratio:.2f}x raw")
        report.target(f"{name}: memwoven / raw QdrantClient", ratio, 1.10, False)
