"""Exact top-10 search at N x 384: InMemoryVectorMemory against LangChain and LlamaIndex in-memory stores."""

from __future__ import annotations

from typing import Any

import numpy as np
from harness import Report, measure

from memweave import InMemoryVectorMemory, VectorDocument


def _corpus(count: int, dimension: int, seed: int = 7) -> tuple[list[str], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dimension), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((8, dimension), dtype=np.float32)
    return [f"doc-{i}" for i in range(count)], vectors, queries


def _memweave(ids: list[str], vectors: np.ndarray[Any, Any]) -> InMemoryVectorMemory:
    memory = InMemoryVectorMemory(vectors.shape[1])
    batch = 10_000
    for start in range(0, len(ids), batch):
        memory.store(
            VectorDocument(id=i, content=i, embedding=v)
            for i, v in zip(ids[start : start + batch], vectors[start : start + batch])
        )
    return memory


def _langchain(ids: list[str], vectors: np.ndarray[Any, Any]) -> Any:
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    lookup = dict(zip(ids, vectors.tolist()))

    class Precomputed(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [lookup[t] for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return lookup[text]

    store = InMemoryVectorStore(Precomputed())
    store.add_texts(ids, ids=ids)
    return store


def _llama_index(ids: list[str], vectors: np.ndarray[Any, Any]) -> Any:
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores import SimpleVectorStore

    store = SimpleVectorStore()
    store.add([TextNode(id_=i, text=i, embedding=v) for i, v in zip(ids, vectors.tolist())])
    return store


def run(report: Report, *, count: int, dimension: int = 384) -> None:
    """Add the search benchmark rows and the ≥100x targets to `report`."""
    from llama_index.core.vector_stores import VectorStoreQuery

    ids, vectors, queries = _corpus(count, dimension)
    query = queries[0]
    name = f"search top-10, {count:,}x{dimension}"

    ours = _memweave(ids, vectors)
    mine = measure(lambda: ours.search(query, top_k=10), runs=50, warmup=3)
    report.add(name, "memweave InMemoryVectorMemory", mine, "1.0")

    expected = [h.document.id for h in ours.search(query, top_k=10)]
    langchain = _langchain(ids, vectors)
    query_list = query.tolist()
    got = [d.id for d in langchain.similarity_search_by_vector(query_list, k=10)]
    assert got == expected, "LangChain and memweave disagree on the top 10"
    theirs = measure(lambda: langchain.similarity_search_by_vector(query_list, k=10), runs=5)
    report.add(name, "LangChain InMemoryVectorStore", theirs, f"memweave is {theirs.median / mine.median:.0f}x faster")
    report.target(f"{name}: speed-up over LangChain InMemoryVectorStore", theirs.median / mine.median, 100, True)

    llama = _llama_index(ids, vectors)
    request = VectorStoreQuery(query_embedding=query_list, similarity_top_k=10)
    assert llama.query(request).ids == expected, "LlamaIndex and memweave disagree on the top 10"
    theirs = measure(lambda: llama.query(request), runs=5)
    report.add(name, "LlamaIndex SimpleVectorStore", theirs, f"memweave is {theirs.median / mine.median:.0f}x faster")
    report.target(f"{name}: speed-up over LlamaIndex SimpleVectorStore", theirs.median / mine.median, 100, True)
