"""Every prefix and namespace is a boundary: nothing written under one is visible, listable or deletable under
another, on every backend it applies to.

Hypothesis draws pairs of distinct names a store could confuse: case twins, one a string prefix of the other,
Unicode twins (NFC/NFD, fullwidth letters) and any two. A name the store refuses must raise `InvalidInputError`
before anything is created; two accepted names must not share a thing. Covered: SQL `table_prefix` and `schema`,
the Redis `prefix` (chat and vectors), vector collection names, namespaces (the LlamaIndex chat store's
`key_prefix`), the scopes of `WorkingMemory` and users of `UserMemory` over one ItemMemory, LangGraph store
namespaces and store prefixes, and session ids hashed by the encryption wrapper. Server tests create few distinct
names (small alphabets), so tables are reused across examples; everything is removed afterwards.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from llama_index.core.llms import ChatMessage
from reliability_stores import CHAT_KINDS, fresh_store

from langgraph.store.memwoven import MemwovenStore
from llama_index.storage.chat_store.memwoven import MemwovenChatStore
from memwoven import ChatMemory, InMemoryItemMemory, InMemoryVectorMemory, ItemMemory, Message, SQLItemMemory
from memwoven.embed import HashingEmbedFn
from memwoven.encryption import EncryptedChatMemory, generate_key
from memwoven.errors import InvalidInputError
from memwoven.policies import UserMemory, WorkingMemory
from memwoven.urls import open_vector_memory
from memwoven_test_support import mysql_url, postgres_url, redis_url, unique_name

NFC_E = unicodedata.normalize("NFC", "é")
NFD_E = unicodedata.normalize("NFD", NFC_E)
DIMENSION = 4
EMBEDDING = [1.0, 0.5, 0.25, 0.125]

pytestmark = [pytest.mark.timeout(300)]


def examples(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def fullwidth(text: str) -> str:
    """`text` with its printable ASCII as fullwidth forms (U+FF01-U+FF5E)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def twins(base: st.SearchStrategy[str], tail: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, str]]:
    """Two distinct names, in either order: case twins, one starting the other, NFC/NFD or fullwidth twins, any."""
    pairs = st.one_of(
        base.map(lambda a: (a, a.swapcase())),
        st.tuples(base, tail).map(lambda p: (p[0], p[0] + p[1])),
        base.map(lambda a: (a + NFC_E, a + NFD_E)),
        base.map(lambda a: (a, fullwidth(a))),
        st.tuples(base, base),
    )
    return pairs.filter(lambda p: p[0] != p[1]).flatmap(lambda p: st.sampled_from([p, (p[1], p[0])]))


def said(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


def opened(make: Callable[[], Any]) -> Any:
    """`make()`, or None if it refused its arguments (as it must before creating anything)."""
    try:
        return make()
    except InvalidInputError:
        return None


def close_all(*memories: Any) -> None:
    for memory in memories:
        if memory is not None:
            memory.close()


# SQL table prefixes and schemas ----------------------------------------------------------------------------

SQL_KINDS = ("sqlite", "postgresql", "mariadb")
sql_names = twins(st.text("aA_1", min_size=1, max_size=2), st.sampled_from(["_", "s", "_s", "essions"]))


def _sql_url(kind: str, directory: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{directory / 'isolation.db'}"
    return postgres_url() if kind == "postgresql" else mysql_url()


def _tables(engine: sa.Engine, root: str, schema: str | None = None) -> set[str]:
    return {name for name in sa.inspect(engine).get_table_names(schema=schema) if name.lower().startswith(root)}


def _check_chat_apart(a: ChatMemory, b: ChatMemory, reopen_a: Callable[[], ChatMemory]) -> None:
    """`a` and `b` (empty) never see, list or delete each other's sessions, even of the same id."""
    a.save("s", said("a"))
    assert b.load("s") == []
    assert b.sessions() == []
    b.clear("s")
    b.save("s", said("b"))
    assert a.load("s") == said("a")
    assert a.sessions() == ["s"]
    with reopen_a() as fresh:
        assert fresh.load("s") == said("a")
    assert b.load("s") == said("b")
    a.clear("s")
    assert b.load("s") == said("b")
    b.clear("s")


@pytest.mark.parametrize("kind", SQL_KINDS)
def test_table_prefixes_never_share_tables(kind: str, tmp_path: Path) -> None:
    from memwoven import SQLChatMemory, SQLVectorMemory

    url, root = _sql_url(kind, tmp_path), unique_name("mwi") + "_"
    accepted: set[str] = set()
    probe = SQLChatMemory(url, table_prefix=root + "probe_")

    @examples(10 if kind == "sqlite" else 25)
    @given(pair=sql_names)
    @example(pair=("acme_", "Acme_"))
    @example(pair=("a_", "a_s"))
    def check(pair: tuple[str, str]) -> None:
        before = _tables(probe.engine, root)
        chats = [opened(lambda p=p: SQLChatMemory(url, table_prefix=root + p)) for p in pair]
        for prefix, chat in zip(pair, chats):
            if chat is None:
                assert _tables(probe.engine, root) == before, f"refusing {prefix!r} created tables"
            else:
                accepted.add(root + prefix)
        if None in chats:
            close_all(*chats)
            return
        a, b = chats
        vectors = [SQLVectorMemory(url, table_prefix=root + p, collection="c", dimension=DIMENSION) for p in pair]
        try:
            _check_chat_apart(a, b, lambda: SQLChatMemory(url, table_prefix=root + pair[0]))
            vectors[0].store([{"id": "d", "content": "a", "embedding": EMBEDDING}])
            assert vectors[1].count() == 0
            assert vectors[1].get(["d"]) == []
            vectors[1].delete(["d"])
            vectors[1].clear()
            assert [d.content for d in vectors[0].get(["d"])] == ["a"]
            vectors[0].clear()
        finally:
            close_all(*chats, *vectors)

    try:
        check()
    finally:
        for prefix in accepted:
            with SQLChatMemory(url, table_prefix=prefix) as memory:
                memory.drop_tables()
        assert _tables(probe.engine, root) == set()
        probe.close()


@pytest.mark.service
def test_postgres_schemas_never_share_tables() -> None:
    from memwoven import SQLChatMemory

    url, root = postgres_url(), unique_name("mwi") + "_"
    accepted: set[str] = set()
    probe = SQLChatMemory(url)

    def schemas() -> set[str]:
        return {name for name in sa.inspect(probe.engine).get_schema_names() if name.lower().startswith(root)}

    @examples(8)
    @given(pair=sql_names)
    @example(pair=("acme", "Acme"))
    def check(pair: tuple[str, str]) -> None:
        before = schemas()
        chats = [opened(lambda s=s: SQLChatMemory(url, schema=root + s, table_prefix="t_")) for s in pair]
        for chat in chats:
            if chat is None:
                assert schemas() == before
            else:
                accepted.add(chat.schema)
        try:
            if None not in chats:
                _check_chat_apart(*chats, lambda: SQLChatMemory(url, schema=root + pair[0], table_prefix="t_"))
        finally:
            close_all(*chats)

    try:
        check()
    finally:
        with probe.engine.begin() as connection:
            for schema in accepted:
                connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        assert schemas() == set()
        probe.close()


@pytest.mark.parametrize("option", ["table_prefix", "schema"])
@pytest.mark.parametrize(
    "value", ["Acme_", "ACME_", f"caf{NFC_E}_", fullwidth("acme_"), "acme_\n", "acme_\n\n", "a" * 42]
)
def test_sql_names_a_database_could_fold_are_refused_before_anything_is_created(
    option: str, value: str, tmp_path: Path
) -> None:
    from memwoven import SQLChatMemory, SQLVectorMemory

    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(InvalidInputError):
        SQLChatMemory(url, **{option: value})
    with pytest.raises(InvalidInputError):
        SQLVectorMemory(url, **{option: value})
    assert not (tmp_path / "x.db").exists()
    with SQLChatMemory(url) as default:  # the default prefix stays valid
        default.save("s", said("x"))
        assert default.table_prefix == "memwoven_"


# Redis prefixes ------------------------------------------------------------------------------------------


@pytest.mark.service
def test_redis_prefixes_never_share_keys() -> None:
    from memwoven.backends.redis import RedisChatMemory
    from memwoven.backends.redis_vector import RedisVectorMemory
    from memwoven.backends.redis_vector import list_collections as redis_collections

    url, root = redis_url(), unique_name("mwi")

    def chat(prefix: str) -> RedisChatMemory:
        return RedisChatMemory(url, prefix=root + prefix)

    def vectors(prefix: str, collection: str = "c") -> RedisVectorMemory:
        return RedisVectorMemory(url, prefix=root + prefix, collection=collection, dimension=DIMENSION)

    @examples(40)
    @given(pair=twins(st.text("aA:._-0", min_size=1, max_size=3), st.sampled_from([":", ":x", ":vec", "0"])))
    @example(pair=("", ":"))
    @example(pair=(":a", ":a:b"))
    @example(pair=(":app", ":App"))
    def check(pair: tuple[str, str]) -> None:
        chats = [opened(lambda p=p: chat(p)) for p in pair]
        if None in chats:
            close_all(*chats)
            assert keys() == []
            return
        a, b = chats
        stores = [vectors(p) for p in pair]
        try:
            _check_chat_apart(a, b, lambda: chat(pair[0]))
            stores[0].store([{"id": "d", "content": "a", "embedding": EMBEDDING}])
            assert stores[1].count() == 0
            assert stores[1].get(["d"]) == []
            assert [c.name for c in redis_collections(url, prefix=root + pair[1])] == ["c"]  # its own, used: empty
            stores[1].delete(["d"])
            stores[1].clear()
            assert [c.name for c in redis_collections(url, prefix=root + pair[0])] == ["c"]
            with vectors(pair[0]) as fresh:
                assert [d.content for d in fresh.get(["d"])] == ["a"]
        finally:
            close_all(*chats, *stores)
            remove_keys()

    import redis

    client = redis.Redis.from_url(url)

    def keys() -> list[bytes]:
        return list(client.scan_iter(match=root + "*", count=1000))

    def remove_keys() -> None:  # every prefix of this test starts with `root`
        for key in keys():
            client.delete(key)

    try:
        check()
        # A chat prefix `<p>:vec` and a vector prefix `<p>` share the text before '{' when a collection is named
        # like a session's hash: their keys still differ in their last part, and so do the SCAN patterns.
        tag = hashlib.sha256(b"s").hexdigest()
        with chat(":vec") as chat_memory, vectors("", tag) as vector_memory:
            chat_memory.save("s", said("a"))
            vector_memory.store([{"id": "d", "content": "v", "embedding": EMBEDDING}])
            assert chat_memory.load("s") == said("a")
            assert chat_memory.sessions() == ["s"]
            assert vector_memory.count() == 1
            assert [c.name for c in redis_collections(url, prefix=root)] == [tag]
            assert [c.name for c in redis_collections(url, prefix=root + ":vec")] == []
            with chat("") as above:
                assert above.sessions() == []
    finally:
        remove_keys()
        assert keys() == []
        client.close()


@pytest.mark.parametrize("prefix", ["app\n", f"caf{NFC_E}", fullwidth("app"), "a{b}", "a*", ""])
def test_redis_prefixes_that_could_glob_or_hide_are_refused(prefix: str) -> None:
    import redis

    from memwoven.backends.redis import RedisChatMemory
    from memwoven.backends.redis_vector import RedisVectorMemory

    client = redis.Redis()  # never connected: the prefix is refused first
    with pytest.raises(InvalidInputError):
        RedisChatMemory(client, prefix=prefix)
    with pytest.raises(InvalidInputError):
        RedisVectorMemory(client, prefix=prefix, collection="c")


# Vector collection names ---------------------------------------------------------------------------------

COLLECTION_KINDS = ("file", "sqlite", "postgresql", "mariadb", "redis")


@pytest.mark.parametrize("kind", COLLECTION_KINDS)
def test_collections_never_share_documents(kind: str, tmp_path: Path) -> None:
    with fresh_store(kind, tmp_path, "mwi") as store:
        if kind == "file":
            url, options = f"file://{store.location}", {}
        elif kind == "redis":
            url, options = store.location, {"prefix": store.prefix}
        else:
            url, options = store.location, {"table_prefix": store.prefix}

        def collection(name: str) -> Any:
            return open_vector_memory(url, collection=name, dimension=DIMENSION, **options)

        @examples(15 if kind in ("file", "sqlite") else 25)
        @given(pair=twins(st.text("aA.-_0", min_size=1, max_size=3), st.sampled_from([".b", "b", "-", "_"])))
        @example(pair=("Notes", "notes"))
        @example(pair=("a", "a.b"))
        def check(pair: tuple[str, str]) -> None:
            stores = [opened(lambda c=c: collection(c)) for c in pair]
            if None in stores:
                close_all(*stores)
                return
            a, b = stores
            try:
                a.store([{"id": "d", "content": "a", "embedding": EMBEDDING}])
                assert b.count() == 0
                assert b.get(["d"]) == []
                assert b.search(EMBEDDING) == []
                b.delete(["d"])
                b.clear()
                b.store([{"id": "d", "content": "b", "embedding": EMBEDDING}])
                with collection(pair[0]) as fresh:
                    assert [d.content for d in fresh.get(["d"])] == ["a"]
                    assert fresh.count() == 1
                assert [d.content for d in b.get(["d"])] == ["b"]
                a.clear()
                assert b.count() == 1
                b.clear()
            finally:
                a.close()
                b.close()

        check()


# Namespaces: the LlamaIndex chat store's key_prefix ---------------------------------------------------------

stems = st.text(alphabet=f"aA1%:{NFC_E}", min_size=1, max_size=3)
namespace_pairs = st.one_of(
    twins(stems, stems).map(lambda p: (p[0] + ":", p[1] + ":")),
    st.tuples(stems, stems).map(lambda p: (p[0] + ":", p[0] + ":" + p[1] + ":")),
    twins(stems, stems),  # mostly not ending with ':': refused
).filter(lambda p: p[0] != p[1])
keys = st.text(alphabet="a:%", min_size=1, max_size=3)


def _colliding_keys(first: str, second: str, key: str) -> tuple[str, str]:
    """Keys of `first` and `second` whose sessions would be the same with plain concatenation, where possible."""
    if second.startswith(first):
        return second[len(first) :] + key, key
    if first.startswith(second):
        return key, first[len(second) :] + key
    return key, key


@pytest.fixture(scope="module", params=CHAT_KINDS)
def chat_memory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatMemory]:
    """One chat memory per backend for the module; each example removes what it wrote."""
    with fresh_store(request.param, tmp_path_factory.mktemp("isolation"), "mwi") as store, store.chat() as memory:
        yield memory


def _emptied(memory: ChatMemory) -> None:
    for session in memory.sessions():
        memory.clear(session)


def _chat_store(memory: ChatMemory, namespace: str) -> MemwovenChatStore | None:
    store = opened(lambda: MemwovenChatStore(memory, key_prefix=namespace))
    if store is None:
        assert memory.sessions() == [], f"refusing key_prefix {namespace!r} wrote something"
    return store


def _texts(messages: list[ChatMessage] | None) -> list[str]:
    return [str(m.content) for m in messages or []]


@pytest.fixture
def isolated(chat_memory: ChatMemory) -> Iterator[ChatMemory]:
    _emptied(chat_memory)
    yield chat_memory
    _emptied(chat_memory)


def test_llama_index_key_prefixes_are_boundaries(isolated: ChatMemory) -> None:
    memory = isolated

    @examples(30)
    @given(pair=namespace_pairs, key=keys)
    @example(pair=("tenant1:", "tenant10:"), key="/chat")
    @example(pair=("tenant1", "tenant10"), key="/chat")
    @example(pair=("a:", "a:b:"), key="k")
    @example(pair=("Acme:", "acme:"), key="k")
    def check(pair: tuple[str, str], key: str) -> None:
        try:
            stores = [_chat_store(memory, namespace) for namespace in pair]
            if None in stores:
                return
            a, b = stores
            key_a, key_b = _colliding_keys(*pair, key)
            b.set_messages(key_b, [ChatMessage(role="user", content="b")])
            assert a.get_messages(key_a) == []
            assert a.get_keys() == []
            assert a.delete_messages(key_a) is None
            assert a.delete_last_message(key_a) is None
            a.add_message(key_a, ChatMessage(role="user", content="a"))
            assert _texts(b.get_messages(key_b)) == ["b"]
            assert b.get_keys() == [key_b]
            assert _texts(a.get_messages(key_a)) == ["a"]
            assert a.get_keys() == [key_a]
            assert len(memory.sessions()) == 2
            assert _texts(b.delete_messages(key_b)) == ["b"]
            assert _texts(a.get_messages(key_a)) == ["a"]
        finally:
            _emptied(memory)

    check()


def test_the_empty_key_prefix_is_no_namespace(isolated: ChatMemory) -> None:
    MemwovenChatStore(isolated, key_prefix="tenant1:").add_message("a:b", ChatMessage(role="user", content="x"))
    assert isolated.sessions() == ["tenant1:a%3Ab"]
    assert MemwovenChatStore(isolated).get_keys() == ["tenant1:a%3Ab"]  # every session is one of its keys


# WorkingMemory and UserMemory over one ItemMemory ------------------------------------------------------------

ITEM_KINDS = ("memory", "sqlite", "postgresql", "mariadb")
item_labels = st.text(alphabet=f"aA1:*{NFC_E}", min_size=1, max_size=2)
label_lists = st.lists(item_labels, max_size=2).map(tuple)
Config = tuple[tuple[str, ...], str]


@st.composite
def config_pairs(draw: st.DrawFn) -> tuple[Config, Config]:
    """Two distinct (namespace, id) configurations: ids or labels that are twins, or one configuration's
    namespaces nested under the other's (a working scope's, a user's facts)."""
    namespace, id_ = draw(label_lists), draw(item_labels)
    how = draw(st.sampled_from(["twin ids", "twin labels", "under a scope", "under facts", "any"]))
    if how == "twin ids":
        first, second = draw(twins(item_labels, item_labels))
        pair = ((namespace, first), (namespace, second))
    elif how == "twin labels":
        first, second = draw(twins(item_labels, item_labels))
        pair = (((*namespace, first), id_), ((*namespace, second), id_))
    elif how == "under a scope":
        pair = ((namespace, id_), ((*namespace, id_, *draw(label_lists)), draw(item_labels)))
    elif how == "under facts":
        pair = ((namespace, id_), ((*namespace, id_, "facts", *draw(label_lists)), draw(item_labels)))
    else:
        pair = ((namespace, id_), (draw(label_lists), draw(item_labels)))
    assume(pair[0] != pair[1])
    return pair if draw(st.booleans()) else (pair[1], pair[0])


@pytest.fixture(scope="module", params=ITEM_KINDS)
def item_memory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ItemMemory]:
    """One item memory per backend for the module (on a server, tables of its own, dropped afterwards)."""
    if request.param == "memory":
        yield InMemoryItemMemory()
        return
    url = _sql_url(request.param, tmp_path_factory.mktemp("items"))
    with SQLItemMemory(url, table_prefix=unique_name("mwi") + "_") as memory:
        try:
            yield memory
        finally:
            if request.param != "sqlite":
                memory.drop_tables()


def _items_emptied(memory: ItemMemory) -> None:
    memory.delete_many([(item.namespace, item.key) for item in memory.list()])


def test_working_and_user_memory_namespaces_are_boundaries(item_memory: ItemMemory) -> None:
    memory = item_memory
    _items_emptied(memory)

    @examples(20)
    @given(pair=config_pairs())
    @example(pair=(((), "a"), (("a",), "b")))
    @example(pair=(((), "a"), (("a", "facts"), "b")))
    @example(pair=((("t",), "a"), (("T",), "a")))
    def check(pair: tuple[Config, Config]) -> None:
        try:
            working = [WorkingMemory(memory, id_, namespace=namespace) for namespace, id_ in pair]
            users = [UserMemory(memory, id_, namespace=namespace, max_facts=1) for namespace, id_ in pair]
            working[0].set("k", "a")
            users[0].add_many(["likes tea", "likes jazz"])  # "likes tea" goes to the archive
            assert working[1].get("k") is None
            assert working[1].keys() == []
            assert (users[1].facts(), users[1].archived()) == ([], [])
            assert not users[1].has("likes jazz")
            working[1].clear()
            users[1].clear()
            assert not users[1].delete("likes jazz")
            working[1].set("k", "b")
            users[1].add("likes owls")
            assert working[0].to_dict() == {"k": "a"}
            assert (users[0].facts(), users[0].archived()) == (["likes jazz"], ["likes tea"])
            assert working[1].to_dict() == {"k": "b"}
            assert users[1].facts() == ["likes owls"]
        finally:
            _items_emptied(memory)

    check()


# LangGraph store namespaces and prefixes -----------------------------------------------------------------

labels = st.text(alphabet=f"aA1:{NFC_E}", min_size=1, max_size=2)
label_pairs = twins(labels, labels)
namespaces = st.lists(labels, min_size=0, max_size=1)

# Two namespaces that part at some label (twins there), so neither is a namespace prefix of the other.
store_namespace_pairs = st.tuples(namespaces, label_pairs, namespaces, namespaces).map(
    lambda t: ((*t[0], t[1][0], *t[2]), (*t[0], t[1][1], *t[3]))
)
store_prefixes = st.one_of(
    st.just(("store:", "store:")),
    twins(st.sampled_from(["store:", "s", ""]), st.sampled_from(["x", "[", '["a",', ":"])),
)


def test_langgraph_namespaces_and_prefixes_are_boundaries() -> None:
    """Store namespaces (`MemwovenStore(namespace=...)`: one label, "st" + the prefix string) over one ItemMemory
    and one vector collection: neither namespaces nor store namespaces that part at twin labels ever meet."""

    @examples(25)
    @given(namespace_pair=store_namespace_pairs, prefix_pair=store_prefixes)
    @example(namespace_pair=(("a",), ("ab",)), prefix_pair=("store:", "store:"))
    @example(namespace_pair=(("users", "a"), ("users", "A")), prefix_pair=("store:", "store:"))
    @example(namespace_pair=(("a",), ("a",)), prefix_pair=("s", 's["a",'))
    def check(namespace_pair: tuple[tuple[str, ...], tuple[str, ...]], prefix_pair: tuple[str, str]) -> None:
        if namespace_pair[0] == namespace_pair[1] and prefix_pair[0] == prefix_pair[1]:
            return
        items, shared_vectors = InMemoryItemMemory(), InMemoryVectorMemory(dimension=64)
        index = {"dims": 64, "embed": HashingEmbedFn(64), "fields": ["text"]}
        a, b = (
            MemwovenStore(items, vectors=shared_vectors, index=index, namespace=(f"st{prefix}",))  # type: ignore[arg-type]
            for prefix in prefix_pair
        )
        mine, theirs = namespace_pair
        a.put(mine, "k", {"text": "green tea"})
        assert b.get(theirs, "k") is None
        assert b.search(theirs) == []
        assert b.search(theirs, query="green tea") == []
        assert b.list_namespaces(prefix=theirs) == []
        if prefix_pair[0] != prefix_pair[1]:
            assert b.search(()) == []
            assert b.list_namespaces() == []
        b.delete(theirs, "k")
        assert [item.value for item in a.search(mine, query="green tea")] == [{"text": "green tea"}]
        assert a.get(mine, "k") is not None
        assert a.list_namespaces() == [mine]

    check()


# Session ids hashed by the encryption wrapper ------------------------------------------------------------


def test_hashed_session_ids_never_meet(isolated: ChatMemory) -> None:
    encrypted = EncryptedChatMemory(isolated, key=generate_key(), id_key=generate_key())

    @examples(10)
    @given(pair=twins(st.text("aA:%", min_size=1, max_size=3), st.sampled_from(["0", ":", "%"])))
    def check(pair: tuple[str, str]) -> None:
        try:
            encrypted.save(pair[0], said("a"))
            assert encrypted.load(pair[1]) == []
            encrypted.clear(pair[1])
            assert encrypted.load(pair[0]) == said("a")
            assert encrypted.sessions() == [pair[0]]
        finally:
            _emptied(isolated)

    check()
