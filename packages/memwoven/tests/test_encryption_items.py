"""`EncryptedItemMemory`: the ItemMemory contract through the wrapper, what the store gets to see, keys, rotation
and tampering."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clock_support import Clock
from redis_support import delete_prefix
from sql_support import sql_place

from memwoven import CorruptMemoryError, InMemoryItemMemory, InvalidInputError, ItemWrite, SQLItemMemory
from memwoven._steps import Steps
from memwoven.backends.file.items import FileItemMemory
from memwoven.backends.redis_items import RedisItemMemory
from memwoven.contracts import ItemMemory
from memwoven.encryption import MARKER, EncryptedItemMemory, Keyring, generate_key
from memwoven.errors import ConcurrentModificationError
from memwoven.testing import ItemMemoryContract
from memwoven_test_support import redis_url, unique_name

KEY = generate_key()
ID_KEY = generate_key()
SECRET = "zebra-octopus-4711"  # a marker that must never reach the store in the clear
ID_MODES = ("plain-ids", "hashed-ids")
HEX = re.compile(r"[0-9a-f]{64}")


def _items(inner: ItemMemory, hashed: bool = True, key: Any = KEY) -> EncryptedItemMemory:
    return EncryptedItemMemory(inner, key=key, id_key=ID_KEY if hashed else None)


def _flip(token: str) -> str:
    """The token with one character of its ciphertext changed."""
    middle = len(token) - 10
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]


# The contract through the wrapper ------------------------------------------------------------------------------


class TestEncryptedInMemoryItems(ItemMemoryContract):
    @pytest.fixture(params=ID_MODES)
    def item_memory(self, request: pytest.FixtureRequest, clock: Clock) -> ItemMemory:
        self.clock = clock
        return _items(InMemoryItemMemory(), request.param == "hashed-ids")

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def reopen(self, memory: ItemMemory) -> ItemMemory:
        assert isinstance(memory, EncryptedItemMemory)
        return _items(memory.inner, memory.hashed_ids)  # a second wrapper: nothing remembered


class _SQLEncryptedItems(ItemMemoryContract):
    kind = "sqlite"

    @pytest.fixture(params=ID_MODES)
    def id_mode(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def item_memory(self, id_mode: str, clock: Clock, tmp_path: Path) -> Iterator[ItemMemory]:
        self.clock = clock
        with sql_place(self.kind, tmp_path) as (url, prefix):
            yield _items(SQLItemMemory(url, table_prefix=prefix), id_mode == "hashed-ids")

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def reopen(self, memory: ItemMemory) -> ItemMemory:
        assert isinstance(memory, EncryptedItemMemory)
        assert isinstance(memory.inner, SQLItemMemory)
        inner = SQLItemMemory(memory.inner.engine.url, table_prefix=memory.inner.table_prefix)
        return _items(inner, memory.hashed_ids)

    @contextlib.contextmanager
    def neighbour(self, memory: ItemMemory) -> Iterator[ItemMemory]:
        assert isinstance(memory, EncryptedItemMemory)
        assert isinstance(memory.inner, SQLItemMemory)
        inner = SQLItemMemory(memory.inner.engine.url, table_prefix=memory.inner.table_prefix + "s_")
        with _items(inner, memory.hashed_ids) as neighbour:
            try:
                yield neighbour
            finally:
                inner.drop_tables()


class TestEncryptedSQLiteItems(_SQLEncryptedItems):
    kind = "sqlite"


@pytest.mark.service
class TestEncryptedPostgresItems(_SQLEncryptedItems):
    kind = "postgresql"
    state_machine_examples = 100  # per mode: the state machine's 200 run on PostgreSQL itself in test_items.py

    @pytest.fixture
    def id_mode(self) -> str:
        return "hashed-ids"  # plain ids differ from SQLite's case only in what the wrapper leaves to the database


class TestEncryptedFileItems(ItemMemoryContract):
    state_machine_examples = 50  # per mode: the 200 run on the wrapper in memory and on files in their own tests

    @pytest.fixture
    def item_memory(self, clock: Clock, tmp_path: Path) -> ItemMemory:
        self.clock = clock
        return _items(FileItemMemory(tmp_path / "items"))

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def reopen(self, memory: ItemMemory) -> ItemMemory:
        assert isinstance(memory, EncryptedItemMemory)
        assert isinstance(memory.inner, FileItemMemory)
        return _items(FileItemMemory(memory.inner.directory), memory.hashed_ids)


@pytest.mark.service
class TestEncryptedRedisItems(ItemMemoryContract):
    state_machine_examples = 50

    @pytest.fixture
    def item_memory(self, clock: Clock) -> Iterator[ItemMemory]:
        self.clock = clock
        prefix = unique_name("mwenc")
        with _items(RedisItemMemory(redis_url(), prefix=prefix)) as memory:
            yield memory
        delete_prefix(redis_url(), prefix)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def reopen(self, memory: ItemMemory) -> ItemMemory:
        assert isinstance(memory, EncryptedItemMemory)
        assert isinstance(memory.inner, RedisItemMemory)
        return _items(RedisItemMemory(redis_url(), prefix=memory.inner.prefix), memory.hashed_ids)


# What the store sees -------------------------------------------------------------------------------------------


def _write_secrets(items: EncryptedItemMemory) -> None:
    items.put(("users", f"user-{SECRET}", "facts"), f"key-{SECRET}", {"text": SECRET, SECRET: [SECRET, 1]})
    items.put_many(
        [
            ItemWrite((f"label-{SECRET}",), "k", {"nested": {"deep": SECRET}}, ttl=3600),
            ItemWrite((f"label-{SECRET}", "x"), f"key-{SECRET}", {"n": 1}),
        ]
    )


def test_sqlite_at_rest_holds_no_plaintext_key_label_or_value(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/db/items.db"
    items = _items(SQLItemMemory(url))
    _write_secrets(items)
    assert items.get(("users", f"user-{SECRET}", "facts"), f"key-{SECRET}").value["text"] == SECRET
    assert items.namespaces(suffix=("facts",)) == [("users", f"user-{SECRET}", "facts")]
    assert [i.key for i in items.list((f"label-{SECRET}",))] == ["k", f"key-{SECRET}"]
    assert items.list(filter={"nested.deep": SECRET})[0].namespace == (f"label-{SECRET}",)
    items.close()
    raw = b"".join(path.read_bytes() for path in sorted((tmp_path / "db").rglob("*")) if path.is_file())
    assert raw
    assert b"zebra" not in raw
    assert b"users" not in raw  # labels are hashed too, not only the secret ones
    with sqlite3.connect(tmp_path / "db" / "items.db") as connection:
        rows = list(connection.execute("SELECT * FROM memwoven_items"))
    assert len(rows) == 3
    assert not any("zebra" in str(value) or "users" in str(value) for row in rows for value in row)


@pytest.mark.parametrize("hashed", [False, True])
def test_the_inner_memory_holds_one_token_per_item(hashed: bool) -> None:
    items = _items(InMemoryItemMemory(), hashed)
    _write_secrets(items)
    stored = items.inner.list()
    assert len(stored) == 3
    for item in stored:
        assert list(item.value) == [MARKER]
        assert item.value[MARKER].startswith("mwe2:")
        assert SECRET not in item.value[MARKER]
        assert all(HEX.fullmatch(label) for label in item.namespace) is hashed
        assert bool(HEX.fullmatch(item.key)) is hashed
    if hashed:
        assert not any(SECRET in label or SECRET in item.key for item in stored for label in item.namespace)
    ttl = {item.ttl for item in stored}
    assert ttl == {None, 3600.0}  # expiry passes through to the inner memory


def test_hashed_labels_keep_prefixes_and_hide_equalities() -> None:
    items = _items(InMemoryItemMemory())
    deep, _ = items.stored_address(("a", "b", "c"), "k")
    assert items.stored_address(("a", "b"), "k")[0] == deep[:2]  # a prefix is still a prefix
    assert items.stored_address(("a",), "k")[0] == deep[:1]
    assert items.stored_address(("b",), "k")[0] != (deep[1],)  # "b" under "a" is not "b" at the top
    assert len(set(deep)) == 3
    assert items.stored_address(("a",), "k")[1] != items.stored_address(("b",), "k")[1]  # one key, two namespaces
    other = EncryptedItemMemory(items.inner, key=KEY, id_key=generate_key())
    assert other.stored_address(("a",), "k") != items.stored_address(("a",), "k")
    plain = EncryptedItemMemory(items.inner, key=KEY)
    assert plain.stored_address(["a", "b"], "k") == (("a", "b"), "k")
    with pytest.raises(InvalidInputError):
        items.stored_address(("a",), "")


def test_a_namespace_too_deep_to_hash_is_refused_before_anything_is_written() -> None:
    items = _items(InMemoryItemMemory())
    deep = tuple("x" for _ in range(1100))  # 2.2 KB as given, 70 KB hashed
    with pytest.raises(InvalidInputError):
        items.put_many([(("ok",), "k", {"v": 1}), (deep, "k", {"v": 1})])
    assert items.list() == []
    items.put(deep[:1000], "k", {"v": 1})
    assert items.namespaces() == [deep[:1000]]


# namespaces(): plaintext labels from hashed ones ----------------------------------------------------------------


class _CountingItems(InMemoryItemMemory):
    """An in-memory item memory that counts the selects it answers (the wrapper's reads of a namespace)."""

    def __init__(self) -> None:
        super().__init__()
        self.selects = 0

    def _select(self, query: Any) -> Steps[list[Any]]:
        self.selects += 1
        found: list[Any] = yield from super()._select(query)
        return found


NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("users", "u1", "facts"),
    ("users", "u2", "facts"),
    ("users", "u2", "prefs"),
    ("*",),
    ("a",),
    ("ab",),
]
QUERIES: list[dict[str, Any]] = [
    {},
    {"prefix": ("a",)},
    {"prefix": ("a", "b"), "max_depth": 3},
    {"prefix": ("a",), "max_depth": 2},
    {"max_depth": 1},
    {"suffix": ("f",)},
    {"suffix": ("*", "facts")},
    {"prefix": ("users", "*", "facts")},
    {"prefix": ("a", "*"), "suffix": ("f",), "max_depth": 2},
    {"prefix": ("*", "*", "*", "*")},
    {"prefix": ("*",)},
    {"prefix": ("a", "b", "c", "d")},
    {"prefix": ("a",), "limit": 2, "offset": 1},
    {"max_depth": 2, "offset": 3},
]


def test_namespaces_returns_plaintext_labels_like_any_backend() -> None:
    reference = InMemoryItemMemory()
    inner = _CountingItems()
    writer = _items(inner)
    for position, namespace in enumerate(NAMESPACES):
        reference.put(namespace, f"k{position}", {"v": position})
        writer.put(namespace, f"k{position}", {"v": position})
    reference.put(("a", "b", "c"), "second", {"v": 0})
    writer.put(("a", "b", "c"), "second", {"v": 0})
    reader = _items(inner)  # remembers nothing: recovers each namespace from one of its items
    for query in QUERIES:
        assert reader.namespaces(**query) == reference.namespaces(**query), query
        assert asyncio.run(reader.anamespaces(**query)) == reference.namespaces(**query), query
    inner.selects = 0
    assert reader.namespaces() == reference.namespaces()
    assert inner.selects == 0  # every namespace is remembered now
    fresh = _items(inner)
    assert fresh.namespaces(prefix=("users",)) == reference.namespaces(prefix=("users",))
    assert inner.selects == 3  # one item of each of the three namespaces under ("users",)
    assert writer.namespaces() == reference.namespaces()
    assert inner.selects == 3  # the writer knows its own namespaces
    writer.delete_many([(("users", "u2", "prefs"), "k7")])
    assert reader.namespaces(prefix=("users",)) == [("users", "u1", "facts"), ("users", "u2", "facts")]


def test_namespaces_of_expired_items_disappear(clock: Clock, tmp_path: Path) -> None:
    items = _items(SQLItemMemory(f"sqlite:///{tmp_path}/expiry.db"))
    items.put(("short",), "k", {"v": 1}, ttl=1)
    items.put(("long",), "k", {"v": 1}, ttl=100)
    assert items.namespaces() == [("long",), ("short",)]
    clock.advance(2)
    assert _items(items.inner).namespaces() == items.namespaces() == [("long",)]
    assert items.cleanup_expired() == 1


# Keys: the wrong one, rotation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("hashed", [False, True])
def test_another_key_cannot_read_anything(hashed: bool) -> None:
    items = _items(InMemoryItemMemory(), hashed)
    items.put(("n", "m"), "k", {"v": SECRET})
    thief = _items(items.inner, hashed, key=generate_key())
    with pytest.raises(CorruptMemoryError, match=r"item 'k' in \('n', 'm'\) was encrypted with key .* not in the"):
        thief.get(("n", "m"), "k")
    with pytest.raises(CorruptMemoryError, match="not in the keyring"):
        thief.list()
    with pytest.raises(CorruptMemoryError, match="not in the keyring"):
        thief.list(("n",), filter={"v": SECRET})
    if hashed:
        with pytest.raises(CorruptMemoryError, match="not in the keyring"):
            thief.namespaces()
    assert thief.count() == 1  # what needs no decryption still works


def test_another_id_key_addresses_other_items_and_opens_none() -> None:
    items = _items(InMemoryItemMemory())
    items.put(("n",), "k", {"v": 1})
    other = EncryptedItemMemory(items.inner, key=KEY, id_key=generate_key())
    assert other.get(("n",), "k") is None
    with pytest.raises(CorruptMemoryError, match="holds another item's address"):
        other.list()
    with pytest.raises(CorruptMemoryError, match="holds another item's address"):
        other.namespaces()
    other.put(("n",), "k", {"v": 2})
    assert items.get(("n",), "k").value == {"v": 1}


def test_rotation_reads_with_old_keys_writes_with_the_new_and_reencrypts(tmp_path: Path) -> None:
    old, new = generate_key(), generate_key()
    url = f"sqlite:///{tmp_path}/rotate.db"
    before = EncryptedItemMemory(SQLItemMemory(url), key=old, id_key=ID_KEY)
    before.put_many([(("a", str(i)), f"k{i}", {"i": i}) for i in range(300)])
    before.put(("b",), "k", {"i": -1}, ttl=3600)
    rotated = EncryptedItemMemory(SQLItemMemory(url), key=[old, new], id_key=ID_KEY)
    assert rotated.get(("a", "7"), "k7").value == {"i": 7}
    rotated.put(("a", "7"), "k7", {"i": 70})
    key_ids = {Keyring.key_id(item.value[MARKER]) for item in rotated.inner.list()}
    assert key_ids == {Keyring(old).current, Keyring(new).current}
    only_new = EncryptedItemMemory(SQLItemMemory(url), key=new, id_key=ID_KEY)
    with pytest.raises(CorruptMemoryError, match=r"'k8'.*not in the keyring"):
        only_new.get(("a", "8"), "k8")
    assert rotated.reencrypt(("b",)) == 1  # a prefix rewrites only its items
    assert only_new.get(("b",), "k").value == {"i": -1}
    assert only_new.get(("b",), "k").ttl == 3600
    with pytest.raises(CorruptMemoryError):
        only_new.list(("a",))
    assert asyncio.run(rotated.areencrypt()) == 299  # in two batches; the one rewritten already is skipped
    assert rotated.reencrypt() == 0
    assert [i.value["i"] for i in only_new.list(("a",), filter={"i": {"$gte": 298}})] == [298, 299]
    assert only_new.get(("a", "7"), "k7").value == {"i": 70}
    assert only_new.count() == 301


class _RacedItems(InMemoryItemMemory):
    """An in-memory item memory in which another writer changes `rival` just before the first batch write."""

    def __init__(self) -> None:
        super().__init__()
        self.rival: tuple[EncryptedItemMemory, tuple[str, ...], str] | None = None

    def _write(self, writes: Any) -> Steps[list[int]]:
        if self.rival is not None and len(writes) > 1:
            writer, namespace, key = self.rival
            self.rival = None
            writer.put(namespace, key, {"v": "rival"})  # a whole write of its own, before this one
        versions: list[int] = yield from super()._write(writes)
        return versions


def test_reencrypt_keeps_a_concurrent_write_and_retries() -> None:
    old, new = generate_key(), generate_key()
    inner = _RacedItems()
    EncryptedItemMemory(inner, key=old, id_key=ID_KEY).put_many([(("n",), f"k{i}", {"v": i}) for i in range(5)])
    rotated = EncryptedItemMemory(inner, key=[old, new], id_key=ID_KEY)
    inner.rival = (EncryptedItemMemory(inner, key=new, id_key=ID_KEY), ("n",), "k2")
    assert rotated.reencrypt() == 4  # the rival wrote k2 with the new key meanwhile: not overwritten
    only_new = EncryptedItemMemory(inner, key=new, id_key=ID_KEY)
    assert [i.value["v"] for i in only_new.list()] == [0, 1, "rival", 3, 4]


# Tampering ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hashed", [False, True])
def test_tampered_moved_and_plaintext_values_are_detected(hashed: bool) -> None:
    items = _items(InMemoryItemMemory(), hashed)
    items.put(("alice",), "secret", {"v": "alice's"})
    items.put(("mallory",), "secret", {"v": "mallory's"})
    alice, mallory = items.stored_address(("alice",), "secret"), items.stored_address(("mallory",), "secret")
    stolen = items.inner.get(*alice).value
    items.inner.put(*mallory, stolen)  # alice's ciphertext copied under mallory's address
    with pytest.raises(CorruptMemoryError, match=r"item 'secret' in \('mallory',\) fails authentication"):
        items.get(("mallory",), "secret")
    with pytest.raises(CorruptMemoryError, match="fails authentication"):
        items.list()
    items.inner.put(*mallory, {MARKER: _flip(stolen[MARKER])})
    with pytest.raises(CorruptMemoryError, match="fails authentication"):
        items.get_many([(("alice",), "secret"), (("mallory",), "secret")])
    items.inner.put(*mallory, {"v": "injected in the clear"})
    with pytest.raises(CorruptMemoryError, match="is not encrypted"):
        items.get(("mallory",), "secret")
    items.inner.put(*mallory, {**stolen, "extra": 1})
    with pytest.raises(CorruptMemoryError, match="is not encrypted"):
        items.get(("mallory",), "secret")
    assert items.get(("alice",), "secret").value == {"v": "alice's"}


# The wrapper itself --------------------------------------------------------------------------------------------


def test_async_calls_use_the_inner_async_twins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = SQLItemMemory(f"sqlite:///{tmp_path}/async.db")
    items = _items(inner)
    for name in ("get_many", "put_many", "delete", "delete_many", "list", "count", "namespaces", "cleanup_expired"):
        monkeypatch.setattr(inner, name, lambda *args, _name=name, **kwargs: pytest.fail(f"sync {_name} called"))

    async def use() -> None:
        await items.aput(("n", "m"), "k", {"v": 1})
        [version] = await items.aput_many([(("n",), "j", {"v": 2})])
        assert (await items.aget(("n", "m"), "k")).value == {"v": 1}  # type: ignore[union-attr]
        assert [i.key for i in await items.alist(("n",))] == ["j", "k"]
        assert await items.acount(("n",)) == 2
        assert await items.anamespaces() == [("n",), ("n", "m")]
        assert await items.adelete(("n",), "j", expected_version=version) is True
        assert await items.adelete_many([(("n", "m"), "k")]) == 1
        assert await items.acleanup_expired() == 0
        await items.aclose()

    asyncio.run(use())


def test_construction_checks_its_arguments_and_hides_its_keys() -> None:
    with pytest.raises(TypeError):
        EncryptedItemMemory(object(), key=KEY)  # type: ignore[arg-type]
    for bad in ("", b"short", [KEY, KEY]):
        with pytest.raises(InvalidInputError):
            EncryptedItemMemory(InMemoryItemMemory(), key=bad)
    with pytest.raises(InvalidInputError):
        EncryptedItemMemory(InMemoryItemMemory(), key=KEY, id_key="not base64 !!")
    with pytest.raises(InvalidInputError):
        EncryptedItemMemory(InMemoryItemMemory(), key=KEY, cache_size=-1)
    items = _items(InMemoryItemMemory())
    assert items.hashed_ids
    assert repr(items).startswith("EncryptedItemMemory(InMemoryItemMemory(), key_ids=[")
    assert KEY not in repr(items)
    assert ID_KEY not in repr(items)
    with pytest.raises(InvalidInputError):
        items.reencrypt(("n", ""))


def test_a_conflict_on_a_hashed_address_names_the_item() -> None:
    items = _items(InMemoryItemMemory())
    version = items.put(("n", "m"), "k", {"v": 1})
    with pytest.raises(ConcurrentModificationError, match=r"^item 'k' in \('n', 'm'\) \(stored hashed\): .*version"):
        items.put(("n", "m"), "k", {"v": 2}, expected_version=version + 1)
    with pytest.raises(ConcurrentModificationError, match=r"^item 'k' in \('n', 'm'\)"):
        items.delete(("n", "m"), "k", expected_version=0)
    with pytest.raises(ConcurrentModificationError):  # in a batch: the inner memory's own message
        items.put_many([(("n",), "new", {"v": 2}), (("n", "m"), "k", {"v": 3}, None, version + 1)])
    assert items.list() == [items.get(("n", "m"), "k")]
