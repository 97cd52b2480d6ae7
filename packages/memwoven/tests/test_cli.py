"""The `memwoven` command line, driven through its real entry point in subprocesses, on SQLite and PostgreSQL.

Independent commands of one test run concurrently: a process spends most of its life importing.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cli_support import CONVERSATION, EMBED, ENV, NOTES, contents, memwoven, memwoven_all, place, seed
from sqlalchemy.engine import make_url

import memwoven as memwoven_package
from memwoven import Message, ToolCall, VectorDocument
from memwoven.cli._demo import ADAPTERS, SESSION, TURNS, core_message
from memwoven.cli._stores import Failure, Store
from memwoven.cli._transfer import FORMAT, VERSION, dump_record, export_records, import_records, migrate
from memwoven.contracts import CollectionInfo
from memwoven.urls import open_chat_memory, open_item_memory, open_vector_memory, vector_collections
from memwoven_test_support import postgres_url

KINDS = ("sqlite", "postgresql")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path) -> Iterator[str]:
    """A seeded store: two sessions, two collections."""
    with place(kind, tmp_path) as url:
        seed(url)
        yield url


CAT_EMBED = """
from cli_support import EMBED, NOTES
from memwoven.embed import embed_fn_from_callable

def always_the_cat():
    return embed_fn_from_callable(lambda text: EMBED(NOTES["cat"]), dimension=EMBED.dimension)
"""


def test_reading_commands(store: str, tmp_path: Path) -> None:
    (tmp_path / "cat_embed.py").write_text(CAT_EMBED)
    configured = {"MEMWOVEN_EMBED_FN": "cat_embed:always_the_cat", "PYTHONPATH": f"{tmp_path}:{Path(__file__).parent}"}
    listed, shown, stats, found, search_dot, missing, unknown = memwoven_all(
        ("sessions", "list", store, "--json"),
        ("sessions", "show", store, "trip/1", "--json"),
        ("vectors", "stats", store, "--json"),
        ("vectors", "search", store, "green tea in the morning", "--collection", "notes", "--json", "-k", "2"),
        ("vectors", "search", store, "x", "-c", "notes", "--filter", '{"topic": "cat"}', "--json"),
        ("sessions", "show", store, "no such session"),
        ("vectors", "search", store, "tea", "--collection", "nope"),
    )
    with_embed_fn = memwoven("vectors", "search", store, "green tea", "-c", "notes", "-k", "1", env=configured)
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in listed.json()}
    assert sorted(rows) == ["notes:é", "trip/1"]
    assert rows["trip/1"]["messages"] == 5
    assert rows["notes:é"]["messages"] == 1
    assert rows["trip/1"]["size"] == sum(len(m.model_dump_json().encode()) for m in CONVERSATION)
    assert rows["trip/1"]["last_activity"].startswith("20")

    assert shown.returncode == 0, shown.stderr
    assert [Message.model_validate(m) for m in shown.json()["messages"]] == CONVERSATION

    assert {row["collection"]: (row["documents"], row["dimension"], row["metric"]) for row in stats.json()} == {
        "dots": (2, 3, "dot"),
        "notes": (3, EMBED.dimension, "cosine"),
    }
    hits = found.json()
    assert hits[0]["id"] == "tea"
    assert len(hits) == 2
    assert hits[0]["content"] == NOTES["tea"]
    assert hits[0]["metadata"] == {"topic": "tea"}
    assert [hit["id"] for hit in search_dot.json()] == ["cat"]
    assert with_embed_fn.returncode == 0, with_embed_fn.stderr  # the configured EmbedFn, not HashingEmbedFn
    assert "Miso" in with_embed_fn.stdout
    assert "tea" not in with_embed_fn.stdout.split("1 hit")[0]

    assert missing.failed_with("no session 'no such session'")
    assert unknown.failed_with("no vector collection 'nope'")
    assert "dots, notes" in unknown.stderr


def test_reading_a_directory_writes_nothing(tmp_path: Path) -> None:
    """Reading commands on file:// write nothing, lock files included (those are the writers'): not in a directory
    whose lock files are gone (copied, restored), nor in an empty one."""
    full, empty = tmp_path / "full", tmp_path / "empty"
    seed(f"file://{full}")
    with open_item_memory(f"file://{full}") as items:
        items.put(("users", "u1"), "profile", {"name": "Alice"})
    shutil.rmtree(full / ".locks")
    for lock in full.rglob("*lock"):
        lock.unlink()
    empty.mkdir()

    def tree() -> dict[str, int]:
        return {str(path): path.stat().st_mtime_ns for path in [tmp_path, *tmp_path.rglob("*")]}

    before = tree()
    url = f"file://{full}"
    results = memwoven_all(
        ("export", url),
        ("export", f"file://{empty}"),
        ("sessions", "list", url),
        ("sessions", "show", url, "trip/1"),
        ("vectors", "stats", url),
        ("vectors", "search", url, "tea", "-c", "notes"),
        ("items", "list", url),
        ("items", "show", url, "users/u1", "profile"),
        ("migrate", url, f"sqlite:///{tmp_path}/never.db", "--dry-run"),
    )
    for result in results:
        assert result.returncode == 0, (result.args, result.stderr)
    assert tree() == before


def test_sessions_delete(store: str) -> None:
    deleted = memwoven("sessions", "delete", store, "trip/1")
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted session 'trip/1' (5 messages)" in deleted.stdout
    with open_chat_memory(store) as chat:
        assert chat.sessions() == ["notes:é"]  # (deleting an unknown session: the failure tests)


def test_export_then_import_is_lossless(store: str, kind: str, tmp_path: Path) -> None:
    exported = memwoven("export", store)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["header", "session", "session", "collection"] + ["document"] * 2 + [
        "collection"
    ] + ["document"] * 3 + ["end"]
    assert lines[0]["format"] == "memwoven-export"
    assert lines[0]["version"] == VERSION == 2
    assert lines[-1] == {"type": "end", "sessions": 2, "messages": 6, "collections": 2, "documents": 5, "items": 0}
    assert "exported 2 sessions (6 messages), 0 items and 2 collections (5 documents)" in exported.stderr
    with place(kind, tmp_path, "copy") as copy:
        imported = memwoven("import", copy, stdin=exported.stdout.encode())
        assert imported.returncode == 0, imported.stderr
        assert contents(copy) == contents(store)
        again = memwoven("import", copy, stdin=exported.stdout.encode())  # idempotent
        assert again.returncode == 0
        assert contents(copy) == contents(store)


def test_export_selected_sessions_and_collections_to_a_file(store: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    only, unknown = memwoven_all(
        (
            "export",
            store,
            "--session",
            "trip/1",
            "--session",
            "notes:é",
            "--session",
            "trip/1",
            "--collection",
            "dots",
            "-o",
            str(out),
        ),
        ("export", store, "--session", "nope", "-o", str(tmp_path / "never.jsonl")),
    )
    assert only.returncode == 0, only.stderr
    assert only.stdout == "", only.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["type"], r.get("id") or r.get("name")) for r in records[1:-1]] == [
        ("session", "notes:é"),  # sorted by id, each once, as the format says
        ("session", "trip/1"),
        ("collection", "dots"),
        ("document", "x"),
        ("document", "y"),
    ]
    assert unknown.failed_with("no session 'nope'")
    assert not (tmp_path / "never.jsonl").exists()
    assert not (tmp_path / "never.jsonl.partial").exists()


def test_tables_for_people(tmp_path: Path) -> None:
    with place("sqlite", tmp_path) as url:
        seed(url)
        listed, shown, stats, found = memwoven_all(
            ("sessions", "list", url),
            ("sessions", "show", url, "trip/1"),
            ("vectors", "stats", url),
            ("vectors", "search", url, "a cat called Miso", "-c", "notes", "--top-k", "1"),
        )
    assert "trip/1" in listed.stdout
    assert "notes:é" in listed.stdout
    assert "2 sessions, 6 messages" in listed.stdout
    for expected in ["system", "[image: image/png", "-> locate(", "[c1]", "<- result of c1", "tool (locate)"]:
        assert expected in shown.stdout, expected
    assert "notes" in stats.stdout
    assert "cosine" in stats.stdout
    assert "2 collections" in stats.stdout
    assert "Miso" in found.stdout
    assert "1 hit in 'notes'" in found.stdout


def test_failures_are_one_line_with_exit_code_1(tmp_path: Path) -> None:
    with place("sqlite", tmp_path) as url:
        seed(url)
        truncated = "\n".join(memwoven("export", url).stdout.splitlines()[:-1]).encode()
        results = memwoven_all(
            ("sessions", "list", "nosuch://host/db"),
            ("sessions", "list", f"sqlite:///{tmp_path}/missing.db"),
            ("sessions", "list", "postgresql://alice:s3cr%40t@127.0.0.1:1/db"),
            ("migrate", url, "postgresql://alice@127.0.0.1:1/db?password=hunter22"),
            ("vectors", "search", url, "tea", "-c", "notes", "--embed-fn", "no_such_module:embed"),
            ("sessions", "list", "qdrant+memory://"),
            ("migrate", url, "qdrant+memory://", "--dry-run"),
            ("sessions", "delete", url, "nope"),
        )
        imported_junk = memwoven("import", url, stdin=b'{"hello": "world"}\n')
        imported_truncated = memwoven("import", f"sqlite:///{tmp_path}/new.db", stdin=truncated)
        from_the_future = memwoven(
            "import", url, stdin=b'{"type":"header","format":"memwoven-export","version":99}\n{"type":"end"}\n'
        )
    scheme, missing, unreachable, unreachable_target, embed_fn, qdrant_chat, qdrant_target, deleted = results
    assert scheme.failed_with("unsupported scheme")
    assert missing.failed_with("no SQLite database")
    assert unreachable.failed_with("unavailable")
    assert "s3cr" not in unreachable.stderr
    assert "***" in unreachable.stderr
    assert unreachable_target.failed_with("unavailable")
    assert "hunter" not in unreachable_target.stderr
    assert embed_fn.failed_with("no_such_module")
    assert qdrant_chat.failed_with("vectors only")
    assert qdrant_target.failed_with("vectors only")
    assert deleted.failed_with("no session 'nope'")
    assert imported_junk.failed_with("not a memwoven export")
    assert imported_truncated.failed_with("truncated")
    assert from_the_future.failed_with("version 99")


def test_failures_on_postgresql(tmp_path: Path) -> None:
    missing_database = (
        make_url(postgres_url()).set(password="pa55-w0rd", database="memwoven_no_such_db").render_as_string(False)
    )
    with (
        place("postgresql", tmp_path) as url,
        place("postgresql", tmp_path) as empty,
        place("sqlite", tmp_path) as local,
    ):
        seed(url)
        seed(local)
        reads = memwoven_all(
            ("sessions", "list", empty, "--json"),
            ("sessions", "show", empty, "x"),
            ("export", empty),
            ("vectors", "stats", empty, "--json"),
            ("migrate", empty, f"sqlite:///{tmp_path}/copy.db"),
        )
        prefix = make_url(empty).query["table_prefix"]
        with sa.create_engine(make_url(postgres_url())).connect() as connection:
            assert [t for t in sa.inspect(connection).get_table_names() if t.startswith(prefix)] == []
        results = memwoven_all(
            ("sessions", "list", missing_database),
            ("migrate", local, missing_database),
            ("export", url, "--collection", "nope"),
            ("sessions", "delete", url, "nope"),
            ("vectors", "search", url, "tea"),
            ("vectors", "search", url, "tea", "-c", "notes", "--dimension", "32"),
            ("migrate", url, url),
            ("migrate", url, f"sqlite:///{tmp_path}/never.db", "--dry-run"),
        )
        junk = memwoven("import", url, stdin=b'{"type":"header","format":"memwoven-export","version":1}\n[1, 2]\n')
        assert contents(url)[0].keys() == {"trip/1", "notes:é"}  # nothing was deleted or imported
    # reading an empty store (say, a mistyped ?table_prefix=) finds nothing and creates no table
    nothing, unknown, exported, no_stats, no_migration = reads
    assert nothing.returncode == 0
    assert nothing.json() == []
    assert unknown.failed_with("no session 'x'")
    assert exported.returncode == 0
    assert '"sessions":0' in exported.stdout.splitlines()[-1]
    assert no_stats.returncode == 0
    assert no_stats.json() == []
    assert no_migration.returncode == 0
    assert "0 sessions" in no_migration.stdout
    listed, migrated, collection, deleted, ambiguous, dimension, same, dry = results
    for result in (listed, migrated):
        assert result.failed_with("memwoven_no_such_db"), result.stderr
        assert "unavailable" in result.stderr, result.stderr
        assert "pa55" not in result.stderr
        assert "w0rd" not in result.stderr
        assert "***" in result.stderr
    assert collection.failed_with("no vector collection 'nope'")
    assert deleted.failed_with("no session 'nope'")
    assert ambiguous.returncode == 2
    assert "several collections (dots, notes)" in ambiguous.stderr
    assert dimension.failed_with("dimension")
    assert same.failed_with("the same store")
    assert dry.returncode == 0
    assert "2 sessions" in dry.stdout
    assert "3 documents (cosine, dimension 64)" in dry.stdout
    assert not (tmp_path / "never.db").exists()  # a dry run does not touch the target
    assert junk.failed_with("line 2: a record is a JSON object")


def test_bad_usage_exits_with_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    results = memwoven_all(
        ("sessions", "show", url),
        ("vectors", "search", url, "tea", "--top-k", "0"),
        ("vectors", "search", url, "tea", "--filter", "{not json"),
        ("no-such-command",),
        ("migrate", url),
    )
    for result in results:
        assert result.returncode == 2, (result.args, result.stderr)
        assert "Traceback" not in result.stderr
    top = memwoven()
    assert top.returncode in (0, 2)
    assert "sessions" in top.stdout + top.stderr


def _script() -> list[tuple[str, str, list[ToolCall], str | None]]:
    return [_essentials(core_message(role, body)) for turn in TURNS for role, body in turn]


def _essentials(message: Message) -> tuple[str, str, list[ToolCall], str | None]:
    return message.role, message.text, list(message.tool_calls), message.tool_call_id


def test_demo(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":  # as a new user runs it: no arguments, a temporary file
        result = memwoven("demo", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert list(tmp_path.iterdir()) == []  # nothing left behind
        assert "\n  memwoven demo --url sqlite:///demo.db\n" in result.stdout  # the hint, outside nox
    else:
        with place(kind, tmp_path) as url:
            result = memwoven("demo", "--url", url)
            assert result.returncode == 0, result.stderr
            sessions, collections = contents(url)
            assert [_essentials(m) for m in sessions[SESSION]] == _script()  # what LangChain wrote
            assert list(sessions) == [SESSION]
            assert len(collections["notes"]) == 5
    out = result.stdout
    for expected in [
        "LangChain writes",
        "AIMessage  -> search_restaurants(",
        "LlamaIndex reads",
        "<- result of call_1",
        "Alice is vegetarian and allergic to peanuts.",
        f"session    │ {SESSION}",
        "9 messages",
        "5 documents",
    ]:
        assert expected in out, expected
    assert "not installed" not in out
    assert "pip install" not in out


def test_demo_without_the_adapters(tmp_path: Path) -> None:
    """Without langchain-memwoven and llama-index-memwoven the core API does their part, and says how to get them."""
    hide = "; ".join(f"sys.modules[{module!r}] = None" for module in ADAPTERS.values())  # as if not installed
    url = f"sqlite:///{tmp_path}/demo.db"
    code = f"import sys; {hide}; from memwoven.cli import main; main(['demo', '--url', {url!r}])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, env=ENV)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "The core API writes" in out
    assert "The core API reads" in out
    assert "LangChain writes" not in out
    assert "LangChain adapter not installed" in out
    assert "LlamaIndex adapter not installed" in out
    assert "pip install ./packages/langchain-memwoven ./packages/llama-index-memwoven" in out  # works today
    assert "pip install langchain-memwoven llama-index-memwoven  # once they are published" in out
    assert "Alice is vegetarian and allergic to peanuts." in out
    assert "-> forecast(" in out
    sessions, collections = contents(url)
    assert sessions == {SESSION: [core_message(role, body) for turn in TURNS for role, body in turn]}
    assert len(collections["notes"]) == 5


def test_the_closing_hint_runs_in_the_shell_that_started_nox(tmp_path: Path) -> None:
    """After `nox -s demo` the user's shell has no `memwoven` command: the hint names commands that run there."""
    under_nox = {"NOX_CURRENT_SESSION": "demo"}
    temporary = memwoven("demo", cwd=tmp_path, env=under_nox)
    kept = memwoven("demo", "--url", f"sqlite:///{tmp_path}/demo.db", cwd=tmp_path, env=under_nox)
    assert temporary.returncode == 0, temporary.stderr
    assert kept.returncode == 0, kept.stderr
    again, show = temporary.stdout.splitlines()[-2:]
    assert again == "  nox -s demo -- --url sqlite:///demo.db"
    inspect = shlex.split(kept.stdout.rsplit("Inspect it: ", 1)[1])
    assert shlex.split(show)[:3] == inspect[:3]
    assert Path(inspect[0]).is_absolute()
    shell = ENV | {"PATH": os.defpath}  # the shell outside nox: no virtual environment on the PATH
    shown = subprocess.run(inspect, capture_output=True, timeout=300, env=shell, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr.decode()
    assert f"{SESSION}  ·  9 messages" in shown.stdout.decode()


def test_the_core_never_imports_an_adapter_or_a_framework() -> None:
    """Data flows one way: the adapters import memwoven, never the reverse (the demo looks them up at run time)."""
    frameworks = ("langchain", "langchain_core", "langchain_memwoven", "llama_index", "langgraph")
    source = Path(memwoven_package.__file__).parent
    offenders = []
    for path in sorted(source.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.relative_to(source)}: {n}" for n in names if n.split(".")[0] in frameworks]
    assert offenders == []
    assert set(ADAPTERS.values()) == {"langchain_memwoven", "llama_index.storage.chat_store.memwoven"}


def test_import_keeps_other_data_and_checks_dimensions(tmp_path: Path) -> None:
    with place("sqlite", tmp_path, "a") as source, place("sqlite", tmp_path, "b") as target:
        seed(source)
        with open_chat_memory(target) as chat:
            chat.save("other", [Message(role="user", content="keep me")])
        with open_vector_memory(target, collection="notes", dimension=8) as notes:
            notes.store([VectorDocument(id="z", embedding=[1.0] * 8)])
        export = memwoven("export", source, "--session", "trip/1").stdout.encode()
        clash = memwoven("export", source, "--collection", "notes").stdout.encode()
        (tmp_path / "clash.jsonl").write_bytes(clash)
        ok, refused = (
            memwoven("import", target, stdin=export),
            memwoven("import", target, "--input", str(tmp_path / "clash.jsonl")),
        )
        assert ok.returncode == 0, ok.stderr
        sessions, _ = contents(target)
        assert sorted(sessions) == ["other", "trip/1"]
        assert refused.failed_with("line 2: collection 'notes' has dimension 8, not 64")  # refused at open


def _export(*records: dict[str, Any]) -> bytes:
    header = {"type": "header", "format": FORMAT, "version": VERSION}
    return b"".join(dump_record(record) for record in (header, *records))


def test_import_names_a_line_only_for_what_that_line_holds(tmp_path: Path) -> None:
    session = {"type": "session", "id": "s", "messages": [{"role": "user", "content": "hi"}]}
    (tmp_path / "export.jsonl").write_bytes(
        _export(session, {"type": "end", "sessions": 1, "messages": 1, "collections": 0, "documents": 0})
    )
    unreachable, two_slashes = memwoven_all(
        ("import", "postgresql://me@127.0.0.1:1/db", "--input", str(tmp_path / "export.jsonl")),
        ("import", "sqlite://x.db", "--input", str(tmp_path / "export.jsonl")),
    )
    assert unreachable.failed_with("unavailable")
    assert "line" not in unreachable.stderr
    assert two_slashes.failed_with("host 'x.db' with no file path")
    assert "sqlite:///x.db" in two_slashes.stderr
    assert "line" not in two_slashes.stderr

    # Documents are stored in batches: a document the store refuses is named by the lines of its batch.
    store = Store(f"sqlite:///{tmp_path}/target.db")
    collection = {"type": "collection", "name": "c", "metric": "cosine", "dimension": None}
    one, zero = (
        {"type": "document", "collection": "c", "id": name, "embedding": embedding}
        for name, embedding in (("one", [1.0, 0.0]), ("zero", [0.0, 0.0]))
    )
    with pytest.raises(Failure, match=r"^a document on lines 3-4: a zero vector"):
        import_records(store, _export(collection, one, zero, {"type": "end"}).splitlines())
    with pytest.raises(Failure, match=r"^line 3: a zero vector"):
        import_records(store, _export(collection, zero).splitlines())


@pytest.mark.parametrize("target", ["redis", "qdrant", "file"])
def test_empty_collections_are_carried(target: str, tmp_path: Path) -> None:
    """An empty collection exists after an import and a migration, with its metric and dimension; where it cannot
    (Qdrant, without a dimension), the import and the migration fail instead of reporting success."""
    source = Store(f"sqlite:///{tmp_path}/source.db")
    with open_vector_memory(source.url, collection="sized", dimension=3, metric="dot") as sized:
        sized.count()  # an SQL collection exists from its first use
    with open_vector_memory(source.url, collection="unsized") as unsized:
        unsized.count()
    wanted = [CollectionInfo("sized", "dot", 3), CollectionInfo("unsized", "cosine", None)]
    assert vector_collections(source.url) == wanted
    lines = b"".join(map(dump_record, export_records(source))).splitlines()
    for how in ("import", "migrate"):
        local = f"qdrant+local://{tmp_path}/{how}" if target == "qdrant" else f"file://{tmp_path}/{how}"
        with place("redis", tmp_path) if target == "redis" else nullcontext(local) as url:
            into = Store(url)
            run = partial(import_records, into, lines) if how == "import" else partial(migrate, source, into)
            if target == "qdrant":
                with pytest.raises(Failure, match=r"collection 'unsized' is not in .* an empty one may have none"):
                    run()
                assert vector_collections(url) == wanted[:1]
            else:
                run()
                assert vector_collections(url) == wanted


def test_import_changes_only_what_differs_as_json_and_refuses_hostile_lines(tmp_path: Path) -> None:
    """An import skips what the target holds identically, where JSON tells values apart (``true`` is not ``1``,
    which Python's == takes as equal: the target kept its stale value); importing again keeps even the version; a
    session record without messages (which would delete the target's session) and hostile lines are refused,
    naming the line."""
    store = Store(f"sqlite:///{tmp_path}/target.db")
    with open_chat_memory(store.url) as chat, open_vector_memory(store.url, collection="c") as vectors:
        chat.save("kept", [Message(role="user", content="precious")])
        vectors.store([VectorDocument(id="d", embedding=[1.0, 0.0], metadata={"flag": 1})])
    session = {"type": "session", "id": "s", "messages": [{"role": "user", "content": "hi"}]}
    collection = {"type": "collection", "name": "c", "metric": "cosine", "dimension": 2}
    document = {"type": "document", "collection": "c", "id": "d", "embedding": [1.0, 0.0], "metadata": {"flag": True}}
    end = {"type": "end", "sessions": 1, "messages": 1, "collections": 1, "documents": 1, "items": 0}
    export = _export(session, collection, document, end).splitlines()
    import_records(store, export)
    with open_chat_memory(store.url) as chat, open_vector_memory(store.url, collection="c") as vectors:
        assert vectors.get(["d"])[0].metadata["flag"] is True
        version = chat.load_versioned("s").version
    import_records(store, export)
    with open_chat_memory(store.url) as chat:
        assert chat.load_versioned("s").version == version
    hostile = [
        ({"type": "session", "id": "kept", "messages": []}, "line 2: a session record needs at least one message"),
        ({**document, "embedding": [{"x": 1}, 2]}, "line 3: an embedding's list holds numbers only"),
        ({**document, "embedding": [10**400, 0]}, "line 3: an embedding's number is beyond float range"),
    ]
    for record, message in hostile:
        lines = _export(collection, record) if record["type"] == "document" else _export(record)
        with pytest.raises(Failure) as refused:
            import_records(store, lines.splitlines())
        assert str(refused.value).startswith(message)
    nested = [*_export().splitlines(), b'{"type": "session", "id": "x", "messages": ' + b"[" * 100_000]
    with pytest.raises(Failure, match=r"^line 2: not JSON"):
        import_records(store, nested)
    with open_chat_memory(store.url) as chat:
        assert chat.load("kept") == [Message(role="user", content="precious")]


def test_an_error_raised_while_ctrl_c_unwinds_is_the_interrupt() -> None:
    """A driver whose cleanup fails after Ctrl-C cancelled its query still exits 130 (not 1, "unavailable")."""
    import typer

    from memwoven import BackendUnavailableError
    from memwoven.cli._app import _resumable

    with pytest.raises(typer.Exit) as exited, _resumable("migrate"):  # noqa: PT012 - the unwinding is the test
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            try:
                raise sa.exc.OperationalError("ROLLBACK", {}, Exception("connection lost")) from None
            except sa.exc.OperationalError as error:
                raise BackendUnavailableError("database is unavailable") from error
    assert exited.value.exit_code == 130
    with pytest.raises(typer.Exit) as exited, _resumable("migrate"):
        raise KeyboardInterrupt
    assert exited.value.exit_code == 130
    with pytest.raises(BackendUnavailableError), _resumable("migrate"):
        raise BackendUnavailableError("a failure of its own stays a failure")


def test_one_url_with_vector_options_serves_the_chat_and_item_commands(tmp_path: Path) -> None:
    """The CLI opens chat, items and vectors from one URL: a vector option (`?search=server`) reached the chat
    memory's driver, and `export` died after writing its header."""
    with place("postgresql", tmp_path) as url:
        with open_chat_memory(url) as chat:
            chat.save("trip/1", CONVERSATION)
        served = f"{url}&search=server&index=hnsw&ef_search=100"
        exported, listed = memwoven_all(("export", served), ("sessions", "list", served))
        assert exported.returncode == 0, exported.stderr
        assert '"type":"end","sessions":1' in exported.stdout
        assert listed.returncode == 0, listed.stderr
        assert "trip/1" in listed.stdout
