"""8 processes x 100 turns on one session, through every write path, on every backend several processes share.

Paths: the LangChain history (`add_messages`, two messages a turn), the LlamaIndex chat store (`add_message`),
the core `append`, and the core read-modify-write `update` (load, add one message, save under the optimistic
version, retry on conflict). Odd writers use the async API, even writers the sync one. Afterwards every message
is there exactly once and each writer's messages are in its own order. Then 8 processes store and delete
documents of one collection; the final state of each id must be the value of a write no other write to that id
certainly followed (a linearizability check on the final state, with one clock for all processes).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from reliability_jobs import CHAT_PATHS, MESSAGES_PER_TURN, turn_text, vector_for
from reliability_processes import Zygote
from reliability_stores import SHARED_KINDS, Store

WRITERS = 8
TURNS = 100
VECTOR_OPERATIONS = 100
VECTOR_IDS = 24

pytestmark = pytest.mark.slow


def _check_outcomes(outcomes: list[Any]) -> None:
    failures = [o for o in outcomes if not o.ok]
    assert not failures, "writers failed:\n" + "\n".join(f"{o.exit_code} {o.signal}\n{o.error}" for o in failures)


@pytest.mark.parametrize("path", CHAT_PATHS)
@pytest.mark.parametrize("store", SHARED_KINDS, indirect=True)
def test_eight_processes_lose_nothing(zygote: Zygote, store: Store, path: str) -> None:
    session = f"shared {path} ☃ 50%_*"
    with store.chat() as memory:
        assert memory.load(session) == []  # creates the tables before the race
    outcomes = zygote.group("chat_turns", [(store, session, path, w, TURNS) for w in range(WRITERS)])
    _check_outcomes(outcomes)
    with store.chat() as memory:
        texts = [m.text for m in memory.load(session)]
    per_turn = MESSAGES_PER_TURN[path]
    assert len(texts) == WRITERS * TURNS * per_turn
    duplicates = [text for text, seen in Counter(texts).items() if seen > 1]
    assert not duplicates, f"duplicated messages: {duplicates[:5]}"
    for writer in range(WRITERS):
        mine = [t for t in texts if t.split(" ")[0].split(":")[0] == f"w{writer}"]
        expected = [turn_text(writer, i) for i in range(TURNS)]
        if per_turn == 2:  # a LangChain turn is one atomic append of the question and its reply, side by side
            expected = [text for t in expected for text in (t, f"{t} reply")]
            position = {text: n for n, text in enumerate(texts)}
            assert all(position[f"{t} reply"] == position[t] + 1 for t in expected[::2])
        assert mine == expected, f"writer {writer}'s messages are missing or out of order"


def _final_value_is_a_last_write(log: list[tuple[str, str | None, int, int]], doc_id: str, final: str | None) -> bool:
    """True if `final` is the value of a write to `doc_id` that no other write to it certainly followed.

    Write B certainly followed write A if B started after A returned; the state a linearizable store ends in
    is the value of one of the writes nothing certainly followed (None: deleted, or never written).
    """
    writes = [(value, start, end) for i, value, start, end in log if i == doc_id]
    if not writes:
        return final is None
    candidates = {value for value, _, end in writes if not any(start > end for _, start, _ in writes)}
    return final in candidates


@pytest.mark.parametrize("store", SHARED_KINDS, indirect=True)
def test_eight_processes_storing_and_deleting_converge_on_the_last_writes(
    zygote: Zygote, store: Store, tmp_path: Path
) -> None:
    early = store.vector("shared", dimension=4)
    early.count()  # an object opened before the race, brought up to date incrementally afterwards
    logs = [tmp_path / f"writer{w}.json" for w in range(WRITERS)]
    arguments = [(store, "shared", w, VECTOR_OPERATIONS, VECTOR_IDS, str(logs[w])) for w in range(WRITERS)]
    _check_outcomes(zygote.group("vector_writes", arguments))
    log = [tuple(entry) for path in logs for entry in json.loads(path.read_text())]
    ids = [f"d{i}" for i in range(VECTOR_IDS)]
    with store.vector("shared") as late:
        for reader in (early, late):
            stored = {d.id: d for d in reader.get(ids)}
            for doc_id in ids:
                document = stored.get(doc_id)
                value = None if document is None else document.content
                assert _final_value_is_a_last_write(log, doc_id, value), (doc_id, value)  # type: ignore[arg-type]
                if document is not None:  # never a mix of two writes
                    assert document.metadata == {"tag": value}
                    assert list(document.embedding) == pytest.approx(vector_for(document.content))
            assert reader.count() == len(stored)
            assert {h.document.id for h in reader.search(vector_for("probe"), top_k=100)} == set(stored)
    early.close()
