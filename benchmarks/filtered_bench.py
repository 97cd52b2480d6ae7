"""Filtered top-10, the common case of agent memory (one tenant's, one user's documents), on every client-side store
beside pgvector's exact search with a GIN index on the metadata, on the same server.

N x 384 clustered unit vectors (`vector_search.dataset`), metadata ``{"tenant": i % 100, "half": i % 2 == 0}``;
three searches per subject: unfiltered, a 1%-selective equality (``{"tenant": 7}``) and a 50% one
(``{"half": true}``). Subjects, all filled through the columnar path (`store_arrays`):

- `InMemoryVectorMemory`;
- `SQLVectorMemory` on an SQLite file and on PostgreSQL, client-side search (the default);
- pgvector exact through psycopg on its own table (``embedding vector(384)``, ``metadata jsonb`` with a GIN index):
  ``SELECT id FROM t WHERE metadata @> %s ORDER BY embedding <=> %s LIMIT 10`` — the query a pgvector user writes.

PostgreSQL is the private server with pgvector (`pgvector_bench.server`); without it, memwoven's PostgreSQL row runs on
the given server and the pgvector row is skipped with the reason. Every subject is timed once per round, the order
rotating (`harness.measure_rounds`); each answer's recall is against numpy's exact top-10 of the matching rows.
Targets (issue 22): 1% filter ≤ 0.2x the subject's unfiltered search and ≤ 1.0x pgvector's 1% search; 50% filter
≤ 1.2x unfiltered; recall 1.0. N is 100,000 (10,000 with --quick); ``MEMWOVEN_BENCH_FILTER_COUNT=1000000`` for the
issue's second size.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pgvector_bench
from harness import Report, Timing, measure_rounds
from vector_search import TOP_K, Array, dataset

from memwoven import InMemoryVectorMemory, SQLVectorMemory

COUNT_VARIABLE = "MEMWOVEN_BENCH_FILTER_COUNT"
DIMENSION = 384
PREFIX = "mwflt_"
FILTERED_1_GOAL = 0.2  # a 1%-selective equality filter <= 0.2x the unfiltered search
FILTERED_50_GOAL = 1.2  # a 50% filter <= 1.2x
PGVECTOR_GOAL = 1.0  # the 1% filter <= 1.0x pgvector exact with a GIN index
CASES: dict[str, dict[str, Any] | None] = {
    "unfiltered": None,
    '1% {"tenant": 7}': {"tenant": 7},
    '50% {"half": true}': {"half": True},
}
ONE, HALF = list(CASES)[1:]
PGVECTOR = "pgvector exact + GIN (psycopg)"

Store = InMemoryVectorMemory | SQLVectorMemory
Search = Callable[[Array, dict[str, Any] | None], list[str]]


def _memwoven(memory: Store) -> Search:
    def search(query: Any, spec: dict[str, Any] | None) -> list[str]:  # a float32 row, taken as it is
        return [hit.document.id for hit in memory.search(query, top_k=TOP_K, filter=spec)]

    return search


def _fill(memory: Store, ids: list[str], vectors: Array, metadata: list[dict[str, Any]]) -> float:
    """Store the corpus in batches of 100,000 through `store_arrays` and load it with one search; seconds taken."""
    start = time.perf_counter()
    for begin in range(0, len(ids), 100_000):
        end = begin + 100_000
        memory.store_arrays(ids[begin:end], vectors[begin:end], metadata=metadata[begin:end])
    memory.search(vectors[0], top_k=1)  # a client-side SQL index loads at its first search
    return time.perf_counter() - start


@contextmanager
def _pgvector(
    url: str, ids: list[str], vectors: Array, metadata: list[dict[str, Any]]
) -> Iterator[tuple[Search, float]]:
    """pgvector's exact search with a GIN index on the metadata, on its own table; its search and fill seconds."""
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.types.json import Jsonb

    table = f"{PREFIX}pgvector"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(connection)
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, embedding vector({DIMENSION}), metadata jsonb)")
        start = time.perf_counter()
        with connection.cursor() as cursor, cursor.copy(f"COPY {table} FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "vector", "jsonb"])
            for row in zip(ids, vectors, metadata):
                copy.write_row((row[0], row[1], Jsonb(row[2])))
        connection.execute(f"CREATE INDEX ON {table} USING gin (metadata jsonb_path_ops)")
        connection.execute(f"ANALYZE {table}")
        fill = time.perf_counter() - start
        filtered = f"SELECT id FROM {table} WHERE metadata @> %s ORDER BY embedding <=> %s LIMIT {TOP_K}"
        unfiltered = f"SELECT id FROM {table} ORDER BY embedding <=> %s LIMIT {TOP_K}"

        def search(query: Array, spec: dict[str, Any] | None) -> list[str]:
            if spec is None:
                rows = connection.execute(unfiltered, (query,)).fetchall()
            else:
                rows = connection.execute(filtered, (json.dumps(spec), query)).fetchall()
            return [row[0] for row in rows]

        try:
            yield search, fill
        finally:
            connection.execute(f"DROP TABLE IF EXISTS {table}")


def _postgres(stack: ExitStack, postgres: str) -> tuple[str, str]:
    """The private server with pgvector if it runs, else `postgres`: its URL and why pgvector is missing (or "")."""
    try:
        return stack.enter_context(pgvector_bench.server()), ""
    except RuntimeError as error:
        print(f"  filtered search: no pgvector server ({error}); PostgreSQL on {postgres}", flush=True)
        return postgres, str(error)


def run(report: Report, *, postgres: str, count: int, runs: int) -> str:
    """Measure every subject at `count` x 384 (or `$MEMWOVEN_BENCH_FILTER_COUNT`); the Markdown section."""
    count = int(os.environ.get(COUNT_VARIABLE, count))
    ids, vectors, queries = dataset("clustered", count, DIMENSION)
    tenants = np.arange(count) % 100
    metadata = [{"tenant": int(t), "half": i % 2 == 0} for i, t in enumerate(tenants)]
    masks = {"unfiltered": np.ones(count, dtype=bool), ONE: tenants == 7, HALF: np.arange(count) % 2 == 0}
    label = f"filtered top-10, clustered {count:,}x{DIMENSION}"
    searches: dict[str, Search] = {}
    notes: list[str] = []
    with ExitStack() as stack:
        directory = stack.enter_context(tempfile.TemporaryDirectory())  # removed after the stores are closed
        url, missing = _postgres(stack, postgres)
        stores: dict[str, Store] = {
            "memwoven InMemoryVectorMemory": InMemoryVectorMemory(dimension=DIMENSION),
            "memwoven SQLVectorMemory (SQLite, client-side)": SQLVectorMemory(
                f"sqlite:///{Path(directory) / 'filtered.db'}", dimension=DIMENSION
            ),
            "memwoven SQLVectorMemory (PostgreSQL, client-side)": SQLVectorMemory(
                url, table_prefix=PREFIX, dimension=DIMENSION
            ),
        }
        for name, memory in stores.items():
            if isinstance(memory, SQLVectorMemory):
                stack.callback(memory.close)
                stack.callback(memory.drop_tables)
            seconds = _fill(memory, ids, vectors, metadata)
            notes.append(f"{name}: filled and loaded in {seconds:.1f} s")
            print(f"  {label}: {name} filled and loaded in {seconds:.1f} s", flush=True)
            searches[name] = _memwoven(memory)
        if missing:
            notes.append(f"{PGVECTOR}: not run ({missing})")
        else:
            search, seconds = stack.enter_context(_pgvector(url, ids, vectors, metadata))
            notes.append(f"{PGVECTOR}: filled by binary COPY and indexed in {seconds:.1f} s")
            searches[PGVECTOR] = search
        recalls = {
            (name, case): _recall(search, spec, queries[:4], ids, vectors, masks[case])
            for name, search in searches.items()
            for case, spec in CASES.items()
        }
        cycle = iter(range(10**9))
        calls = {
            f"{name} | {case}": (lambda s=search, f=spec: s(queries[next(cycle) % len(queries)], f))
            for name, search in searches.items()
            for case, spec in CASES.items()
        }
        timings = measure_rounds(calls, runs=runs, warmup=2)
    return _section(report, label, searches, timings, recalls, notes)


def _recall(
    search: Search, spec: dict[str, Any] | None, queries: Array, ids: list[str], vectors: Array, mask: Array
) -> float:
    """Mean overlap of `search`'s top-10 with numpy's exact top-10 among the rows in `mask`."""
    rows = np.flatnonzero(mask)
    found = 0
    for query in queries:
        scores = vectors[rows] @ query  # unit vectors: cosine
        expected = {ids[i] for i in rows[np.argsort(-scores, kind="stable")[:TOP_K]]}
        found += len(expected & set(search(query, spec)))
    return found / (TOP_K * len(queries))


def _section(
    report: Report,
    label: str,
    searches: dict[str, Search],
    timings: dict[str, Timing],
    recalls: dict[tuple[str, str], float],
    notes: list[str],
) -> str:
    lines = [
        f"#### Filtered search, {label.removeprefix('filtered top-10, ')}, top-10 cosine (metadata kept column-wise)",
        "",
        "Each cell: p50, then the ratio to the subject's unfiltered search; the 1% column also gives the ratio to "
        "pgvector's 1% search (exact, GIN index on the metadata, same server). Recall against numpy's exact top-10 of "
        "the matching rows, over all three searches.",
        "",
        "| subject | unfiltered | 1% equality | 50% equality | recall |",
        "| --- | --- | --- | --- | --- |",
    ]
    pgvector_one = timings.get(f"{PGVECTOR} | {ONE}")
    for name in searches:
        base = timings[f"{name} | unfiltered"]
        one, half = timings[f"{name} | {ONE}"], timings[f"{name} | {HALF}"]
        one_ratio, half_ratio = one.median / base.median, half.median / base.median
        versus = f", {one.median / pgvector_one.median:.2f}x pgvector" if pgvector_one and name != PGVECTOR else ""
        recall = min(recalls[name, case] for case in CASES)
        lines.append(
            f"| {name} | {base} | {one} ({one_ratio:.2f}x{versus}) | {half} ({half_ratio:.2f}x) | {recall:.3f} |"
        )
        for case in CASES:
            report.add(label, f"{name}, {case}", timings[f"{name} | {case}"])
        if name == PGVECTOR:
            continue
        report.target(f"{label}, {name}: 1% filter / unfiltered", one_ratio, FILTERED_1_GOAL, False)
        report.target(f"{label}, {name}: 50% filter / unfiltered", half_ratio, FILTERED_50_GOAL, False)
        if pgvector_one:
            versus_pgvector = one.median / pgvector_one.median
            report.target(f"{label}, {name}: 1% filter / pgvector exact + GIN", versus_pgvector, PGVECTOR_GOAL, False)
        report.target(f"{label}, {name}: recall@10", recall, 1.0, True)
    lines += ["", *(f"- {note}" for note in notes), ""]
    return "\n".join(lines)
