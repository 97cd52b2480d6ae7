"""Every backend works from any event loop, one after another and at once (issue 19 §3, issue 18).

An object built in sync code is used from 20 successive `asyncio.run` calls (a write and a read in each, as
LlamaIndex's sync methods make them), then by concurrent tasks on a new loop: 100 appends of id-carrying messages
beside 100 read-modify-write increments, or 100 stores each followed by a search. No call may fail, every write
must be stored exactly once, nothing may be left unclosed (a ResourceWarning fails the test, and so does a socket
of this process still open after `close()`).
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import re
import stat
import sys
import warnings
from collections import Counter
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any

import pytest
from reliability_stores import CHAT_KINDS, VECTOR_KINDS, Store

from memwoven import ChatMemory, Message, VectorDocument, VectorMemory

SUCCESSIVE = 20
TASKS = 100

pytestmark = pytest.mark.timeout(180)


def _sockets() -> set[tuple[int, int]]:
    """The sockets this process has open: (descriptor, inode) pairs."""
    found = set()
    for name in os.listdir("/dev/fd"):
        try:
            status = os.fstat(int(name))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if stat.S_ISSOCK(status.st_mode):
            found.add((int(name), status.st_ino))
    return found


def _collect() -> list[str]:
    """Collect garbage; what finalizers raised, which would otherwise surface in a later test."""
    raised: list[str] = []

    def record(event: Any) -> None:
        where = getattr(event.object, "__qualname__", type(event.object).__name__)
        raised.append(f"raised in {where}: {event.exc_type.__name__}: {event.exc_value}")

    hook, sys.unraisablehook = sys.unraisablehook, record
    try:
        gc.collect()
    finally:
        sys.unraisablehook = hook
    return raised


@pytest.fixture
def nothing_left_open() -> Iterator[None]:
    """Fail if the test leaves a socket of this process open, or unclosed resources to the garbage collector."""
    with warnings.catch_warnings():  # what earlier tests left behind is theirs to answer for
        warnings.simplefilter("ignore", ResourceWarning)
        _collect()
    before = _sockets()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        raised = _collect()
    unclosed = [str(w.message) for w in caught if w.category is ResourceWarning]
    left = Counter(re.sub(r" at 0x[0-9a-f]+", "", text) for text in unclosed + raised)
    assert left == {}, "resources left unclosed (message: how many)"
    assert _sockets() - before == set(), "sockets left open"


async def _failures(calls: Sequence[Awaitable[Any]]) -> list[BaseException]:
    """Run `calls` at once; the exceptions they raised."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    return [result for result in results if isinstance(result, BaseException)]


def _message(name: str) -> Message:
    return Message(role="user", content=f"text of {name}", id=name)


async def _append_and_load(memory: ChatMemory, i: int) -> list[Message]:
    await memory.aappend("successive", [_message(f"s{i}")])
    return await memory.aload("successive")


def _increment(messages: list[Message]) -> list[Message]:
    return [*messages, Message(role="user", content=str(len(messages)))]


@pytest.mark.parametrize("store", CHAT_KINDS, indirect=True)
def test_a_chat_memory_serves_successive_and_concurrent_event_loops(nothing_left_open: None, store: Store) -> None:
    memory = store.chat()
    try:
        for i in range(SUCCESSIVE):
            assert [m.id for m in asyncio.run(_append_and_load(memory, i))] == [f"s{n}" for n in range(i + 1)]
        appends = [memory.aappend("appended", [_message(f"t{i}")]) for i in range(TASKS)]
        increments = [memory.aupdate("counter", _increment) for _ in range(TASKS)]
        assert asyncio.run(_failures(appends + increments)) == []
        assert [m.id for m in memory.load("successive")] == [f"s{i}" for i in range(SUCCESSIVE)]
        appended = [str(m.id) for m in memory.load("appended")]
        assert sorted(appended) == sorted(f"t{i}" for i in range(TASKS))  # each exactly once
        assert [m.text for m in memory.load("counter")] == [str(i) for i in range(TASKS)]  # no increment lost
    finally:
        memory.close()


def _document(name: str, i: int) -> VectorDocument:
    """A document whose embedding points in a direction of its own (so a search for it finds it first)."""
    angle = 2 * math.pi * i / (SUCCESSIVE + TASKS)
    return VectorDocument(id=name, content=f"text of {name}", embedding=[math.cos(angle), math.sin(angle), 0.0, 0.0])


async def _store_and_search(memory: VectorMemory, name: str, i: int) -> list[str]:
    document = _document(name, i)
    await memory.astore([document])
    return [hit.document.id for hit in await memory.asearch(document.embedding, top_k=1)]


@pytest.mark.parametrize("store", VECTOR_KINDS, indirect=True)
def test_a_vector_memory_serves_successive_and_concurrent_event_loops(nothing_left_open: None, store: Store) -> None:
    memory = store.vector("loops", dimension=4)
    try:
        for i in range(SUCCESSIVE):
            assert asyncio.run(_store_and_search(memory, f"s{i}", i)) == [f"s{i}"]
            assert asyncio.run(memory.acount()) == i + 1

        async def concurrently() -> list[Any]:
            calls = [_store_and_search(memory, f"t{i}", SUCCESSIVE + i) for i in range(TASKS)]
            return await asyncio.gather(*calls, return_exceptions=True)

        outcomes = asyncio.run(concurrently())
        assert [o for o in outcomes if isinstance(o, BaseException)] == []
        assert outcomes == [[f"t{i}"] for i in range(TASKS)]  # each store seen by its own search
        names = [f"s{i}" for i in range(SUCCESSIVE)] + [f"t{i}" for i in range(TASKS)]
        assert memory.ids() == sorted(names)
        assert [d.content for d in memory.get(names)] == [f"text of {name}" for name in names]
    finally:
        memory.close()
