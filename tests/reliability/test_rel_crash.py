"""A writer killed with SIGKILL at random moments, 200 times per backend, never leaves a torn state behind.

The writer (`reliability_jobs.crash_writer`, forked from the zygote so a restart costs milliseconds) loops
forever: save a history of generation g (state 2g), append one message (2g+1), store a collection of generation g
(state 2g), delete one document (2g+1). It acknowledges each write once it returned. The parent waits for a
random number of acknowledgements, sleeps a random sliver more and kills it: often mid-write, sometimes while it
connects. Then, with fresh objects, every load must return exactly one of the two states the acknowledgements
allow (the last acknowledged one, or the one that was in flight), whole and byte-exact, and the next writer must
be able to write again (a lock or a half transaction left behind would stop it). Each writer continues the
generations of the last, so a state from before the last acknowledgement can never pass.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from reliability_jobs import CHAT_ACK, CRASH_DOCS, VECTOR_ACK, chat_state, documents, read_acks
from reliability_processes import Zygote
from reliability_stores import Store

from memwoven import Message

KILLS = int(os.environ.get("MW_CRASH_KILLS", "200"))
SESSION = "crash ☃ 100%_*"
COLLECTION = "crash"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _chat_state_of(messages: list[Message]) -> int:
    """The state number of a loaded history, checking it is that state exactly (-1 for none yet)."""
    if not messages:
        return -1
    generation = messages[0].metadata["g"]
    appended = messages[-1].role == "tool"
    expected = chat_state(generation, appended)
    assert [m.model_dump_json() for m in messages] == [m.model_dump_json() for m in expected], "a torn history"
    return 2 * generation + appended


def _vector_state_of(store: Store) -> int:
    """The state number of the stored collection, checking it is that state exactly (-1 for none yet)."""
    with store.vector(COLLECTION) as memory:
        found = memory.get([f"d{i}" for i in range(CRASH_DOCS)])
        assert memory.count() == len(found)
        assert memory.ids() == sorted(d.id for d in found)
    if not found:
        return -1
    generation = found[0].metadata["g"]
    deleted = len(found) == CRASH_DOCS - 1
    expected = documents(generation)[: len(found)]
    assert [d.id for d in found] == [d.id for d in expected], "a torn collection (documents missing)"
    for got, want in zip(found, expected):
        assert (got.content, got.metadata) == (want.content, want.metadata), "a torn collection (mixed generations)"
        assert list(got.embedding) == pytest.approx(list(want.embedding), rel=1e-6)
    return 2 * generation + deleted


def _wait_for_acks(path: str, wanted: int, pid: int, deadline: float) -> None:
    while len(read_acks(path)) < wanted and time.monotonic() < deadline:
        time.sleep(0.0005)
    assert time.monotonic() < deadline, f"writer {pid} made no progress"


@pytest.mark.parametrize("store", ["file", "sqlite", "postgresql"], indirect=True)
def test_a_writer_killed_at_random_moments_leaves_a_whole_earlier_or_later_state(
    zygote: Zygote, store: Store, tmp_path: Path
) -> None:
    rng = random.Random(f"crash-{store.kind}")
    cache_off = {"cache_size": 0}
    with store.chat() as memory:
        memory.load(SESSION)  # create the tables before the first kill
    chat_seen = vector_seen = -1
    next_generation = 0
    in_loop = 0
    for kill in range(KILLS):
        ack_path = str(tmp_path / f"acks-{kill}")
        pid, error = zygote.fork("crash_writer", store, SESSION, COLLECTION, ack_path, next_generation)
        wanted = rng.choice([0, 1, 2, 3, 4, 4, 5, 7])
        _wait_for_acks(ack_path, wanted, pid, time.monotonic() + 60)
        time.sleep(rng.uniform(0, 0.004))
        os.kill(pid, signal.SIGKILL)
        outcome = zygote.reap(pid, error)
        assert outcome.signal == signal.SIGKILL, f"the writer died on its own:\n{outcome.error}"
        acks = read_acks(ack_path)
        first = 2 * next_generation
        allowed: dict[int, set[int]] = {}
        for what, seen in ((CHAT_ACK, chat_seen), (VECTOR_ACK, vector_seen)):
            mine = [state for kind, state in acks if kind == what]
            # the last acknowledged state, or the next one (in flight when the kill came)
            allowed[what] = {mine[-1], mine[-1] + 1} if mine else {seen, first}
        with store.chat(**cache_off) as reader:
            chat_seen = _chat_state_of(reader.load(SESSION))
            assert reader.sessions() == ([SESSION] if chat_seen >= 0 else [])
        vector_seen = _vector_state_of(store)
        assert chat_seen in allowed[CHAT_ACK], (kill, chat_seen, allowed[CHAT_ACK])
        assert vector_seen in allowed[VECTOR_ACK], (kill, vector_seen, allowed[VECTOR_ACK])
        in_loop += bool(acks)
        next_generation = max(next_generation, max(chat_seen, vector_seen) // 2 + 1)
    # the store is writable after the last kill too, through the same API an application uses
    with store.chat() as memory:
        version = memory.save(SESSION, chat_state(next_generation, False))
        assert memory.load_versioned(SESSION) == (chat_state(next_generation, False), version)
    with store.vector(COLLECTION) as vectors:
        vectors.store(documents(next_generation))
    assert _vector_state_of(store) == 2 * next_generation
    assert in_loop > KILLS // 2, "too few kills landed in the write loop to prove anything"
