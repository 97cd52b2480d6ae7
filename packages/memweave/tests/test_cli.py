"""The `memweave` command line, driven through its real entry point in subprocesses, on SQLite and PostgreSQL.

Independent commands of one test run concurrently: a process spends most of its life importing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import CONVERSATION, EMBED, NOTES, contents, memweave, memweave_all, place, seed

from memweave import Message, VectorDocument
from memweave.urls import open_chat_memory, open_vector_memory
from memweave_test_support import postgres_url

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


def test_reading_commands(store: str) -> None:
    listed, shown, stats, found, search_dot, missing, unknown = memweave_all(
        ("sessions", "list", store, "--json"),
        ("sessions", "show", store, "trip/1", "--json"),
        ("vectors", "stats", store, "--json"),
        ("vectors", "search", store, "green tea in the morning", "--collection", "notes", "--json", "-k", "2"),
        ("vectors", "search", store, "x", "-c", "notes", "--filter", '{"topic": "cat"}', "--json"),
        ("sessions", "show", store, "no such session"),
        ("vectors", "search", store, "tea", "--collection", "nope"),
    )
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in listed.json()}
    assert sorted(rows) == ["notes:é", "trip/1"]
    assert rows["trip/1"]["messages"] == 5 and rows["notes:é"]["messages"] == 1
    assert rows["trip/1"]["size"] == sum(len(m.model_dump_json().encode()) for m in CONVERSATION)
    assert rows["trip/1"]["last_activity"].startswith("20")

    assert shown.returncode == 0, shown.stderr
    assert [Message.model_validate(m) for m in shown.json()["messages"]] == CONVERSATION

    assert {row["collection"]: (row["documents"], row["dimension"], row["metric"]) for row in stats.json()} == {
        "dots": (2, 3, "dot"),
        "notes": (3, EMBED.dimension, "cosine"),
    }
    hits = found.json()
    assert hits[0]["id"] == "tea" and len(hits) == 2
    assert hits[0]["content"] == NOTES["tea"] and hits[0]["metadata"] == {"topic": "tea"}
    assert [hit["id"] for hit in search_dot.json()] == ["cat"]

    assert missing.failed_with("no session 'no such session'")
    assert unknown.failed_with("no vector collection 'nope'") and "dots, notes" in unknown.stderr


def test_sessions_delete(store: str) -> None:
    deleted = memweave("sessions", "delete", store, "trip/1")
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted session 'trip/1' (5 messages)" in deleted.stdout
    with open_chat_memory(store) as chat:
        assert chat.sessions() == ["notes:é"]
    again = memweave("sessions", "delete", store, "trip/1")
    assert again.failed_with("no session 'trip/1'")


def test_export_then_import_is_lossless(store: str, kind: str, tmp_path: Path) -> None:
    exported = memweave("export", store)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["header", "session", "session", "collection"] + ["document"] * 2 + [
        "collection"
    ] + ["document"] * 3 + ["end"]
    assert lines[0]["format"] == "memweave-export" and lines[0]["version"] == 1
    assert lines[-1] == {"type": "end", "sessions": 2, "messages": 6, "collections": 2, "documents": 5}
    assert "exported 2 sessions (6 messages) and 2 collections (5 documents)" in exported.stderr
    with place(kind, tmp_path, "copy") as copy:
        imported = memweave("import", copy, stdin=exported.stdout.encode())
        assert imported.returncode == 0, imported.stderr
        assert contents(copy) == contents(store)
        again = memweave("import", copy, stdin=exported.stdout.encode())  # idempotent
        assert again.returncode == 0 and contents(copy) == contents(store)


def test_export_selected_sessions_and_collections_to_a_file(store: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    only, unknown = memweave_all(
        ("export", store, "--session", "trip/1", "--collection", "dots", "-o", str(out)),
        ("export", store, "--session", "nope", "-o", str(tmp_path / "never.jsonl")),
    )
    assert only.returncode == 0 and only.stdout == "", only.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["type"], r.get("id") or r.get("name")) for r in records[1:-1]] == [
        ("session", "trip/1"),
        ("collection", "dots"),
        ("document", "x"),
        ("document", "y"),
    ]
    assert unknown.failed_with("no session 'nope'")
    assert not (tmp_path / "never.jsonl").exists() and not (tmp_path / "never.jsonl.partial").exists()


def test_tables_for_people(tmp_path: Path) -> None:
    with place("sqlite", tmp_path) as url:
        seed(url)
        listed, shown, stats, found = memweave_all(
            ("sessions", "list", url),
            ("sessions", "show", url, "trip/1"),
            ("vectors", "stats", url),
            ("vectors", "search", url, "a cat called Miso", "-c", "notes", "--top-k", "1"),
        )
    assert "trip/1" in listed.stdout and "notes:é" in listed.stdout and "2 sessions, 6 messages" in listed.stdout
    for expected in ["system", "[image: image/png", "-> locate(", "[c1]", "<- result of c1", "tool (locate)"]:
        assert expected in shown.stdout, expected
    assert "notes" in stats.stdout and "cosine" in stats.stdout and "2 collections" in stats.stdout
    assert "Miso" in found.stdout and "1 hit in 'notes'" in found.stdout


def test_failures_are_one_line_with_exit_code_1(tmp_path: Path) -> None:
    with place("sqlite", tmp_path) as url:
        seed(url)
        truncated = "\n".join(memweave("export", url).stdout.splitlines()[:-1]).encode()
        results = memweave_all(
            ("sessions", "list", "nosuch://host/db"),
            ("sessions", "list", f"sqlite:///{tmp_path}/missing.db"),
            ("sessions", "list", "postgresql://alice:s3cr%40t@127.0.0.1:1/db"),
            ("vectors", "search", url, "tea"),  # two collections: which one? (bad usage)
            ("vectors", "search", url, "tea", "-c", "notes", "--dimension", "32"),
            ("vectors", "search", url, "tea", "-c", "notes", "--embed-fn", "no_such_module:embed"),
            ("sessions", "list", "qdrant+memory://"),
            ("migrate", url, "qdrant+memory://", "--dry-run"),
            ("migrate", url, url),
        )
        imported_junk = memweave("import", url, stdin=b'{"hello": "world"}\n')
        imported_truncated = memweave("import", f"sqlite:///{tmp_path}/new.db", stdin=truncated)
        from_the_future = memweave(
            "import", url, stdin=b'{"type":"header","format":"memweave-export","version":99}\n{"type":"end"}\n'
        )
    scheme, missing, unreachable, ambiguous, dimension, embed_fn, qdrant_chat, qdrant_target, same = results
    assert scheme.failed_with("unsupported scheme")
    assert missing.failed_with("no SQLite database")
    assert unreachable.failed_with("unavailable") and "s3cr" not in unreachable.stderr and "***" in unreachable.stderr
    assert ambiguous.returncode == 2 and "several collections" in ambiguous.stderr
    assert dimension.failed_with("dimension")
    assert embed_fn.failed_with("no_such_module")
    assert qdrant_chat.failed_with("vectors only")
    assert qdrant_target.failed_with("vectors only")
    assert same.failed_with("the same store")
    assert imported_junk.failed_with("not a memweave export")
    assert imported_truncated.failed_with("truncated")
    assert from_the_future.failed_with("version 99")


def test_bad_usage_exits_with_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    results = memweave_all(
        ("sessions", "show", url),
        ("vectors", "search", url, "tea", "--top-k", "0"),
        ("vectors", "search", url, "tea", "--filter", "{not json"),
        ("no-such-command",),
        ("migrate", url),
    )
    for result in results:
        assert result.returncode == 2, (result.args, result.stderr)
        assert "Traceback" not in result.stderr
    top = memweave()
    assert top.returncode in (0, 2) and "sessions" in top.stdout + top.stderr


def test_demo(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":  # as a new user runs it: no arguments, a temporary file
        result = memweave("demo", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert list(tmp_path.iterdir()) == []  # nothing left behind
    else:
        with place(kind, tmp_path) as url:
            result = memweave("demo", "--url", url)
            assert result.returncode == 0, result.stderr
            sessions, collections = contents(url)
            assert [len(m) for m in sessions.values()] == [9] and len(collections["notes"]) == 5
            assert "postgres" in postgres_url()
    out = result.stdout
    for expected in [
        "LangChain writes",
        "-> search_restaurants(",
        "LlamaIndex reads",
        "<- result of call_1",
        "Alice is vegetarian and allergic to peanuts.",
        "alice/trip-planning",
        "9 messages",
        "5 documents",
    ]:
        assert expected in out, expected


def test_import_keeps_other_data_and_checks_dimensions(tmp_path: Path) -> None:
    with place("sqlite", tmp_path, "a") as source, place("sqlite", tmp_path, "b") as target:
        seed(source)
        with open_chat_memory(target) as chat:
            chat.save("other", [Message(role="user", content="keep me")])
        with open_vector_memory(target, collection="notes", dimension=8) as notes:
            notes.store([VectorDocument(id="z", embedding=[1.0] * 8)])
        export = memweave("export", source, "--session", "trip/1").stdout.encode()
        clash = memweave("export", source, "--collection", "notes").stdout.encode()
        (tmp_path / "clash.jsonl").write_bytes(clash)
        ok, refused = (
            memweave("import", target, stdin=export),
            memweave("import", target, "--input", str(tmp_path / "clash.jsonl")),
        )
        assert ok.returncode == 0, ok.stderr
        sessions, _ = contents(target)
        assert sorted(sessions) == ["other", "trip/1"]
        assert refused.failed_with("dimension")
