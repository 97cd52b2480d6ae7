"""A LlamaIndex `VectorStoreIndex` whose documents, index structure and vectors all live in one SQLite file through
memwoven, reloaded in a second process with `load_index_from_storage`. Offline.

    uv run python examples/llama_index_storage.py [path/to/storage.db]

This process indexes a small handbook into a `StorageContext` of `MemwovenDocumentStore` (the nodes and the
documents' hashes), `MemwovenIndexStore` (the index structure) and `MemwovenVectorStore` (the embeddings), then
starts a second Python process (this script with `--reload`) that opens the same file, loads the index and asks it
questions. Run it twice: the second run loads the index instead of building it, and the docstore's hashes tell
`refresh_ref_docs` that no document changed. Embeddings come from memwoven's offline `HashingEmbedFn`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from llama_index.core import Document, StorageContext, VectorStoreIndex, load_index_from_storage

from llama_index.embeddings.memwoven import EmbedFnEmbedding
from llama_index.storage.docstore.memwoven import MemwovenDocumentStore
from llama_index.storage.index_store.memwoven import MemwovenIndexStore
from llama_index.vector_stores.memwoven import MemwovenVectorStore
from memwoven import SQLItemMemory
from memwoven.embed import HashingEmbedFn

HANDBOOK = {
    "standup": "The team standup is at 9:30 every weekday, in the small meeting room.",
    "expenses": "Expense reports are due on the last Friday of each month.",
    "laptops": "New laptops are ordered through the IT portal and arrive within a week.",
}
QUESTIONS = ["When is the standup?", "How do I get a new laptop?"]
EMBED_MODEL = EmbedFnEmbedding(HashingEmbedFn(384))


def documents() -> list[Document]:
    """The handbook as LlamaIndex documents, with stable ids (so a rerun recognizes them)."""
    return [Document(id_=doc_id, text=text) for doc_id, text in HANDBOOK.items()]


def storage_context(path: Path) -> StorageContext:
    """Docstore, index store and vector store, all in the SQLite file at `path`."""
    url = f"sqlite:///{path}"
    items = SQLItemMemory(url)  # one item memory (one connection pool) for the docstore and the index store
    return StorageContext.from_defaults(
        docstore=MemwovenDocumentStore.from_item_memory(items),
        index_store=MemwovenIndexStore.from_item_memory(items),
        vector_store=MemwovenVectorStore.from_url(url, collection="handbook"),
    )


def close(storage: StorageContext) -> None:
    """Release the connections of the storage context's memwoven stores."""
    assert isinstance(storage.docstore, MemwovenDocumentStore)
    assert isinstance(storage.vector_store, MemwovenVectorStore)
    storage.docstore.kvstore.close()
    storage.vector_store.close()


def build(path: Path) -> None:
    """Index the handbook into the file (or, when it holds the index already, refresh it), then reload elsewhere."""
    storage = storage_context(path)
    if storage.index_store.index_structs():
        # store_nodes_override is no part of the stored index: pass it again, so a changed document's new nodes
        # go to the docstore too
        index = load_index_from_storage(storage, embed_model=EMBED_MODEL, store_nodes_override=True)
        refreshed = index.refresh_ref_docs(documents())
        print(f"process {os.getpid()}: the index was already in {path}; {sum(refreshed)} documents changed")
    else:
        # store_nodes_override: keep the nodes in the docstore too (the vector store alone would suffice to query)
        index = VectorStoreIndex.from_documents(
            documents(), storage_context=storage, embed_model=EMBED_MODEL, store_nodes_override=True
        )
        print(f"process {os.getpid()}: indexed {len(HANDBOOK)} documents into {path} (index {index.index_id})")
    close(storage)
    subprocess.run([sys.executable, __file__, "--reload", str(path)], check=True)  # noqa: S603 (this very script)


def reload(path: Path) -> None:
    """Load the index from the file with `load_index_from_storage` and answer the questions."""
    storage = storage_context(path)
    index = load_index_from_storage(storage, embed_model=EMBED_MODEL)
    print(
        f"process {os.getpid()}: loaded index {index.index_id}: {len(storage.docstore.docs)} nodes of "
        f"{len(storage.docstore.get_all_ref_doc_info() or {})} documents"
    )
    retriever = index.as_retriever(similarity_top_k=1)
    for question in QUESTIONS:
        hit = retriever.retrieve(question)[0]
        print(f"{question} -> [{hit.node.ref_doc_id}] {hit.node.get_content()}")
    close(storage)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reload"]:
        reload(Path(sys.argv[2]))
    else:
        build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.gettempdir()) / "memwoven-llama-storage.db")
