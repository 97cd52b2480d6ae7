"""Save after adding 2 messages to sessions of 10 / 1,000 / 10,000 messages: the cost must stay flat."""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path

from harness import Report, Timing

from memweave import ChatMemory, Message
from memweave.backends.sql import SQLChatMemory


def _message(i: int) -> Message:
    role = "user" if i % 2 == 0 else "assistant"
    return Message(role=role, content=f"message number {i}: " + "lorem ipsum dolor sit amet " * 4)


def save_after_two(memory: ChatMemory, sessions: dict[int, str], runs: int, warmup: int = 2) -> dict[int, Timing]:
    """Seconds per `save(history + 2 new messages)` for each size, on sessions filled with that many messages.

    The sizes take turns (one save of each per round, the history loaded untimed before each), so a change in
    the machine's load falls on every size alike.
    """
    for size, session in sessions.items():
        memory.save(session, [_message(i) for i in range(size)])
    samples: dict[int, list[float]] = {size: [] for size in sessions}
    for index in range(warmup + runs):
        for size, session in sessions.items():
            history = memory.load(session)
            new: list[Message] = [*history, _message(len(history)), _message(len(history) + 1)]
            start = time.perf_counter()
            memory.save(session, new)
            if index >= warmup:
                samples[size].append(time.perf_counter() - start)
    return {size: Timing(statistics.median(s), min(s), max(s), runs) for size, s in samples.items()}


def run(
    report: Report, *, sizes: tuple[int, ...] = (10, 1_000, 10_000), runs: int = 30, url: str | None = None
) -> None:
    """Add the save-cost rows (SQLite, or `url`) and the flatness target to `report`."""
    with tempfile.TemporaryDirectory() as directory:
        target = url or f"sqlite:///{Path(directory) / 'bench.db'}"
        label = target.split(":", 1)[0]
        memory = SQLChatMemory(target, table_prefix=f"mwbench_{uuid.uuid4().hex[:8]}_")
        try:
            timings = save_after_two(memory, {size: f"bench-{size}" for size in sizes}, runs)
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
