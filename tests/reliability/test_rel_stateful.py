"""Stateful property tests: random sequences of operations on every backend, checked against a plain model.

Hypothesis drives a `RuleBasedStateMachine` through random saves, appends, updates, compare-and-swaps, loads and
clears over a few sessions whose ids are twins of each other (case, Unicode normalization, `%`/`_`), and through
random stores, deletes, gets and searches over a few document ids. Every step goes through one of two objects
over the same storage (so caches must stay coherent with another writer), and every result is compared with a
dict kept by the test. 200 examples per backend, a few steps each.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test
from reliability_stores import CHAT_KINDS, SHARED_KINDS, VECTOR_KINDS, Store, fresh_store

from memwoven import ChatMemory, Message, VectorMemory
from memwoven.errors import ConcurrentModificationError
from memwoven_test_support import unique_name

SETTINGS = settings(
    max_examples=200,
    stateful_step_count=6,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
NFC = unicodedata.normalize("NFC", "é")
SESSIONS = ["s", "S", NFC, unicodedata.normalize("NFD", NFC), "a%", "a_"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with fresh_store(request.param, tmp_path, "mws") as where:
        yield where


# Chat --------------------------------------------------------------------------------------------------------

metadata_values = st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from([1.0, 0.5, -0.0]), st.text(max_size=3))
messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6),
    metadata=st.dictionaries(st.sampled_from(["k", "n", ""]), metadata_values, max_size=2),
)
histories = st.lists(messages, max_size=4)


def _exact(history: list[Message]) -> list[str]:
    return [m.model_dump_json() for m in history]


class ChatMachine(RuleBasedStateMachine):
    """Two objects over one chat store against a dict of session -> messages.

    The objects live for the whole test (examples clean up after themselves), so their caches also meet the
    sessions of earlier examples, cleared and re-created.
    """

    objects: list[ChatMemory]

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, list[Message]] = {}
        self.versions: dict[str, set[int]] = {}  # every version each session was ever given
        self.current: dict[str, int] = {}

    def _written(self, session: str, history: list[Message], version: int) -> None:
        if history:
            assert version > 0, "a stored history has a version"
            assert version not in self.versions.setdefault(session, set()), "a version was reused"
            assert version > max(self.versions[session], default=0), "versions must only grow"
            self.versions[session].add(version)
            self.model[session] = history
        else:
            assert version == 0
            self.model.pop(session, None)
        self.current[session] = version

    @rule(via=st.integers(0, 1), session=st.sampled_from(SESSIONS), history=histories)
    def save(self, via: int, session: str, history: list[Message]) -> None:
        self._written(session, history, self.objects[via].save(session, history))

    @rule(via=st.integers(0, 1), session=st.sampled_from(SESSIONS), added=st.lists(messages, min_size=1, max_size=3))
    def append(self, via: int, session: str, added: list[Message]) -> None:
        self._written(session, [*self.model.get(session, []), *added], self.objects[via].append(session, added))

    @rule(via=st.integers(0, 1), session=st.sampled_from(SESSIONS), keep=st.integers(0, 3), added=histories)
    def update(self, via: int, session: str, keep: int, added: list[Message]) -> None:
        def change(history: list[Message]) -> list[Message]:
            assert _exact(history) == _exact(self.model.get(session, []))
            return [*history[:keep], *added]

        expected = [*self.model.get(session, [])[:keep], *added]
        self._written(session, expected, self.objects[via].update(session, change))

    @rule(via=st.integers(0, 1), session=st.sampled_from(SESSIONS), history=histories)
    def compare_and_swap(self, via: int, session: str, history: list[Message]) -> None:
        _, version = self.objects[via].load_versioned(session)
        assert version == self.current.get(session, 0)
        self._written(session, history, self.objects[1 - via].save(session, history, expected_version=version))

    @precondition(lambda self: any(len(v) > 0 for v in self.versions.values()))
    @rule(via=st.integers(0, 1), session=st.sampled_from(SESSIONS))
    def stale_save_is_refused(self, via: int, session: str) -> None:
        stale = [v for v in self.versions.get(session, set()) if v != self.current.get(session, 0)]
        if not stale:
            return
        with pytest.raises(ConcurrentModificationError):
            self.objects[via].save(session, [Message(role="user", content="lost")], expected_version=min(stale))

    @rule(via=st.integers(0, 1), session=st.sampled_from(SESSIONS))
    def clear(self, via: int, session: str) -> None:
        self.objects[via].clear(session)
        self.model.pop(session, None)
        self.current[session] = 0

    @rule(via=st.integers(0, 1), session=st.sampled_from(SESSIONS))
    def load(self, via: int, session: str) -> None:
        loaded, version = self.objects[via].load_versioned(session)
        assert _exact(loaded) == _exact(self.model.get(session, []))
        assert version == self.current.get(session, 0)

    @rule(via=st.integers(0, 1))
    def sessions(self, via: int) -> None:
        assert self.objects[via].sessions() == sorted(self.model)

    def teardown(self) -> None:
        for session in self.current:
            self.objects[0].clear(session)


def _two_objects(store: Store, open_one: Any) -> list[Any]:
    """Two objects over the same storage (the same object twice where storage is private to one object)."""
    first = open_one()
    return [first, open_one() if store.kind in SHARED_KINDS else first]


@pytest.mark.parametrize("store", CHAT_KINDS, indirect=True)
def test_chat_operations_match_a_dict(store: Store) -> None:
    objects = _two_objects(store, store.chat)
    try:
        run_state_machine_as_test(type("Chat", (ChatMachine,), {"objects": objects}), settings=SETTINGS)
    finally:
        for memory in {id(m): m for m in objects}.values():
            memory.close()


# Vectors -----------------------------------------------------------------------------------------------------

# Directions whose cosines with each other are exactly equal or far apart, so the ranking is never decided by
# float rounding (ties are exact and broken by id, as the contract says).
POOL = [(1, 0, 0, 0), (0, 1, 0, 0), (1, 1, 0, 0), (1, 2, 3, 4), (4, 3, 2, 1), (-1, 0, 0, 0)]
IDS = ["a", "A", "b", "10", "1", "ü"]
FILTERS: list[dict[str, Any] | None] = [None, {"g": 1}, {"g": {"$gte": 2}}, {"$not": {"g": 0}}, {"g": {"$in": [0, 3]}}]


def _cosine(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _matches(metadata: dict[str, Any], spec: dict[str, Any] | None) -> bool:
    """The handful of filters above, evaluated by hand (not by memwoven.filters)."""
    g = metadata["g"]
    if spec is None:
        return True
    if spec == {"g": 1}:
        return bool(g == 1)
    if spec == {"g": {"$gte": 2}}:
        return bool(g >= 2)
    if spec == {"$not": {"g": 0}}:
        return bool(g != 0)
    return g in (0, 3)


documents = st.fixed_dictionaries(
    {
        "id": st.sampled_from(IDS),
        "vector": st.sampled_from(POOL),
        "g": st.integers(0, 3),
        # no NUL: PostgreSQL text cannot hold it (refused with InvalidInputError, see the hostile corpus)
        "content": st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=4),
    }
)


class VectorMachine(RuleBasedStateMachine):
    """Two objects over one collection against a dict of id -> (vector, metadata, content)."""

    objects: list[VectorMemory]

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, dict[str, Any]] = {}

    @rule(via=st.integers(0, 1), batch=st.lists(documents, min_size=1, max_size=3))
    def store_documents(self, via: int, batch: list[dict[str, Any]]) -> None:
        self.objects[via].store(
            [
                {"id": d["id"], "content": d["content"], "embedding": list(d["vector"]), "metadata": {"g": d["g"]}}
                for d in batch
            ]
        )
        for d in batch:  # the last one of an id wins
            self.model[d["id"]] = d

    @rule(via=st.integers(0, 1), ids=st.lists(st.sampled_from([*IDS, "never"]), max_size=3))
    def delete(self, via: int, ids: list[str]) -> None:
        self.objects[via].delete(ids)
        for doc_id in ids:
            self.model.pop(doc_id, None)

    @rule(via=st.integers(0, 1))
    def clear(self, via: int) -> None:
        self.objects[via].clear()
        self.model.clear()

    @rule(via=st.integers(0, 1), ids=st.lists(st.sampled_from([*IDS, "never"]), max_size=4))
    def get(self, via: int, ids: list[str]) -> None:
        got = self.objects[via].get(ids)
        expected = [doc_id for doc_id in ids if doc_id in self.model]
        assert [d.id for d in got] == expected
        for document in got:
            want = self.model[document.id]
            # exact to float32 precision: Qdrant keeps a unit vector and the norm
            assert list(document.embedding) == pytest.approx([float(x) for x in want["vector"]], rel=1e-6)
            assert (document.content, document.metadata) == (want["content"], {"g": want["g"]})
            assert json.dumps(document.metadata) == json.dumps({"g": want["g"]})

    @rule(
        via=st.integers(0, 1),
        query=st.sampled_from(POOL),
        top_k=st.integers(0, 7),
        threshold=st.sampled_from([None, 0.0, 0.5, -1.0]),
        spec=st.sampled_from(FILTERS),
    )
    def search(
        self, via: int, query: tuple[int, ...], top_k: int, threshold: float | None, spec: dict[str, Any] | None
    ) -> None:
        hits = self.objects[via].search(list(query), top_k=top_k, threshold=threshold, filter=spec)
        scored = [
            (round(_cosine(d["vector"], query), 6), doc_id)
            for doc_id, d in self.model.items()
            if _matches({"g": d["g"]}, spec)
        ]
        scored = [(score, doc_id) for score, doc_id in scored if threshold is None or score > threshold + 1e-6]
        expected = sorted(scored, key=lambda pair: (-pair[0], pair[1]))[:top_k]
        assert [h.document.id for h in hits] == [doc_id for _, doc_id in expected]
        assert [h.score for h in hits] == pytest.approx([score for score, _ in expected], abs=1e-5)

    @rule(via=st.integers(0, 1))
    def count_and_ids(self, via: int) -> None:
        reader = self.objects[via]
        assert reader.count() == len(self.model)
        assert reader.ids() == sorted(self.model)

    def teardown(self) -> None:
        if self.model:
            self.objects[0].clear()


@pytest.mark.parametrize("store", VECTOR_KINDS, indirect=True)
def test_vector_operations_match_a_dict(store: Store) -> None:
    collection = unique_name("c")
    objects = _two_objects(store, lambda: store.vector(collection, dimension=4))
    try:
        run_state_machine_as_test(type("Vectors", (VectorMachine,), {"objects": objects}), settings=SETTINGS)
    finally:
        for memory in {id(m): m for m in objects}.values():
            memory.close()
