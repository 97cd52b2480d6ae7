"""A LlamaIndex `StorageContext` of MemwovenDocumentStore, MemwovenIndexStore and MemwovenVectorStore: a
`VectorStoreIndex` built, reloaded with `load_index_from_storage` from other objects (on every item backend) and
from another process (the repository's example, on SQLite), refreshed, edited and deleted from, sync and async."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.base import BaseIndex

from llama_index.storage.docstore.memwoven import MemwovenDocumentStore
from llama_index.storage.index_store.memwoven import MemwovenIndexStore
from llama_index.vector_stores.memwoven import MemwovenVectorStore
from memwoven import InMemoryVectorMemory, ItemMemory

EXAMPLE = Path(__file__).parents[3] / "examples" / "llama_index_storage.py"

HANDBOOK = {
    "standup": "The team standup is at 9:30 every weekday, in the small meeting room.",
    "expenses": "Expense reports are due on the last Friday of each month.",
    "laptops": "New laptops are ordered through the IT portal and arrive within a week.",
}


def documents(**changed: str) -> list[Document]:
    return [Document(id_=doc_id, text=changed.get(doc_id, text)) for doc_id, text in HANDBOOK.items()]


def storage(items: ItemMemory, vector_store: MemwovenVectorStore) -> StorageContext:
    return StorageContext.from_defaults(
        docstore=MemwovenDocumentStore.from_item_memory(items, namespace_prefix=("handbook",)),
        index_store=MemwovenIndexStore.from_item_memory(items, namespace_prefix=("handbook",)),
        vector_store=vector_store,
    )


def best(index: BaseIndex[object], question: str) -> str | None:
    """The source document of the best hit for `question`."""
    return index.as_retriever(similarity_top_k=1).retrieve(question)[0].node.ref_doc_id


def test_an_index_reloads_from_other_objects(
    item_memory: ItemMemory, reopen_items: ItemMemory, embed_model: BaseEmbedding
) -> None:
    vector_store = MemwovenVectorStore(InMemoryVectorMemory())  # the stores of this package under test
    built = VectorStoreIndex.from_documents(
        documents(),
        storage_context=storage(item_memory, vector_store),
        embed_model=embed_model,
        store_nodes_override=True,
    )
    context = storage(reopen_items, vector_store)
    index = load_index_from_storage(context, embed_model=embed_model, store_nodes_override=True)
    assert isinstance(index, VectorStoreIndex)
    assert index.index_id == built.index_id
    assert index.index_struct == built.index_struct
    assert set(index.ref_doc_info) == set(HANDBOOK)
    assert {node.ref_doc_id for node in context.docstore.docs.values()} == set(HANDBOOK)
    assert best(index, "When is the standup?") == "standup"
    assert best(index, "How do I get a new laptop?") == "laptops"

    # refresh_ref_docs compares the docstore's hashes: only the changed document is re-indexed
    assert index.refresh_ref_docs(documents(laptops="Laptops now come from the hardware desk, same day.")) == [
        False,
        False,
        True,
    ]
    assert best(index, "Where do laptops come from now? the hardware desk") == "laptops"
    assert "hardware desk" in next(
        node.get_content() for node in context.docstore.docs.values() if node.ref_doc_id == "laptops"
    )

    index.delete_ref_doc("expenses", delete_from_docstore=True)
    assert set(
        load_index_from_storage(
            storage(item_memory, vector_store), embed_model=embed_model, store_nodes_override=True
        ).ref_doc_info
    ) == {
        "standup",
        "laptops",
    }
    assert context.docstore.get_ref_doc_info("expenses") is None
    assert all(hit.node.ref_doc_id != "expenses" for hit in index.as_retriever(similarity_top_k=5).retrieve("reports"))


def test_an_index_is_edited_through_the_async_api(item_memory: ItemMemory, embed_model: BaseEmbedding) -> None:
    vector_store = MemwovenVectorStore(InMemoryVectorMemory())
    context = storage(item_memory, vector_store)

    async def scenario() -> None:
        index = VectorStoreIndex(
            nodes=[], storage_context=context, embed_model=embed_model, store_nodes_override=True, use_async=True
        )
        for document in documents():
            await index.ainsert(document)
        assert set(await context.docstore.aget_all_ref_doc_info() or {}) == set(HANDBOOK)
        await index.adelete_ref_doc("standup", delete_from_docstore=True)
        assert await context.docstore.aget_ref_doc_info("standup") is None
        hits = await index.as_retriever(similarity_top_k=1).aretrieve("When are expense reports due?")
        assert hits[0].node.ref_doc_id == "expenses"

    asyncio.run(scenario())
    reloaded = load_index_from_storage(
        storage(item_memory, vector_store), embed_model=embed_model, store_nodes_override=True
    )
    assert set(reloaded.ref_doc_info) == {"expenses", "laptops"}


def run_example(path: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), str(path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


@pytest.mark.slow
def test_the_example_reloads_the_index_in_a_second_process(tmp_path: Path) -> None:
    if not EXAMPLE.exists():  # an installed package without the repository around it
        pytest.skip(f"{EXAMPLE} is not here")
    path = tmp_path / "storage.db"
    first = run_example(path)
    built = re.fullmatch(r"process (\d+): indexed 3 documents into .* \(index (\S+)\)", first[0])
    loaded = re.fullmatch(r"process (\d+): loaded index (\S+): 3 nodes of 3 documents", first[1])
    assert built, first
    assert loaded, first
    assert built[1] != loaded[1]  # another process
    assert built[2] == loaded[2]  # the same index
    assert first[2:] == [
        "When is the standup? -> [standup] " + HANDBOOK["standup"],
        "How do I get a new laptop? -> [laptops] " + HANDBOOK["laptops"],
    ]
    second = run_example(path)
    assert second[0].endswith("the index was already in " + str(path) + "; 0 documents changed")
    assert re.fullmatch(rf"process \d+: loaded index {built[2]}: 3 nodes of 3 documents", second[1])
    assert second[2:] == first[2:]
