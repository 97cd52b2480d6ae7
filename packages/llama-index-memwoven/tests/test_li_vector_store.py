"""MemwovenVectorStore on every backend: VectorStoreIndex build and retrieval with every filter operator (checked
against LlamaIndex's own SimpleVectorStore where it supports them), node round trips, deletion, MMR, async twins,
and the agent Memory's VectorMemoryBlock."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory, VectorMemoryBlock
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from llama_index.storage.chat_store.memwoven import MemwovenDBChatStore
from llama_index.vector_stores.memwoven import MemwovenVectorStore
from llama_index.vector_stores.memwoven._filters import UnsupportedFilterError
from memwoven import InMemoryChatMemory, InMemoryVectorMemory, ScoredDocument, VectorMemory

ALL = {"p1", "p2", "n1", "n2", "x1"}


def corpus() -> list[TextNode]:
    def node(node_id: str, text: str, source: str, **metadata: Any) -> TextNode:
        return TextNode(
            id_=node_id,
            text=text,
            metadata=metadata,
            relationships={
                NodeRelationship.SOURCE: RelatedNodeInfo(node_id=source, metadata={"file": f"{source}.txt"})
            },
        )

    return [
        node("p1", "cats purr on the sofa", "doc-1", kind="post", year=2020, tags=["a", "b"], score=0.5, title="Cats"),
        node("p2", "dogs bark at the mailman", "doc-1", kind="post", year=2022, tags=["b"], score=1),
        node("n1", "stock markets fell sharply", "doc-2", kind="note", year=2024, tags=[], lang="en"),
        node("n2", "the weather is sunny today", "doc-2", kind="note", year=2023, lang=""),
        node("x1", "quantum computing basics", "doc-3"),
    ]


def f(key: str, operator: str, value: Any) -> MetadataFilter:
    return MetadataFilter(key=key, operator=FilterOperator(operator), value=value)


def all_of(*filters: MetadataFilter | MetadataFilters, condition: str = "and") -> MetadataFilters:
    return MetadataFilters(filters=list(filters), condition=FilterCondition(condition))


FLAT_CASES: list[tuple[MetadataFilters, set[str]]] = [
    (all_of(f("kind", "==", "post")), {"p1", "p2"}),
    (all_of(f("kind", "!=", "post")), {"n1", "n2", "x1"}),
    (all_of(f("year", ">", 2022)), {"n1", "n2"}),
    (all_of(f("year", ">=", 2022)), {"p2", "n1", "n2"}),
    (all_of(f("year", "<", 2022)), {"p1"}),
    (all_of(f("year", "<=", 2022)), {"p1", "p2"}),
    (all_of(f("year", "in", [2020, 2024])), {"p1", "n1"}),
    (all_of(f("kind", "nin", ["post"])), {"n1", "n2", "x1"}),
    (all_of(f("tags", "any", ["a", "z"])), {"p1"}),
    (all_of(f("tags", "all", ["a", "b"])), {"p1"}),
    (all_of(f("tags", "all", ["b"])), {"p1", "p2"}),
    (all_of(f("tags", "contains", "b")), {"p1", "p2"}),
    (all_of(f("tags", "is_empty", None)), {"n1", "n2", "x1"}),
    (all_of(f("lang", "is_empty", None)), {"p1", "p2", "n2", "x1"}),
    (all_of(f("score", ">=", 0.75)), {"p2"}),
    (all_of(f("kind", "==", "note"), f("year", "==", 2020), condition="or"), {"p1", "n1", "n2"}),
    (all_of(f("kind", "==", "post"), f("year", "<", 2024)), {"p1", "p2"}),
    (all_of(f("kind", "==", "post"), f("lang", "==", "en"), condition="not"), {"n2", "x1"}),
    (all_of(f("lang", "==", None)), set()),  # LlamaIndex: nothing, not even a missing value, equals None
    (all_of(f("lang", "!=", None)), ALL),
]
NESTED_CASES: list[tuple[MetadataFilters, set[str]]] = [
    (
        all_of(f("kind", "==", "note"), all_of(f("lang", "==", "en"), f("year", "<", 2024), condition="or")),
        {"n1", "n2"},
    ),
    (all_of(f("tags", "contains", "b"), all_of(f("year", "==", 2020), condition="not")), {"p2"}),
    # an empty group is no condition (every node holds), nested as at the top level: adding a condition to an OR
    # never narrows it, and a NOT of one matches nothing
    (all_of(f("kind", "==", "post"), all_of()), {"p1", "p2"}),
    (all_of(f("kind", "==", "post"), all_of(condition="not"), condition="or"), ALL),
    (all_of(all_of(), f("kind", "==", "post"), condition="or"), ALL),
    (all_of(all_of(), condition="or"), ALL),
    (all_of(all_of(), all_of(all_of(), condition="or"), condition="not"), set()),
    (all_of(f("kind", "==", "post"), all_of(all_of(), condition="not")), set()),
]


def build(store: MemwovenVectorStore | SimpleVectorStore, embed_model: BaseEmbedding) -> VectorStoreIndex:
    return VectorStoreIndex(
        corpus(), storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed_model
    )


def retrieve(
    index: VectorStoreIndex, filters: MetadataFilters | None = None, top_k: int = 10, **kwargs: Any
) -> set[str]:
    return {
        hit.node.node_id
        for hit in index.as_retriever(similarity_top_k=top_k, filters=filters, **kwargs).retrieve("cats")
    }


@pytest.fixture
def store(vector_memory: VectorMemory) -> MemwovenVectorStore:
    return MemwovenVectorStore(vector_memory)


@pytest.fixture
def index(store: MemwovenVectorStore, embed_model: BaseEmbedding) -> VectorStoreIndex:
    return build(store, embed_model)


@pytest.fixture(scope="module")
def reference_index() -> VectorStoreIndex:
    from llama_index.embeddings.memwoven import EmbedFnEmbedding
    from memwoven.embed import HashingEmbedFn

    return build(SimpleVectorStore(), EmbedFnEmbedding(HashingEmbedFn(128)))


def test_build_and_retrieve(store: MemwovenVectorStore, index: VectorStoreIndex, embed_model: BaseEmbedding) -> None:
    assert store.client.count() == 5
    hits = index.as_retriever(similarity_top_k=2).retrieve("cats on the sofa")
    assert hits[0].node.node_id == "p1"
    assert hits[0].node.get_content() == "cats purr on the sofa"
    assert len(hits) == 2
    assert hits[0].score is not None
    assert hits[1].score is not None
    assert hits[0].score > hits[1].score
    reloaded = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    assert [h.node.node_id for h in reloaded.as_retriever(similarity_top_k=1).retrieve("stock markets")] == ["n1"]


@pytest.mark.parametrize(("filters", "expected"), FLAT_CASES + NESTED_CASES)
def test_filters(index: VectorStoreIndex, filters: MetadataFilters, expected: set[str]) -> None:
    assert retrieve(index, filters) == expected


@pytest.mark.parametrize(("filters", "expected"), FLAT_CASES)
def test_filters_mean_what_they_mean_in_llama_index(
    reference_index: VectorStoreIndex, filters: MetadataFilters, expected: set[str]
) -> None:
    assert retrieve(reference_index, filters) == expected


@pytest.mark.parametrize("operator", ["text_match", "text_match_insensitive"])
def test_text_match_is_refused_rather_than_emulated(index: VectorStoreIndex, operator: str) -> None:
    with pytest.raises(UnsupportedFilterError, match="text-match"):
        retrieve(index, all_of(f("title", operator, "Cat")))


def test_node_ids_and_doc_ids_restrict_a_query(
    store: MemwovenVectorStore, index: VectorStoreIndex, embed_model: BaseEmbedding
) -> None:
    def ids(**restrictions: Any) -> set[str]:
        query = VectorStoreQuery(query_embedding=embed_model.get_query_embedding("cats"), similarity_top_k=10)
        for name, value in restrictions.items():
            setattr(query, name, value)
        return set(store.query(query).ids or [])

    assert ids(node_ids=["n1", "x1"]) == {"n1", "x1"}
    assert ids(doc_ids=["doc-2", "doc-3"]) == {"n1", "n2", "x1"}
    assert ids(filters=all_of(f("kind", "==", "note")), doc_ids=["doc-2"], node_ids=["n2", "p1"]) == {"n2"}
    assert ids(node_ids=[], doc_ids=[]) == ALL  # empty lists restrict nothing (VectorStoreIndex passes them)
    assert retrieve(index, doc_ids=["doc-3"]) == {"x1"}


def test_similarity_top_k_is_honoured(index: VectorStoreIndex) -> None:
    assert len(retrieve(index, top_k=3)) == 3


def test_mmr_trades_similarity_for_diversity(
    store: MemwovenVectorStore, index: VectorStoreIndex, embed_model: BaseEmbedding
) -> None:
    twin = embed_model.get_text_embedding("cats purr on the sofa")
    store.add([TextNode(id_=f"twin{i}", text="cats purr on the sofa", embedding=twin) for i in range(3)])
    embedding = embed_model.get_query_embedding("cats purr on the sofa")
    plain = store.query(VectorStoreQuery(query_embedding=embedding, similarity_top_k=2))
    assert set(plain.ids or []) < {"p1", "twin0", "twin1", "twin2"}  # two identical texts
    query = VectorStoreQuery(
        query_embedding=embedding, similarity_top_k=2, mode=VectorStoreQueryMode.MMR, mmr_threshold=0.2
    )
    diverse = store.query(query)
    assert diverse.ids is not None
    assert len(diverse.ids) == 2
    assert diverse.ids[0] in {"p1", "twin0", "twin1", "twin2"}
    assert diverse.ids[1] not in {"p1", "twin0", "twin1", "twin2"}  # the second pick is no duplicate
    assert all(isinstance(score, float) for score in diverse.similarities or [])
    # with only the 4 nearest (all the same text) prefetched, there is nothing diverse to pick
    assert set(store.query(query, mmr_prefetch_k=4).ids or []) <= {"p1", "twin0", "twin1", "twin2"}


def test_nodes_round_trip_with_relationships_and_metadata(store: MemwovenVectorStore, index: VectorStoreIndex) -> None:
    originals = {node.node_id: node for node in corpus()}
    for node in store.get_nodes(["x1", "p1", "missing"]):
        assert node.model_dump(exclude={"embedding"}) == originals[node.node_id].model_dump(exclude={"embedding"})
        assert node.ref_doc_id == originals[node.node_id].ref_doc_id
    assert [n.node_id for n in store.get_nodes(["x1", "p1"])] == ["x1", "p1"]
    assert {n.node_id for n in store.get_nodes()} == ALL
    assert {n.node_id for n in store.get_nodes(filters=all_of(f("kind", "==", "note")))} == {"n1", "n2"}
    assert [n.node_id for n in store.get_nodes(["n2", "p1", "n1"], filters=all_of(f("kind", "==", "note")))] == [
        "n2",
        "n1",
    ]


def test_deleting(store: MemwovenVectorStore, index: VectorStoreIndex) -> None:
    index.delete_ref_doc("doc-1")
    assert {n.node_id for n in store.get_nodes()} == {"n1", "n2", "x1"}
    store.delete_nodes(["n1"])
    store.delete_nodes()  # neither ids nor filters: nothing
    assert {n.node_id for n in store.get_nodes()} == {"n2", "x1"}
    store.delete_nodes(filters=all_of(f("lang", "is_empty", None)))
    assert {n.node_id for n in store.get_nodes()} == set()
    assert store.add([TextNode(id_="z", text="z", embedding=[1.0] * 128)]) == ["z"]
    store.clear()
    assert store.client.count() == 0


def test_async_twins(store: MemwovenVectorStore, embed_model: BaseEmbedding) -> None:
    nodes = corpus()
    for node in nodes:
        node.embedding = embed_model.get_text_embedding(node.get_content())

    async def scenario() -> None:
        assert await store.async_add(nodes) == [n.node_id for n in nodes]
        query = VectorStoreQuery(
            query_embedding=await embed_model.aget_query_embedding("stock markets"),
            similarity_top_k=2,
            filters=all_of(f("kind", "==", "note")),
        )
        result = await store.aquery(query)
        assert result.ids is not None
        assert result.ids[0] == "n1"
        assert set(result.ids) == {"n1", "n2"}
        assert [n.node_id for n in await store.aget_nodes(["p2"])] == ["p2"]
        assert {n.node_id for n in await store.aget_nodes(filters=all_of(f("year", ">", 2022)))} == {"n1", "n2"}
        await store.adelete("doc-1")
        await store.adelete_nodes(filters=all_of(f("kind", "==", "note")))
        await store.adelete_nodes(["x1"])
        assert await store.client.acount() == 0
        await store.async_add(nodes)
        await store.aclear()
        assert await store.client.acount() == 0

    asyncio.run(scenario())


def test_as_the_store_of_the_agent_memorys_vector_block(store: MemwovenVectorStore, embed_model: BaseEmbedding) -> None:
    block = VectorMemoryBlock(name="recall", vector_store=store, embed_model=embed_model, similarity_top_k=2)
    memory = Memory.from_defaults(
        session_id="s1",
        chat_store=MemwovenDBChatStore(InMemoryChatMemory()),
        memory_blocks=[block],
        token_limit=80,
        token_flush_size=20,
        chat_history_token_ratio=0.5,
    )
    facts = ["my cat is called Tom", "I live in Lisbon", "my favourite colour is green", "I play the cello"]
    for i, fact in enumerate(facts * 2):
        memory.put(ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"{fact} (message {i})"))
    assert store.client.count() > 0  # flushed messages went to the vector block
    recalled = memory.get(input="what is my cat called?")
    assert "Tom" in (recalled[0].content or "")
    assert recalled[0].role == "system"


def test_from_url(tmp_path: Path, embed_model: BaseEmbedding) -> None:
    url = f"sqlite:///{tmp_path}/vectors.db"
    store = MemwovenVectorStore.from_url(url, collection="notes")
    build(store, embed_model)
    store.close()
    again = MemwovenVectorStore.from_url(url, collection="notes")
    assert again.client.count() == 5
    assert again.client.dimension == 128
    other = MemwovenVectorStore.from_url(url, collection="other")
    assert other.client.count() == 0
    asyncio.run(again.aclose())
    asyncio.run(other.aclose())


@pytest.mark.parametrize("first", ["delete", "get_nodes", "delete_nodes"])
def test_a_store_opened_on_stored_nodes_finds_them_at_once(
    tmp_path: Path, embed_model: BaseEmbedding, first: str
) -> None:
    # Before its first call, a store opened on a collection does not know its dimension yet: finding nodes
    # (deleting a source document, listing, deleting by filter) must not read that as "empty".
    url = f"sqlite:///{tmp_path}/vectors.db"
    with MemwovenVectorStore.from_url(url, collection="notes").client as memory:
        build(MemwovenVectorStore(memory), embed_model)
    store = MemwovenVectorStore.from_url(url, collection="notes")
    if first == "delete":
        store.delete("doc-1")
        assert {node.node_id for node in store.get_nodes()} == ALL - {"p1", "p2"}
    elif first == "get_nodes":
        assert {node.node_id for node in store.get_nodes()} == ALL
    else:
        store.delete_nodes(filters=all_of(f("kind", "==", "note")))
        assert {node.node_id for node in store.get_nodes()} == ALL - {"n1", "n2"}
    store.close()


class ApproximateVectorMemory(InMemoryVectorMemory):
    """A search that finds one hit at most, however many match: an approximate (HNSW) index's recall below 1."""

    def search(self, embedding: Sequence[float], **options: Any) -> list[ScoredDocument]:
        return super().search(embedding, **options)[:1]

    async def asearch(self, embedding: Sequence[float], **options: Any) -> list[ScoredDocument]:
        return self.search(embedding, **options)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_deletes_and_get_nodes_find_every_node_where_search_is_approximate(
    embed_model: BaseEmbedding, mode: str
) -> None:
    store = MemwovenVectorStore(ApproximateVectorMemory())
    build(store, embed_model)

    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        """`store.<name>` in sync mode, its async twin `a<name>` in async mode."""
        if mode == "sync":
            return getattr(store, name)(*args, **kwargs)
        return asyncio.run(getattr(store, "a" + name)(*args, **kwargs))

    assert {node.node_id for node in call("get_nodes")} == ALL
    assert {node.node_id for node in call("get_nodes", filters=all_of(f("kind", "==", "post")))} == {"p1", "p2"}
    call("delete", "doc-1")
    assert store.client.ids() == ["n1", "n2", "x1"]
    call("delete_nodes", filters=all_of(f("kind", "==", "note")))
    assert store.client.ids() == ["x1"]


def test_mmr_threshold_given_as_a_keyword_as_retrievers_pass_it(vector_memory: VectorMemory) -> None:
    # VectorIndexRetriever passes `vector_store_kwargs={"mmr_threshold": ...}` to `query` as keyword arguments.
    def at(degrees: float) -> list[float]:
        return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))] + [0.0] * 126

    store = MemwovenVectorStore(vector_memory)
    store.add([TextNode(id_=name, text=name, embedding=at(angle)) for name, angle in (("a", 0), ("b", 8), ("c", 45))])
    query = VectorStoreQuery(query_embedding=at(0), similarity_top_k=2, mode=VectorStoreQueryMode.MMR)
    assert store.query(query, mmr_threshold=0.9).ids == ["a", "b"]  # mostly relevance: the near twin
    assert store.query(query, mmr_threshold=0.1).ids == ["a", "c"]  # mostly diversity: the far one
    reference = SimpleVectorStore()
    reference.add([TextNode(id_=n, text=n, embedding=at(d)) for n, d in (("a", 0), ("b", 8), ("c", 45))])
    assert reference.query(query, mmr_threshold=0.1).ids == ["a", "c"]


def test_documents_another_framework_wrote_read_as_text_nodes(vector_memory: VectorMemory) -> None:
    vector_memory.store(
        [{"id": "lc-1", "embedding": [1.0] + [0.0] * 127, "content": "from LangChain", "metadata": {"lang": "en"}}]
    )
    result = MemwovenVectorStore(vector_memory).query(VectorStoreQuery(query_embedding=[1.0] + [0.0] * 127))
    assert result.ids == ["lc-1"]
    (node,) = result.nodes or []
    assert isinstance(node, TextNode)
    assert (node.node_id, node.text, node.metadata) == ("lc-1", "from LangChain", {"lang": "en"})


def test_a_stored_null_equals_nothing_as_in_llama_index(vector_memory: VectorMemory) -> None:
    axis = [[1.0 if i == j else 0.0 for i in range(128)] for j in range(2)]
    nodes = [
        TextNode(id_="null", text="a", metadata={"lang": None}, embedding=axis[0]),
        TextNode(id_="en", text="b", metadata={"lang": "en"}, embedding=axis[1]),
    ]
    cases = [(f("lang", "==", None), set()), (f("lang", "!=", None), {"null", "en"}), (f("lang", "!=", "en"), {"null"})]
    for store in (MemwovenVectorStore(vector_memory), SimpleVectorStore()):
        store.add(nodes)
        for condition, expected in cases:
            query = VectorStoreQuery(query_embedding=axis[0], similarity_top_k=10, filters=all_of(condition))
            assert set(store.query(query).ids or []) == expected, (type(store).__name__, condition)


def test_node_ids_select_by_document_id(vector_memory: VectorMemory) -> None:
    # Node-id restrictions name documents: those another writer stored (no node JSON), a copy stored under a new id
    # (its metadata, node JSON included, the original's) and a node whose own metadata has a `_node_id` key.
    axis = [[1.0 if i == j else 0.0 for i in range(128)] for j in range(3)]
    store = MemwovenVectorStore(vector_memory)
    store.add([TextNode(id_="a", text="a", metadata={"k": 1, "_node_id": "mine"}, embedding=axis[0])])
    vector_memory.store(
        [
            {"id": "lc", "embedding": axis[1], "content": "from LangChain", "metadata": {"k": 1}},
            vector_memory.get(["a"])[0].model_copy(update={"id": "a-copy", "embedding": axis[2]}),
        ]
    )
    k1 = all_of(f("k", "==", 1))

    def queried(node_ids: list[str], filters: MetadataFilters | None = None) -> list[str]:
        query = VectorStoreQuery(query_embedding=axis[0], similarity_top_k=10, node_ids=node_ids, filters=filters)
        return store.query(query).ids or []

    assert queried(["lc", "a"]) == ["a", "lc"]
    assert sorted(queried(["a-copy", "lc"], k1)) == ["a-copy", "lc"]
    assert queried(["a"], all_of(f("_node_id", "==", "mine"))) == ["a"]  # the node's own key, kept
    assert [node.get_content() for node in store.get_nodes(["lc", "a"], filters=k1)] == ["from LangChain", "a"]
    assert len(store.get_nodes(["a-copy"], filters=k1)) == 1
    store.delete_nodes(["lc", "a"], filters=k1)
    assert vector_memory.ids() == ["a-copy"]


def test_documents_another_framework_wrote_come_back_with_mutable_metadata(vector_memory: VectorMemory) -> None:
    metadata = {"source": "s", "nested": {"a": [1, 2]}}
    vector_memory.store([{"id": "lc-1", "embedding": [1.0] + [0.0] * 127, "content": "x", "metadata": metadata}])
    (node,) = MemwovenVectorStore(vector_memory).get_nodes(["lc-1"])
    assert type(node.metadata["nested"]) is dict
    assert type(node.metadata["nested"]["a"]) is list
    node.metadata["nested"]["a"].append(3)  # as on any LlamaIndex node
    assert node.metadata == {"source": "s", "nested": {"a": [1, 2, 3]}}


def test_boolean_metadata_is_matched_by_1_and_0_as_in_llama_index(vector_memory: VectorMemory) -> None:
    # MetadataFilter refuses boolean values; SimpleVectorStore compares with Python's ==, where True == 1
    values: dict[str, Any] = {"true": True, "false": False, "one": 1, "zero": 0.0, "two": 2, "text": "1"}
    axis = [[1.0 if i == j else 0.0 for i in range(128)] for j in range(len(values) + 1)]
    nodes = [
        TextNode(id_=name, text=name, metadata={"v": value}, embedding=axis[i])
        for i, (name, value) in enumerate(values.items())
    ]
    nodes.append(TextNode(id_="missing", text="missing", embedding=axis[-1]))
    cases = [
        ("==", 1),
        ("==", 0),
        ("==", 1.0),
        ("==", 2),
        ("!=", 1),
        ("!=", 0),
        ("in", [1]),
        ("in", [0, 2]),
        ("nin", [0]),
        ("nin", [1, 2]),
    ]
    found: dict[str, list[set[str]]] = {}
    for store in (MemwovenVectorStore(vector_memory), SimpleVectorStore()):
        store.add(nodes)
        for operator, value in cases:
            query = VectorStoreQuery(
                query_embedding=[1.0] * 128, similarity_top_k=10, filters=all_of(f("v", operator, value))
            )
            found.setdefault(type(store).__name__, []).append(set(store.query(query).ids or []))
    assert found["MemwovenVectorStore"] == found["SimpleVectorStore"]
    assert found["MemwovenVectorStore"][:2] == [{"true", "one"}, {"false", "zero"}]
