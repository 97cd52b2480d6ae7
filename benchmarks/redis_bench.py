"""Save after adding 2 messages to sessions of 10 / 1,000 / 10,000 messages on RedisChatMemory: the cost must stay
flat. Runs on the shared server under a unique key prefix, and removes every session it wrote. The sizes take turns
(one save of each per round), so a change in the machine's load falls on every size alike."""

from __future__ import annotations

import uuid

from chat_save import save_after_two
from harness import Report

from memwoven.backends.redis import RedisChatMemory


def run(report: Report, *, url: str, sizes: tuple[int, ...] = (10, 1_000, 10_000), runs: int = 30) -> None:
    """Add the Redis save-cost rows and the flatness target to `report`."""
    memory = RedisChatMemory(url, prefix=f"mwbench_{uuid.uuid4().hex[:8]}")
    sessions = {size: f"bench-{size}" for size in sizes}
    try:
        timings = save_after_two(memory, sessions, runs)
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
