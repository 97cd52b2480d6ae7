"""LangGraph's long-term memory store: memwoven's `MemwovenStore` (langgraph-checkpoint-memwoven, on
`SQLItemMemory`) against LangGraph's own `SqliteStore` (langgraph-checkpoint-sqlite) and `PostgresStore`
(langgraph-checkpoint-postgres), on the same data in the same run.

Data: N items in N / 100 namespaces ``("users", "u0042", "memories")`` of 100 keys each; a value holds a text, a
`kind` (10 values: 10 items of a namespace share one) and a `topic` (100 values: one item per namespace). Timed,
`limit=10` each: `search` with a filter in one namespace and across every namespace, and `search` without query
or filter (LangGraph's listing) in one namespace and across every namespace; for each, memwoven's raw
`ItemMemory.list(prefix, filter=..., limit=10)` and `ItemMemory.count(prefix, filter=...)` on the same table.
Also, on SQLite: a `put` of 10,000 items in one batch (`MemwovenStore.batch` of `PutOp`s, raw
`SQLItemMemory.put_many`, `SqliteStore.batch`), and the case that took 7 s when the store emulated items on chat
sessions: a filtered search matching nothing over 5,000 items.

The subjects of a case take turns, one call each per round (`harness.measure_rounds`), so load from other
processes on a shared host falls on all alike. Each store is used as its package ships it: LangGraph's from
`from_conn_string` (SqliteStore: SQLite's defaults, rollback journal and full sync; PostgresStore: one
connection), memwoven's SQLite engine with its WAL journal and `synchronous = NORMAL`. PostgreSQL: memwoven's
table under a unique table prefix, PostgresStore (whose table names are fixed) in a schema of its own through the
connection's search_path; both dropped afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from harness import Report, Timing, measure_rounds
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore

from langgraph.store.memwoven import MemwovenStore
from memwoven import ItemWrite, SQLItemMemory

PER_NAMESPACE = 100
FILL_CHUNK = 10_000
OURS = "MemwovenStore"
INDEXED_FIELD = "topic"  # the field of the filtered search over every namespace
INDEXED = f"MemwovenStore(indexed_fields=['{INDEXED_FIELD}'])"
RAW_LIST = "ItemMemory.list"
RAW_COUNT = "ItemMemory.count"
SCAN = "the database's own scan"
SEARCH_GOAL_SECONDS = 0.020
PUT_GOAL_RATE = 20_000.0
EMPTY_GOAL_SECONDS = 0.010
FORMER_CASE_ITEMS = 5_000


@dataclass
class Place:
    """One database with memwoven's store (on `items`) and LangGraph's own store, holding the same items."""

    database: str
    items: SQLItemMemory
    ours: MemwovenStore
    peer: BaseStore
    peer_name: str
    settle: Callable[[], object]
    """Run after filling: what the database would do on its own before long (PostgreSQL: ANALYZE)."""
    scan: Callable[[str, str], object]
    """The database's own scan: count the rows of LangGraph's table whose JSON value has field = text."""
    indexed: Callable[[], contextlib.AbstractContextManager[MemwovenStore]] | None = None
    """SQLite: opens a second memwoven store on the same table, with `INDEXED_FIELD` indexed (`indexed_fields`)."""


@dataclass
class CaseResult:
    """The timings of one search case on one database, by subject."""

    database: str
    peer_name: str
    case: str
    timings: dict[str, Timing]

    @property
    def subject(self) -> str:
        """The memwoven store the case's targets are on: the one with the field index where it was measured."""
        return INDEXED if INDEXED in self.timings else OURS

    @property
    def ratio(self) -> float:
        """memwoven's store time / LangGraph's store time (medians)."""
        return self.timings[self.subject].median / self.timings[self.peer_name].median


@dataclass
class StoreResults:
    """Everything the store benchmark measured, for its Markdown section."""

    count: int
    cases: list[CaseResult] = field(default_factory=list)
    fills: list[tuple[str, str, float]] = field(default_factory=list)  # (database, subject, items/s)
    puts: dict[str, Timing] = field(default_factory=dict)
    put_count: int = 0
    former: dict[str, Timing] = field(default_factory=dict)


def namespace(index: int, root: str = "users") -> tuple[str, ...]:
    """The namespace of the `index`-th group of 100 items."""
    return (root, f"u{index:04d}", "memories")


def value(index: int) -> dict[str, Any]:
    """The value of the `index`-th item."""
    return {
        "text": f"memory {index}: the user likes green tea and long walks",
        "kind": f"k{index % 10}",
        "topic": f"t{index % PER_NAMESPACE}",
        "score": index % 1_000,
    }


def put_ops(count: int, root: str = "users") -> list[PutOp]:
    """`count` puts, 100 to a namespace."""
    return [PutOp(namespace(i // PER_NAMESPACE, root), f"m{i % PER_NAMESPACE:03d}", value(i)) for i in range(count)]


def _writes(count: int, root: str) -> list[ItemWrite]:
    """The same items as `put_ops`, as `ItemMemory.put_many` takes them."""
    return [ItemWrite(namespace(i // PER_NAMESPACE, root), f"m{i % PER_NAMESPACE:03d}", value(i)) for i in range(count)]


def _conninfo(url: str) -> str:
    """A libpq connection string from an SQLAlchemy-style URL (``postgresql+psycopg://`` -> ``postgresql://``)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+', 1)[0]}://{rest}"


def _with_search_path(conninfo: str, schema: str) -> str:
    return f"{conninfo}{'&' if '?' in conninfo else '?'}options=-csearch_path%3D{schema}"


@contextlib.contextmanager
def sqlite_place(directory: Path, name: str) -> Iterator[Place]:
    """Fresh SQLite files for both stores, in `directory`."""
    items_url = f"sqlite:///{directory / f'{name}-memwoven.db'}"
    items = SQLItemMemory(items_url)
    ours = MemwovenStore(items)
    try:
        with SqliteStore.from_conn_string(str(directory / f"{name}-langgraph.db")) as peer:
            peer.setup()
            conn = peer.conn

            def scan(field_name: str, wanted: str) -> object:
                sql = f"SELECT count(*) FROM store WHERE json_extract(value, '$.{field_name}') = ?"
                return conn.execute(sql, (wanted,)).fetchall()

            def indexed() -> contextlib.AbstractContextManager[MemwovenStore]:
                return MemwovenStore.from_url(items_url, indexed_fields=[INDEXED_FIELD])

            yield Place("SQLite", items, ours, peer, "SqliteStore", _nothing, scan, indexed)
    finally:
        ours.close()
        items.close()


@contextlib.contextmanager
def postgres_place(url: str) -> Iterator[Place]:
    """memwoven's table under a unique prefix and PostgresStore in a unique schema; both dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    schema = f"lgbench_{tag}"
    conninfo = _conninfo(url)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            items = SQLItemMemory(url, table_prefix=f"mwbench_{tag}_")
            tables = f'ANALYZE "mwbench_{tag}_items", "{schema}".store'
            ours = MemwovenStore(items)
            try:
                with PostgresStore.from_conn_string(_with_search_path(conninfo, schema)) as peer:
                    peer.setup()
                    yield Place(
                        "PostgreSQL",
                        items,
                        ours,
                        peer,
                        "PostgresStore",
                        lambda: admin.execute(tables),
                        lambda name, wanted: admin.execute(
                            f"SELECT count(*) FROM \"{schema}\".store WHERE value ->> '{name}' = %s", (wanted,)
                        ).fetchall(),
                    )
            finally:
                ours.close()
                items.drop_tables()
                items.close()
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _nothing() -> None:
    """SQLite analyses a table only when told to: it is measured as loaded."""


def fill(place: Place, count: int, results: StoreResults | None = None) -> None:
    """Put the same `count` items into both stores, in batches of `FILL_CHUNK`, taking turns per batch."""
    ops = put_ops(count)
    spent = {OURS: 0.0, place.peer_name: 0.0}
    for start in range(0, count, FILL_CHUNK):
        chunk = ops[start : start + FILL_CHUNK]
        for name, store in (OURS, place.ours), (place.peer_name, place.peer):
            began = time.perf_counter()
            store.batch(chunk)
            spent[name] += time.perf_counter() - began
    place.settle()
    if results is not None:
        results.fills += [(place.database, name, count / seconds) for name, seconds in spent.items()]


def _stored(place: Place, prefix: tuple[str, ...]) -> tuple[str, ...]:
    """Where memwoven's store keeps the items of `prefix` in its item memory (under the store's own namespace)."""
    return (*place.ours.namespace, *prefix)


def _matches(spec: Mapping[str, Any] | None) -> Callable[[Mapping[str, Any]], bool]:
    return lambda found: spec is None or all(found.get(name) == wanted for name, wanted in spec.items())


def _check(place: Place, prefix: tuple[str, ...], spec: dict[str, Any] | None, expected: int) -> None:
    """Both stores and the raw list return the same number of items, all matching (guards the timed calls)."""
    pages = {
        OURS: [item.value for item in place.ours.search(prefix, filter=spec, limit=10)],
        place.peer_name: [item.value for item in place.peer.search(prefix, filter=spec, limit=10)],
        RAW_LIST: [dict(item.value) for item in place.items.list(_stored(place, prefix), filter=spec, limit=10)],
    }
    for name, page in pages.items():
        if len(page) != expected or not all(map(_matches(spec), page)):
            raise AssertionError(f"{place.database} {name} search {prefix} {spec}: {len(page)} items, not {expected}")


def _calls(place: Place, prefix: tuple[str, ...], spec: dict[str, Any] | None) -> dict[str, Callable[[], object]]:
    return {
        OURS: lambda: place.ours.search(prefix, filter=spec, limit=10),
        place.peer_name: lambda: place.peer.search(prefix, filter=spec, limit=10),
        RAW_LIST: lambda: place.items.list(_stored(place, prefix), filter=spec, limit=10),
        RAW_COUNT: lambda: place.items.count(_stored(place, prefix), filter=spec),
    }


def search_cases(place: Place, count: int, runs: int) -> list[CaseResult]:
    """Time the four search cases on `place` (filled with `count` items)."""
    spaces = count // PER_NAMESPACE
    one = namespace(42 % spaces)
    everything = ("users",)
    cases: list[tuple[str, tuple[str, ...], dict[str, Any] | None, int]] = [
        (f"search, filter, 1 namespace of {spaces:,} (100 items)", one, {"kind": "k7"}, 10),
        (f"search, filter, all {spaces:,} namespaces ({count:,} items)", everything, {"topic": "t42"}, spaces),
        ("search without query, 1 namespace (100 items)", one, None, PER_NAMESPACE),
        (f"search without query, all namespaces ({count:,} items)", everything, None, count),
    ]
    results = []
    with contextlib.ExitStack() as stack:
        for case, prefix, spec, matching in cases:
            _check(place, prefix, spec, min(10, matching))
            if place.items.count(_stored(place, prefix), filter=spec) != matching:
                raise AssertionError(f"{place.database} count {prefix} {spec} is not {matching}")
            calls = _calls(place, prefix, spec)
            if spec is not None and prefix == everything:  # the floor: the database's own scan of every JSON value
                ((field_name, wanted),) = spec.items()
                calls[SCAN] = functools.partial(place.scan, field_name, wanted)
                if place.indexed is not None:  # the same search with the field indexed (made here, untimed)
                    indexed = stack.enter_context(place.indexed())
                    if [i.value for i in indexed.search(prefix, filter=spec, limit=10)] != [
                        i.value for i in place.ours.search(prefix, filter=spec, limit=10)
                    ]:
                        raise AssertionError(f"{INDEXED} search {prefix} {spec} differs from {OURS}'s")
                    calls[INDEXED] = functools.partial(indexed.search, prefix, filter=spec, limit=10)
            timings = measure_rounds(calls, runs=runs)
            results.append(CaseResult(place.database, place.peer_name, case, timings))
    return results


def put_batches(directory: Path, count: int, runs: int) -> dict[str, Timing]:
    """One batch of `count` new items per round on SQLite: store batch, raw put_many, SqliteStore batch."""
    rounds = runs + 1  # measure_rounds' warm-up round writes too
    with sqlite_place(directory, "put") as place:
        ours = iter([put_ops(count, f"store{r}") for r in range(rounds)])
        theirs = iter([put_ops(count, f"peer{r}") for r in range(rounds)])
        raw = iter([_writes(count, f"raw{r}") for r in range(rounds)])
        timings = measure_rounds(
            {
                f"{OURS}.batch": lambda: place.ours.batch(next(ours)),
                "SQLItemMemory.put_many": lambda: place.items.put_many(next(raw)),
                "SqliteStore.batch": lambda: place.peer.batch(next(theirs)),
            },
            runs=runs,
        )
        for root, under in (("store", place.ours.namespace), ("raw", ())):
            written = sum(place.items.count((*under, f"{root}{r}")) for r in range(rounds))
            if written != rounds * count:
                raise AssertionError(f"{root}: {written} items written, not {rounds * count}")
    return timings


def former_case(directory: Path, runs: int) -> dict[str, Timing]:
    """The search that took 7 s on the chat-session emulation: a filter matching nothing over 5,000 items."""
    spec = {"kind": "none-such"}
    with sqlite_place(directory, "former") as place:
        fill(place, FORMER_CASE_ITEMS)
        _check(place, ("users",), spec, 0)
        return measure_rounds(
            {
                OURS: lambda: place.ours.search(("users",), filter=spec, limit=10),
                place.peer_name: lambda: place.peer.search(("users",), filter=spec, limit=10),
                RAW_LIST: lambda: place.items.list(_stored(place, ("users",)), filter=spec, limit=10),
            },
            runs=runs,
        )


def run(report: Report, *, postgres: str, count: int, put_count: int, runs: int) -> StoreResults:
    """Measure every case, add the rows and the targets to `report`, and return them for `markdown`."""
    results = StoreResults(count=count, put_count=put_count)
    with tempfile.TemporaryDirectory(prefix="mwbench-store-") as temporary:
        directory = Path(temporary)
        with sqlite_place(directory, "search") as place:
            fill(place, count, results)
            results.cases += search_cases(place, count, runs)
        with postgres_place(postgres) as place:
            fill(place, count, results)
            results.cases += search_cases(place, count, runs)
        results.puts = put_batches(directory, put_count, max(3, runs // 3))
        results.former = former_case(directory, runs)
    _report(report, results)
    return results


def _report(report: Report, results: StoreResults) -> None:
    for case in results.cases:
        name = f"LangGraph store {case.case} ({case.database})"
        for subject, timing in case.timings.items():
            note = f"{case.ratio:.2f}x (memwoven / LangGraph)" if subject == case.subject else ""
            report.add(name, subject, timing, note)
    for case in results.cases:
        what = f"{case.database}, {case.case}"
        report.target(f"{what}: {case.subject} / {case.peer_name}", case.ratio, 1.0, False)
        milliseconds = case.timings[case.subject].median * 1e3
        report.target(f"{what}: {case.subject} ms", milliseconds, SEARCH_GOAL_SECONDS * 1e3, False)
    name = f"SQLite put of {results.put_count:,} items in one batch"
    for subject, timing in results.puts.items():
        report.add(name, subject, timing, f"{results.put_count / timing.median:,.0f} items/s")
    for subject in (f"{OURS}.batch", "SQLItemMemory.put_many"):
        rate = results.put_count / results.puts[subject].median
        report.target(f"{name}: {subject} items/s", rate, PUT_GOAL_RATE, True)
    name = f"SQLite store search, filter matching nothing, {FORMER_CASE_ITEMS:,} items (was 7 s)"
    for subject, timing in results.former.items():
        report.add(name, subject, timing)
    report.target(f"{name}: {OURS} ms", results.former[OURS].median * 1e3, EMPTY_GOAL_SECONDS * 1e3, False)


def _ms(timing: Timing) -> str:
    return f"{timing.median * 1e3:.3g} ms"


def _floors(results: StoreResults) -> list[str]:
    """The database's own scan beside the filtered search over every namespace: no store beats it unindexed."""
    return [
        f"- {case.database}, {case.case}: the database's own scan of LangGraph's table for the same filter (a bare "
        f"count with json_extract / ->>) takes {_ms(case.timings[SCAN])}, the floor of any unindexed JSON filter "
        "over every row."
        for case in results.cases
        if SCAN in case.timings
    ]


def markdown(results: StoreResults) -> str:
    """The section's tables: search cases per database, the batch put, the former 7 s case."""
    lines = [
        f"{results.count:,} items in {results.count // PER_NAMESPACE:,} namespaces, `limit=10`; medians of rounds "
        "in which the subjects take turns (min, max and n in the rows below). Ratio: memwoven's store / "
        "LangGraph's own store (below 1: memwoven is faster).",
        "",
        "| database | operation | MemwovenStore | LangGraph store | ratio | ItemMemory.list | ItemMemory.count |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case in results.cases:
        t = case.timings
        ours = _ms(t[OURS]) if case.subject == OURS else f"{_ms(t[case.subject])} (without the index {_ms(t[OURS])})"
        lines.append(
            f"| {case.database} | {case.case} | {ours} | {case.peer_name} {_ms(t[case.peer_name])} | "
            f"{case.ratio:.2f}x | {_ms(t[RAW_LIST])} | {_ms(t[RAW_COUNT])} |"
        )
    lines += ["", *_floors(results)]
    if any(case.subject == INDEXED for case in results.cases):
        lines += [
            "",
            f"With an index (SQLite): {INDEXED}, a second store on the same table, its item memory made with "
            f"`indexed_fields=['{INDEXED_FIELD}']` (an expression index of that field, added to the table on first "
            "use), answers the filtered search over every namespace off that index; the ratio and the targets of "
            "that case are its own. Without the index SQLite tests the JSON of every item under the prefix, "
            "whose floor is the database's own scan above.",
        ]
    lines += [
        "",
        f"Filling (batches of {FILL_CHUNK:,} puts, once): "
        + "; ".join(f"{subject} on {database} {rate:,.0f} items/s" for database, subject, rate in results.fills)
        + ".",
        "",
        f"SQLite, one batch of {results.put_count:,} new items:",
        "",
        "| subject | time | items/s |",
        "| --- | --- | --- |",
        *(
            f"| {subject} | {timing} | {results.put_count / timing.median:,.0f} |"
            for subject, timing in results.puts.items()
        ),
        "",
        f"SQLite, search with a filter matching nothing over {FORMER_CASE_ITEMS:,} items (7 s when the store kept "
        "each item as a chat session): "
        + ", ".join(f"{subject} {timing}" for subject, timing in results.former.items())
        + ".",
        "",
    ]
    return "\n".join(lines)


# The small-search entry profiled as of the commit reading list_plain and caching the pre-selections; the others
# profiled (cProfile, EXPLAIN / EXPLAIN QUERY PLAN) on SQLItemMemory as of commit c2b9fc7, the SQL pre-selection of
# filters (json_type + json_extract on SQLite, json_typeof + json_extract_path_text on PostgreSQL, the exact filter
# re-applied in Python); the two PostgreSQL entries on searches over every namespace as of the commit adding
# key_head and value_jsonb. Profile again when that code changes.
REASONS = [
    "- LangGraph store, small searches (one namespace of 100 items, limit 10; target <= 1.0x). Measured with a probe "
    "calling the bench's own stores (100,000 items in 1,000 namespaces; 2-core machine shared with three other "
    "engineers' test runs). PostgreSQL: MET, filtered 0.75-0.81x of PostgresStore (0.44-0.65 ms; was 1.30x), "
    "without query 0.66-0.86x (was 1.03x). SQLite: NOT MET, close: filtered 1.13x of SqliteStore (0.172 ms against "
    "0.153; 1.67x, 0.254 ms, for the code of 29fd9ae in the same rounds; 3.0x before list_plain), without query "
    "1.07x (0.118 ms against 0.110; 29fd9ae 1.80x, 0.199 ms): medians of 10 rounds x 300 searches, the old and the "
    "new code in two processes taking turns on the same files, load 4-7 (6 rounds at load 10 gave 1.14x / 1.08x). "
    "What changed: the store reads ItemMemory.list_plain, rows "
    "straight into the dict LangGraph's SearchItem keeps (damaged text still raises CorruptMemoryError); each "
    "filter's SQL pre-selection and listing statement are built once; on SQLite a listing runs its SQL text, "
    "compiled once, on the DBAPI cursor of the pooled connection (no SQLAlchemy execution context or result), on a "
    "connection without SQLAlchemy's transaction object (no BEGIN was sent already); compile_filter remembers "
    "filters by their JSON text, so the store's validation and the item memory's compilation are one; values "
    "decoded with raw_decode (json's decode matched the surrounding whitespace twice, longer than the decoding), "
    "datetimes from a positional timedelta, and the store's batch makes one pass over its ops. cProfile of 3,000 "
    "one-namespace searches after that: ~15% SQLAlchemy's Connection and pool checkout/checkin (the remaining gap: "
    "SqliteStore keeps one sqlite3 connection), ~20% turning the 10 rows into PlainItems and then SearchItems "
    "(LangGraph's own SearchItem construction ~7%, two datetimes each), ~10% SQLite's execute, ~10% the store's "
    "batch, the ItemQuery validation and the two step runners, and for the filtered case the filter checked again "
    "in Python on each row the SQL pre-selection kept (the pre-selection keeps every match but is not known exact). "
    "Since then (d453b33) a file SQLite database keeps one connection for single reads, as PostgreSQL did, and "
    "filters are keyed by one shared JSON encoder: a probe on the bench's stores at 100,000 items (15 rounds, the "
    "two stores alternating, SQLAlchemy 2.1.9, a test run on the other core) gave one-namespace filtered 1.27x -> "
    "1.04-1.09x of SqliteStore, one-namespace without query 1.24x -> 0.97-0.98x, all namespaces filtered 0.96x -> "
    "0.97-0.98x, all namespaces without query 1.10x -> 1.12x. That last one is SQLite's plan, not Python: memwoven's "
    "bare SQL alone takes 1.01x of SqliteStore's whole search, SQLite walking the namespace index and sorting all "
    "100,000 rows in a temporary B-tree to return 10 (walking the key index instead avoids the sort but makes a "
    "one-namespace search ~180x slower, and SQLite keeps no statistics to choose per prefix). The filtered "
    "one-namespace gap is spread thin: ~20% turning rows into results (JSON decoding, two datetimes per item) and the "
    "filter checked again in Python on the pre-selected rows.",
    "- LangGraph store on PostgreSQL right after a bulk load: with no statistics yet the planner may AND the "
    "namespace index with a bitmap of `expires_at_ms IS NULL` (EXPLAIN ANALYZE: ~16-20 ms for a 100-item namespace "
    "against 0.22 ms once the table is analysed; worse when writes inserted a placeholder row per new item, which "
    "the store's puts, needing no compare-and-set, no longer do). The benchmark runs ANALYZE on both stores' tables "
    "after filling, as autovacuum does within about a minute; a store freshly bulk-loaded is slower until then.",
    "- LangGraph store, filtered search over every namespace (100,000 items; target 20 ms). PostgreSQL: was 1.4-1.9x "
    "of PostgresStore (memwoven's value column is json, text that each JSON function parses again: EXPLAIN ANALYZE "
    "showed a parallel scan of every row, ~35-40 ms, whether the test was a substring search of the text or, on a "
    "jsonb copy, jsonb_extract_path). Now the items table has a jsonb copy of each value generated by PostgreSQL "
    "(NULL where the text holds \\u0000, which jsonb refuses; the json text stays what is read back) with a GIN "
    "index (jsonb_path_ops), and a string or boolean equality is a containment test it answers (plus an index of the "
    "rows without a copy, selected by their text): a bitmap scan of the 1,000 candidates, 5.5 ms in EXPLAIN ANALYZE, "
    "and 0.29x of PostgresStore (14 ms against 48 ms) in the benchmark at 100,000 items. Its cost to writes, "
    "put_many of 10,000 items on PostgreSQL, 10-12 rounds each taking turns: 7,700-8,100 items/s before this table "
    "change, 6,600-7,300 with key_head, the jsonb copy and the GIN index (the rounds scatter by +-15% on this shared "
    "machine; the three additions were not told apart). Since 2026-11-27 (fifth session) the copy is not stored: the "
    "GIN index is an expression index of the value as jsonb (what every write sent to the heap and the WAL was the "
    "json text twice, the saver's base64 blobs included), the pre-selection's rows with \\u0000 found by a cheap "
    "strpos test (the partial index's predicate, evaluated on every insert); a one-namespace filtered search now "
    "parses its ~100 candidate values once each (20,000 items, 10 rounds alternating: 0.58-0.69 ms against the "
    "stored copy's 0.51-0.60, PostgresStore 0.69-0.71; all namespaces 2.3-2.4 ms against 2.0). SQLite: 1.03x of "
    "SqliteStore in a run after writes went back to inserting a batch in namespace order (2.1-2.2x while they went "
    "in address order, which scattered a namespace's rows over the table): one json_extract per row; no store meets "
    "the target without an index on the field, the floor lines show the database's own scan over 20 ms. Since "
    "2026-11-28 an SQLite item memory keeps an expression index of each field named in "
    "`SQLItemMemory(indexed_fields=...)` (`MemwovenStore.from_url(..., indexed_fields=...)`), and a filtered listing "
    "or count over every namespace or a prefix of 1,024 items or more tests those fields on that expression, which "
    "SQLite reads off the index: the case is measured on such a store (a second one on the same table) and its "
    "targets are its own; a probe at 100,000 items: 2.6 ms against SqliteStore's 44 ms and the unindexed store's "
    "44 ms. What it costs writes is in the fill and put rows of the bench's own store, which has no field index.",
    "- LangGraph store, search without query over every namespace (100,000 items, limit 10; target 20 ms). "
    "PostgreSQL: was 1.9x (memwoven orders by key then namespace, and no index held that order: keys may be 64 KiB, "
    "over a B-tree entry, so PostgreSQL sorted every live row). Now an indexed key_head (the first 100 characters of "
    "the key) leads the order, key_head, item_key, namespace (the same order): an index scan of the first head's "
    "rows and an incremental sort, 0.07-0.09x of PostgresStore (2.8-3.9 ms against 37-52 ms). It needed the "
    "namespace range inlined into the SQL text: psycopg prepares a statement after 5 runs, and PostgreSQL's generic "
    "plan for a range on parameters assumes it narrow and walks the namespace index (EXPLAIN ANALYZE, forced generic "
    "plan: 77 ms with parameters, 4-8 ms inlined). SQLite: 1.24x of SqliteStore in a run with rows in namespace "
    "order (3.2-3.8x with rows in address order): its planner has no statistics telling it that the range "
    '("users",) holds every row, so it takes the namespace index and sorts (170-230 ms for the bare query with '
    "rows in address order); forced onto the key index it takes 1.7 ms, but 16 ms instead of 0.09 ms for a "
    "one-namespace prefix, so no hint is given (still 1.24x in the probe above: NOT MET). Ordering by key_head there "
    "costs nothing measurable (190 against 201 ms, 12 alternating runs), and its index ~3% of put_many's rate "
    "(within the noise). Since 2026-11-27 (third session) SQLite's key index holds the listings' whole order "
    "(key_head, item_key, namespace: SQLite indexes keys of any length), and a page of a prefix holding 1,024 rows or "
    "more (counted on the namespace index, the count remembered for 64 listings) is first looked for among the first "
    "rows of the table in that order, a bounded number (64 + 8 per item wanted), read off that index with no sort; "
    "only if they do not hold it does the range plan run. Probe on the bench's 100,000 items, quiet machine, the "
    "code before and after on copies of the same file, two rounds: 22.6-22.8 ms (1.03-1.04x of SqliteStore) -> "
    "0.52-0.57 ms (0.03x); the one-namespace cases unchanged (1.08-1.14x in this probe's alternation, 0.85-0.87x in "
    "the full run), the filtered search over every namespace unchanged (its matches lie past the first rows in key "
    "order). The wider index costs writes ~5-10% (put_many of 10,000 new items into a growing table, three "
    "rounds, twice: 33,000-59,000 -> 31,000-51,000 items/s).",
    "- Batch put of 10,000 items on SQLite (target 20,000 items/s): SQLItemMemory.put_many 26,000-28,000 items/s on "
    "an idle machine (20,000 median in a run beside tests), MemwovenStore.batch ~19,000 beside tests, SqliteStore "
    "6-8x faster. Since values are validated in one walk (not pydantic and a json.dumps) and writes that need no "
    "compare-and-set no longer read the stored rows first, cProfile of the store's batch: ~30% the contract's "
    "validation (each namespace label and key through check_id, each value frozen), ~15% encoding each value to JSON "
    "for its row, ~35% SQLAlchemy's 500-row upserts (insertmanyvalues, RETURNING the versions), ~8% SQLite's "
    "executemany, and the store's own per-op work (index texts, namespace checks). SqliteStore validates nothing, "
    "keeps no versions and sends orjson text through one executemany. Since 2026-11-27 (second session) the upserts "
    "run as SQL text compiled once per row count on the driver's cursor (no insertmanyvalues), values go through one "
    "reused C JSON encoder and a batch validates each namespace once; cProfile of put_many after that (10,000 items "
    "into a table of 60,000): SQLite's own execution ~35-45%, validation and freezing ~25%, JSON ~7%. What is left in "
    "SQLite is the layout: a row is a table entry and four index entries, and the primary key is the SHA-256 of the "
    "address, so every insert lands on a random page of that index (plain sqlite3 with the same rows: ~130,000 "
    "rows/s with sequential addresses, 30,000-60,000 with the hashed ones, falling as the table grows; a 32 MiB "
    "page cache instead of SQLite's 2 MiB gave 22-27k -> 29-40k rows/s in a loaded run). Since 2026-11-27 (fifth "
    "session, schema version 4) the address starts with a digest of the namespace, then one of (namespace, key), "
    "keeping a namespace's rows together in that index: put_many 40,000-44,000 -> 48,000-61,000 items/s, "
    "MemwovenStore.batch 28,000-29,000 -> 28,000-35,000 (3 alternating processes x 4 rounds, a test run on the "
    "other core; SqliteStore 110,000-230,000). A probe on this bench's stores (5 rounds of 10,000 new "
    "items each, the code before and after in alternating processes, a test run on the other core): put_many "
    "9,200 -> 13,400 items/s, MemwovenStore.batch 11,500 -> 15,000 (SqliteStore 55,000-79,000): NOT MET.",
    "- The former 7 s case (store search with a filter matching nothing over 5,000 items, SQLite, target < 10 ms; "
    "7.0 s on the chat-session emulation): 3.6 ms against SqliteStore's 2.8 ms in the same rounds (one json_extract "
    "per row; nothing reaches Python).",
]
