"""`MemwovenStore` over each backend: items in a ChatMemory, the semantic index in a VectorMemory."""

from __future__ import annotations

from langchain_memwoven import MemwovenStore
from memwoven.embed import HashingEmbedFn
from memwoven_test_support import unique_name

NOTES = ("users", "u1", "notes")
OTHER = ("users", "u2", "notes")


def open_store(backend) -> MemwovenStore:  # type: ignore[no-untyped-def]
    embed = HashingEmbedFn(64)
    return MemwovenStore(
        backend.chat(), vectors=backend.vector(), embed=embed, fields=["text"], prefix=unique_name("st") + ":"
    )


def test_items_search_and_namespaces(backend) -> None:  # type: ignore[no-untyped-def]
    store = open_store(backend)
    store.put(NOTES, "n1", {"text": "prefers green tea", "kind": "pref"})
    store.put(NOTES, "n2", {"text": "rides a red bicycle", "kind": "fact"}, ttl=60)
    store.put(OTHER, "n1", {"text": "drinks black coffee", "kind": "pref"}, index=False)
    assert store.get(NOTES, "n1").value == {"text": "prefers green tea", "kind": "pref"}  # type: ignore[union-attr]
    assert [h.key for h in store.search(("users",), query="green tea")] == ["n1", "n2"]
    assert [h.namespace for h in store.search(("users",), filter={"kind": "pref"})] == [NOTES, OTHER]
    assert store.list_namespaces(prefix=("users",)) == [NOTES, OTHER]
    store.put(NOTES, "n1", {"text": "now prefers coffee", "kind": "pref"})
    assert store.search(("users",), query="coffee", limit=1)[0].value["text"] == "now prefers coffee"
    store.delete(NOTES, "n1")
    assert [h.key for h in store.search(("users",), query="coffee")] == ["n2"]
    assert store.vectors is not None
    assert store.vectors.count() == 1
    assert store.sweep_ttl() == 0


async def test_async_api(backend) -> None:  # type: ignore[no-untyped-def]
    store = open_store(backend)
    await store.aput(NOTES, "n1", {"text": "prefers green tea"})
    await store.aput(OTHER, "n1", {"text": "drinks black coffee"})
    assert (await store.aget(NOTES, "n1")).value == {"text": "prefers green tea"}  # type: ignore[union-attr]
    assert [h.namespace for h in await store.asearch(("users",), query="black coffee")] == [OTHER, NOTES]
    assert await store.alist_namespaces(suffix=("notes",)) == [NOTES, OTHER]
    await store.adelete(OTHER, "n1")
    assert [h.namespace for h in await store.asearch(("users",))] == [NOTES]


def test_from_url(persistent_backend) -> None:  # type: ignore[no-untyped-def]
    url, options, prefix = persistent_backend.url, persistent_backend.options, unique_name("st") + ":"
    collection = unique_name("c")

    def open_at_url() -> MemwovenStore:
        embed = HashingEmbedFn(32)
        return MemwovenStore.from_url(
            url, embed=embed, fields=["text"], collection=collection, prefix=prefix, **options
        )

    store = open_at_url()
    try:
        store.put(NOTES, "k", {"text": "green tea"})
    finally:
        store.close()
    reopened = open_at_url()
    try:
        assert [h.key for h in reopened.search(NOTES, query="tea")] == ["k"]
    finally:
        reopened.close()
