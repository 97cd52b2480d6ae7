"""Every case of the hostile input corpus (`hostile_cases.py`) against every backend it applies to.

A case is either refused with a typed memwoven error before anything is written (the store is compared before
and after), or stored and given back exactly (compared as JSON, through the writing object and a fresh one),
with no other session able to see it. pytest-timeout turns a hang into a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hostile_cases import CASES, DIMENSION, EITHER, FILTER_CORPUS, OK_VECTOR, REJECT, Case
from reliability_stores import CHAT_KINDS, SHARED_KINDS, VECTOR_KINDS, Store, fresh_store

from memwoven import ChatMemory, Message, VectorDocument, VectorMemory
from memwoven.errors import InvalidInputError, MemwovenError
from memwoven.models import coerce_messages
from memwoven.urls import open_chat_memory, open_vector_memory
from memwoven_test_support import unique_name

SENTINEL = "sentinel"
SENTINEL_HISTORY = [Message(role="system", content="be kind"), Message(role="user", content="hello")]
KEEP = VectorDocument(id="keep", content="kept", embedding=[0.5, 1.0, 0.5, 1.0], metadata={"keep": True})

pytestmark = pytest.mark.timeout(120)


def _cases(*targets: str) -> list[Any]:
    return [case for case in CASES if case.values[0].target in targets]


@pytest.fixture(scope="module", params=CHAT_KINDS)
def chat_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store per backend for the whole module, holding only the sentinel session between tests."""
    with fresh_store(request.param, tmp_path_factory.mktemp("hostile"), "mwh") as store:
        with store.chat() as memory:
            memory.save(SENTINEL, SENTINEL_HISTORY)
        yield store


@pytest.fixture
def chat(chat_store: Store) -> Iterator[ChatMemory]:
    memory = chat_store.chat()
    assert memory.sessions() == [SENTINEL], "a previous case left something behind"
    yield memory
    for session_id in memory.sessions():  # after a failure, so that one failure does not fail the next cases
        if session_id != SENTINEL:
            memory.clear(session_id)
    memory.close()


def _unchanged(store: Store, memory: ChatMemory) -> None:
    assert memory.sessions() == [SENTINEL]
    assert memory.load(SENTINEL) == SENTINEL_HISTORY
    with store.chat() as fresh:
        assert fresh.sessions() == [SENTINEL]


@pytest.mark.parametrize("case", _cases("ids"))
def test_session_ids(chat_store: Store, chat: ChatMemory, case: Case) -> None:
    ids = case.value()
    if case.outcome == REJECT:
        [bad] = ids
        for call in (
            lambda: chat.load(bad),
            lambda: chat.load_versioned(bad),
            lambda: chat.save(bad, [Message(role="user", content="x")]),
            lambda: chat.append(bad, [Message(role="user", content="x")]),
            lambda: chat.update(bad, lambda messages: [*messages, Message(role="user", content="x")]),
            lambda: chat.clear(bad),
            lambda: chat.session(bad),
        ):
            with pytest.raises(InvalidInputError):
                call()
        _unchanged(chat_store, chat)
        return
    histories = {sid: [Message(role="user", content=f"#{n}", metadata={"n": n})] for n, sid in enumerate(ids)}
    for sid, history in histories.items():
        chat.save(sid, history)
    expected_sessions = sorted({SENTINEL, *ids})
    with chat_store.chat() as fresh:
        for reader in (chat, fresh):
            assert reader.sessions() == expected_sessions
            for sid, history in histories.items():
                assert reader.load(sid) == history, f"{sid[:40]!r} reads another session"
    first, *others = ids
    chat.append(first, [Message(role="assistant", content="only the first")])
    for sid in others:
        assert chat.load(sid) == histories[sid]
    for sid in ids:
        chat.clear(sid)
    _unchanged(chat_store, chat)


@pytest.mark.parametrize("case", _cases("messages"))
def test_messages(chat_store: Store, chat: ChatMemory, case: Case) -> None:
    value = case.value()
    first = Message(role="user", content="first")
    before = chat.save("target", [first])
    rejected = case.outcome == REJECT
    if case.outcome == EITHER:
        try:
            chat.append("target", value)
        except InvalidInputError:
            rejected = True
        else:
            chat.save("target", [first])
            before = chat.load_versioned("target").version
    if rejected:
        with pytest.raises(InvalidInputError):
            chat.save("target", [first, *value] if isinstance(value, list) else value)
        with pytest.raises(InvalidInputError):
            chat.append("target", value)
        with pytest.raises(InvalidInputError):
            chat.save("fresh", value)
        assert chat.load_versioned("target") == ([first], before)
        chat.clear("target")
        _unchanged(chat_store, chat)
        return
    expected = [first, *coerce_messages(value)]
    chat.append("target", value)
    chat.save("saved", expected)
    with chat_store.chat() as fresh:
        for reader in (chat, fresh):
            assert reader.load("target") == expected
            assert reader.load("saved") == expected
            assert reader.sessions() == sorted([SENTINEL, "saved", "target"])
    chat.clear("target")
    chat.clear("saved")
    _unchanged(chat_store, chat)


# Vectors ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=VECTOR_KINDS)
def vector_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with fresh_store(request.param, tmp_path_factory.mktemp("hostile-vectors"), "mwhv") as store:
        yield store


@pytest.fixture
def collection(vector_store: Store) -> Iterator[VectorMemory]:
    """A fresh collection of dimension 4 holding one document."""
    memory = vector_store.vector(unique_name("c"), dimension=DIMENSION)
    memory.store([KEEP])
    yield memory
    memory.close()


def _only_keep(memory: VectorMemory) -> None:
    assert memory.count() == 1
    assert memory.ids() == ["keep"]
    assert memory.get(["keep"]) == [KEEP.model_copy(update={"embedding": memory.get(["keep"])[0].embedding})]
    assert [hit.document.id for hit in memory.search(OK_VECTOR, top_k=5)] == ["keep"]


def _reopened(store: Store, memory: VectorMemory) -> VectorMemory | None:
    if store.kind not in SHARED_KINDS:
        return None
    name = memory.collection if hasattr(memory, "collection") else Path(memory.path).stem  # type: ignore[attr-defined]
    return store.vector(name)


@pytest.mark.parametrize("case", _cases("document"))
def test_documents(vector_store: Store, collection: VectorMemory, case: Case) -> None:
    value = case.value()
    rejected = case.outcome == REJECT
    if case.outcome == EITHER:
        try:
            collection.store([VectorDocument(id="also", embedding=OK_VECTOR), value])
        except InvalidInputError:
            rejected = True
        else:
            collection.delete(["also"])
    if rejected:
        with pytest.raises(InvalidInputError):
            collection.store([VectorDocument(id="also", embedding=OK_VECTOR), value])
        _only_keep(collection)
        second = _reopened(vector_store, collection)
        if second is not None:
            with second:
                _only_keep(second)
        return
    expected = VectorDocument.model_validate(value)
    collection.store([value])
    second = _reopened(vector_store, collection)
    for reader in [collection] + ([second] if second is not None else []):
        [got] = reader.get([expected.id])
        assert got.id == expected.id
        assert got.content == expected.content
        assert json.dumps(got.metadata, sort_keys=True) == json.dumps(expected.metadata, sort_keys=True)
        want = np.asarray(expected.embedding, dtype=np.float32)
        if vector_store.kind == "qdrant":  # Qdrant keeps unit vectors and the norm: float32 precision of the norm
            assert np.allclose(got.embedding, want, rtol=1e-6, atol=1e-6 * float(np.linalg.norm(want)))
        else:
            assert list(got.embedding) == want.tolist()
        assert sorted(reader.ids()) == sorted(["keep", expected.id])
        assert reader.search(expected.embedding, top_k=1)[0].document.id == expected.id
    if second is not None:
        second.close()


@pytest.mark.parametrize("case", _cases("query"))
def test_queries(collection: VectorMemory, case: Case) -> None:
    with pytest.raises(InvalidInputError):
        collection.search(case.value())
    _only_keep(collection)


@pytest.fixture(scope="module")
def filtered(vector_store: Store) -> Iterator[VectorMemory]:
    """One collection per backend holding `FILTER_CORPUS`."""
    memory = vector_store.vector("filters", dimension=DIMENSION)
    memory.store([{**item, "content": item["id"], "embedding": OK_VECTOR} for item in FILTER_CORPUS])
    yield memory
    memory.close()


@pytest.mark.parametrize("case", _cases("filter"))
def test_filters(filtered: VectorMemory, case: Case) -> None:
    if case.outcome == REJECT:
        with pytest.raises(InvalidInputError):
            filtered.search(OK_VECTOR, top_k=10, filter=case.value())
    else:
        found = {hit.document.id for hit in filtered.search(OK_VECTOR, top_k=10, filter=case.value())}
        assert found == case.expected
    assert filtered.count() == len(FILTER_CORPUS)


# URLs ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opener", ["chat", "vector"])
@pytest.mark.parametrize("case", _cases("url"))
def test_urls(case: Case, opener: str) -> None:
    url = case.value()
    with pytest.raises(MemwovenError) as raised:  # noqa: PT012 - opening or the first use may refuse the URL
        memory: Any = open_chat_memory(url) if opener == "chat" else open_vector_memory(url, dimension=DIMENSION)
        try:
            memory.load("s") if opener == "chat" else memory.count()
        finally:
            memory.close()
    assert "s3cret" not in str(raised.value)
