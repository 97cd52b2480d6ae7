"""Items in the command line: `items list` / `items show` through the real entry point, and export, import and
migrate carrying items (SQLite and PostgreSQL; the paging helpers also on the in-memory backend)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cli_support import memwoven, memwoven_all, place
from sqlalchemy.engine import make_url

from memwoven import InMemoryItemMemory, ItemMemory, ItemWrite, Message
from memwoven.cli._stores import Failure, Store, parse_namespace, show_namespace
from memwoven.cli._transfer import (
    BATCH,
    FORMAT,
    ItemCopy,
    dump_record,
    export_records,
    import_records,
    migrate,
    stored_items,
    write_changed,
)
from memwoven.urls import open_chat_memory, open_item_memory
from memwoven_test_support import postgres_url

KINDS = ("sqlite", "postgresql")
ITEMS = [
    (("users", "u1", "facts"), "diet", {"text": "vegetarian", "level": {"strict": True}}, None),
    (("users", "u1"), "profile", {"name": "Alice"}, 3600.0),
    (("users", "u2", "facts"), "diet", {"text": "vegan"}, None),
    (("users", "a/b"), "k", {"n": 1}, None),
    (("usersx",), "k", {"n": 2}, None),
]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def seed_items(url: str) -> None:
    with open_item_memory(url) as items:
        items.put_many([ItemWrite(ns, key, value, ttl) for ns, key, value, ttl in ITEMS])
    with open_chat_memory(url) as chat:
        chat.save("s1", [Message(role="user", content="hi")])


@pytest.fixture
def store(kind: str, tmp_path: Path) -> Iterator[str]:
    with place(kind, tmp_path) as url:
        seed_items(url)
        yield url


def snapshot(url: str) -> dict[tuple[tuple[str, ...], str], tuple[dict[str, Any], float | None]]:
    """(namespace, key) -> (value, ttl) of every item."""
    with open_item_memory(url) as items:
        return {(item.namespace, item.key): (dict(item.value), item.ttl) for item in items.list()}


def test_namespaces_on_the_command_line() -> None:
    assert parse_namespace("users/u1/facts") == ("users", "u1", "facts")
    assert parse_namespace('["users", "a/b"]') == ("users", "a/b")
    assert parse_namespace("", prefix=True) == ()
    for namespace in [("users", "u1"), ("users", "a/b"), ("[draft]",), ("x", "[y]"), ("é", " ")]:
        assert parse_namespace(show_namespace(namespace)) == namespace
    assert parse_namespace('{"a": 1}') == ('{"a": 1}',)  # only a leading '[' means JSON
    for bad in ["", "a//b", "[1, 2]", "[not json", "[]", "a/\x00"]:
        with pytest.raises(ValueError):  # noqa: PT011 - InvalidInputError or the JSON's own message
            parse_namespace(bad)


def test_items_list_and_show(store: str) -> None:
    results = memwoven_all(
        ("items", "list", store, "--json"),
        ("items", "list", store, "--prefix", "users/u1", "--json"),
        ("items", "list", store, "--filter", '{"level.strict": true}', "--json"),
        ("items", "list", store, "--limit", "2"),
        ("items", "show", store, "users/u1", "profile", "--json"),
        ("items", "show", store, '["users", "a/b"]', "k"),
        ("items", "show", store, "users/u9", "profile"),
        ("items", "show", store, "users//u1", "profile"),
        ("items", "list", store, "--prefix", "[oops"),
    )
    everything, prefixed, filtered, limited, shown, table, missing, empty_label, bad_json = results
    assert everything.returncode == 0, everything.stderr
    listed = [(tuple(i["namespace"]), i["key"]) for i in everything.json()]
    assert listed == [  # by key, then namespace
        (("users", "u1", "facts"), "diet"),
        (("users", "u2", "facts"), "diet"),
        (("users", "a/b"), "k"),
        (("usersx",), "k"),
        (("users", "u1"), "profile"),
    ]
    assert [(i["key"], i["namespace"]) for i in prefixed.json()] == [
        ("diet", ["users", "u1", "facts"]),
        ("profile", ["users", "u1"]),
    ]
    assert [i["value"]["text"] for i in filtered.json()] == ["vegetarian"]
    assert "2 of 5 items" in limited.stdout
    assert "users/u1/facts" in limited.stdout
    item = shown.json()
    assert (item["value"], item["ttl"]) == ({"name": "Alice"}, 3600.0)
    expires = datetime.fromisoformat(item["expires_at"].replace("Z", "+00:00"))
    assert timedelta(minutes=50) < expires - datetime.now(timezone.utc) <= timedelta(hours=1)
    assert '["users", "a/b"]' in table.stdout
    assert '"n": 1' in table.stdout
    assert missing.failed_with("no item 'profile' in namespace 'users/u9'")
    for usage in (empty_label, bad_json):
        assert usage.returncode == 2, usage.stderr
    assert "cannot be empty" in empty_label.stderr
    assert "JSON array" in bad_json.stderr


def test_reading_items_creates_nothing(tmp_path: Path) -> None:
    with place("postgresql", tmp_path) as empty:
        results = memwoven_all(
            ("items", "list", empty, "--json"),
            ("items", "show", empty, "a", "k"),
            ("items", "list", f"sqlite:///{tmp_path}/missing.db"),
            ("items", "list", "qdrant+memory://"),
            ("items", "list"),
        )
        prefix = make_url(empty).query["table_prefix"]
        with sa.create_engine(make_url(postgres_url())).connect() as connection:
            assert [t for t in sa.inspect(connection).get_table_names() if t.startswith(prefix)] == []
    listed, shown, missing, qdrant, no_url = results
    assert listed.returncode == 0, listed.stderr
    assert listed.json() == []
    assert shown.failed_with("no item 'k' in namespace 'a'")
    assert missing.failed_with("no SQLite database")
    assert qdrant.failed_with("vectors only")
    assert no_url.returncode == 2
    assert "MEMWOVEN_ITEM_URL" in no_url.stderr
    from_env = memwoven("items", "list", env={"MEMWOVEN_ITEM_URL": f"sqlite:///{tmp_path}/missing.db"})
    assert from_env.failed_with("no SQLite database")


def test_export_then_import_carries_items(store: str, kind: str, tmp_path: Path) -> None:
    """Through files this time (--output, --input); the stdin/stdout path is test_cli's."""
    path = tmp_path / "export.jsonl"
    exported, selected = memwoven_all(
        ("export", store, "-o", str(path)),
        ("export", store, "--items", "users/u1", "--items", "users/u1/facts"),
    )
    assert exported.returncode == 0, exported.stderr
    assert "1 session (1 message), 5 items and 0 collections" in exported.stderr
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert (records[0]["version"], [r["type"] for r in records]) == (2, ["header", "session", *["item"] * 5, "end"])
    assert records[-1] == {"type": "end", "sessions": 1, "messages": 1, "collections": 0, "documents": 0, "items": 5}
    assert [(r["namespace"], r["key"]) for r in map(json.loads, selected.stdout.splitlines()[1:-1])] == [
        (["users", "u1"], "profile"),
        (["users", "u1", "facts"], "diet"),
    ]
    with place(kind, tmp_path, "copy") as copy:
        versions = []
        for _ in range(2):  # the second import finds every item identical and writes none
            imported = memwoven("import", copy, "--input", str(path))
            assert imported.returncode == 0, imported.stderr
            assert snapshot(copy) == snapshot(store)
            with open_item_memory(copy) as items:
                versions.append({(i.namespace, i.key): i.version for i in items.list()})
        assert versions[0] == versions[1]


def _export(version: int, *records: dict[str, Any]) -> list[bytes]:
    header = {"type": "header", "format": FORMAT, "version": version}
    return b"".join(dump_record(record) for record in (header, *records)).splitlines()


def _item(key: str, **fields: Any) -> dict[str, Any]:
    return {"type": "item", "namespace": ["n"], "key": key, "value": {"k": key}, **fields}


def _end(items: int) -> dict[str, Any]:
    return {"type": "end", "sessions": 0, "messages": 0, "collections": 0, "documents": 0, "items": items}


def test_import_versions_and_refusals(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/target.db")
    session = {"type": "session", "id": "s", "messages": [{"role": "user", "content": "hi"}]}
    old_end = {"type": "end", "sessions": 1, "messages": 1, "collections": 0, "documents": 0}
    assert import_records(store, _export(1, session, old_end)).sessions == 1  # version 1: no items, no count
    with pytest.raises(Failure, match="line 2: unknown record type 'item'"):
        import_records(store, _export(1, _item("a"), old_end))
    with pytest.raises(Failure, match="the end record counts"):
        import_records(store, _export(2, _item("a"), old_end))  # version 2 counts its items

    past = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    records = (_item("live", ttl=60, expires_at=future), _item("gone", ttl=60, expires_at=past), _item("plain"))
    assert import_records(store, _export(2, *records, _end(3))).items == 3
    with open_item_memory(store.url) as items:
        assert [(i.key, i.ttl) for i in items.list(("n",))] == [
            ("a", None),
            ("live", 60.0),
            ("plain", None),
        ]  # no "gone"

    bad = [
        ((_item("a"), _item("a")), "line 3: item 'a' of namespace ['n'] appears twice"),
        ((_item("a", value=[1]),), "line 2: a item record needs 'value'"),
        ((_item("a", ttl=-1),), "line 2: ttl must be a positive"),
        ((_item("a", namespace=[]),), "line 2: namespace needs at least one label"),
        ((_item("a", expires_at="yesterday"),), "line 2: "),
    ]
    for lines, message in bad:
        with pytest.raises(Failure, match=f"^{re.escape(message)}"):
            import_records(store, _export(2, *lines, _end(len(lines))))
    with pytest.raises(Failure, match="vectors only"):
        import_records(Store("qdrant+memory://"), _export(2, _item("a"), _end(1)))


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_fixed_expiry_is_kept_and_imported_once(kind: str, tmp_path: Path) -> None:
    """An item exported with an `expires_at` and no ttl (written by another tool) expires when it said, and
    importing it again writes nothing (the seconds left differ at each import: they are not compared)."""
    expires_at = datetime.now(timezone.utc) + timedelta(hours=1)
    export = _export(2, _item("fixed", expires_at=expires_at.isoformat(), ttl=None), _end(1))
    with place(kind, tmp_path) as url:
        found = []
        for _ in range(2):
            import_records(Store(url), export)
            with open_item_memory(url) as items:
                found.append(items.get(("n",), "fixed"))
        first, second = found
        assert first is not None
        assert first.expires_at is not None
        assert abs(first.expires_at - expires_at) < timedelta(seconds=1)
        assert first.ttl is not None
        assert timedelta(minutes=59) < timedelta(seconds=first.ttl) <= timedelta(hours=1)
        assert second == first  # not written again: same version, same expiry


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_paging_keeps_every_item_of_each_namespace(backend: str, tmp_path: Path) -> None:
    """`stored_items` pages by key: a key shared by more namespaces than a page holds loses none of them."""
    items: ItemMemory = InMemoryItemMemory() if backend == "memory" else open_item_memory(f"sqlite:///{tmp_path}/p.db")
    with items:
        writes = [ItemWrite(("a", f"{i:05d}"), "same", {"i": i}) for i in range(BATCH + 5)]
        writes += [ItemWrite(("a",), f"k{i:05d}", {"i": i}) for i in range(BATCH + 5)]
        writes += [ItemWrite(("a",), "same", {"top": True})]
        items.put_many(writes)
        found = list(stored_items(items, items.namespaces()))
        assert len(found) == len(writes)
        assert {(item.namespace, item.key) for item in found} == {(w.namespace, w.key) for w in writes}
        copies = [ItemCopy(*write) for write in writes]
        assert write_changed(items, copies) == 0
        changed = [copies[0]._replace(value={"i": -1}), copies[1]._replace(ttl=5.0), copies[2]]
        assert write_changed(items, changed) == 2
        assert write_changed(items, [copies[1]._replace(value={"i": True})]) == 1  # true is not 1 in JSON


def test_migrate_carries_items(tmp_path: Path) -> None:
    with place("sqlite", tmp_path, "origin") as origin, place("postgresql", tmp_path) as target:
        seed_items(origin)
        with open_item_memory(target) as items:
            items.put(("theirs",), "keep", {"mine": True})
        dry = memwoven("migrate", origin, target, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "4 namespaces" not in dry.stdout
        assert "5 namespaces" in dry.stdout
        assert "5 items" in dry.stdout
        first = memwoven("migrate", origin, target)
        assert first.returncode == 0, first.stderr
        assert "5 items (5 written)" in first.stdout
        assert snapshot(target) == {**snapshot(origin), (("theirs",), "keep"): ({"mine": True}, None)}
        report = migrate(Store(origin), Store(target))  # again: everything already there
        assert (report.items, report.items_copied) == (5, 0)
        with pytest.raises(Failure, match="vectors only"):
            migrate(Store(origin), Store("qdrant+memory://"))


def test_exports_hold_items_only_of_stores_that_have_them(tmp_path: Path) -> None:
    chat_only = Store(f"sqlite:///{tmp_path}/chat.db")
    with open_chat_memory(chat_only.url) as chat:
        chat.save("s", [Message(role="user", content="hi")])
    assert not chat_only.holds_items()  # its items table was never created
    records = list(export_records(chat_only))
    assert [r["type"] for r in records] == ["header", "session", "end"]
    assert not any(name.endswith("items") for name in sa.inspect(sa.create_engine(chat_only.url)).get_table_names())
    with pytest.raises(Failure, match="vectors only"):
        list(export_records(Store("qdrant+memory://"), namespaces=[("a",)]))
