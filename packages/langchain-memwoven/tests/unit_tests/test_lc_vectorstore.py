"""`MemwovenVectorStore` behaviour beyond the standard suite (which runs in the integration tests)."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_memwoven import EmbedFnEmbeddings, MemwovenVectorStore
from memwoven import DimensionMismatchError, InMemoryVectorMemory, InvalidInputError
from memwoven.embed import HashingEmbedFn

TEXTS = ["green tea with jasmine", "black coffee, no sugar", "oolong tea tasting", "a red bicycle"]
METADATA = [{"kind": "tea", "year": 2020}, {"kind": "coffee", "year": 2021}, {"kind": "tea", "year": 2024}, {}]


@pytest.fixture
def store() -> MemwovenVectorStore:
    return MemwovenVectorStore.from_texts(TEXTS, HashingEmbedFn(64), METADATA, ids=["t1", "c1", "t2", "b1"])


def test_an_embed_fn_is_wrapped_as_embeddings(store: MemwovenVectorStore) -> None:
    assert isinstance(store.embeddings, EmbedFnEmbeddings)
    assert store.memory.count() == 4


def test_scores_are_similarities_and_relevance_is_in_0_1(store: MemwovenVectorStore) -> None:
    scored = store.similarity_search_with_score("tea", k=4)
    relevance = store.similarity_search_with_relevance_scores("tea", k=4)
    assert [doc.id for doc, _ in scored] == [doc.id for doc, _ in relevance]
    for (_, score), (_, rel) in zip(scored, relevance):
        assert -1.0 <= score <= 1.0
        assert rel == pytest.approx((score + 1) / 2)
    assert store.similarity_search_with_score("a red bicycle", k=1)[0][1] == pytest.approx(1.0, abs=1e-5)
    assert MemwovenVectorStore._select_relevance_score_fn(store)(-1.0) == 0.0


def test_threshold_retriever(store: MemwovenVectorStore) -> None:
    retriever = store.as_retriever(search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.7})
    docs = retriever.invoke("oolong tea tasting")
    assert docs
    assert docs[0].id == "t2"
    relevant = [d for d, rel in store.similarity_search_with_relevance_scores("oolong tea tasting", k=4) if rel >= 0.7]
    assert docs == relevant
    assert len(docs) < 4


def test_filter_is_the_core_filter_language(store: MemwovenVectorStore) -> None:
    assert {d.id for d in store.similarity_search("tea", k=4, filter={"kind": "tea"})} == {"t1", "t2"}
    assert [d.id for d in store.similarity_search("tea", k=4, filter={"year": {"$gte": 2021}})] == ["t2", "c1"]
    assert {d.id for d in store.similarity_search("x", k=4, filter={"kind": {"$exists": False}})} == {"b1"}
    with pytest.raises(InvalidInputError):
        store.similarity_search("tea", filter={"year": {"$regex": "20"}})


async def test_async_twins_agree(store: MemwovenVectorStore) -> None:
    assert await store.asimilarity_search("tea", k=3) == store.similarity_search("tea", k=3)
    assert await store.asimilarity_search_with_score("tea", k=2) == store.similarity_search_with_score("tea", k=2)
    vector = store.embeddings.embed_query("coffee")
    assert await store.asimilarity_search_by_vector(vector, k=1) == store.similarity_search_by_vector(vector, k=1)
    assert await store.amax_marginal_relevance_search("tea", k=2) == store.max_marginal_relevance_search("tea", k=2)
    assert await store.aget_by_ids(["b1", "zz", "t1"]) == store.get_by_ids(["b1", "zz", "t1"])
    retriever = store.as_retriever(search_kwargs={"k": 2, "filter": {"kind": "tea"}})
    assert await retriever.ainvoke("tea") == retriever.invoke("tea")


def test_mmr_prefers_diversity() -> None:
    texts = ["tea tea tea", "tea tea tea!", "tea and coffee", "coffee"]
    store = MemwovenVectorStore.from_texts(texts, HashingEmbedFn(64), ids=["a", "b", "c", "d"])
    assert [d.id for d in store.similarity_search("tea tea tea", k=2)] == ["a", "b"]
    assert [d.id for d in store.max_marginal_relevance_search("tea tea tea", k=2, fetch_k=4, lambda_mult=0.3)] == [
        "a",
        "d",
    ]
    assert store.max_marginal_relevance_search("tea", k=2, filter={"nope": 1}) == []


def test_get_by_ids_keeps_order_and_metadata_is_a_plain_copy(store: MemwovenVectorStore) -> None:
    docs = store.get_by_ids(["t2", "missing", "t1"])
    assert docs == [
        Document(id="t2", page_content=TEXTS[2], metadata=METADATA[2]),
        Document(id="t1", page_content=TEXTS[0], metadata=METADATA[0]),
    ]
    docs[0].metadata["year"] = 1999  # a plain dict, not the store's frozen copy
    assert store.get_by_ids(["t2"])[0].metadata["year"] == 2024


async def test_add_documents_takes_the_documents_ids_unless_ids_are_given(store: MemwovenVectorStore) -> None:
    # ids=None passed on by a wrapper still means "the documents' own ids", as in InMemoryVectorStore
    documents = [
        Document(id="d1", page_content="one"),
        Document(page_content="two"),
        Document(id="d3", page_content="x"),
    ]
    added = store.add_documents(documents[:2], ids=None)
    assert added[0] == "d1"
    assert added[1] not in ("", None)
    assert await store.aadd_documents(documents[2:], ids=None) == ["d3"]
    assert store.add_documents([Document(id="d1", page_content="one again")], ids=["e1"]) == ["e1"]
    assert [doc.page_content for doc in store.get_by_ids(["d1", added[1], "d3", "e1"])] == [
        "one",
        "two",
        "x",
        "one again",
    ]
    assert store.add_documents(documents[:1]) == ["d1"]  # stored again under its id: an upsert, not a copy
    assert store.memory.count() == len(TEXTS) + 4
    with pytest.raises(InvalidInputError):
        store.add_documents(documents, ids=["only one"])


def test_delete_without_ids_clears_everything(store: MemwovenVectorStore) -> None:
    assert store.delete(["t1", "unknown"]) is True
    assert store.memory.count() == 3
    store.delete()
    assert store.memory.count() == 0


async def test_delete_refuses_arguments_other_than_ids(store: MemwovenVectorStore) -> None:
    # Another store's `filter=` (or a misspelt `id=`) must not read as "no ids: delete everything".
    with pytest.raises(InvalidInputError, match="filter"):
        store.delete(filter={"year": 2024})
    with pytest.raises(InvalidInputError, match="id"):
        await store.adelete(id="t1")
    assert store.memory.count() == 4


def test_add_texts_checks_lengths_and_json() -> None:
    store = MemwovenVectorStore(InMemoryVectorMemory(), DeterministicFakeEmbedding(size=4))
    assert store.add_texts([]) == []
    with pytest.raises(InvalidInputError):
        store.add_texts(["a", "b"], [{}])
    with pytest.raises(InvalidInputError):
        store.add_texts(["a"], ids=["1", "2"])
    with pytest.raises(InvalidInputError):
        store.add_texts(["a"], [{"when": object()}])
    assert store.memory.count() == 0
    generated = store.add_texts(["a", "b"], ids=["given", None])  # type: ignore[list-item]
    assert generated[0] == "given"
    assert len(generated[1]) == 36


def test_dimension_mismatch_is_reported() -> None:
    store = MemwovenVectorStore(InMemoryVectorMemory(dimension=3), DeterministicFakeEmbedding(size=4))
    with pytest.raises(DimensionMismatchError):
        store.add_texts(["a"])


async def test_afrom_texts_and_url() -> None:
    store = await MemwovenVectorStore.afrom_texts(["x", "y"], HashingEmbedFn(16), ids=["1", "2"], url="memory://")
    assert [d.id for d in await store.asimilarity_search("x", k=1)] == ["1"]
    await store.aclose()
    docs = [Document(page_content="p", metadata={"a": 1}, id="d1")]
    from_docs = MemwovenVectorStore.from_documents(docs, DeterministicFakeEmbedding(size=4))
    assert from_docs.get_by_ids(["d1"]) == docs


def test_from_texts_passes_options_to_the_memory_it_opens_and_refuses_the_rest() -> None:
    """Keyword arguments configure the memory `from_texts` opens; they were dropped without a word."""
    dot = MemwovenVectorStore.from_texts(["x"], HashingEmbedFn(16), metric="dot")
    assert dot.memory.metric == "dot"
    dot_at_url = MemwovenVectorStore.from_texts(["x"], HashingEmbedFn(16), url="memory://", metric="dot")
    assert dot_at_url.memory.metric == "dot"
    with pytest.raises(InvalidInputError, match="bogus"):
        MemwovenVectorStore.from_texts(["x"], HashingEmbedFn(16), bogus=1)
    given = InMemoryVectorMemory()
    with pytest.raises(InvalidInputError, match="metric"):
        MemwovenVectorStore.from_texts(["x"], HashingEmbedFn(16), memory=given, metric="dot")
    assert given.count() == 0


def test_from_texts_in_memory_takes_any_collection_name() -> None:
    """Without a url the new in-memory collection has no name to check (as before options were passed on)."""
    store = MemwovenVectorStore.from_texts(["x"], HashingEmbedFn(16), collection="my docs")
    assert store.memory.count() == 1
