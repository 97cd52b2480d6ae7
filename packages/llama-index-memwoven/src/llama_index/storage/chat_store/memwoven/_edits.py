"""Read-modify-write steps over one session's core messages, run by `ChatMemory.update` / `aupdate`.

A step is a plain function of the stored list, so the sync and async methods of the chat stores share it, and
it remembers the messages it picked in its last run (`update` runs it again when a concurrent writer forces a
retry, so only the last run counts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from memwoven.models import Message

__all__ = ["Pick", "Selector", "every", "last", "position"]

Selector = Callable[[list[Message]], Iterable[int]]
"""Chooses positions in a session's message list."""


class Pick:
    """A change that removes the messages `select` chooses, or rewrites them with `rewrite`, remembering them."""

    def __init__(self, select: Selector, rewrite: Callable[[Message], Message] | None = None) -> None:
        self.select = select
        self.rewrite = rewrite
        self.picked: list[Message] = []

    def __call__(self, messages: list[Message]) -> list[Message]:
        chosen = set(self.select(messages))
        self.picked = [message for i, message in enumerate(messages) if i in chosen]
        if self.rewrite is None:
            return [message for i, message in enumerate(messages) if i not in chosen]
        return [self.rewrite(message) if i in chosen else message for i, message in enumerate(messages)]


def position(index: int) -> Selector:
    """The message at list position `index` (negative counts from the end), if there is one."""
    return lambda messages: [index % len(messages)] if -len(messages) <= index < len(messages) else []


def last(messages: list[Message]) -> Iterable[int]:
    """The last message, if any."""
    return [len(messages) - 1] if messages else []


def every(messages: list[Message]) -> Iterable[int]:
    """Every message."""
    return range(len(messages))
