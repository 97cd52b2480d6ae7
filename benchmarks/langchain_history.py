"""A 1,000-turn conversation through LangChain chat histories on one SQLite file: langchain-memwoven's
`MemwovenChatMessageHistory` against langchain-community's `SQLChatMessageHistory`.

Each turn does what `RunnableWithMessageHistory` does: read the history, then add the user message and the
model's reply (an `AIMessage` with a tool call every third turn, usage metadata on every reply).
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Report, Timing


def _turn(index: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    usage = {"input_tokens": 20 + index, "output_tokens": 12, "total_tokens": 32 + index}
    calls = [{"name": "lookup", "args": {"q": f"topic {index}"}, "id": f"call_{index}"}] if index % 3 == 0 else []
    return [
        HumanMessage(f"question number {index}: " + "lorem ipsum dolor sit amet " * 3),
        AIMessage(
            f"answer number {index}: " + "consectetur adipiscing elit " * 4, tool_calls=calls, usage_metadata=usage
        ),
    ]


def converse(history: Any, turns: int) -> float:
    """Seconds for `turns` turns of read-then-add-two on `history`; checks that nothing was lost."""
    script = [_turn(i) for i in range(turns)]
    start = time.perf_counter()
    for messages in script:
        _ = history.messages
        history.add_messages(messages)
    elapsed = time.perf_counter() - start
    assert len(history.messages) == 2 * turns
    return elapsed


def _ours(url: str) -> Any:
    from langchain_memwoven import MemwovenChatMessageHistory

    return MemwovenChatMessageHistory.from_url(url, "bench")


def _theirs(url: str) -> Any:
    from langchain_community.chat_message_histories import SQLChatMessageHistory

    return SQLChatMessageHistory("bench", connection=url)


def run(report: Report, *, turns: int = 1_000, runs: int = 3) -> None:
    """Add the conversation rows (median of `runs` fresh conversations each) and the ≤ 1.0x target."""
    subjects: dict[str, Callable[[str], Any]] = {
        "MemwovenChatMessageHistory (langchain-memwoven)": _ours,
        "SQLChatMessageHistory (langchain-community)": _theirs,
    }
    timings: dict[str, Timing] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # both classes are deprecated upstream
        for name, make in subjects.items():
            samples = []
            for run_index in range(runs):
                with tempfile.TemporaryDirectory() as directory:
                    history = make(f"sqlite:///{Path(directory) / f'bench-{run_index}.db'}")
                    samples.append(converse(history, turns))
                    getattr(history, "close", lambda: None)()
            timings[name] = Timing(sorted(samples)[len(samples) // 2], min(samples), max(samples), runs)
    ours, theirs = timings.values()
    for name, timing in timings.items():
        report.add(f"LangChain history, {turns:,}-turn conversation (SQLite)", name, timing)
    report.target(
        f"MemwovenChatMessageHistory / SQLChatMessageHistory, {turns:,} turns on SQLite",
        ours.median / theirs.median,
        1.0,
        False,
    )
