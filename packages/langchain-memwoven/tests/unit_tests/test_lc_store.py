"""`MemwovenStore` (LangGraph `BaseStore`) on the in-memory backends."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import langchain_memwoven.store as store_module
from langchain_memwoven import MemwovenStore
from memwoven import CorruptMemoryError, InMemoryChatMemory, InMemoryVectorMemory, InvalidInputError, Message
from memwoven.embed import HashingEmbedFn

PROFILE = ("users", "u1", "profile")
NOTES = ("users", "u1", "notes")
OTHER = ("users", "u2", "notes")


@pytest.fixture
def store() -> MemwovenStore:
    return MemwovenStore(
        InMemoryChatMemory(), vectors=InMemoryVectorMemory(), embed=HashingEmbedFn(128), fields=["text"]
    )


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)
        monkeypatch.setattr(store_module, "_now", lambda: self.now)

    def advance(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


def fill(store: MemwovenStore) -> None:
    store.put(PROFILE, "name", {"text": "Alice, a tea lover", "kind": "fact"})
    store.put(NOTES, "n1", {"text": "prefers green tea in the morning", "kind": "pref", "year": 2024})
    store.put(NOTES, "n2", {"text": "rides a red bicycle to work", "kind": "fact", "year": 2022})
    store.put(OTHER, "n1", {"text": "drinks black coffee", "kind": "pref", "year": 2023})


def test_put_get_update_delete(store: MemwovenStore, clock: Clock) -> None:
    assert store.get(NOTES, "n1") is None
    store.put(NOTES, "n1", {"text": "first"})
    first = store.get(NOTES, "n1")
    assert first is not None
    assert first.value == {"text": "first"}
    assert first.namespace == NOTES
    assert first.key == "n1"
    assert first.created_at == first.updated_at == clock.now
    clock.advance(5)
    store.put(NOTES, "n1", {"text": "second", "nested": {"list": [1, None, 2.5]}})
    second = store.get(NOTES, "n1")
    assert second is not None
    assert second.value == {"text": "second", "nested": {"list": [1, None, 2.5]}}
    assert (second.created_at, second.updated_at) == (first.created_at, clock.now)
    second.value["text"] = "mutated"  # a plain copy
    assert store.get(NOTES, "n1").value["text"] == "second"  # type: ignore[union-attr]
    store.delete(NOTES, "n1")
    assert store.get(NOTES, "n1") is None
    store.delete(NOTES, "never existed")


def test_a_batch_reads_the_state_before_it_and_the_last_put_wins(store: MemwovenStore) -> None:
    store.put(NOTES, "k", {"v": 0})
    results = store.batch(
        [
            PutOp(NOTES, "k", {"v": 1}),
            GetOp(NOTES, "k"),
            PutOp(NOTES, "k", {"v": 2}),
            SearchOp(NOTES),
            PutOp(NOTES, "new", {"v": 3}),
        ]
    )
    assert results[0] is None
    assert results[1].value == {"v": 0}
    assert [item.value for item in results[3]] == [{"v": 0}]  # type: ignore[union-attr]
    assert store.get(NOTES, "k").value == {"v": 2}  # type: ignore[union-attr]
    assert store.get(NOTES, "new").value == {"v": 3}  # type: ignore[union-attr]


def test_search_without_query_lists_by_prefix_with_filter_and_paging(store: MemwovenStore) -> None:
    fill(store)
    assert [(i.namespace, i.key) for i in store.search(("users", "u1"))] == [
        (NOTES, "n1"),
        (NOTES, "n2"),
        (PROFILE, "name"),
    ]
    assert [i.key for i in store.search(("users",), filter={"kind": "pref"})] == ["n1", "n1"]
    assert [i.namespace for i in store.search(("users",), filter={"year": {"$gte": 2023}})] == [NOTES, OTHER]
    assert [i.key for i in store.search(("users", "u1"), limit=1, offset=1)] == ["n2"]
    assert store.search(("users", "u1"), offset=10) == []
    assert len(store.search(())) == 4
    assert store.search(("users", "u")) == []  # labels match whole, not as string prefixes
    assert all(item.score is None for item in store.search(("users",)))


def test_semantic_search_ranks_within_the_prefix(store: MemwovenStore) -> None:
    fill(store)
    hits = store.search(("users",), query="green tea")
    assert [(h.namespace, h.key) for h in hits][:2] == [(NOTES, "n1"), (PROFILE, "name")]
    assert all(isinstance(h.score, float) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)  # type: ignore[type-var]
    assert {h.namespace for h in store.search(("users", "u2"), query="green tea")} == {OTHER}
    assert [h.key for h in store.search(("users",), query="tea", filter={"kind": "fact"})] == ["name", "n2"]
    page = store.search(("users",), query="green tea", limit=2, offset=1)
    assert [(h.namespace, h.key) for h in page] == [(h.namespace, h.key) for h in hits[1:3]]


def test_index_false_and_per_put_fields(store: MemwovenStore) -> None:
    store.put(NOTES, "hidden", {"text": "green tea"}, index=False)
    store.put(NOTES, "by_title", {"text": "unrelated words", "title": "green tea"}, index=["title"])
    store.put(NOTES, "tags", {"tags": ["bicycle", "green tea"]}, index=["tags[*]"])
    keys = [h.key for h in store.search(NOTES, query="green tea")]
    assert "hidden" not in keys
    assert keys[:2] in (["by_title", "tags"], ["tags", "by_title"])
    assert store.get(NOTES, "hidden") is not None
    assert store.vectors is not None
    assert store.vectors.count() == 3


def test_updates_and_deletes_replace_the_vectors(store: MemwovenStore) -> None:
    store.put(NOTES, "n", {"text": "green tea"})
    store.put(NOTES, "n", {"text": "red bicycle"})
    assert store.vectors is not None
    assert store.vectors.count() == 1
    hit = store.search(NOTES, query="green tea")[0]
    assert hit.value == {"text": "red bicycle"}
    store.delete(NOTES, "n")
    assert store.vectors.count() == 0
    assert store.search(NOTES, query="bicycle") == []


def test_vectors_of_an_unfinished_write_are_ignored(store: MemwovenStore) -> None:
    store.put(NOTES, "n", {"text": "red bicycle"})
    assert store.vectors is not None
    [only] = store.vectors.search(HashingEmbedFn(128).embed("red bicycle"), top_k=1)
    fake = only.document.model_copy(
        update={"id": "crashed-write", "metadata": {**only.document.metadata, "revision": "never-saved"}}
    )
    store.vectors.store([fake])
    assert len(store.search(NOTES, query="red bicycle")) == 1  # the crashed write's vector is not used
    store.delete(NOTES, "n")
    assert store.search(NOTES, query="red bicycle") == []


def test_list_namespaces_behaves_like_langgraphs_store() -> None:
    ours = MemwovenStore(InMemoryChatMemory())
    reference = InMemoryStore()
    namespaces = [("a",), ("a", "b"), ("a", "b", "c"), ("a", "x", "c"), ("b", "b"), ("c", "d", "e", "f")]
    for target in (ours, reference):
        for ns in namespaces:
            target.put(ns, "k", {"ns": list(ns)})
    queries: list[dict[str, Any]] = [
        {},
        {"prefix": ("a",)},
        {"prefix": ("a", "*", "c")},
        {"suffix": ("c",)},
        {"suffix": ("*", "c")},
        {"prefix": ("a",), "suffix": ("c",)},
        {"max_depth": 1},
        {"max_depth": 2, "prefix": ("a",)},
        {"limit": 2, "offset": 1},
        {"prefix": ("z",)},
    ]
    for query in queries:
        assert ours.list_namespaces(**query) == reference.list_namespaces(**query), query
    for prefix in [("a",), ("a", "b"), ()]:
        assert sorted(i.key + str(i.namespace) for i in ours.search(prefix, limit=100)) == sorted(
            i.key + str(i.namespace) for i in reference.search(prefix, limit=100)
        )


def test_ttl_expiry_refresh_and_sweep(store: MemwovenStore, clock: Clock) -> None:
    store.put(NOTES, "short", {"text": "green tea"}, ttl=10)
    store.put(NOTES, "forever", {"text": "green tea too"})
    clock.advance(8)
    assert store.get(NOTES, "short", refresh_ttl=False) is not None
    clock.advance(3)
    assert store.get(NOTES, "short") is None  # expired at minute 10
    store.put(NOTES, "short", {"text": "green tea"}, ttl=10)
    clock.advance(8)
    assert store.get(NOTES, "short") is not None  # refreshes to minute 8 + 10
    clock.advance(8)
    assert [h.key for h in store.search(NOTES, query="green tea")] == ["short", "forever"]  # refreshes again
    clock.advance(11)
    assert [h.key for h in store.search(NOTES)] == ["forever"]
    assert store.vectors is not None
    assert store.vectors.count() == 2
    assert store.sweep_ttl() == 1
    assert store.vectors.count() == 1
    assert store.items.sessions() == ['store:["users","u1","notes","forever"]']


def test_default_ttl_and_refresh_on_read_come_from_the_config(clock: Clock) -> None:
    store = MemwovenStore(InMemoryChatMemory(), ttl={"default_ttl": 5, "refresh_on_read": False})
    store.put(NOTES, "k", {"v": 1})
    clock.advance(4)
    assert store.get(NOTES, "k") is not None  # no refresh
    clock.advance(2)
    assert store.get(NOTES, "k") is None
    store.put(NOTES, "k", {"v": 1}, ttl=None)
    clock.advance(1000)
    assert store.get(NOTES, "k") is not None


async def test_the_async_api_uses_the_same_operations(store: MemwovenStore, clock: Clock) -> None:
    await store.aput(NOTES, "n1", {"text": "prefers green tea", "kind": "pref"})
    await store.aput(OTHER, "n1", {"text": "red bicycle", "kind": "fact"}, ttl=1)
    assert (await store.aget(NOTES, "n1")).value["kind"] == "pref"  # type: ignore[union-attr]
    assert [h.namespace for h in await store.asearch(("users",), query="green tea")] == [NOTES, OTHER]
    assert [h.key for h in await store.asearch(("users",), filter={"kind": "fact"})] == ["n1"]
    assert await store.alist_namespaces(prefix=("users",)) == [NOTES, OTHER]
    clock.advance(2)
    assert await store.asweep_ttl() == 1
    await store.adelete(NOTES, "n1")
    assert await store.asearch(("users",)) == []
    assert store.vectors is not None
    assert await store.vectors.acount() == 0


def test_stores_share_a_chat_memory_without_seeing_each_other() -> None:
    memory = InMemoryChatMemory()
    memory.append("a chat session", [Message(role="user", content="hi")])
    first, second = MemwovenStore(memory), MemwovenStore(memory, prefix="other:")
    first.put(NOTES, "k", {"v": 1})
    second.put(NOTES, "k", {"v": 2})
    assert first.get(NOTES, "k").value == {"v": 1}
    assert second.get(NOTES, "k").value == {"v": 2}
    assert first.list_namespaces() == [NOTES]
    assert len(first.search(())) == 1
    assert memory.load("a chat session") == [Message(role="user", content="hi")]


def test_hostile_keys_and_labels_stay_separate(store: MemwovenStore) -> None:
    keys = ['a"b', "a,b", "a]", "[", "\\", "caf\u00e9", "x" * 1000, "", "ns:key"]
    for key in keys:
        store.put(("weird", '"', "]"), key, {"key": key})
    store.put(("weird", '"'), "]", {"key": "shallower"})
    assert {i.value["key"] for i in store.search(("weird", '"', "]"), limit=100)} == set(keys)
    assert all(store.get(("weird", '"', "]"), key).value == {"key": key} for key in keys)  # type: ignore[union-attr]
    assert store.list_namespaces(prefix=("weird",)) == [("weird", '"'), ("weird", '"', "]")]


def test_bad_values_write_nothing(store: MemwovenStore) -> None:
    with pytest.raises(InvalidInputError):
        store.put(NOTES, "k", {"text": "ok", "when": datetime.now()})
    with pytest.raises(InvalidInputError):
        store.batch([PutOp(NOTES, "k", ["not", "a", "dict"])])  # type: ignore[arg-type]
    assert store.search(()) == []
    assert store.vectors is not None
    assert store.vectors.count() == 0
    with pytest.raises(InvalidInputError):
        MemwovenStore(InMemoryChatMemory(), vectors=InMemoryVectorMemory())


def test_a_corrupt_item_is_reported(store: MemwovenStore) -> None:
    store.items.save('store:["ns","k"]', [Message(role="system", content="not a record")])
    with pytest.raises(CorruptMemoryError, match="ns"):
        store.get(("ns",), "k")


def test_concurrent_puts_lose_nothing_and_keep_vectors_consistent(store: MemwovenStore) -> None:
    def writer(index: int) -> None:
        for round_ in range(10):
            store.put(NOTES, f"own-{index}", {"text": f"writer {index} round {round_}"})
            store.put(NOTES, "shared", {"text": f"shared by {index} at {round_}"})

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {i.key for i in store.search(NOTES, limit=100)} == {"shared", *(f"own-{i}" for i in range(4))}
    shared = store.get(NOTES, "shared")
    assert shared is not None
    hits = [h for h in store.search(NOTES, query=shared.value["text"], limit=10) if h.key == "shared"]
    assert len(hits) == 1
    assert hits[0].value == shared.value
    assert store.vectors is not None
    assert store.vectors.count() == 5
