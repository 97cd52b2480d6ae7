"""8 processes add turns to one session through `MemwovenChatMessageHistory`: nothing is lost or reordered.

Importing LangChain takes seconds, so a fresh interpreter is spawned once: it imports everything, then forks
the 8 writers (a fork of a single-threaded process that has opened nothing yet), which open their own
history from the URL, wait for each other at a barrier and then write at the same time.
"""

from __future__ import annotations

import multiprocessing

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_memwoven import MemwovenChatMessageHistory
from memwoven_test_support import unique_name

WRITERS = 8
TURNS = 15

WRITERS_SCRIPT = """
import multiprocessing

from langchain_core.messages import AIMessage, HumanMessage

from langchain_memwoven import MemwovenChatMessageHistory


def add_turns(writer, start):
    with MemwovenChatMessageHistory.from_url(url, session, **options) as history:
        start.wait(timeout=60)
        for turn in range(turns):
            call = {"name": "echo", "args": {"writer": writer, "turn": turn}, "id": f"c{writer}.{turn}"}
            history.add_messages(
                [
                    HumanMessage(f"w{writer} t{turn}", id=f"h-{writer}-{turn}"),
                    AIMessage("", id=f"a-{writer}-{turn}", tool_calls=[call]),
                ]
            )


with MemwovenChatMessageHistory.from_url(url, session, **options) as warm_up:  # imports drivers, creates tables
    assert warm_up.messages == []

context = multiprocessing.get_context("fork")
start = context.Barrier(writers)
processes = [context.Process(target=add_turns, args=(writer, start)) for writer in range(writers)]
for process in processes:
    process.start()
for process in processes:
    process.join(timeout=120)
codes = [process.exitcode for process in processes]
if codes != [0] * writers:
    raise SystemExit(f"writer exit codes: {codes}")
"""


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork()")
def test_concurrent_processes_lose_nothing(persistent_backend) -> None:  # type: ignore[no-untyped-def]
    url, options, session = persistent_backend.url, persistent_backend.options, unique_name("shared")
    variables = {"url": url, "options": options, "session": session, "writers": WRITERS, "turns": TURNS}
    parent = multiprocessing.get_context("spawn").Process(target=exec, args=(WRITERS_SCRIPT, variables))
    parent.start()
    parent.join(timeout=180)
    assert parent.exitcode == 0

    with MemwovenChatMessageHistory.from_url(url, session, **options) as history:
        messages = history.messages
    assert len(messages) == WRITERS * TURNS * 2
    for writer in range(WRITERS):
        mine = [m.id for m in messages if m.id and m.id.split("-")[1] == str(writer)]
        assert mine == [f"{kind}-{writer}-{turn}" for turn in range(TURNS) for kind in ("h", "a")]
    for human, reply in zip(messages[::2], messages[1::2]):  # each add_messages is one atomic append
        assert isinstance(human, HumanMessage)
        assert isinstance(reply, AIMessage)
        assert reply.id == "a" + (human.id or "")[1:]
        assert reply.tool_calls[0]["args"] == {
            "writer": int(human.id.split("-")[1]),
            "turn": int(human.id.split("-")[2]),
        }  # type: ignore[union-attr]
