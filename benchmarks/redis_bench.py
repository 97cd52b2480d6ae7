"""Save after adding 2 messages to sessions of 10 / 1,000 / 10,000 messages on RedisChatMemory: the cost must stay
flat. Runs on the shared server under a unique key prefix, and removes every session it wrote. The sizes take turns
(one save of each per round), so a change in the machine's load falls on every size alike."""

from __future__ import annotations

import statistics
import time
import uuid

from chat_save import _message
from harness import Report, Timing

from memweave import Message
from memweave.backends.redis import RedisChatMemory


def _rounds(memory: RedisChatMemory, sessions: dict[int, str], runs: int, warmup: int) -> dict[int, Timing]:
    """Seconds per `save(history + 2 new messages)` for each size, the history loaded (untimed) before each."""
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


def run(report: Report, *, url: str, sizes: tuple[int, ...] = (10, 1_000, 10_000), runs: int = 30) -> None:
    """Add the Redis save-cost rows and the flatness target to `report`."""
    memory = RedisChatMemory(url, prefix=f"mwbench_{uuid.uuid4().hex[:8]}")
    sessions = {size: f"bench-{size}" for size in sizes}
    try:
        for size, session in sessions.items():
            memory.save(session, [_message(i) for i in range(size)])
        timings = _rounds(memory, sessions, runs, warmup=2)
    finally:
        for session in sessions.values():
            memory.clear(session)
        memory.close()
    base = timings[sizes[0]].median
    for size, timing in timings.items():
        report.add(
            "RedisChatMemory save after +2",
            f"{size:,} messages",
            timing,
            f"{timing.median / base:.2f}x the {sizes[0]} case",
        )
    report.target(
        f"RedisChatMemory save: {sizes[-1]:,}-message case / {sizes[0]}-message case",
        timings[sizes[-1]].median / base,
        1.5,
        False,
    )
