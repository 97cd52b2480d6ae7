"""`MemwovenVectorStore`: LlamaIndex's `BasePydanticVectorStore` over any memwoven `VectorMemory`.

A node is stored as a `VectorDocument` with the node's id, its text as `content`, its embedding, and as metadata
LlamaIndex's usual flattening (`node_to_metadata_dict`: the node's own metadata at the top level, so that filters
reach it, plus the whole node as JSON in `_node_content` and its `ref_doc_id`). Restrictions to node ids select by
document id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.indices.query.embedding_utils import get_top_k_mmr_embeddings
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import (
    legacy_metadata_dict_to_node,
    metadata_dict_to_node,
    node_to_metadata_dict,
)

from llama_index.vector_stores.memwoven._filters import to_core_filter
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.contracts import Metric, VectorMemory
from memwoven.errors import InvalidInputError
from memwoven.filters import compile_filter
from memwoven.models import ScoredDocument, VectorDocument, thaw
from memwoven.urls import open_vector_memory
from memwoven.vector_index import VectorIndex, store_columns

__all__ = ["MemwovenVectorStore"]

DEFAULT_MMR_PREFETCH_FACTOR = 4.0
"""In MMR mode, how many candidates per result are fetched before re-ranking (unless `mmr_prefetch_k` is given)."""


class MemwovenVectorStore(BasePydanticVectorStore, Runner):
    """A LlamaIndex vector store over one memwoven `VectorMemory` collection (in memory, files, SQL, ...).

    Stores text (`stores_text=True`), so `VectorStoreIndex.from_vector_store(store)` needs no docstore. Queries
    run the backend's top-k search with the filters translated to memwoven's filter language; MMR mode re-ranks a
    prefetched candidate set with LlamaIndex's own MMR. Deletes and `get_nodes` read the nodes they select with
    `VectorMemory.documents`, exact even where search is approximate (an HNSW index).
    """

    stores_text: bool = True
    _memory: VectorMemory = PrivateAttr()

    def __init__(self, memory: VectorMemory, **kwargs: Any) -> None:
        if not isinstance(memory, VectorMemory):
            raise InvalidInputError(f"MemwovenVectorStore needs a memwoven VectorMemory, got {type(memory).__name__}")
        super().__init__(**kwargs)
        self._memory = memory

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        collection: str = "default",
        dimension: int | None = None,
        metric: Metric = "cosine",
        **options: Any,
    ) -> MemwovenVectorStore:
        """Open one collection at a memwoven URL (default `$MEMWOVEN_VECTOR_URL`), e.g. `sqlite:///vectors.db`."""
        return cls(open_vector_memory(url, collection=collection, dimension=dimension, metric=metric, **options))

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex class name."""
        return "MemwovenVectorStore"

    @property
    def client(self) -> VectorMemory:
        """The memwoven vector memory underneath."""
        return self._memory

    def _add(self, /, nodes: Sequence[BaseNode], **kwargs: Any) -> Steps[list[str]]:
        """Insert or replace nodes (they must have embeddings); return their ids."""
        ids = [node.node_id for node in nodes]
        embeddings = [node.get_embedding() for node in nodes]
        contents = [node.get_content(metadata_mode=MetadataMode.NONE) for node in nodes]
        yield from store_columns(self._memory, ids, embeddings, contents=contents, metadata=list(map(_metadata, nodes)))
        return ids

    def _delete(self, /, ref_doc_id: str, **delete_kwargs: Any) -> Steps[None]:
        """Delete every node of the source document `ref_doc_id`."""
        found = yield Call(self._memory, "documents", ({"ref_doc_id": ref_doc_id},))
        yield Call(self._memory, "delete", ((document.id for document in found),))

    def _query(self, /, query: VectorStoreQuery, **kwargs: Any) -> Steps[VectorStoreQueryResult]:
        """The `similarity_top_k` nodes closest to `query.query_embedding` among those the query selects.

        Honours `filters`, `doc_ids` and `node_ids` (an empty list restricts nothing: `VectorStoreIndex` passes
        its, empty, node list for stores that keep the text); `mode` is DEFAULT or MMR (with the query's
        `mmr_threshold` or, as a retriever's `vector_store_kwargs` pass it, the keyword argument `mmr_threshold`;
        and `mmr_prefetch_k` or `mmr_prefetch_factor`).
        """
        search = _Search.of(query, **kwargs)
        if query.node_ids:
            candidates = yield Call(self._memory, "get", (query.node_ids,))
            return search.result(search.among(candidates, self._memory.metric))
        hits = yield Call(self._memory, "search", (search.embedding,), {"top_k": search.top_k, "filter": search.filter})
        return search.result(hits)

    def _get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> Steps[list[BaseNode]]:
        """The nodes with these ids (in that order) and/or matching `filters`; every node if given neither."""
        if node_ids is not None:
            return [_node(document) for document in _matching((yield Call(self._memory, "get", (node_ids,))), filters)]
        return [_node(document) for document in (yield Call(self._memory, "documents", (to_core_filter(filters),)))]

    def _delete_nodes(
        self, /, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> Steps[None]:
        """Delete the nodes with these ids and/or matching `filters` (nothing if given neither)."""
        if filters is None:
            yield Call(self._memory, "delete", (node_ids or [],))
            return
        if node_ids is not None:
            found = _matching((yield Call(self._memory, "get", (node_ids,))), filters)
        else:
            found = yield Call(self._memory, "documents", (to_core_filter(filters),))
        yield Call(self._memory, "delete", ((document.id for document in found),))

    def _clear(self) -> Steps[None]:
        """Delete every node of the collection."""
        yield Call(self._memory, "clear")

    def _close(self) -> Steps[None]:
        """Release the vector memory's connections (the async ones are better released by `aclose`)."""
        yield Call(self._memory, "close")

    add, async_add = twins(_add, async_name="async_add")  # LlamaIndex's name for the async `add`
    delete, adelete = twins(_delete)
    query, aquery = twins(_query)
    get_nodes, aget_nodes = twins(_get_nodes)
    delete_nodes, adelete_nodes = twins(_delete_nodes)
    clear, aclear = twins(_clear)
    close, aclose = twins(_close)


@dataclass(frozen=True)
class _Search:
    """One query, translated: what to ask the backend, and how to turn its hits into LlamaIndex's result."""

    query: VectorStoreQuery
    embedding: list[float]
    top_k: int
    filter: dict[str, Any] | None

    @classmethod
    def of(
        cls,
        query: VectorStoreQuery,
        *,
        mmr_prefetch_k: int | None = None,
        mmr_prefetch_factor: float = DEFAULT_MMR_PREFETCH_FACTOR,
        mmr_threshold: float | None = None,
        **_: Any,
    ) -> _Search:
        if query.mode not in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
            raise NotImplementedError(f"MemwovenVectorStore answers DEFAULT and MMR queries, not {query.mode.value}")
        embedding = query.query_embedding
        if embedding is None:
            raise ValueError("MemwovenVectorStore needs a query embedding")
        top_k = query.similarity_top_k
        if query.mode == VectorStoreQueryMode.MMR:
            top_k = mmr_prefetch_k or max(top_k, int(top_k * mmr_prefetch_factor))
        restrictions = [
            to_core_filter(query.filters),
            {"ref_doc_id": {"$in": query.doc_ids}} if query.doc_ids else None,
        ]
        if mmr_threshold is not None and query.mmr_threshold is None:  # as a retriever's `vector_store_kwargs`
            query = dataclasses.replace(query, mmr_threshold=mmr_threshold)
        return cls(query, list(embedding), top_k, _all_of(restrictions))

    def among(self, documents: list[VectorDocument], metric: Metric) -> list[ScoredDocument]:
        """This search run over `documents` only (the nodes `node_ids` names): exact, as the backend would score."""
        index = VectorIndex(metric=metric)
        index.upsert(index.prepare(documents, stored=True))
        return index.search(self.embedding, top_k=self.top_k, filter=self.filter)

    def result(self, hits: list[ScoredDocument]) -> VectorStoreQueryResult:
        if self.query.mode == VectorStoreQueryMode.MMR and hits:
            scores, ids = get_top_k_mmr_embeddings(
                self.embedding,
                [list(hit.document.embedding) for hit in hits],
                similarity_top_k=self.query.similarity_top_k,
                embedding_ids=list(range(len(hits))),
                mmr_threshold=self.query.mmr_threshold,
            )
            hits = [hits[i].model_copy(update={"score": float(score)}) for score, i in zip(scores, ids)]
        return VectorStoreQueryResult(
            nodes=[_node(hit.document) for hit in hits],
            similarities=[hit.score for hit in hits],
            ids=[hit.document.id for hit in hits],
        )


def _metadata(node: BaseNode) -> dict[str, Any]:
    """The node's stored metadata: LlamaIndex's flattening."""
    return node_to_metadata_dict(node, remove_text=True, flat_metadata=False)


def _node(document: VectorDocument) -> BaseNode:
    """The node a document holds; for one another framework wrote (no `_node_content`), a `TextNode` of its text
    and metadata, as LlamaIndex's own vector stores read such documents."""
    try:
        return metadata_dict_to_node(document.metadata, text=document.content)
    except ValueError:
        metadata, info, relationships = legacy_metadata_dict_to_node(thaw(document.metadata))
        return TextNode(
            id_=document.id,
            text=document.content,
            metadata=metadata,
            start_char_idx=info.get("start"),
            end_char_idx=info.get("end"),
            relationships=relationships,
        )


def _all_of(clauses: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    present = [clause for clause in clauses if clause is not None]
    if len(present) > 1:
        return {"$and": present}
    return present[0] if present else None


def _matching(documents: list[VectorDocument], filters: MetadataFilters | None) -> list[VectorDocument]:
    spec = to_core_filter(filters)
    if spec is None:
        return documents
    predicate = compile_filter(spec)
    return [document for document in documents if predicate(document.metadata)]
