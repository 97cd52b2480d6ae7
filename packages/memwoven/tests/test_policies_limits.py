"""Limits: max_messages trimming (archived or deleted) on every backend, and TTL expiry with cleanup_expired."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from clock_support import Clock
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_backends import (
    ALL,
    assert_no_orphans,
    conversation,
    dispose,
    histories,
    open_backend,
)
from policy_backends import chat_memory_fixture as chat_memory_fixture

from memwoven import ChatMemory, FileChatMemory, InMemoryChatMemory, InvalidInputError, Message
from memwoven.contracts import MessagesIn
from memwoven.errors import ConcurrentModificationError
from memwoven.policies import (
    SUMMARY_KEY,
    PolicyError,
    SummarizationError,
    SummarizingChatMemory,
    TrimmingChatMemory,
    acleanup_expired,
    archive_id,
    atrim,
    cleanup_expired,
    plan_trim,
    trim,
)
from memwoven.policies._base import head_end
from memwoven.testing import ChatMemoryContract, turn

SYSTEM = Message(role="system", content="rules")


# Trimming ------------------------------------------------------------------------------------------------------


def test_plan_keeps_the_head_and_whole_units() -> None:
    history = [SYSTEM, *conversation(4, tools_every=2)]  # turns 0 and 2 call tools (5 messages), 1 and 3 do not
    assert plan_trim(history, 100) is None
    kept, removed = plan_trim(history, 6) or ([], [])
    assert kept[0] is SYSTEM
    assert len(kept) <= 6
    assert [*kept[:1], *removed, *kept[1:]] == history
    assert kept[1].role != "tool"
    assert_no_orphans(kept)


def test_an_oversized_newest_unit_is_kept_whole() -> None:
    history = conversation(2, tools_every=1)  # ends with user, call, result, result, answer
    kept, removed = plan_trim(history[:-1], 2) or ([], [])
    assert [m.role for m in kept] == ["assistant", "tool", "tool"]
    assert len(removed) == 6


def test_the_summary_of_a_summarizing_memory_is_part_of_the_head() -> None:
    summary = Message(role="system", content="s", metadata={SUMMARY_KEY: {}})
    kept, _ = plan_trim([SYSTEM, summary, *conversation(5, tools_every=0)], 4) or ([], [])
    assert kept[:2] == [SYSTEM, summary]
    assert [m.text for m in kept[2:]] == ["question 4", "answer 4"]


@settings(max_examples=300, deadline=None)
@given(history=histories(("instr", "user", "assistant", "tools", "summary")), max_messages=st.integers(1, 10))
def test_property_trimming_loses_nothing_and_orphans_nothing(history: list[Message], max_messages: int) -> None:
    planned = plan_trim(history, max_messages)
    head = head_end(history)
    if planned is None:  # short enough, or nothing but the head and the newest unit, which is kept whole
        rest = history[head:]
        assert len(history) <= max_messages or all(m.role == "tool" for m in rest[1:])
        return
    kept, removed = planned
    assert [*kept[:head], *removed, *kept[head:]] == history  # removed = a contiguous run after the head
    assert removed
    assert len(kept) < len(history)
    assert_no_orphans(kept)
    if len(kept) > max_messages:  # only the head and the newest unit, kept whole
        tail = kept[head:]
        assert tail[0].role != "tool", tail
        assert all(m.role == "tool" for m in tail[1:]), tail


def test_trimming_memory_archives_on_every_backend(chat_memory: ChatMemory) -> None:
    memory = TrimmingChatMemory(chat_memory, max_messages=5)
    memory.append("s", [SYSTEM])
    sent = [SYSTEM]
    for number in range(10):
        messages = conversation(1, tools_every=4, start=number)
        memory.append("s", messages)
        sent += messages
        assert len(memory.load("s")) <= 5 or memory.load("s")[1].role == "assistant"
    stored = memory.load("s")
    assert stored[0] == SYSTEM
    assert [SYSTEM, *memory.archived("s"), *stored[1:]] == sent
    assert_no_orphans(stored)


def test_trimming_memory_can_delete_instead(chat_memory: ChatMemory) -> None:
    memory = TrimmingChatMemory(chat_memory, max_messages=3, archive=False)
    memory.save("s", [turn(i) for i in range(10)])
    assert [m.text for m in memory.load("s")] == ["w-7", "w-8", "w-9"]
    assert memory.archived("s") == []
    assert chat_memory.sessions() == ["s"]


def test_a_message_reusing_a_trimmed_messages_id_is_archived_too(chat_memory: ChatMemory) -> None:
    # a conversation started over in the same session, its ids numbered from 0 again: each message is archived
    memory = TrimmingChatMemory(chat_memory, max_messages=2)
    sent = []
    for conversation_number in range(2):
        memory.clear("s")
        for number in range(3):
            message = Message(role="user", content=f"{conversation_number}.{number}", id=f"m{number}")
            memory.append("s", [message])
            sent.append(message)
    assert memory.load("s") == sent[-2:]
    assert memory.archived("s") == [sent[0], sent[3]]
    assert asyncio.run(memory.aarchived("s")) == [sent[0], sent[3]]


def test_archiving_the_same_messages_again_stores_them_once() -> None:
    # a crash between the archive's append and the session's save: the next trim archives the same messages again
    inner = InMemoryChatMemory()
    messages = [turn(i).model_copy(update={"id": f"m{i}"}) for i in range(5)]
    inner.save("s", messages)
    trim(inner, "s", 2)
    archived_at = inner.load_versioned(archive_id("s")).version
    inner.save("s", messages)
    assert asyncio.run(atrim(inner, "s", 2)) is not None
    assert TrimmingChatMemory(inner, max_messages=2).archived("s") == messages[:3]
    assert inner.load_versioned(archive_id("s")).version == archived_at
    # the archive's own session holds each id with a digest of its message after it
    assert all(m.id is not None and m.id.startswith(f"{o.id}#") for m, o in zip(inner.load(archive_id("s")), messages))


def test_archived_keeps_ids_it_did_not_derive() -> None:
    # an archive written by an earlier version (plain ids), and ids of the app's own that look derived
    inner = InMemoryChatMemory()
    own = [
        Message(role="user", content="a", id="plain"),
        Message(role="user", content="b", id="looks#0123456789abcdef"),
        Message(role="user", content="c"),
    ]
    inner.append(archive_id("s"), own)
    assert TrimmingChatMemory(inner, max_messages=2).archived("s") == own


def test_trim_once_sync_and_async() -> None:
    memory = InMemoryChatMemory()
    memory.save("s", [turn(i) for i in range(10)])
    assert trim(memory, "s", 20) is None
    assert trim(memory, "s", 6) is not None
    assert len(memory.load("s")) == 6
    assert asyncio.run(atrim(memory, "s", 2)) is not None
    assert [m.text for m in memory.load("s")] == ["w-8", "w-9"]
    assert [m.text for m in memory.load("s:archive")] == [f"w-{i}" for i in range(8)]
    with pytest.raises(InvalidInputError):
        trim(memory, "s", 0)


def test_policies_compose() -> None:
    inner = InMemoryChatMemory()
    memory = TrimmingChatMemory(
        SummarizingChatMemory(inner, summarizer=lambda ms: "sum", trigger=8, keep_recent=3), max_messages=20
    )
    for number in range(10):
        memory.append("s", conversation(1, tools_every=0, start=number))
    assert len(memory.load("s")) <= 8
    assert memory.load("s")[0].metadata[SUMMARY_KEY]["layers"] >= 2


class TestTrimmingChatMemoryContract(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self, tmp_path: Path) -> ChatMemory:
        return TrimmingChatMemory(FileChatMemory(tmp_path / "chat"), max_messages=100_000)

    def reopen(self, memory: ChatMemory) -> ChatMemory:
        assert isinstance(memory, TrimmingChatMemory)
        assert isinstance(memory.inner, FileChatMemory)
        return TrimmingChatMemory(FileChatMemory(memory.inner.directory), max_messages=100_000)

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        assert isinstance(memory, TrimmingChatMemory)
        assert isinstance(memory.inner, FileChatMemory)
        path = memory.inner.path_of(session_id)
        path.write_bytes(path.read_bytes()[:-7])


# Expiry ----------------------------------------------------------------------------------------------------------


def _with_ttl(kind: str, tmp_path: Path, ttl: float) -> ChatMemory:
    return open_backend(kind, tmp_path, ttl=ttl)


@pytest.mark.parametrize("kind", ALL)
def test_a_sliding_ttl_on_every_backend(kind: str, tmp_path: Path, clock: Clock) -> None:
    """Every backend: writes reset the clock, idle sessions read as absent; Redis expires them natively."""
    # Files age by their modification time and Redis keys by the server's clock: those two really wait. The
    # others get a ttl long enough that a loaded machine's own time passing during the test does not expire them.
    let_pass, ttl = (time.sleep, 0.8) if kind in ("file", "redis") else (clock.advance, 80.0)
    memory = _with_ttl(kind, tmp_path, ttl)
    try:
        wrapped = TrimmingChatMemory(memory, max_messages=3)  # through a policy, and its archive expires too
        wrapped.save("idle", [turn(i) for i in range(4)])
        memory.save("busy", [turn(0)])
        for i in range(1, 4):  # every write resets the busy session's clock
            let_pass(ttl * 3 / 8)
            memory.append("busy", [turn(i)])
        assert memory.load("idle") == []
        assert memory.load_versioned("idle").version == 0
        assert memory.append("idle", []) == 0  # the version an empty append reports, as a load reads it
        assert memory.load(archive_id("idle")) == []
        assert memory.sessions() == ["busy"]
        expected = 0 if kind == "redis" else 2  # Redis deleted them itself
        assert cleanup_expired(memory) == expected
        assert cleanup_expired(memory) == 0
        assert memory.save("idle", [turn(9)], expected_version=0) > 0  # an expired session starts afresh
        assert [m.text for m in memory.load("busy")] == ["w-0", "w-1", "w-2", "w-3"]
        assert asyncio.run(acleanup_expired(memory)) == 0
    finally:
        dispose(memory)


def test_an_expired_file_session_appends_afresh(tmp_path: Path) -> None:
    memory = FileChatMemory(tmp_path / "chat", ttl=60)
    memory.save("s", [turn(0)])
    path = memory.path_of("s")
    stale = time.time() - 120
    os.utime(path, (stale, stale))  # written two minutes ago, as another process would have left it
    assert memory.load("s") == []
    assert FileChatMemory(tmp_path / "chat").load("s") == [turn(0)]
    memory.append("s", [turn(1)])
    assert memory.load("s") == [turn(1)]


@pytest.mark.parametrize("kind", ALL)
def test_ttl_must_be_a_positive_number_of_seconds_up_to_the_limit(kind: str, tmp_path: Path) -> None:
    """Every chat backend checks `ttl` alike (`check_ttl`): a typed error, before anything is written."""
    for ttl in (0, -1, float("inf"), float("nan"), 1e20, "60", True):
        with pytest.raises(InvalidInputError, match="ttl"):
            _with_ttl(kind, tmp_path, ttl)  # type: ignore[arg-type]


def test_cleanup_expired_through_policies_and_without_ttl(tmp_path: Path, clock: Clock) -> None:
    inner = InMemoryChatMemory(ttl=60)
    wrapped = TrimmingChatMemory(SummarizingChatMemory(inner, summarizer=str, trigger=50), max_messages=40)
    wrapped.save("s", [turn(0)])
    clock.advance(60)
    assert wrapped.cleanup_expired() == 1
    assert inner.sessions() == []
    assert asyncio.run(wrapped.acleanup_expired()) == 0
    plain = open_backend("file", tmp_path)
    assert cleanup_expired(plain) == 0
    assert asyncio.run(acleanup_expired(plain)) == 0
    assert cleanup_expired(object()) == 0  # type: ignore[arg-type]  # no TTL support at all


def test_a_session_id_too_long_for_the_sessions_the_policy_writes_is_refused_before_anything_is_written() -> None:
    inner = InMemoryChatMemory()
    session_id = "x" * 65_530  # a valid id, but not with ":archive" or ":summarizer" after it
    messages = [turn(i) for i in range(3)]
    wrappers = [
        TrimmingChatMemory(inner, max_messages=2),
        SummarizingChatMemory(inner, summarizer=lambda _: "summary", trigger=10, keep_recent=2),
        SummarizingChatMemory(inner, summarizer=lambda _: "summary", trigger=10, keep_recent=2, archive=False),
    ]
    for wrapper in wrappers:
        with pytest.raises(InvalidInputError, match="bytes long"):
            wrapper.append(session_id, messages)
        with pytest.raises(InvalidInputError, match="bytes long"):
            asyncio.run(wrapper.asave(session_id, messages))
        assert inner.load(session_id) == []
    TrimmingChatMemory(inner, max_messages=2, archive=False).append(session_id, messages)  # writes no other session
    assert inner.load(session_id) == messages[1:]


class LosingEveryRace(InMemoryChatMemory):
    """A chat memory where another writer always changes the session between a read and a save."""

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        if expected_version is not None:
            raise ConcurrentModificationError(f"session {session_id!r} changed")
        return super().save(session_id, messages)


def test_a_trim_failing_after_a_stored_write_says_the_write_was_stored() -> None:
    inner = LosingEveryRace()
    memory = TrimmingChatMemory(inner, max_messages=1)
    with pytest.raises(PolicyError) as raised:
        memory.append("s", [turn(0), turn(1)])
    assert raised.value.stored
    assert isinstance(raised.value.__cause__, ConcurrentModificationError)
    assert inner.load("s") == [turn(0), turn(1)]  # stored, untrimmed: retrying is not needed
    assert issubclass(SummarizationError, PolicyError)
