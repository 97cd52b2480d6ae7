"""Save after adding 2 messages to sessions of 10 / 1,000 / 10,000 messages: the cost must stay flat."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from harness import Report, Timing, measure

from memweave import ChatMemory, Message
from memweave.backends.sql import SQLChatMemory


def _message(i: int) -> Message:
    role = "user" if i % 2 == 0 else "assistant"
    return Message(role=role, content=f"message number {i}: " + "lorem ipsum dolor sit amet " * 4)


def save_after_two(memory: ChatMemory, session: str, size: int, runs: int) -> Timing:
    """Time `save(history + 2 new messages)` on a session that already holds `size` messages."""
    memory.save(session, [_message(i) for i in range(size)])
    state: dict[str, list[Message]] = {}

    def prepare() -> None:
        history = memory.load(session)
        state["next"] = [*history, _message(len(history)), _message(len(history) + 1)]

    return measure(lambda: memory.save(session, state["next"]), runs=runs, warmup=2, setup=prepare)


def run(
    report: Report, *, sizes: tuple[int, ...] = (10, 1_000, 10_000), runs: int = 30, url: str | None = None
) -> None:
    """Add the save-cost rows (SQLite, or `url`) and the flatness target to `report`."""
    with tempfile.TemporaryDirectory() as directory:
        target = url or f"sqlite:///{Path(directory) / 'bench.db'}"
        label = target.split(":", 1)[0]
        memory = SQLChatMemory(target, table_prefix=f"mwbench_{uuid.uuid4().hex[:8]}_")
        try:
            timings = {size: save_after_two(memory, f"bench-{size}", size, runs) for size in sizes}
        finally:
            memory.drop_tables()
            memory.close()
    base = timings[sizes[0]].median
    for size, timing in timings.items():
        report.add(
            f"SQLChatMemory ({label}) save after +2",
            f"{size:,} messages",
            timing,
            f"{timing.median / base:.2f}x the {sizes[0]} case",
        )
    report.target(
        f"SQLChatMemory ({label}) save: {sizes[-1]:,}-message case / {sizes[0]}-message case",
        timings[sizes[-1]].median / base,
        1.5,
        False,
    )
