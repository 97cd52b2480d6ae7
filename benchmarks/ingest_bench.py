"""Columnar ingest: N x 384 float32 through one `store_arrays` call into the in-memory store, an SQLite file,
PostgreSQL (client-side search) and, given a pgvector server, PostgreSQL with search="server".

Each fill goes into a fresh collection; the rate is vectors per second of the whole call (validation, the writes,
the commit and the object's own index), the memory the peak resident size during it (the kernel's VmHWM, reset
before it) beyond the resident size before it, against the bytes of the vectors (the caller's array exists before
and is not counted). A target not met comes with the functions a cProfile of a 100,000-vector fill spends most in.
Filling in batches instead costs the in-memory index its growth: each time the matrix outgrows its capacity it
is copied into a new one twice the size (measured: 100,000-vector batches ~4x slower than one call at 1M).

Where the time goes (2026-11-27, 1M x 384 on the shared 2-core Firecracker VM, whose load moves the rates ~2x):
- in memory: mostly the copy of the vectors into the index's own matrix (the caller's array is never adopted),
  whose pages are fresh memory: their first touch is this VM's dearest operation (a 1.5 GB copy 2-3 s the first
  time in a process, ~0.3 s into memory used before); faulting the live rows in at once (MADV_POPULATE_WRITE)
  halves it. Then the id -> row dict (~0.5 s) and the norms (~0.15 s), each computed once by the validation
  and taken by the index.
- SQLite file: SQLite itself. Raw sqlite3, executemany of pre-built rows of this table in WAL mode, makes ~20,000
  rows/s here (200,000 rows: ~5 s of inserts, ~4 s of commit with its checkpoint); the same rows with a 1-byte
  blob ~70,000/s: it is the 1.5 KB vector blob per row (two rows a 4 KiB page, written to the WAL and again
  into the file) that costs. A 2 GB page cache measured no better. 16 KiB pages do (2026-11-29, idle machine,
  300,000 rows, two rounds each): raw sqlite3 49,000-54,000 -> 80,000-83,000 rows/s in WAL mode (a quarter of
  the WAL frames: user CPU 2.7-3.0 -> 2.2 s, system 2.3-2.5 -> 0.8-1.0 s), memwoven's store_arrays 27,000-28,000
  -> 35,000-36,000 vectors/s (a row's index entries, two 64-character keys, cost the rest); not adopted: the page
  size is the whole database file's, and every small commit (a chat append, a checkpoint) would then write 16 KiB
  WAL frames. A layout of many vectors a row (as sqlite-vec's ~90,000/s) would be the next step.
- PostgreSQL: the server. Its COPY of the same 200,000 pre-built rows into a copy of the table takes 3.1 s with no
  index, 4.1 s with the primary key, 4.7-5.3 s with both indexes (~40,000 rows/s), while the client spends ~2 s
  of CPU on them; the cProfile shares of the per-row COPY calls are mostly the profiler's own overhead (COPY
  data built by numpy instead cut no time: measured and reverted).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from harness import Report, Timing

from memwoven import InMemoryVectorMemory, SQLVectorMemory

DIMENSION = 384
PROFILED = 100_000  # vectors in the profiled fill
RATE_GOALS = {"in memory": 1_000_000.0, "SQLite file": 100_000.0}
SQL_RATE_GOAL = 100_000.0
MEMORY_GOAL = 2.0  # peak added resident memory / data bytes


@dataclass(frozen=True)
class Fill:
    """One measured fill: where, how many vectors, seconds, peak added bytes, and the profile if a goal failed."""

    subject: str
    count: int
    seconds: float
    peak: int
    profile: str = ""

    @property
    def rate(self) -> float:
        """Vectors per second."""
        return self.count / self.seconds

    @property
    def memory_ratio(self) -> float:
        """Peak added resident bytes / the bytes of the vectors."""
        return self.peak / (self.count * DIMENSION * 4)


def _resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM, the peak resident size, to the current one


def _peak() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _subjects(postgres: str, pgvector: str | None, directory: Path) -> Iterator[tuple[str, Callable[[], Any]]]:
    """(label, factory of a fresh memory) per subject; the SQL ones under a unique table prefix."""
    yield "in memory", lambda: InMemoryVectorMemory(dimension=DIMENSION)
    yield "SQLite file", lambda: SQLVectorMemory(f"sqlite:///{directory / uuid.uuid4().hex}.db", dimension=DIMENSION)
    yield "PostgreSQL (client-side search)", lambda: _sql(postgres, "client")
    if pgvector is not None:
        yield "PostgreSQL + pgvector (search='server')", lambda: _sql(pgvector, "server")


def _sql(url: str, search: str) -> SQLVectorMemory:
    prefix = f"mwingest_{uuid.uuid4().hex[:8]}_"
    return SQLVectorMemory(url, table_prefix=prefix, collection="bench", dimension=DIMENSION, search=search)


@contextmanager
def _opened(factory: Callable[[], Any]) -> Iterator[Any]:
    memory = factory()
    try:
        yield memory
    finally:
        if isinstance(memory, SQLVectorMemory):
            memory.drop_tables()
        memory.close()


def _fill(memory: Any, ids: list[str], vectors: Any, batch: int) -> None:
    for start in range(0, len(ids), batch):
        memory.store_arrays(ids[start : start + batch], vectors[start : start + batch])


def _profile(factory: Callable[[], Any], ids: list[str], vectors: Any) -> str:
    """The top functions (own time) of a cProfile of a `PROFILED`-vector fill into a fresh memory."""
    with _opened(factory) as memory:
        profiler = cProfile.Profile()
        profiler.enable()
        memory.store_arrays(ids[:PROFILED], vectors[:PROFILED])
        profiler.disable()
    stats = pstats.Stats(profiler)
    total = max(stats.total_tt, 1e-9)  # type: ignore[attr-defined]
    ranked = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:4]  # type: ignore[attr-defined]
    return "; ".join(f"{_where(function)} {own / total:.0%}" for function, (_, _, own, _, _) in ranked)


def _where(function: tuple[str, int, str]) -> str:
    path, line, name = function
    return name if path == "~" else f"{Path(path).name}:{line}({name})"


def measure(postgres: str, pgvector: str | None, count: int, batch: int | None = None) -> list[Fill]:
    """Fill every subject with the same `count` x 384 vectors (in one call, or `batch` vectors a call); profile
    the fills that miss a goal."""
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((count, DIMENSION), dtype=np.float32)
    ids = [f"doc-{i}" for i in range(count)]
    fills = []
    with tempfile.TemporaryDirectory(prefix="mwingest-") as name:
        for subject, factory in _subjects(postgres, pgvector, Path(name)):
            with _opened(factory) as memory:
                before = _resident()
                _reset_peak()
                start = time.perf_counter()
                _fill(memory, ids, vectors, batch or count)
                seconds = time.perf_counter() - start
                peak = _peak() - before
            fill = Fill(subject, count, seconds, peak)
            if fill.rate < RATE_GOALS.get(subject, SQL_RATE_GOAL) or fill.memory_ratio > MEMORY_GOAL:
                fill = Fill(subject, count, seconds, peak, _profile(factory, ids, vectors))
            fills.append(fill)
    return fills


def run(report: Report, *, postgres: str, pgvector: str | None, count: int) -> str:
    """Add the ingest rows and targets to `report`; return the section's Markdown."""
    fills = measure(postgres, pgvector, count)
    name = f"columnar ingest (store_arrays), {count:,}x{DIMENSION}"
    for fill in fills:
        seconds = Timing(fill.seconds, fill.seconds, fill.seconds, 1)
        report.add(name, fill.subject, seconds, f"{fill.rate:,.0f} vectors/s, peak +{fill.memory_ratio:.2f}x data")
        goal = RATE_GOALS.get(fill.subject, SQL_RATE_GOAL)
        report.target(f"{name}: {fill.subject}, vectors/s", fill.rate, goal, True)
        report.target(f"{name}: {fill.subject}, peak added memory / data", fill.memory_ratio, MEMORY_GOAL, False)
    lines = [
        f"#### Columnar ingest, {count:,}x{DIMENSION} float32 in one store_arrays call",
        "",
        "| subject | vectors/s | fill | peak added memory / data | goal missed: cProfile of a 100k fill (own time) |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {f.subject} | {f.rate:,.0f} | {f.seconds:.2f} s | {f.memory_ratio:.2f}x | {f.profile or '—'} |"
            for f in fills
        ),
        "",
    ]
    if pgvector is None:
        lines += ["(PostgreSQL with pgvector not measured: set MEMWOVEN_PGVECTOR_URL.)", ""]
    return "\n".join(lines)
