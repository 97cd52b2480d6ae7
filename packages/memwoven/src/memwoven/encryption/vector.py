"""`EncryptedVectorMemory`: every document of another `VectorMemory` encrypted (see `memwoven.encryption`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from pydantic import ValidationError

from memwoven._steps import Call, Steps, twins
from memwoven.backends.file import FileVectorMemory
from memwoven.backends.memory import InMemoryVectorMemory
from memwoven.contracts import DocumentsIn, VectorMemory, check_id, check_ids
from memwoven.encryption._keys import IdHasher, KeyLike, Keyring, Wrapper, b64, keyring, unb64
from memwoven.errors import CorruptMemoryError
from memwoven.models import ScoredDocument, VectorDocument
from memwoven.vector_index import SearchQuery, VectorIndex, VectorMemoryBase

__all__ = ["EncryptedVectorMemory"]

_PAGE = 16  # the first page of hits a filtered search asks for (at least 2 * top_k)
_CHUNK = 256  # documents read per `get` when a whole collection is decrypted
logger = logging.getLogger("memwoven.encryption")

# Vectors -------------------------------------------------------------------------------------------------------


def _collection_name(inner: VectorMemory) -> str | None:
    """The name of the collection `inner` holds, or None if it has none."""
    name = getattr(inner, "collection", None)
    if isinstance(name, str):
        return name
    if isinstance(inner, FileVectorMemory):
        return inner.path.stem  # the name `open_vector_memory` and `vector_collections` give a file collection
    if not isinstance(inner, InMemoryVectorMemory):
        logger.warning("%r has no collection name: pass collection= to bind its tokens to one", inner)
    return None


def _sketch(vector: np.ndarray[Any, Any]) -> list[Any]:
    """A clear embedding's fingerprint for its token: its largest magnitude and every value as a signed byte of
    it, which tells an embedding changed in the store (by more than 0.4% of that magnitude anywhere) from one a
    backend returns rounded (Qdrant rebuilds cosine vectors from their direction and norm)."""
    values = vector.astype(np.float64)
    scale = float(np.abs(values).max())
    levels = np.rint(values * (127 / scale)) if scale else np.zeros_like(values)
    return [scale, b64(levels.astype(np.int8).tobytes())]


def _check_sketch(sketch: Any, embedding: Sequence[float]) -> None:
    """Raise `ValueError` unless `embedding` is the one `sketch` was made of, up to the sketch's rounding."""
    if not (isinstance(sketch, list) and len(sketch) == 2 and isinstance(sketch[0], float)):
        raise ValueError("holds no valid sketch of its embedding")
    scale, levels = sketch[0], np.frombuffer(unb64(sketch[1]), dtype=np.int8)
    values = np.asarray(embedding, dtype=np.float64)
    # half a level of rounding, and a margin for a backend's float32 rounding
    if levels.shape != values.shape or np.abs(values - levels * (scale / 127)).max() > scale * (0.5 / 127 + 1e-5):
        raise ValueError("has an embedding other than the one it was stored with")


class EncryptedVectorMemory(Wrapper[VectorMemory], VectorMemoryBase):
    """A `VectorMemory` that keeps the content and metadata of `inner`'s documents encrypted (see the module docs).

    Embeddings stay in the clear by default, so that the backend can rank; with `encrypt_embeddings=True` the
    backend stores a constant unit vector instead and every search decrypts and ranks the whole collection here.
    Tokens are bound to `collection`, by default the name of `inner`'s collection (see the module docs).
    """

    def __init__(
        self,
        inner: VectorMemory,
        *,
        key: KeyLike | Sequence[KeyLike] | Keyring,
        id_key: KeyLike | None = None,
        encrypt_embeddings: bool = False,
        collection: str | None = None,
    ) -> None:
        """Wrap `inner`; `key`: a key or keys oldest first; `id_key`: hash document ids with this separate key;
        `collection`: the name tokens are bound to, instead of `inner`'s own."""
        if not isinstance(inner, VectorMemory):
            raise TypeError(f"inner must be a VectorMemory, got {type(inner).__name__}")
        self.inner = inner
        self.metric = inner.metric
        self.keyring = keyring(key)
        self.encrypt_embeddings = bool(encrypt_embeddings)
        self._hash = IdHasher(id_key) if id_key is not None else None
        self.collection = _collection_name(inner) if collection is None else collection
        name = "" if self.collection is None else check_id(self.collection, "collection name")
        # Neither a collection name nor an id holds a NUL, so the context names exactly one (collection, id) pair.
        self._context = b"vector\x00" + name.encode("utf-8") + b"\x00"

    def __repr__(self) -> str:
        options = (", hashed ids" if self._hash else "") + (", encrypted embeddings" if self.encrypt_embeddings else "")
        keys = self.keyring.key_ids
        return f"EncryptedVectorMemory({self.inner!r}, collection={self.collection!r}, key_ids={keys}{options})"

    @property
    def dimension(self) -> int | None:
        """The inner memory's dimension (also with encrypted embeddings: the stand-in vectors keep it)."""
        return self.inner.dimension

    # The sans-I/O core -----------------------------------------------------------------------------------------

    def stored_id(self, document_id: str) -> str:
        """The id the document is stored under in `inner`: itself, or its keyed hash with `id_key`."""
        document_id = check_id(document_id, "document id")
        return self._hash(document_id) if self._hash else document_id

    def _seal(self, documents: DocumentsIn) -> list[VectorDocument]:
        """Validate `documents` as the built-in backends do, and encrypt them."""
        batch = VectorIndex(self.inner.dimension, self.metric).prepare(documents)
        sealed: list[VectorDocument] = []
        for doc_id, content, metadata, vector in zip(batch.ids, batch.contents, batch.metadata, batch.vectors):
            payload: dict[str, Any] = {"content": content, "metadata": metadata}
            if self._hash:
                payload["id"] = doc_id
            embedding = vector.tolist()
            if self.encrypt_embeddings:
                payload["embedding"] = b64(vector.astype("<f4").tobytes())
                embedding = [1.0] + [0.0] * (len(embedding) - 1)
            else:
                payload["sketch"] = _sketch(vector)
            stored_id = self.stored_id(doc_id)
            plaintext = json.dumps(payload, separators=(",", ":")).encode("ascii")  # ASCII keeps lone surrogates
            token = self.keyring.seal(plaintext, self._context + stored_id.encode("utf-8"))
            sealed.append(VectorDocument(id=stored_id, content=token, embedding=embedding))
        return sealed

    def _open(self, stored: VectorDocument, name: str | None = None) -> VectorDocument:
        """Decrypt a stored document (`name`: its original id when known, for errors)."""
        if name is None:
            name = f"(stored as {stored.id})" if self._hash else stored.id
        try:
            payload = json.loads(self.keyring.open(stored.content, self._context + stored.id.encode("utf-8")))
            if not isinstance(payload, dict) or not {"content", "metadata"} <= payload.keys():
                raise ValueError("does not hold a document")
            if ("embedding" in payload) != self.encrypt_embeddings:
                held = "an encrypted embedding" if "embedding" in payload else "no encrypted embedding"
                raise ValueError(
                    f"holds {held}: open the collection with encrypt_embeddings={not self.encrypt_embeddings}"
                )
            if self._hash:
                found = payload.get("id")
                if not isinstance(found, str) or self._hash(found) != stored.id:
                    raise ValueError("holds another document's id")
                name = found
            embedding: Any = stored.embedding
            if self.encrypt_embeddings:
                embedding = np.frombuffer(unb64(payload["embedding"]), dtype="<f4").tolist()
            elif "sketch" in payload:  # tokens written before 2026-11-29 hold none: their embeddings go unchecked
                _check_sketch(payload["sketch"], embedding)
            return VectorDocument(
                id=name, content=payload["content"], embedding=embedding, metadata=payload["metadata"]
            )
        except (ValueError, TypeError, ValidationError) as error:
            raise CorruptMemoryError(f"document {name!r} {error}") from None

    def _all_steps(self) -> Steps[list[VectorDocument]]:
        """Read and decrypt the whole collection."""
        stored_ids: list[str] = yield Call(self.inner, "ids")
        documents: list[VectorDocument] = []
        for start in range(0, len(stored_ids), _CHUNK):
            chunk: list[VectorDocument] = yield Call(self.inner, "get", (stored_ids[start : start + _CHUNK],))
            documents += map(self._open, chunk)
        return documents

    # VectorMemory ----------------------------------------------------------------------------------------------

    def _store(self, documents: DocumentsIn) -> Steps[None]:
        """Encrypt and upsert documents by id."""
        yield Call(self.inner, "store", (self._seal(documents),))

    store, astore = twins(_store)

    def _query_dimension(self) -> int | None:
        return self.inner.dimension

    def _search_query(self, search: SearchQuery) -> Steps[list[ScoredDocument]]:
        """Exact top-k search; a metadata `filter` is applied after decryption (see the module docs)."""
        top_k, threshold, predicate = search.top_k, search.threshold, search.predicate
        query = search.vector.tolist()
        if self.encrypt_embeddings:
            index = VectorIndex(self.inner.dimension, self.metric)
            index.upsert(index.prepare((yield from self._all_steps()), stored=True))
            return index.query(search)
        if predicate is None and not self._hash:  # the backend's ranking and tie-break are final
            hits = yield Call(self.inner, "search", (query,), {"top_k": top_k, "threshold": threshold})
            return [ScoredDocument(document=self._open(hit.document), score=hit.score) for hit in hits]
        if top_k == 0:
            return []
        page = max(2 * top_k, _PAGE)
        while True:
            hits = yield Call(self.inner, "search", (query,), {"top_k": page, "threshold": threshold})
            found = [(hit.score, self._open(hit.document)) for hit in hits]
            matches = sorted(
                ((score, doc) for score, doc in found if predicate is None or predicate(doc.metadata)),
                key=lambda hit: (-hit[0], hit[1].id),
            )
            # Done when the backend has nothing more, or when the k-th match scores strictly above every hit not
            # yet fetched (so no unseen document can tie with it and win on its original id).
            if len(hits) < page or (len(matches) >= top_k and matches[top_k - 1][0] > hits[-1].score):
                return [ScoredDocument(document=doc, score=score) for score, doc in matches[:top_k]]
            page *= 4

    def _get(self, ids: Iterable[str]) -> Steps[list[VectorDocument]]:
        """Documents by id, decrypted, in the order asked."""
        wanted = check_ids(ids)
        stored_ids = [self.stored_id(i) for i in wanted]
        names = dict(zip(stored_ids, wanted))
        stored: list[VectorDocument] = yield Call(self.inner, "get", (stored_ids,))
        return [self._open(document, names.get(document.id)) for document in stored]

    get, aget = twins(_get)

    def _delete(self, ids: Iterable[str]) -> Steps[None]:
        """Delete documents by id."""
        yield Call(self.inner, "delete", ([self.stored_id(i) for i in check_ids(ids)],))

    delete, adelete = twins(_delete)

    def _count(self) -> Steps[int]:
        """The number of documents."""
        count: int = yield Call(self.inner, "count")
        return count

    count, acount = twins(_count)

    def _clear(self) -> Steps[None]:
        """Delete every document."""
        yield Call(self.inner, "clear")

    clear, aclear = twins(_clear)

    def _ids(self) -> Steps[list[str]]:
        """Every document id, sorted; with `id_key`, recovered by decrypting every document."""
        if not self._hash:
            stored_ids: list[str] = yield Call(self.inner, "ids")
            return stored_ids
        return sorted(document.id for document in (yield from self._all_steps()))

    ids, aids = twins(_ids)

    def _reencrypt(self) -> Steps[int]:
        """Rewrite the documents sealed with an older key with the newest one; returns how many.

        Not atomic with concurrent writers: a document stored by another writer between this call's read and
        its write may be overwritten with its older value. Run it while nothing else writes to the collection.
        """
        stored_ids: list[str] = yield Call(self.inner, "ids")
        rewritten = 0
        for start in range(0, len(stored_ids), _CHUNK):
            chunk: list[VectorDocument] = yield Call(self.inner, "get", (stored_ids[start : start + _CHUNK],))
            old = [self._open(d) for d in chunk if Keyring.key_id(d.content) != self.keyring.current]
            if old:
                yield Call(self.inner, "store", (self._seal(old),))
                rewritten += len(old)
        return rewritten

    reencrypt, areencrypt = twins(_reencrypt)
