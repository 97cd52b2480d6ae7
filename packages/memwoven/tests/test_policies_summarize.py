"""SummarizingChatMemory: compaction on every backend, the 200-turn run, failures, layering, concurrency."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_backends import assert_no_orphans, conversation, histories
from policy_backends import chat_memory_fixture as chat_memory_fixture

from memwoven import ChatMemory, FileChatMemory, InMemoryChatMemory, InvalidInputError, Message, ToolCall
from memwoven.contracts import MessagesIn
from memwoven.policies import (
    SUMMARY_KEY,
    SummarizationError,
    Summarizer,
    SummarizingChatMemory,
    Trigger,
    is_summary,
    render_transcript,
)
from memwoven.testing import ChatMemoryContract


class Recorder:
    """A deterministic summarizer that remembers its inputs."""

    def __init__(self) -> None:
        self.inputs: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> str:
        self.inputs.append(messages)
        originals = [m for m in messages if not is_summary(m)]
        return f"{len(originals)} messages, the last: {originals[-1].text or originals[-1].role}"


def _fail(messages: list[Message]) -> str:
    raise RuntimeError("the model is down")


# The 200-turn run from the issue -----------------------------------------------------------------------------


def test_200_turns_with_tool_calls(chat_memory: ChatMemory) -> None:
    trigger, recorder = 40, Recorder()
    memory = SummarizingChatMemory(chat_memory, summarizer=recorder, trigger=trigger, keep_first=2, keep_recent=12)
    pinned = [Message(role="system", content="You are terse."), Message(role="user", content="I am Ada.")]
    memory.append("s", pinned)
    sent = list(pinned)
    for turn in range(200):
        messages = conversation(1, tools_every=3, start=turn)
        for step in (messages[:1], messages[1:-1], messages[-1:]):  # user; the tool call and results; answer
            if step:
                memory.append("s", step)
                sent += step
                assert len(memory.load("s")) <= trigger
    history = memory.load("s")
    assert history[:2] == pinned
    assert is_summary(history[2])
    assert_no_orphans(history)
    archived = memory.archived("s")
    recent = history[3:]
    assert [*pinned, *archived, *recent] == sent  # every original exactly once, in order
    assert history[2].metadata[SUMMARY_KEY]["summarized"] == len(archived)
    assert len(recorder.inputs) == history[2].metadata[SUMMARY_KEY]["layers"] > 10
    for earlier, later in zip(recorder.inputs, recorder.inputs[1:]):
        assert is_summary(later[0])
        assert not is_summary(earlier[-1])

    # A failing summarizer: the error propagates and the stored history is left as it was.
    failing = SummarizingChatMemory(chat_memory, summarizer=_fail, trigger=trigger, keep_first=2, keep_recent=12)
    before, archived_before = memory.load("s"), memory.archived("s")
    extra = conversation(12, tools_every=0, start=1000)
    with pytest.raises(SummarizationError, match="the model is down") as raised:
        failing.append("s", extra)
    assert raised.value.stored
    assert failing.load("s") == [*before, *extra]  # the write happened; no compaction, nothing dropped
    assert failing.archived("s") == archived_before
    with pytest.raises(SummarizationError, match="the model is down"):
        failing.compact("s")
    assert memory.compact("s")
    assert len(memory.load("s")) <= trigger
    assert [*pinned, *memory.archived("s"), *memory.load("s")[3:]] == [*sent, *extra]


def test_async_compaction_with_an_async_summarizer(chat_memory: ChatMemory) -> None:
    async def summarize(messages: list[Message], *, session_id: str) -> str:
        await chat_memory.aappend(session_id, [Message(role="user", content=f"{len(messages)} to summarize")])
        return f"{len(messages)} messages"

    memory = SummarizingChatMemory(chat_memory, summarizer=summarize, trigger=20, keep_first=1, keep_recent=6)

    async def scenario() -> list[Message]:
        sent = [Message(role="system", content="rules")]
        await memory.aappend("a", sent)
        for turn in range(30):
            messages = conversation(1, tools_every=2, start=turn)
            await memory.aappend("a", messages)
            sent += messages
            assert len(await memory.aload("a")) <= 20
        stored, archived = await memory.aload("a"), await memory.aarchived("a")
        assert [*stored[:1], *archived, *stored[2:]] == sent
        assert is_summary(stored[1])
        return stored

    stored = asyncio.run(scenario())
    assert_no_orphans(stored)
    assert len(chat_memory.load("a:summarizer")) == stored[1].metadata[SUMMARY_KEY]["layers"]


# Properties -------------------------------------------------------------------------------------------------------


@st.composite
def _settings(draw: st.DrawFn) -> tuple[int, int, int]:
    trigger = draw(st.integers(min_value=3, max_value=14))
    keep_first = draw(st.integers(min_value=0, max_value=trigger - 2))
    keep_recent = draw(st.integers(min_value=0, max_value=trigger - keep_first - 2))
    return trigger, keep_first, keep_recent


@settings(max_examples=150, deadline=None)
@given(history=histories(("user", "assistant", "tools"), max_size=40), options=_settings())
def test_property_compaction_loses_nothing_and_stays_under_the_trigger(
    history: list[Message], options: tuple[int, int, int]
) -> None:
    trigger, keep_first, keep_recent = options
    recorder = Recorder()
    memory = SummarizingChatMemory(
        InMemoryChatMemory(), summarizer=recorder, trigger=trigger, keep_first=keep_first, keep_recent=keep_recent
    )
    starts = [i for i, m in enumerate(history) if m.role != "tool"]  # each unit is appended at once
    sent: list[Message] = []
    for start, end in zip(starts, [*starts[1:], len(history)]):
        memory.append("s", history[start:end])
        sent += history[start:end]
        stored, archived = memory.load("s"), memory.archived("s")
        assert sum(map(is_summary, stored)) <= 1
        rebuilt = [m for message in stored for m in (archived if is_summary(message) else [message])]
        assert rebuilt == sent  # every original exactly once: stored or archived, in order
        assert_no_orphans(stored)
        pinned_past_a_call = len(stored) > keep_first and stored[keep_first].role == "tool"
        assert len(stored) <= trigger or pinned_past_a_call
    for middle in recorder.inputs:
        assert_no_orphans([m for m in middle if not is_summary(m)])


def test_a_tool_call_waiting_for_its_results_is_not_summarized() -> None:
    memory, _, recorder = _simple(trigger=4, keep_recent=0)
    calls = [ToolCall(id=f"c{k}", name="lookup", arguments={"k": k}) for k in range(2)]
    memory.append("s", conversation(2, tools_every=0))
    memory.append("s", [Message(role="assistant", tool_calls=calls)])  # past the trigger, results still to come
    for call in calls:  # results arrive one at a time, as an agent loop writes them
        memory.append("s", [Message(role="tool", tool_call_id=call.id, content=f"result {call.id}")])
        assert_no_orphans(memory.load("s"))
    stored = memory.load("s")
    assert recorder.inputs
    assert [m.role for m in stored[1:]] == ["assistant", "tool", "tool"]
    memory.append("s", [Message(role="assistant", content="done")])  # the unit is complete: it may go now
    assert [m.role for m in memory.load("s")] == ["system"]
    assert [m.role for m in memory.archived("s")][-4:] == ["assistant", "tool", "tool", "assistant"]


# Behaviour -------------------------------------------------------------------------------------------------------


def _simple(**options: Any) -> tuple[SummarizingChatMemory, InMemoryChatMemory, Recorder]:
    inner, recorder = InMemoryChatMemory(), Recorder()
    return SummarizingChatMemory(inner, summarizer=recorder, **options), inner, recorder


def test_nothing_happens_under_the_trigger() -> None:
    memory, _, recorder = _simple(trigger=10, keep_recent=4)
    memory.save("s", conversation(3, tools_every=0))
    assert len(memory.load("s")) == 6
    assert not recorder.inputs
    assert memory.archived("s") == []
    assert not memory.compact("s")


def test_the_summary_message_is_a_marked_system_message() -> None:
    memory, _, _ = _simple(trigger=6, keep_recent=2, summary_prefix="Earlier: ")
    memory.save("s", conversation(4, tools_every=0))
    summary = memory.load("s")[0]
    assert summary.role == "system"
    assert summary.text == "Earlier: 6 messages, the last: answer 2"
    assert summary.metadata[SUMMARY_KEY] == {"summarized": 6, "layers": 1}
    assert summary.created_at is not None


def test_tool_calls_stay_with_their_results() -> None:
    memory, _, recorder = _simple(trigger=8, keep_recent=3)
    history = conversation(3, tools_every=1)  # 5 messages a turn: user, call, result, result, answer
    memory.save("s", history)
    stored = memory.load("s")
    assert_no_orphans(stored)
    assert_no_orphans(recorder.inputs[0])
    assert [m.role for m in stored[1:]] in (
        ["assistant", "tool", "tool", "assistant"],
        ["assistant"],
    )


def test_a_token_trigger() -> None:
    memory, _, recorder = _simple(trigger=Trigger(tokens=120), keep_recent=2)
    for turn in range(12):
        memory.append("s", conversation(1, tools_every=0, start=turn))
    assert recorder.inputs
    assert memory.counter.total(memory.load("s")) <= 120


def test_forced_compaction_and_nothing_to_summarize() -> None:
    memory, _, _ = _simple(trigger=100, keep_first=1, keep_recent=2)
    memory.save("s", conversation(3, tools_every=0))
    assert memory.compact("s", force=True)
    assert [m.text for m in memory.load("s")][2:] == ["question 2", "answer 2"]
    assert not memory.compact("s", force=True)  # only the summary is left in the middle


def test_an_empty_summary_is_an_error_and_changes_nothing() -> None:
    inner = InMemoryChatMemory()
    memory = SummarizingChatMemory(inner, summarizer=lambda messages: "  ", trigger=4, keep_recent=1)
    with pytest.raises(SummarizationError):
        memory.save("s", conversation(3, tools_every=0))
    assert len(inner.load("s")) == 6
    assert inner.sessions() == ["s"]


def test_options_are_validated() -> None:
    with pytest.raises(InvalidInputError):
        SummarizingChatMemory(InMemoryChatMemory(), summarizer=Recorder(), trigger=10, keep_first=4, keep_recent=5)
    with pytest.raises(InvalidInputError):
        SummarizingChatMemory(InMemoryChatMemory(), summarizer="no", trigger=10)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Trigger()


def test_the_summarizer_runs_in_its_own_session() -> None:
    inner = InMemoryChatMemory()
    seen: list[str] = []

    def summarizer(messages: list[Message], *, session_id: str) -> str:
        seen.append(session_id)
        inner.append(session_id, [Message(role="user", content=render_transcript(messages))])  # e.g. a traced call
        return "summary"

    memory = SummarizingChatMemory(inner, summarizer=summarizer, trigger=5, keep_recent=2)
    memory.save("chat", conversation(3, tools_every=0))
    assert seen == ["chat:summarizer"]
    assert inner.sessions() == ["chat", "chat:archive", "chat:summarizer"]
    assert [m.text for m in memory.load("chat")][1:] == ["question 2", "answer 2"]
    assert "user: question 0" in inner.load("chat:summarizer")[0].text


def test_async_api_and_async_summarizers() -> None:
    async def summarize(messages: list[Message]) -> str:
        await asyncio.sleep(0)
        return f"async {len(messages)}"

    class Both(Summarizer):
        def __call__(self, messages: list[Message], *, session_id: str | None = None) -> str:
            return "sync path"

        async def acall(self, messages: list[Message], *, session_id: str | None = None) -> str:
            return f"async path for {session_id}"

    async def scenario() -> None:
        memory = SummarizingChatMemory(InMemoryChatMemory(), summarizer=summarize, trigger=4, keep_recent=1)
        await memory.asave("s", conversation(3, tools_every=0))
        assert (await memory.aload("s"))[0].text.endswith("async 5")
        assert len(await memory.aarchived("s")) == 5
        both = SummarizingChatMemory(InMemoryChatMemory(), summarizer=Both(), trigger=4, keep_recent=1)
        await both.aappend("s", conversation(3, tools_every=0))
        assert (await both.aload("s"))[0].text.endswith("async path for s:summarizer")
        sync = SummarizingChatMemory(InMemoryChatMemory(), summarizer=Recorder(), trigger=4, keep_recent=1)
        await sync.aappend("s", conversation(3, tools_every=0))  # a sync summarizer runs in a thread
        assert await sync.acompact("s", force=True) is False

    asyncio.run(scenario())
    memory = SummarizingChatMemory(InMemoryChatMemory(), summarizer=summarize, trigger=4, keep_recent=1)
    memory.save("s", conversation(3, tools_every=0))  # an async summarizer from sync code, outside any loop
    assert memory.load("s")[0].text.endswith("async 5")


def test_a_writer_during_summarization_is_kept_and_nothing_is_archived_twice() -> None:
    inner = InMemoryChatMemory()
    calls = 0

    def busy(messages: list[Message]) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:  # another process appends while the model is thinking
            inner.append("s", [Message(role="user", content="meanwhile")])
        return "summary"

    memory = SummarizingChatMemory(inner, summarizer=busy, trigger=6, keep_recent=2)
    history = conversation(4, tools_every=0)
    memory.save("s", history)
    stored = memory.load("s")
    assert calls == 1  # the summary was reused: the middle had not changed
    assert stored[-1].text == "meanwhile"
    assert is_summary(stored[0])
    assert [*memory.archived("s"), *stored[1:]] == [*history, Message(role="user", content="meanwhile")]


class _RacingMemory(InMemoryChatMemory):
    """Lets another writer in between the compaction's archive append and its save, once."""

    raced = False

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        if expected_version is not None and not self.raced and session_id == "s":
            self.raced = True
            self.append("s", [Message(role="user", content="raced")])
        return super().save(session_id, messages, expected_version=expected_version)


def test_a_save_conflict_replans_without_archiving_twice() -> None:
    inner = _RacingMemory()
    memory = SummarizingChatMemory(inner, summarizer=Recorder(), trigger=6, keep_recent=2)
    history = conversation(4, tools_every=0)
    memory.save("s", history)
    stored = memory.load("s")
    assert inner.raced
    assert stored[-1].text == "raced"
    assert [*memory.archived("s"), *stored[1:]] == [*history, Message(role="user", content="raced")]


def test_a_message_reusing_a_summarized_messages_id_is_archived_too() -> None:
    # the conversation started over with ids numbered from 0 again: both messages named "m0" are archived
    memory, _, _ = _simple(trigger=4, keep_recent=1)
    sent = []
    for conversation_number in range(2):
        memory.clear("s")
        for number in range(5):
            message = Message(role="user", content=f"{conversation_number}.{number}", id=f"m{number}")
            memory.append("s", [message])
            sent.append(message)
    assert memory.archived("s") == [*sent[0:4], *sent[5:9]]
    assert asyncio.run(memory.aarchived("s")) == [*sent[0:4], *sent[5:9]]


def test_archive_false_keeps_no_archive() -> None:
    memory, inner, _ = _simple(trigger=4, keep_recent=1, archive=False)
    memory.save("s", conversation(3, tools_every=0))
    assert inner.sessions() == ["s"]
    assert memory.archived("s") == []


def test_transcript_rendering() -> None:
    text = render_transcript(conversation(1, tools_every=1))
    assert text.splitlines()[0] == "user: question 0"
    assert 'assistant called lookup({"turn":0,"k":0})' in text
    assert "tool result (lookup): result c0-0" in text


# The wrapper is a ChatMemory: the conformance suite over files, with a trigger that never fires ------------------


class TestSummarizingChatMemoryContract(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self, tmp_path: Path) -> ChatMemory:
        return SummarizingChatMemory(FileChatMemory(tmp_path / "chat"), summarizer=Recorder(), trigger=100_000)

    def reopen(self, memory: ChatMemory) -> ChatMemory:
        assert isinstance(memory, SummarizingChatMemory)
        assert isinstance(memory.inner, FileChatMemory)
        return SummarizingChatMemory(FileChatMemory(memory.inner.directory), summarizer=Recorder(), trigger=100_000)

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        assert isinstance(memory, SummarizingChatMemory)
        assert isinstance(memory.inner, FileChatMemory)
        path = memory.inner.path_of(session_id)
        path.write_bytes(path.read_bytes()[:-7])


class _Broken(RuntimeError):
    pass


def _failing(messages: list[Message]) -> str:
    raise _Broken("model unavailable")


@pytest.mark.parametrize("write", ["save", "append"])
def test_a_failing_summarizer_says_the_triggering_write_was_stored(write: str) -> None:
    inner = InMemoryChatMemory()
    memory = SummarizingChatMemory(inner, summarizer=_failing, trigger=4, keep_recent=1)
    history = conversation(3, tools_every=0)
    with pytest.raises(SummarizationError) as raised:
        getattr(memory, write)("s", history)
    cause = raised.value.__cause__
    assert raised.value.stored is True
    assert isinstance(cause, SummarizationError)
    assert isinstance(cause.__cause__, _Broken)
    assert inner.load("s") == history  # stored once, nothing summarized: a caller that retries would duplicate
    with pytest.raises(SummarizationError) as raised:
        memory.compact("s")
    assert raised.value.stored is False
    assert isinstance(raised.value.__cause__, _Broken)


def test_a_failing_summarizer_async() -> None:
    inner = InMemoryChatMemory()
    memory = SummarizingChatMemory(inner, summarizer=_failing, trigger=4, keep_recent=1)
    with pytest.raises(SummarizationError) as raised:
        asyncio.run(memory.aappend("s", conversation(3, tools_every=0)))
    assert raised.value.stored is True
    assert len(inner.load("s")) == 6
