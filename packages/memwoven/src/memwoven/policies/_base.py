"""What the policies share: conversation structure, calling user callables, the wrapping `ChatMemory`, and records
kept as items.

Each policy operation that does I/O is written once, as a generator of `Call`s run by the step engine
(`memwoven._steps`): `run` drives it with the sync methods, `arun` with their async twins.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, TypeVar

from memwoven._steps import Call, Runner, Steps, twins
from memwoven.contracts import (
    ChatMemory,
    History,
    ItemMemory,
    MessagesIn,
    Namespace,
    check_id,
    cleanup_expired_steps,
    compare_and_set,
)
from memwoven.errors import CorruptMemoryError, InvalidInputError, MemwovenError
from memwoven.history import encode_message
from memwoven.models import Item, Message

__all__ = [
    "ARCHIVE_SUFFIX",
    "INSTRUCTION_ROLES",
    "SUMMARIZER_SUFFIX",
    "SUMMARY_KEY",
    "ItemRecords",
    "PolicyError",
    "UserCallable",
    "WrappingChatMemory",
    "archive_id",
    "archive_steps",
    "archived_steps",
    "call_async",
    "call_sync",
    "check_items",
    "group_end",
    "group_start",
    "head_end",
    "is_summary",
    "load_steps",
    "next_order",
    "not_yet_archived",
    "pending_call_start",
    "rewrite_steps",
    "unit_before",
    "without_orphans",
]

_T = TypeVar("_T")
INSTRUCTION_ROLES = frozenset({"system", "developer"})
SUMMARY_KEY = "memwoven_summary"
"""The `Message.metadata` key that marks a summary message written by `SummarizingChatMemory`."""
ARCHIVE_SUFFIX = ":archive"
SUMMARIZER_SUFFIX = ":summarizer"


def archive_id(session_id: str) -> str:
    """The archive session of a session: ``<id>:archive``."""
    return check_id(session_id + ARCHIVE_SUFFIX)


def _archive_tag(message: Message) -> str:
    return hashlib.blake2b(encode_message(message).encode("utf-8"), digest_size=8).hexdigest()


def archive_steps(memory: ChatMemory, session_id: str, messages: Sequence[Message]) -> Steps[None]:
    """Append `messages` to the session's archive, each id stored as ``<id>#<digest of the message>``.

    The archive's append is idempotent by id (CM10), as every session's is. Under the plain id, a message reusing
    the id of one trimmed earlier would be skipped, then lost when trimmed in turn; under a digest of the whole
    message, it is archived, and the same message archived again (a retry after a crash) is still stored once.
    """
    copies = [m if m.id is None else m.model_copy(update={"id": f"{m.id}#{_archive_tag(m)}"}) for m in messages]
    yield Call(memory, "append", (archive_id(session_id), copies))


def archived_steps(memory: ChatMemory, session_id: str) -> Steps[list[Message]]:
    """The session's archive, oldest first, with the ids `archive_steps` stored them under mapped back."""
    messages: list[Message] = yield Call(memory, "load", (archive_id(session_id),))
    originals: list[Message] = []
    for message in messages:
        base, hashed, tag = (message.id or "").rpartition("#")
        if hashed and len(tag) == 16:
            original = message.model_copy(update={"id": base})
            if _archive_tag(original) == tag:  # else an id of its own with a "#" (or an archive of an older version)
                message = original
        originals.append(message)
    return originals


def is_summary(message: Message) -> bool:
    """True for a summary message written by `SummarizingChatMemory` (role system, marked in metadata)."""
    return message.role == "system" and SUMMARY_KEY in message.metadata


# Conversation structure ------------------------------------------------------------------------------------------


def _calls_tools(message: Message) -> bool:
    return message.role == "assistant" and bool(message.tool_calls)


def head_end(messages: Sequence[Message], keep_first: int = 0) -> int:
    """Where the pinned head of a conversation ends.

    The head is the leading run of system/developer messages, or the first `keep_first` messages if that is
    longer, extended over any tool results that follow it (a tool call is never split from its results) and
    over a summary message that directly follows it.
    """
    n = len(messages)
    end = 0
    while end < n and messages[end].role in INSTRUCTION_ROLES:
        end += 1
    end = max(end, min(keep_first, n))
    while 0 < end < n and (messages[end].role == "tool" or is_summary(messages[end])):
        end += 1
    return end


def _answers(message: Message, call_ids: frozenset[str]) -> bool:
    return message.tool_call_id is None or message.tool_call_id in call_ids


def _call_ids(message: Message) -> frozenset[str]:
    return frozenset(call.id for call in message.tool_calls) if _calls_tools(message) else frozenset()


def without_orphans(messages: Sequence[Message]) -> list[Message]:
    """`messages` without orphaned tool results (see `unit_before`)."""
    kept: list[Message] = []
    call_ids: frozenset[str] = frozenset()
    for message in messages:
        if message.role != "tool":
            call_ids = _call_ids(message)
            kept.append(message)
        elif call_ids and _answers(message, call_ids):
            kept.append(message)
    return kept


def unit_before(messages: Sequence[Message], end: int, floor: int = 0) -> tuple[int, list[Message]]:
    """The unit that ends just before `end`: where it starts, and its messages without orphans.

    A unit is a single message, or an assistant message with tool calls together with the run of tool results
    right after it. A tool result belongs to the call it names (`tool_call_id`; a result without one belongs to
    the call before it); any other tool result is an orphan, since no provider accepts a result without its call.
    The messages are empty when the unit is orphans only. Nothing before `floor` is looked at.
    """
    last = end - 1
    if messages[last].role != "tool":
        return last, [messages[last]]
    start = last
    while start > floor and messages[start - 1].role == "tool":
        start -= 1
    if start > floor and _calls_tools(messages[start - 1]):
        call_ids = _call_ids(messages[start - 1])
        return start - 1, [messages[start - 1], *(m for m in messages[start:end] if _answers(m, call_ids))]
    return start, []


def group_start(messages: Sequence[Message], index: int, floor: int = 0) -> int:
    """Move a cut point back so that it does not fall between a tool call and its results (or inside them)."""
    while index > floor and index < len(messages) and messages[index].role == "tool":
        index -= 1
    return index


def group_end(messages: Sequence[Message], index: int) -> int:
    """Move a cut point forward past any tool results at it."""
    while index < len(messages) and messages[index].role == "tool":
        index += 1
    return index


def pending_call_start(messages: Sequence[Message], floor: int = 0) -> int:
    """Where the history's last tool-call unit starts if some of its calls have no result yet, else its end.

    A compaction or trim that removed such a call would orphan the results that arrive after it.
    """
    n = start = len(messages)
    while start > floor and messages[start - 1].role == "tool":
        start -= 1
    if start > floor and _calls_tools(messages[start - 1]):
        results = messages[start:n]
        answered = {m.tool_call_id for m in results}
        calls = messages[start - 1].tool_calls
        if len(results) < len(calls) and not all(call.id in answered for call in calls):
            return start - 1
    return n


def not_yet_archived(removed: Sequence[Message], archived: Sequence[Message]) -> list[Message]:
    """The messages of `removed` left after the prefix this operation already archived in an earlier attempt."""
    kept = 0
    for new, old in zip(removed, archived):
        if new is not old and new != old:
            break
        kept += 1
    return list(removed[kept:]) if kept in (len(archived), len(removed)) else list(removed)


# The sans-I/O driver ---------------------------------------------------------------------------------------------


# Calling user callables that may be sync or async ------------------------------------------------------------


def is_async_callable(function: object) -> bool:
    """True for a coroutine function, or an object whose `__call__` is one."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004
    )


async def _awaited(value: Awaitable[_T]) -> _T:
    return await value


def call_sync(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a sync or async callable from sync code (an async one runs on its own loop if none is running)."""
    result = function(*args, **kwargs)
    if inspect.isawaitable(result):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(_awaited(result))
        if inspect.iscoroutine(result):
            result.close()
        raise InvalidInputError(f"{function!r} is async: inside an event loop, use the async API (the a- methods)")
    return result


async def call_async(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a sync or async callable from async code (a sync one runs in a thread, off the event loop)."""
    if is_async_callable(function):
        result = function(*args, **kwargs)
    else:
        result = await asyncio.to_thread(function, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


class UserCallable:
    """A step target (`Call(UserCallable(f), "call", args)`) that calls a user's callable as `call_sync` does from
    sync code and as `call_async` does from async code."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def call(self, *args: Any) -> Any:
        """`call_sync` of the callable."""
        return call_sync(self.function, *args)

    async def acall(self, *args: Any) -> Any:
        """`call_async` of the callable (a sync one runs in a thread)."""
        return await call_async(self.function, *args)


# A ChatMemory that wraps another -------------------------------------------------------------------------------


class PolicyError(MemwovenError):
    """A policy's own work failed (the cause is attached); `stored` says whether the write that triggered it was
    stored (then do not retry that write: it is in the session, or the policy's archive)."""

    def __init__(self, message: str, *, stored: bool = False) -> None:
        super().__init__(message)
        self.stored = stored


class WrappingChatMemory(ChatMemory):
    """A `ChatMemory` over another one: every call goes to `inner`; writes then run the policy's `_after_write`.

    A write returns the version of the write itself. If the policy then rewrote the session (a compaction, a
    trim), the session has moved on: a `save` with that version as `expected_version` raises
    `ConcurrentModificationError`, and the caller reloads, seeing the rewritten history. If the policy's work
    after a stored write fails, the write raises `PolicyError` with `stored=True` (the cause attached): not the
    cause itself, which could read as "nothing was written" (a `ConcurrentModificationError`, say).

    A policy reads and writes message text, so it goes around an `EncryptedChatMemory`, never inside one (which
    refuses any memory whose `needs_plaintext` is true).
    """

    needs_plaintext: ClassVar[bool] = True

    def __init__(self, inner: ChatMemory) -> None:
        if not isinstance(inner, ChatMemory):
            raise TypeError(f"inner must be a ChatMemory, got {type(inner).__name__}")
        self.inner = inner

    def _after_write(self, session_id: str) -> Steps[None]:
        """The policy's steps after a write to `session_id`. The default does nothing."""
        yield from ()

    def _skips(self, session_id: str) -> bool:
        """Policies leave the archive and summarizer sessions they write alone."""
        return session_id.endswith((ARCHIVE_SUFFIX, SUMMARIZER_SUFFIX))

    def _derived_suffixes(self) -> tuple[str, ...]:
        """The suffixes of the sessions the policy writes beside a session (its archive...). The default: none."""
        return ()

    def _write(self, method: str, session_id: str, *args: Any, **kwargs: Any) -> Steps[int]:
        if not (isinstance(session_id, str) and self._skips(session_id)):
            for suffix in self._derived_suffixes():  # an id too long for them: refused before anything is written
                check_id(check_id(session_id) + suffix)
        version: int = yield Call(self.inner, method, (session_id, *args), kwargs)
        if version and not self._skips(session_id):
            try:
                yield from self._after_write(session_id)
            except PolicyError:
                raise
            except Exception as error:
                raise PolicyError(
                    f"the write to session {session_id!r} was stored, but the policy after it failed: {error}",
                    stored=True,
                ) from error
        return version

    def _load_versioned(self, session_id: str) -> Steps[History]:
        """Delegated to the inner memory."""
        history: History = yield Call(self.inner, "load_versioned", (session_id,))
        return history

    load_versioned, aload_versioned = twins(_load_versioned)

    def _save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> Steps[int]:
        """Save through the inner memory, then apply the policy."""
        return (yield from self._write("save", session_id, list(messages), expected_version=expected_version))

    save, asave = twins(_save)

    def _append(self, session_id: str, messages: MessagesIn) -> Steps[int]:
        """Append through the inner memory, then apply the policy."""
        return (yield from self._write("append", session_id, list(messages)))

    append, aappend = twins(_append)

    def _sessions(self) -> Steps[list[str]]:
        """Delegated to the inner memory."""
        sessions: list[str] = yield Call(self.inner, "sessions")
        return sessions

    sessions, asessions = twins(_sessions)

    def _clear(self, session_id: str) -> Steps[None]:
        """Delegated to the inner memory (the archive is kept)."""
        yield Call(self.inner, "clear", (session_id,))

    clear, aclear = twins(_clear)

    def _cleanup_expired(self) -> Steps[int]:
        """Delete the inner memory's expired sessions (see `memwoven.policies.cleanup_expired`)."""
        return (yield from cleanup_expired_steps(self.inner))

    cleanup_expired, acleanup_expired = twins(_cleanup_expired)

    def _close(self) -> Steps[None]:
        """Close the inner memory."""
        yield Call(self.inner, "close")

    close, aclose = twins(_close)


def load_steps(memory: ChatMemory, session_id: str) -> Steps[list[Message]]:
    """Read a session of `memory` (its `load`)."""
    messages: list[Message] = yield Call(memory, "load", (session_id,))
    return messages


def rewrite_steps(
    memory: ChatMemory,
    session_id: str,
    plan: Callable[[list[Message]], tuple[list[Message], list[Message]] | None],
    *,
    archive: bool,
    retries: int = 16,
) -> Steps[int | None]:
    """Rewrite a session under its optimistic version: `plan(messages)` gives (new history, removed messages).

    The removed messages are appended to the archive session first (if `archive`), then the new history is saved
    with the version it was planned from; on a conflict (after `compare_and_set`'s pause) the plan is made again
    from a fresh read, and messages this call archived already are not archived twice. Returns the new version, or
    None if `plan` saw nothing to do. Nothing is lost: a crash between the two writes leaves the messages in both
    places.
    """
    archived: list[Message] = []

    def attempt() -> Steps[int | None]:
        nonlocal archived
        messages, version = yield Call(memory, "load_versioned", (session_id,))
        planned = plan(messages)
        if planned is None:
            return None
        new, removed = planned
        if archive and removed:
            todo = not_yet_archived(removed, archived)
            if todo:
                yield from archive_steps(memory, session_id, todo)
                archived = list(removed)
        saved: int = yield Call(memory, "save", (session_id, new), {"expected_version": version})
        return saved

    return (yield from compare_and_set(attempt, f"session {session_id!r}", retries))


# Records kept as items (`WorkingMemory`, `UserMemory`) -------------------------------------------------------

_order_lock = threading.Lock()
_last_order = 0


def next_order() -> int:
    """A record's creation stamp: nanoseconds since the Unix epoch, strictly increasing within this process, so
    records made within one clock tick (or after the clock stepped back) still list in the order they were made."""
    global _last_order
    with _order_lock:
        _last_order = max(_last_order + 1, time.time_ns())
        return _last_order


def check_count(value: Any, name: str, *, positive: bool = False, optional: bool = False) -> Any:
    """`value` if it is an int >= 0 (>= 1 if `positive`; or None if `optional`), else `InvalidInputError`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        expected = ("a positive int" if positive else "a non-negative int") + (" or None" if optional else "")
        raise InvalidInputError(f"{name} must be {expected}, got {value!r:.120}")
    return value


def check_items(items: object, owner: str) -> ItemMemory:
    """`items` if it is an `ItemMemory`, else `TypeError` (saying so when a `ChatMemory` was passed)."""
    if isinstance(items, ItemMemory):
        return items
    hint = ": records are items now (InMemoryItemMemory, SQLItemMemory, open_item_memory(url))"
    raise TypeError(
        f"{owner} needs an ItemMemory, got {type(items).__name__}{hint if isinstance(items, ChatMemory) else ''}"
    )


class ItemRecords(Runner):
    """What `WorkingMemory` and `UserMemory` share: records kept as the items of namespaces of `store`, each
    value stamped with its creation `"order"` (`next_order`)."""

    store: ItemMemory

    def _exact(self, namespace: Namespace) -> Steps[list[Item]]:
        """The items of exactly `namespace` (`list` also returns those of namespaces under it: others' records)."""
        found: list[Item] = yield Call(self.store, "list", (namespace,))
        return [item for item in found if item.namespace == namespace]

    def _stored(self, namespace: Namespace) -> Steps[list[Item]]:
        """The records of `namespace`, oldest first."""
        return sorted((yield from self._exact(namespace)), key=lambda item: (self._order(item), item.key))

    def _order(self, item: Item) -> int:
        """The record's creation stamp; `CorruptMemoryError` if the item is not a record."""
        order = item.value.get("order")
        if isinstance(order, bool) or not isinstance(order, int):
            raise CorruptMemoryError(f"{item.namespace!r} holds an item that is not a {type(self).__name__} record")
        return order

    def _delete_all(self, namespace: Namespace) -> Steps[int]:
        """Delete every item of exactly `namespace` (records or not); return how many there were."""
        keys = [(item.namespace, item.key) for item in (yield from self._exact(namespace))]
        deleted: int = (yield Call(self.store, "delete_many", (keys,))) if keys else 0
        return deleted
