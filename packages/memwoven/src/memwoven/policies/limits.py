"""Limits on what a session keeps: `max_messages` trimming (archived or deleted), and expiry clean-up.

`TrimmingChatMemory(inner, max_messages=N)` keeps every session at N messages at most: after each write, the
oldest messages after the pinned head (the leading system/developer messages and a summary) are removed, whole
units at a time (a tool call is never separated from its results, and the kept history never starts with a
tool result). With ``archive=True`` (the default) they are appended to ``<id>:archive`` first (see
`archive_steps` for the ids they are kept under; `archived(id)` reads them back); with ``archive=False`` they are
deleted. `trim(memory, id, max_messages)` does the same once, on any `ChatMemory`.
If the newest unit alone is longer than N it is kept whole.

Expiry: every built-in backend takes ``ttl=`` (seconds, sliding: each write resets it). SQL, file and in-memory
backends also have `cleanup_expired()` to delete what has expired (expired sessions already read as absent);
Redis expires keys itself. `cleanup_expired(memory)` calls it on any memory and returns 0 where the backend
expires natively or has no TTL.
"""

from __future__ import annotations

from collections.abc import Sequence

from memwoven._steps import Steps, function_twins, twins
from memwoven.contracts import ChatMemory, check_id, cleanup_expired_steps
from memwoven.models import Message
from memwoven.policies._base import (
    ARCHIVE_SUFFIX,
    WrappingChatMemory,
    archived_steps,
    check_count,
    group_end,
    group_start,
    head_end,
    rewrite_steps,
)

__all__ = ["TrimmingChatMemory", "acleanup_expired", "atrim", "cleanup_expired", "plan_trim", "trim"]


def _check_max(max_messages: int) -> int:
    return int(check_count(max_messages, "max_messages", positive=True))


def plan_trim(messages: Sequence[Message], max_messages: int) -> tuple[list[Message], list[Message]] | None:
    """The history trimmed to `max_messages` and the messages removed, or None if nothing needs removing."""
    n = len(messages)
    if n <= max_messages:
        return None
    head = head_end(messages)
    cut = n - max(1, max_messages - head)
    start = group_end(messages, cut)  # remove whole units: the kept part starts after any tool results
    if start >= n:  # the newest unit alone is longer than the limit: keep it whole
        start = group_start(messages, cut, head)
    if start <= head:
        return None
    return [*messages[:head], *messages[start:]], list(messages[head:start])


def _trim_steps(memory: ChatMemory, session_id: str, max_messages: int, archive: bool) -> Steps[int | None]:
    return rewrite_steps(memory, session_id, lambda messages: plan_trim(messages, max_messages), archive=archive)


def _trim(memory: ChatMemory, session_id: str, max_messages: int, *, archive: bool = True) -> Steps[int | None]:
    """Trim a session of any memory to `max_messages` now; returns the new version, or None if it was short enough."""
    return (yield from _trim_steps(memory, check_id(session_id), _check_max(max_messages), archive))


trim, atrim = function_twins(_trim)


class TrimmingChatMemory(WrappingChatMemory):
    """A `ChatMemory` that keeps each session at `max_messages` at most, archiving (or deleting) the oldest."""

    def __init__(self, inner: ChatMemory, *, max_messages: int, archive: bool = True) -> None:
        super().__init__(inner)
        self.max_messages = _check_max(max_messages)
        self.archive = archive

    def __repr__(self) -> str:
        return f"TrimmingChatMemory({self.inner!r}, max_messages={self.max_messages}, archive={self.archive})"

    def _derived_suffixes(self) -> tuple[str, ...]:
        return (ARCHIVE_SUFFIX,) if self.archive else ()

    def _archived(self, session_id: str) -> Steps[list[Message]]:
        """The messages trimmed from the session so far (when archiving), oldest first."""
        return (yield from archived_steps(self.inner, session_id))

    archived, aarchived = twins(_archived)

    def _after_write(self, session_id: str) -> Steps[None]:
        yield from _trim_steps(self.inner, session_id, self.max_messages, self.archive)


cleanup_expired, acleanup_expired = function_twins(cleanup_expired_steps)
