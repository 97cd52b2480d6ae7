"""MemwovenDocumentStore and MemwovenIndexStore on every item backend (in-memory, SQLite, PostgreSQL, MariaDB).

The first groups run the scenarios of LlamaIndex's own document and index store tests against them, rewritten here
with only the construction changed (the source of each is named; llama_index is MIT-licensed, (c) Jerry Liu and
LlamaIndex contributors): llama-index-core's tests/storage/docstore/test_simple_docstore.py and
tests/storage/index_store/test_simple_index_store.py, and llama-index-storage-docstore-postgres's
tests/test_postgres.py. `persist` / `to_dict` belong to the in-memory stores; their tests become a reload from a
second object over the same storage. (test_simple_docstore.py's `get_all_document_ids` tests are not here: that
method is newer than the llama-index-core this package supports.) Then memwoven's part: async twins, batches,
namespaces, and what is stored.
"""

from __future__ import annotations

import asyncio

import pytest
from li_item_spy import spy
from llama_index.core.data_structs.data_structs import IndexDict, IndexGraph, IndexList
from llama_index.core.schema import BaseNode, Document, NodeRelationship, TextNode
from llama_index.core.storage.docstore.types import RefDocInfo

from llama_index.storage.docstore.memwoven import MemwovenDocumentStore
from llama_index.storage.docstore.memwoven.base import DEFAULT_BATCH_SIZE
from llama_index.storage.index_store.memwoven import MemwovenIndexStore
from llama_index.storage.kvstore.memwoven import MemwovenKVStore
from memwoven import ItemMemory
from memwoven.errors import InvalidInputError


@pytest.fixture
def docstore(item_memory: ItemMemory) -> MemwovenDocumentStore:
    return MemwovenDocumentStore(MemwovenKVStore(item_memory))


@pytest.fixture
def index_store(item_memory: ItemMemory) -> MemwovenIndexStore:
    return MemwovenIndexStore(MemwovenKVStore(item_memory))


def doc_and_node() -> tuple[Document, TextNode]:
    return (
        Document(text="hello world", id_="d1", metadata={"foo": "bar"}),
        TextNode(text="my node", id_="d2", metadata={"node": "info"}),
    )


def sourced() -> tuple[Document, Document, TextNode]:
    """A source document d1, and d2 and d3 whose SOURCE is d1."""
    ref_doc = Document(text="hello world", id_="d1", metadata={"foo": "bar"})
    doc = Document(text="hello world", id_="d2", metadata={"foo": "bar"})
    doc.relationships[NodeRelationship.SOURCE] = ref_doc.as_related_node_info()
    node = TextNode(text="my node", id_="d3", metadata={"node": "info"})
    node.relationships[NodeRelationship.SOURCE] = ref_doc.as_related_node_info()
    return ref_doc, doc, node


def stored(docstore: MemwovenDocumentStore, doc_id: str) -> dict[str, bool]:
    """Whether `doc_id` is in each of the docstore's three collections."""
    return {
        collection: docstore.kvstore.get(doc_id, collection) is not None
        for collection in (docstore._node_collection, docstore._metadata_collection, docstore._ref_doc_collection)
    }


NOWHERE = {"docstore/data": False, "docstore/metadata": False, "docstore/ref_doc_info": False}


# llama-index-core's test_simple_docstore.py ------------------------------------------------------------------


def test_docstore(docstore: MemwovenDocumentStore) -> None:
    """test_simple_docstore.py::test_docstore."""
    doc, node = doc_and_node()
    docstore.add_documents([doc, node])
    assert docstore.get_document("d1") == doc
    assert docstore.get_document("d2") == node


def test_docstore_persist(item_memory: ItemMemory, reopen_items: ItemMemory) -> None:
    """test_simple_docstore.py::test_docstore_persist and ::test_docstore_dict: a second document store over the
    same storage reads what the first wrote."""
    doc, node = doc_and_node()
    MemwovenDocumentStore.from_item_memory(item_memory).add_documents([doc, node])
    new_docstore = MemwovenDocumentStore.from_item_memory(reopen_items)
    assert new_docstore.get_document("d1") == doc
    assert new_docstore.get_document("d2") == node


def test_docstore_delete_document(docstore: MemwovenDocumentStore) -> None:
    """test_simple_docstore.py::test_docstore_delete_document."""
    docstore.add_documents(list(doc_and_node()))
    docstore.delete_document("d1")
    assert stored(docstore, "d1") == NOWHERE
    assert stored(docstore, "d2") == {"docstore/data": True, "docstore/metadata": True, "docstore/ref_doc_info": False}


def test_docstore_delete_ref_doc(docstore: MemwovenDocumentStore) -> None:
    """test_simple_docstore.py::test_docstore_delete_ref_doc."""
    docstore.add_documents(list(sourced()))
    docstore.delete_ref_doc("d1")
    for doc_id in ("d1", "d2", "d3"):
        assert stored(docstore, doc_id) == NOWHERE


def test_docstore_delete_ref_doc_not_in_docstore(docstore: MemwovenDocumentStore) -> None:
    """test_simple_docstore.py::test_docstore_delete_ref_doc_not_in_docstore."""
    _, doc, node = sourced()
    docstore.add_documents([doc, node])
    assert docstore.kvstore.get("d1", docstore._ref_doc_collection) is not None
    docstore.delete_ref_doc("d1")
    for doc_id in ("d1", "d2", "d3"):
        assert stored(docstore, doc_id) == NOWHERE


def test_docstore_delete_all_ref_doc_nodes(docstore: MemwovenDocumentStore) -> None:
    """test_simple_docstore.py::test_docstore_delete_all_ref_doc_nodes."""
    docstore.add_documents(list(sourced()))
    ref_doc_info = docstore.kvstore.get("d1", docstore._ref_doc_collection)
    assert ref_doc_info is not None
    assert ref_doc_info["node_ids"] == ["d2", "d3"]
    docstore.delete_document("d2")
    assert stored(docstore, "d1") == {key: True for key in NOWHERE}
    ref_doc_info = docstore.kvstore.get("d1", docstore._ref_doc_collection)
    assert ref_doc_info is not None
    assert ref_doc_info["node_ids"] == ["d3"]
    docstore.delete_document("d3")
    assert stored(docstore, "d1") == NOWHERE


# llama-index-storage-docstore-postgres's test_postgres.py ----------------------------------------------------


def two_documents() -> list[Document]:
    return [Document(text="doc_1"), Document(text="doc_2")]


def test_postgres_docstore(docstore: MemwovenDocumentStore) -> None:
    """The postgres docstore's test_postgres_docstore (`id_` for the deprecated `get_doc_id()`)."""
    documents = two_documents()
    assert len(docstore.docs) == 0
    docstore.add_documents(documents)
    assert len(docstore.docs) == 2
    assert all(isinstance(doc, BaseNode) for doc in docstore.docs.values())
    docstore.add_documents(documents)  # an update
    assert len(docstore.docs) == 2
    doc0 = docstore.get_document(documents[0].id_)
    assert doc0 is not None
    assert documents[0].get_content() == doc0.get_content()
    docstore.delete_document(documents[0].id_)
    assert len(docstore.docs) == 1


def test_postgres_docstore_hash(docstore: MemwovenDocumentStore) -> None:
    """The postgres docstore's test_postgres_docstore_hash."""
    docstore.set_document_hash("test_doc_id", "test_doc_hash")
    assert docstore.get_document_hash("test_doc_id") == "test_doc_hash"
    docstore.set_document_hash("test_doc_id", "test_doc_hash_new")
    assert docstore.get_document_hash("test_doc_id") == "test_doc_hash_new"
    assert docstore.get_document_hash("test_not_exist") is None


# llama-index-core's test_simple_index_store.py ---------------------------------------------------------------


def test_simple_index_store_dict(item_memory: ItemMemory, reopen_items: ItemMemory) -> None:
    """test_simple_index_store.py::test_simple_index_store_dict: read back from a second object."""
    index_struct = IndexGraph()
    MemwovenIndexStore.from_item_memory(item_memory).add_index_struct(index_struct)
    loaded_index_store = MemwovenIndexStore.from_item_memory(reopen_items)
    assert loaded_index_store.get_index_struct(index_struct.index_id) == index_struct


# memwoven's part: the document store -------------------------------------------------------------------------


def test_async_twins(docstore: MemwovenDocumentStore, item_memory: ItemMemory) -> None:
    calls = spy(item_memory)

    async def scenario() -> None:
        documents = list(sourced())
        await docstore.async_add_documents(documents)
        assert await docstore.aget_document("d2") == documents[1]
        assert await docstore.adocument_exists("d3")
        ref_doc_info = await docstore.aget_ref_doc_info("d1")
        assert ref_doc_info is not None
        assert ref_doc_info.node_ids == ["d2", "d3"]
        assert set(await docstore.aget_all_document_hashes()) == {doc.hash for doc in documents}
        await docstore.aset_document_hashes({"d2": "h2", "d3": "h3"})
        assert await docstore.aget_document_hash("d3") == "h3"
        await docstore.adelete_document("d2")
        assert await docstore.aget_document("d2", raise_error=False) is None
        await docstore.adelete_ref_doc("d1")
        assert await docstore.aget_all_ref_doc_info() == {}

    asyncio.run(scenario())
    assert calls
    assert all(name.startswith("a") for name, _ in calls)  # no sync call from async code


def test_add_documents_writes_in_batches(docstore: MemwovenDocumentStore, item_memory: ItemMemory) -> None:
    nodes = [TextNode(text=f"node {i}", id_=f"n{i}") for i in range(DEFAULT_BATCH_SIZE * 2 + 5)]
    calls = spy(item_memory)
    docstore.add_documents(nodes)
    batches = [
        (namespace[0], len(writes)) for name, writes in calls if name == "put_many" for namespace in [writes[0][0]]
    ]
    assert batches == [
        ("docstore/data", 100),
        ("docstore/data", 100),
        ("docstore/data", 5),
        ("docstore/metadata", 100),
        ("docstore/metadata", 100),
        ("docstore/metadata", 5),
    ]
    assert len(docstore.docs) == len(nodes)
    calls.clear()
    asyncio.run(docstore.async_add_documents(nodes[:3], batch_size=2))
    assert sorted(len(writes) for name, writes in calls if name == "aput_many") == [1, 1, 2, 2]


def test_documents_are_stored_as_llama_index_json(docstore: MemwovenDocumentStore, item_memory: ItemMemory) -> None:
    doc = Document(text="héllo 🌍", id_="d1", metadata={"page": 3, "tags": ["a"], "nested": {"x": None}})
    docstore.add_documents([doc])
    item = item_memory.get(("docstore/data",), "d1")
    assert item is not None
    assert item.value["__type__"] == Document.get_type()
    assert item.value["__data__"]["text"] == "héllo 🌍"
    assert item.value["__data__"]["metadata"] == {"page": 3, "tags": ["a"], "nested": {"x": None}}
    hashes = item_memory.get(("docstore/metadata",), "d1")
    assert hashes is not None
    assert hashes.value == {"doc_hash": doc.hash}


def test_docstores_in_different_namespaces_never_meet(item_memory: ItemMemory) -> None:
    kvstore = MemwovenKVStore(item_memory)
    first, second = MemwovenDocumentStore(kvstore), MemwovenDocumentStore(kvstore, namespace="other")
    third = MemwovenDocumentStore.from_item_memory(item_memory, namespace_prefix=("tenant2",))
    first.add_documents([Document(text="first", id_="d")])
    second.add_documents([Document(text="second", id_="d"), Document(text="second only", id_="e")])
    assert third.docs == {}
    assert {doc_id: node.get_content() for doc_id, node in first.docs.items()} == {"d": "first"}
    assert sorted(second.docs) == ["d", "e"]
    second.delete_document("d")
    assert first.document_exists("d")
    assert third.get_document("d", raise_error=False) is None


def test_unknown_documents(docstore: MemwovenDocumentStore) -> None:
    with pytest.raises(ValueError, match="not found"):
        docstore.get_document("missing")
    with pytest.raises(ValueError, match="not found"):
        docstore.delete_document("missing")
    assert docstore.get_document("missing", raise_error=False) is None
    assert docstore.get_ref_doc_info("missing") is None
    assert docstore.get_all_ref_doc_info() == {}


def test_ref_doc_info_round_trips(docstore: MemwovenDocumentStore, reopen_items: ItemMemory) -> None:
    _, doc, node = sourced()
    docstore.add_documents([doc, node])
    again = MemwovenDocumentStore.from_item_memory(reopen_items)
    assert again.get_all_ref_doc_info() == {
        "d1": RefDocInfo(node_ids=["d2", "d3"], metadata={"foo": "bar", "node": "info"})
    }
    assert again.ref_doc_exists("d1")
    assert again.get_all_document_hashes() == {doc.hash: "d2", node.hash: "d3"}


def test_a_document_whose_metadata_is_no_json_is_refused_before_any_write(docstore: MemwovenDocumentStore) -> None:
    good = [TextNode(text=f"node {i}", id_=f"n{i}") for i in range(5)]
    bad = TextNode(text="bad", id_="bad", metadata={"score": float("nan")})
    with pytest.raises(InvalidInputError):
        docstore.add_documents([*good, bad], batch_size=2)
    assert docstore.docs == {}


# memwoven's part: the index store ----------------------------------------------------------------------------


def test_index_store(index_store: MemwovenIndexStore, reopen_items: ItemMemory) -> None:
    graph, vectors = IndexGraph(), IndexDict()
    vectors.add_node(TextNode(text="t", id_="n1"), text_id="v1")
    index_store.add_index_struct(graph)
    assert index_store.get_index_struct() == graph  # the only one
    index_store.add_index_struct(vectors)
    again = MemwovenIndexStore.from_item_memory(reopen_items)
    assert {struct.index_id: struct for struct in again.index_structs()} == {
        graph.index_id: graph,
        vectors.index_id: vectors,
    }
    assert again.get_index_struct(vectors.index_id) == vectors
    assert again.get_index_struct("missing") is None
    index_store.delete_index_struct(graph.index_id)
    assert again.index_structs() == [vectors]


def test_index_store_async_twins(index_store: MemwovenIndexStore, item_memory: ItemMemory) -> None:
    calls = spy(item_memory)
    struct = IndexList(nodes=["a", "b"])

    async def scenario() -> None:
        await index_store.async_add_index_struct(struct)
        assert await index_store.aget_index_struct(struct.index_id) == struct
        assert await index_store.aget_index_struct() == struct
        assert await index_store.async_index_structs() == [struct]
        await index_store.adelete_index_struct(struct.index_id)
        assert await index_store.async_index_structs() == []

    asyncio.run(scenario())
    assert [name for name, _ in calls] == ["aput", "aget", "alist", "alist", "adelete", "alist"]


def test_index_stores_in_different_namespaces_never_meet(item_memory: ItemMemory) -> None:
    first = MemwovenIndexStore.from_item_memory(item_memory)
    second = MemwovenIndexStore.from_item_memory(item_memory, namespace="other")
    third = MemwovenIndexStore.from_item_memory(item_memory, namespace_prefix=("tenant2",))
    first.add_index_struct(IndexGraph(index_id="i"))
    second.add_index_struct(IndexList(index_id="i"))
    assert [type(struct) for struct in first.index_structs()] == [IndexGraph]
    assert [type(struct) for struct in second.index_structs()] == [IndexList]
    assert third.index_structs() == []
    assert first.kvstore.items is item_memory
