"""Save after adding 2 messages to sessions of several lengths: the cost must stay flat (used by chat_history)."""

from __future__ import annotations

import statistics
import time

from harness import Timing

from memwoven import ChatMemory, Message


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
