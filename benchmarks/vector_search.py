"""Exact top-10 vector search and ingest: memwoven's backends against the stores users would otherwise pick.

For each data set (random unit vectors, or a clustered set: 100 centres with noise), dimension and size, every
subject is filled with the same vectors and asked the same queries. Measured per subject: bulk upsert (vectors/s),
single-query latency (p50, p95), throughput over a batch of queries (the library's batch API where it has one,
else one query after another), a single upsert of an existing id, the resident memory the store added, and
recall@10 against numpy's exact answer
(over 32 queries; 4 on the slow stores). Every exact store's latency is also given as a multiple of the bandwidth
floor: the bytes of float32 vectors it must read, divided by the machine's memory bandwidth (a numpy scan).

A subject that cannot run here (a package missing, sqlite3 without extension loading, a server down) is skipped
with the reason printed and written to the results.
"""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from harness import Report, Timing

from memwoven import InMemoryVectorMemory, SQLVectorMemory, VectorDocument

Array = np.ndarray[Any, Any]
RAM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
TOP_K = 10
BATCH_QUERIES = 32
DATABASE_LARGEST = 100_000 * 1536  # floats: stores with a database behind them are not filled with more


def _corpus(count: int, dimension: int, seed: int = 7) -> tuple[list[str], Array, Array]:
    """Random unit vectors (and 8 random queries); kept for the other benchmarks that import it."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dimension), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((8, dimension), dtype=np.float32)
    return [f"doc-{i}" for i in range(count)], vectors, queries


def _memwoven(ids: list[str], vectors: Array) -> InMemoryVectorMemory:
    memory = InMemoryVectorMemory(dimension=vectors.shape[1])
    _store(memory, ids, vectors)
    return memory


def _store(memory: Any, ids: list[str], vectors: Array, batch: int = 10_000) -> None:
    for start in range(0, len(ids), batch):
        memory.store(
            VectorDocument(id=i, content=i, embedding=v)
            for i, v in zip(ids[start : start + batch], vectors[start : start + batch])
        )


def dataset(kind: str, count: int, dimension: int, seed: int = 11) -> tuple[list[str], Array, Array]:
    """`count` unit vectors and `BATCH_QUERIES` unit queries: "random", or "clustered" (queries near stored points)."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        vectors = rng.standard_normal((count, dimension), dtype=np.float32)
        queries = rng.standard_normal((BATCH_QUERIES, dimension), dtype=np.float32)
    else:
        centres = rng.standard_normal((100, dimension), dtype=np.float32)
        vectors = centres[rng.integers(0, 100, count)]
        vectors += rng.standard_normal((count, dimension), dtype=np.float32) * np.float32(0.6)
        queries = vectors[rng.integers(0, count, BATCH_QUERIES)]
        queries = queries + rng.standard_normal(queries.shape, dtype=np.float32) * np.float32(0.3)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return [f"doc-{i}" for i in range(count)], vectors, queries.astype(np.float32)


def memory_bandwidth(megabytes: int = 256, runs: int = 5) -> float:
    """Bytes per second numpy reads in a scan (the best of `runs` passes of `max` over a float32 array)."""
    data = np.ones(megabytes * 2**18, dtype=np.float32)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        data.max()
        best = min(best, time.perf_counter() - start)
    return data.nbytes / best


def _rss() -> int:
    """Resident bytes, after a garbage collection and handing freed heap pages back to the OS (glibc)."""
    gc.collect()
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Subject:
    """One store under test; `exact` stores must read every vector per query (the bandwidth floor applies)."""

    name = ""
    exact = True
    memwoven = False
    slow = False  # pure-Python scans: fewer runs, and skipped at the largest sizes
    largest: int | None = None  # most floats (N x d) it is filled with: a 1M fill of a database takes minutes

    def open(self, dimension: int) -> None:
        """Create an empty store (untimed)."""

    def fill(self, ids: list[str], vectors: Array) -> None:
        """Insert the whole corpus (timed as bulk upsert)."""
        raise NotImplementedError

    def search(self, query: Array) -> list[str]:
        """The ids of the top 10 for one query."""
        raise NotImplementedError

    def batch(self, queries: Array) -> None:
        """Answer every query (a batch API where the library has one)."""
        for query in queries:
            self.search(query)

    def upsert_one(self, doc_id: str, vector: Array) -> None:
        """Replace one existing document."""
        raise NotImplementedError

    def close(self) -> None:
        """Drop everything the store created."""


class MemwovenSubject(Subject):
    memwoven = True

    def make(self, dimension: int) -> Any:
        raise NotImplementedError

    def open(self, dimension: int) -> None:
        self.memory = self.make(dimension)

    def fill(self, ids: list[str], vectors: Array) -> None:
        _store(self.memory, ids, vectors)
        self.memory.search(vectors[0], top_k=1)  # SQL and Redis stores load their in-process index on first use

    def search(self, query: Array) -> list[str]:
        return [hit.document.id for hit in self.memory.search(query, top_k=TOP_K)]

    def upsert_one(self, doc_id: str, vector: Array) -> None:
        self.memory.store([VectorDocument(id=doc_id, content=doc_id, embedding=vector)])

    def close(self) -> None:
        self.memory.close()


class InMemory(MemwovenSubject):
    name = "memwoven InMemoryVectorMemory"

    def make(self, dimension: int) -> Any:
        return InMemoryVectorMemory(dimension=dimension)


class InMemoryBfloat16(MemwovenSubject):
    name = "memwoven InMemoryVectorMemory (bfloat16 scan)"

    def make(self, dimension: int) -> Any:
        return InMemoryVectorMemory(dimension=dimension, scan="bfloat16")


class SQLite(MemwovenSubject):
    name = "memwoven SQLVectorMemory (SQLite)"
    largest = DATABASE_LARGEST

    def make(self, dimension: int) -> Any:
        self.directory = tempfile.mkdtemp(prefix="mwbench_", dir=RAM)
        return SQLVectorMemory(f"sqlite:///{self.directory}/v.db", collection="bench", dimension=dimension)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.directory, ignore_errors=True)


class Postgres(MemwovenSubject):
    name = "memwoven SQLVectorMemory (PostgreSQL)"
    largest = DATABASE_LARGEST

    def __init__(self, url: str) -> None:
        self.url = url

    def make(self, dimension: int) -> Any:
        prefix = f"mwbench_{uuid.uuid4().hex[:8]}_"
        return SQLVectorMemory(self.url, table_prefix=prefix, collection="bench", dimension=dimension)

    def close(self) -> None:
        self.memory.drop_tables()
        super().close()


class Redis(MemwovenSubject):
    name = "memwoven RedisVectorMemory"
    largest = DATABASE_LARGEST

    def __init__(self, url: str) -> None:
        self.url = url

    def make(self, dimension: int) -> Any:
        from memwoven.backends.redis_vector import RedisVectorMemory

        self.prefix = f"mwbench{uuid.uuid4().hex[:8]}"
        return RedisVectorMemory(self.url, collection="bench", dimension=dimension, prefix=self.prefix)

    def close(self) -> None:
        import redis

        super().close()
        client = redis.Redis.from_url(self.url)
        for key in client.scan_iter(f"{self.prefix}:*"):
            client.delete(key)
        client.close()


class QdrantLocal(MemwovenSubject):
    name = "memwoven QdrantVectorMemory (local)"
    slow = True

    def make(self, dimension: int) -> Any:
        from memwoven.backends.qdrant import QdrantVectorMemory

        self.directory = tempfile.mkdtemp(prefix="mwbench_qdrant_", dir=RAM)
        return QdrantVectorMemory(f"qdrant+local://{self.directory}", collection="bench", dimension=dimension)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.directory, ignore_errors=True)


class LangChain(Subject):
    name = "LangChain InMemoryVectorStore"
    slow = True

    def open(self, dimension: int) -> None:
        from langchain_core.embeddings import Embeddings
        from langchain_core.vectorstores import InMemoryVectorStore

        lookup: dict[str, list[float]] = {}
        self.lookup = lookup

        class Precomputed(Embeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return [lookup[t] for t in texts]

            def embed_query(self, text: str) -> list[float]:
                return lookup[text]

        self.store = InMemoryVectorStore(Precomputed())

    def fill(self, ids: list[str], vectors: Array) -> None:
        self.lookup.update(zip(ids, vectors.tolist()))
        self.store.add_texts(ids, ids=ids)

    def search(self, query: Array) -> list[str]:
        return [str(d.id) for d in self.store.similarity_search_by_vector(query.tolist(), k=TOP_K)]

    def upsert_one(self, doc_id: str, vector: Array) -> None:
        self.lookup[doc_id] = vector.tolist()
        self.store.add_texts([doc_id], ids=[doc_id])


class LlamaIndex(Subject):
    name = "LlamaIndex SimpleVectorStore"
    slow = True

    def open(self, dimension: int) -> None:
        from llama_index.core.vector_stores import SimpleVectorStore

        self.store = SimpleVectorStore()

    def fill(self, ids: list[str], vectors: Array) -> None:
        from llama_index.core.schema import TextNode

        self.store.add([TextNode(id_=i, text=i, embedding=v) for i, v in zip(ids, vectors.tolist())])

    def search(self, query: Array) -> list[str]:
        from llama_index.core.vector_stores import VectorStoreQuery

        return list(
            self.store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=TOP_K)).ids or []
        )

    def upsert_one(self, doc_id: str, vector: Array) -> None:
        from llama_index.core.schema import TextNode

        self.store.add([TextNode(id_=doc_id, text=doc_id, embedding=vector.tolist())])


class QdrantRaw(Subject):
    name = "qdrant-client local mode"
    slow = True

    def open(self, dimension: int) -> None:
        from qdrant_client import QdrantClient, models

        self.directory = tempfile.mkdtemp(prefix="mwbench_qdrant_", dir=RAM)
        self.client = QdrantClient(path=self.directory)
        config = models.VectorParams(size=dimension, distance=models.Distance.COSINE)
        self.client.create_collection("bench", vectors_config=config)

    def _points(self, ids: list[str], vectors: Array) -> list[Any]:
        from qdrant_client import models

        return [
            models.PointStruct(id=str(uuid.uuid5(uuid.NAMESPACE_URL, i)), vector=v, payload={"id": i})
            for i, v in zip(ids, vectors.tolist())
        ]

    def fill(self, ids: list[str], vectors: Array) -> None:
        for start in range(0, len(ids), 256):
            self.client.upsert("bench", points=self._points(ids[start : start + 256], vectors[start : start + 256]))

    def search(self, query: Array) -> list[str]:
        found = self.client.query_points("bench", query=query.tolist(), limit=TOP_K, with_payload=True)
        return [point.payload["id"] for point in found.points]  # type: ignore[index]

    def batch(self, queries: Array) -> None:
        from qdrant_client import models

        requests = [models.QueryRequest(query=q, limit=TOP_K, with_payload=True) for q in queries.tolist()]
        self.client.query_batch_points("bench", requests=requests)

    def upsert_one(self, doc_id: str, vector: Array) -> None:
        self.client.upsert("bench", points=self._points([doc_id], vector.reshape(1, -1)))

    def close(self) -> None:
        self.client.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _loadable_sqlite() -> Any:
    """A sqlite3 module that loads extensions: Python's own if built with them, else sqlean.py's drop-in (as
    sqlite-vec's documentation suggests), else None."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import sqlean
    except ImportError:
        return None
    return sqlean


class SqliteVec(Subject):
    name = "sqlite-vec (vec0, exact)"

    def open(self, dimension: int) -> None:
        import sqlite_vec

        self.directory = tempfile.mkdtemp(prefix="mwbench_", dir=RAM)
        self.db = _loadable_sqlite().connect(f"{self.directory}/vec.db")
        self.db.enable_load_extension(True)
        sqlite_vec.load(self.db)
        self.db.enable_load_extension(False)
        self.db.execute(
            "create virtual table v using vec0(doc text primary key, "
            f"embedding float[{dimension}] distance_metric=cosine)"
        )

    def fill(self, ids: list[str], vectors: Array) -> None:
        with self.db:
            self.db.executemany("insert into v(doc, embedding) values (?, ?)", zip(ids, (v.tobytes() for v in vectors)))

    def search(self, query: Array) -> list[str]:
        sql = "select doc from v where embedding match ? and k = ? order by distance"
        return [row[0] for row in self.db.execute(sql, (query.tobytes(), TOP_K))]

    def upsert_one(self, doc_id: str, vector: Array) -> None:
        with self.db:  # vec0 has no upsert: replace in one transaction
            self.db.execute("delete from v where doc = ?", (doc_id,))
            self.db.execute("insert into v(doc, embedding) values (?, ?)", (doc_id, vector.tobytes()))

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class Faiss(Subject):
    name = "faiss IndexFlatIP (exact)"

    def open(self, dimension: int) -> None:
        import faiss

        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))
        self.ids: list[str] = []
        self.numbers: dict[str, int] = {}

    def fill(self, ids: list[str], vectors: Array) -> None:
        numbers = np.arange(len(self.ids), len(self.ids) + len(ids), dtype=np.int64)
        self.numbers.update(zip(ids, numbers.tolist()))
        self.ids.extend(ids)
        self.index.add_with_ids(vectors, numbers)  # unit vectors: inner product is cosine

    def search(self, query: Array) -> list[str]:
        _, found = self.index.search(query.reshape(1, -1), TOP_K)
        return [self.ids[n] for n in found[0]]

    def batch(self, queries: Array) -> None:
        self.index.search(queries, TOP_K)

    def upsert_one(self, doc_id: str, vector: Array) -> None:
        number = self.numbers[doc_id]
        self.index.remove_ids(np.array([number], dtype=np.int64))  # type: ignore[arg-type]  # stubs omit arrays
        self.index.add_with_ids(vector.reshape(1, -1), np.array([number], dtype=np.int64))


def _available(subject: Subject) -> str | None:
    """None if the subject can run here, else why not."""
    try:
        if isinstance(subject, SqliteVec):
            import sqlite_vec  # noqa: F401

            if _loadable_sqlite() is None:
                return "this Python's sqlite3 cannot load extensions and sqlean.py is not installed"
        if isinstance(subject, Faiss):
            import faiss  # noqa: F401
        if isinstance(subject, (QdrantRaw, QdrantLocal)):
            import qdrant_client  # noqa: F401
        if isinstance(subject, Postgres):
            import sqlalchemy

            engine = sqlalchemy.create_engine(subject.url)
            with engine.connect():
                pass
            engine.dispose()
        if isinstance(subject, Redis):
            import redis

            redis.Redis.from_url(subject.url, socket_timeout=2).ping()
    except Exception as error:
        return f"{type(error).__name__}: {error}".splitlines()[0][:160]
    return None


@dataclass
class Result:
    """What one subject measured on one data set."""

    subject: str
    memwoven: bool
    exact: bool
    upsert: Timing  # seconds for the whole corpus
    latency: list[float]  # single-query seconds
    batch: Timing  # seconds for batch_size queries
    batch_size: int
    single_upsert: Timing
    memory: int  # bytes of resident memory the filled store added
    recall: float
    floor: float  # seconds to read the corpus at the bandwidth measured around this subject's queries

    @property
    def p50(self) -> float:
        return float(np.percentile(self.latency, 50))

    @property
    def p95(self) -> float:
        return float(np.percentile(self.latency, 95))


@dataclass
class Case:
    """One data set and every subject's result on it."""

    kind: str
    count: int
    dimension: int
    floor: float  # seconds to read count x dimension float32 at the measured bandwidth
    results: list[Result] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.count:,}x{self.dimension}"

    def get(self, name: str) -> Result | None:
        return next((r for r in self.results if r.subject == name), None)


def _timing(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), min(samples), max(samples), len(samples))


def _repeat(call: Callable[[], object], *, runs: int, budget: float, warmup: int = 1) -> list[float]:
    """Up to `runs` timed calls (at least 3) within about `budget` seconds, after `warmup` untimed calls."""
    for _ in range(warmup):
        call()
    samples: list[float] = []
    deadline = time.perf_counter() + budget
    while len(samples) < runs and (len(samples) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Local mode is not recommended")
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def measure_subject(
    subject: Subject, ids: list[str], vectors: Array, queries: Array, truth: list[set[str]], *, budget: float
) -> Result:
    """Fill a fresh store (repeated while the budget allows), then query and upsert it."""
    fills: list[float] = []
    memory = 0
    while not fills or (len(fills) < 3 and sum(fills) < budget / 3 and not subject.slow):
        if fills:
            subject.close()
        subject.open(vectors.shape[1])
        before = _rss()
        start = time.perf_counter()
        subject.fill(ids, vectors)
        fills.append(time.perf_counter() - start)
        memory = max(memory, _rss() - before)
    try:
        few = 4 if subject.slow else len(queries)  # a pure-Python scan takes ~0.1-1 s per query
        found = [subject.search(q) for q in queries[:few]]
        recall = float(np.mean([len(truth[i] & set(f)) / TOP_K for i, f in enumerate(found)]))
        cycle = iter(range(10**9))
        bandwidth = memory_bandwidth()  # measured again around the queries: a shared host's bandwidth drifts
        latency = _repeat(
            lambda: subject.search(queries[next(cycle) % few]),
            runs=10 if subject.slow else 200,
            budget=budget / 3,
        )
        bandwidth = max(bandwidth, memory_bandwidth())
        batch_queries = queries[:few]
        batch = _repeat(lambda: subject.batch(batch_queries), runs=5, budget=budget / 3, warmup=0)
        rng = np.random.default_rng(5)
        targets = iter(rng.integers(0, len(ids), 10**6).tolist())
        single = _repeat(
            lambda: subject.upsert_one(ids[t := next(targets)], vectors[t]), runs=30, budget=budget / 6, warmup=1
        )
    finally:
        subject.close()
    return Result(
        subject.name,
        subject.memwoven,
        subject.exact,
        _timing(fills),
        latency,
        _timing(batch),
        len(batch_queries),
        _timing(single),
        memory,
        recall,
        vectors.nbytes / bandwidth,
    )


def subjects(*, postgres: str, redis: str) -> list[Subject]:
    """Every subject, memwoven's first."""
    return [
        InMemory(),
        InMemoryBfloat16(),
        SQLite(),
        Postgres(postgres),
        Redis(redis),
        QdrantLocal(),
        LangChain(),
        LlamaIndex(),
        QdrantRaw(),
        SqliteVec(),
        Faiss(),
    ]


def run_case(
    kind: str,
    count: int,
    dimension: int,
    *,
    bandwidth: float,
    postgres: str,
    redis: str,
    budget: float,
    slow_limit: int,
) -> Case:
    """Measure every available subject on one data set; slow subjects only while count x dimension <= slow_limit."""
    ids, vectors, queries = dataset(kind, count, dimension)
    scores = queries @ vectors.T
    truth = [set(np.array(ids)[np.argsort(-row, kind="stable")[:TOP_K]].tolist()) for row in scores]
    del scores
    case = Case(kind, count, dimension, vectors.nbytes / bandwidth)
    for subject in subjects(postgres=postgres, redis=redis):
        reason = _available(subject)
        if reason is None and subject.slow and count * dimension > slow_limit:
            reason = f"not run above {slow_limit:,} floats (too slow for this mode)"
        if reason is None and subject.largest is not None and count * dimension > subject.largest:
            reason = f"not filled with more than {subject.largest:,} floats (a database fill this big takes minutes)"
        if reason is not None:
            case.skipped.append(f"{subject.name}: {reason}")
            print(f"  skip {subject.name} on {case.label}: {reason}", flush=True)
            continue
        started = time.perf_counter()
        with _quiet():
            case.results.append(measure_subject(subject, ids, vectors, queries, truth, budget=budget))
        print(f"  {case.label}: {subject.name} in {time.perf_counter() - started:.1f} s", flush=True)
    return case


def _p(seconds: float) -> str:
    return str(Timing(seconds, seconds, seconds, 1)).split(" (")[0]


def markdown(cases: list[Case], bandwidth: float) -> str:
    """One table per data set, and the skipped subjects."""
    lines = [
        f"Memory bandwidth (numpy scan, best of 5) at the start: {bandwidth / 1e9:.1f} GB/s; the floor in each heading "
        "is N x d x 4 bytes at that bandwidth. The p50 / floor column uses the floor measured again around that "
        "row's own queries (the better of a scan just before and just after them), since a shared host's bandwidth "
        "drifts during a run. "
        f"QPS: {BATCH_QUERIES} queries (4 on the slow stores) through the library's batch API where it has one "
        "(faiss, qdrant-client), else one after another. Memory: resident set growth while filling, after gc and "
        "malloc_trim (approximate: allocator fragmentation counts).",
        "",
    ]
    for case in cases:
        lines += [
            f"#### {case.label} (bandwidth floor {_p(case.floor)})",
            "",
            "| subject | p50 | p95 | p50 / floor | QPS | bulk upsert vectors/s | single upsert | memory | recall@10 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in case.results:
            rate = case.count / r.upsert.median
            lines.append(
                f"| {r.subject} | {_p(r.p50)} | {_p(r.p95)} | {r.p50 / r.floor:.2f} | "
                f"{r.batch_size / r.batch.median:,.0f} (min {r.batch_size / r.batch.high:,.0f}, "
                f"max {r.batch_size / r.batch.low:,.0f}, n={r.batch.runs}) | "
                f"{rate:,.0f} (n={r.upsert.runs}) | {r.single_upsert} | {r.memory / 2**20:,.0f} MiB | {r.recall:.3f} |"
            )
        lines += [*(f"- skipped {reason}" for reason in case.skipped), ""]
    return "\n".join(lines)


def _peer_case(cases: list[Case]) -> Case | None:
    """The case the peer targets are set on: random 100k x 384, else the largest random 384-dimensional one below."""
    chosen = [c for c in cases if c.kind == "random" and c.dimension == 384 and c.count <= 100_000]
    return max(chosen, key=lambda c: c.count) if chosen else None


def targets(report: Report, cases: list[Case]) -> None:
    """The issue's targets: speed-ups and bandwidth on random 100k x 384, the bfloat16 scan on the clustered set."""
    case = _peer_case(cases)
    ours = case.get(InMemory.name) if case is not None else None
    if case is None or ours is None:
        return
    for peer, goal in ((LangChain.name, 100), (LlamaIndex.name, 100), (QdrantRaw.name, 10)):
        theirs = case.get(peer)
        if theirs is not None:
            report.target(f"{case.label}: in-memory p50 speed-up over {peer}", theirs.p50 / ours.p50, goal, True)
    for name in (InMemory.name, SQLite.name, Postgres.name, Redis.name):
        result = case.get(name)
        if result is not None:
            report.target(f"{case.label}: {name} p50 / bandwidth floor", result.p50 / result.floor, 1.5, False)
    for clustered in (c for c in cases if c.kind == "clustered"):
        halved = clustered.get(InMemoryBfloat16.name)
        if halved is not None:
            report.target(f"{clustered.label}: bfloat16 scan (half the bytes) recall@10", halved.recall, 0.99, True)


def ratio_rows(cases: list[Case]) -> list[tuple[str, float, float, float]]:
    """(label, peer p50 / memwoven p50, lowest, highest) on random 100k x 384 (or the largest below)."""
    case = _peer_case(cases)
    if case is None:
        return []
    rows = []
    pairs = [(InMemory.name, peer) for peer in (LangChain.name, LlamaIndex.name, QdrantRaw.name, SqliteVec.name)]
    pairs += [(InMemory.name, Faiss.name), (QdrantLocal.name, QdrantRaw.name)]
    pairs += [(InMemoryBfloat16.name, InMemory.name)]
    for mine, theirs in pairs:
        a, b = case.get(mine), case.get(theirs)
        if a is None or b is None:
            continue
        label = f"search {case.count // 1000}kx{case.dimension}: {theirs} / {mine.removeprefix('memwoven ')}"
        rows.append((label, b.p50 / a.p50, min(b.latency) / max(a.latency), max(b.latency) / min(a.latency)))
    return rows


def sixteen_bit_probe(count: int, dimension: int = 384, runs: int = 7) -> str:
    """Why the 16-bit scan (`scan="bfloat16"`) runs on SimSIMD: what a 16-bit scan costs against the float32 one.

    Halving the bytes scanned only pays if the scan stays memory-bound; numpy has no float16 BLAS kernel, so a
    numpy 16-bit scan is either its generic float16 matmul or a float16 -> float32 conversion per block of rows
    (kept in cache) followed by the float32 product. Both are timed here next to the float32 product and
    SimSIMD's float16 and bfloat16 dot kernels (one thread, like the BLAS here).
    """
    import simsimd

    from memwoven.vector_index import _bfloat16

    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((count, dimension), dtype=np.float32)
    query = rng.standard_normal(dimension, dtype=np.float32)
    half, half_query = matrix.astype(np.float16), query.astype(np.float16)
    brain, brain_query = _bfloat16(matrix), _bfloat16(query)[None]
    block = np.empty((1024, dimension), dtype=np.float32)
    out = np.empty(count, dtype=np.float32)

    def blocked() -> None:
        for start in range(0, count, len(block)):
            rows = half[start : start + len(block)]
            target = block[: len(rows)]
            target[...] = rows
            np.matmul(target, query, out=out[start : start + len(rows)])

    timings = {
        "float32 matrix @ query (BLAS sgemv)": _timing(_repeat(lambda: matrix @ query, runs=runs, budget=2.0)),
        "float16 matrix @ float16 query (numpy)": _timing(_repeat(lambda: half @ half_query, runs=3, budget=2.0)),
        "float16 -> float32 per 1,024-row block, then sgemv": _timing(_repeat(blocked, runs=3, budget=2.0)),
        "SimSIMD float16 dot": _timing(
            _repeat(lambda: simsimd.cdist(half_query[None], half, metric="dot"), runs=runs, budget=2.0)
        ),
        'SimSIMD bfloat16 dot (the scan of scan="bfloat16")': _timing(
            _repeat(lambda: simsimd.cdist(brain_query, brain, metric="dot", dtype="bf16"), runs=runs, budget=2.0)
        ),
    }
    base = next(iter(timings.values())).median
    title = f"#### 16-bit scan probe, {count:,}x{dimension} (which kernel the bfloat16 scan uses, and why)"
    ratios = {name: timing.median / base for name, timing in timings.items()}
    return _ratio_table(title, ("scan", "time", "vs float32"), timings, ratios)


def _ratio_table(title: str, header: tuple[str, str, str], timings: dict[str, Timing], ratios: dict[str, float]) -> str:
    """A Markdown section: `title`, then one row per timing with its ratio."""
    lines = [title, "", f"| {' | '.join(header)} |", "| --- | --- | --- |"]
    lines += [f"| {name} | {timing} | {ratios[name]:.2f}x |" for name, timing in timings.items()]
    return "\n".join([*lines, ""])
