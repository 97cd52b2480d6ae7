"""Context windows: unit tests, property tests (budget, orphans, head) and the window as a view of a session."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_backends import assert_no_orphans, conversation, histories
from policy_backends import chat_memory_fixture as chat_memory_fixture

from memwoven import ChatMemory, ImagePart, InvalidInputError, Message, TextPart, ToolCall
from memwoven.policies import (
    SUMMARY_KEY,
    ContextWindow,
    MessageTokenCounter,
    OversizedTurnWarning,
    SummarizingChatMemory,
    window,
)
from memwoven.policies._base import head_end, without_orphans
from memwoven.testing import sample_conversation


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def _one_token_each() -> MessageTokenCounter:
    return MessageTokenCounter(lambda text: 0, per_message=1, per_name=0, per_tool_call=0)


# Selection rules -------------------------------------------------------------------------------------------------


def test_no_budget_returns_everything() -> None:
    history = sample_conversation()
    selected = window(history)
    assert selected.messages == history
    assert not selected.over_budget
    assert selected.omitted == 0


def test_newest_units_first_and_the_instructions_are_kept() -> None:
    history = [Message(role="system", content="sys"), *conversation(6, tools_every=0)]
    selected = window(history, max_messages=5)
    assert _texts(selected.messages) == ["sys", "question 4", "answer 4", "question 5", "answer 5"]
    assert selected.omitted == len(history) - 5
    assert len(selected) == 5


def test_a_tool_call_is_never_split_from_its_results() -> None:
    history = conversation(3, tools_every=1)  # user, assistant(2 calls), tool, tool, assistant per turn
    selected = window(history, max_messages=4)  # the newest unit is 1 message, then a unit of 3
    assert [m.role for m in selected.messages] == ["assistant", "tool", "tool", "assistant"]
    selected = window(history, max_messages=3)  # the 3-message unit does not fit beside the answer
    assert [m.role for m in selected.messages] == ["assistant"]
    assert_no_orphans(window(history, max_messages=2).messages)


def test_orphaned_tool_results_are_left_out() -> None:
    history = [
        Message(role="tool", tool_call_id="gone", content="result of a call trimmed away"),
        Message(role="user", content="hi"),
        Message(role="tool", tool_call_id="x", content="stray"),
        Message(role="assistant", content="hello"),
    ]
    selected = window(history)
    assert _texts(selected.messages) == ["hi", "hello"]
    assert selected.omitted == 2


def test_an_oversized_newest_turn_is_returned_alone_and_flagged() -> None:
    history = [Message(role="system", content="sys"), Message(role="user", content="short")]
    history.append(Message(role="assistant", content="word " * 500))
    with pytest.warns(OversizedTurnWarning):
        selected = window(history, max_tokens=50)
    assert _texts(selected.messages)[0] == "sys"
    assert len(selected) == 2
    assert selected.over_budget
    assert selected.tokens > 50


def test_a_head_over_budget_still_comes_with_the_newest_turn() -> None:
    history = [Message(role="system", content="rules " * 300), *conversation(2, tools_every=0)]
    with pytest.warns(OversizedTurnWarning):
        selected = window(history, max_tokens=20)
    assert _texts(selected.messages)[1:] == ["answer 1"]
    assert selected.over_budget


def test_keep_first_pins_more_and_a_following_summary_stays() -> None:
    summary = Message(role="system", content="summary", metadata={SUMMARY_KEY: {"summarized": 4}})
    history = [Message(role="user", content="first question"), summary, *conversation(5, tools_every=0)]
    selected = window(history, max_messages=4, keep_first=1)
    assert _texts(selected.messages) == ["first question", "summary", "question 4", "answer 4"]


def test_tokens_cover_text_tool_calls_and_images() -> None:
    counter = MessageTokenCounter(lambda text: len(text.split()), image_tokens=100, low_detail_image_tokens=10)
    image = Message(
        role="user",
        name="alice",
        content=[TextPart(text="look at this"), ImagePart(url="https://x/y.png"), ImagePart(url="z", detail="low")],
    )
    call = Message(role="assistant", tool_calls=[ToolCall(id="1", name="lookup", arguments={"q": "a b"})])
    assert counter.count(image) == 3 + (1 + 1) + 3 + 100 + 10
    assert counter.count(call) == 3 + 3 + 1 + 2  # framing, per call, the name, '{"q":"a b"}' (two "words" here)
    selected = window([image, call], max_tokens=200, tokenizer=counter)
    assert selected.tokens == counter.total([image, call])


def test_budgets_are_validated() -> None:
    for bad in ({"max_messages": 0}, {"max_tokens": -1}, {"max_tokens": True}, {"keep_first": -1}):
        with pytest.raises(InvalidInputError):
            window([], **bad)  # type: ignore[arg-type]


def test_a_window_costs_what_it_holds_not_the_history() -> None:
    counted: list[str] = []
    counter = MessageTokenCounter(lambda text: counted.append(text) or len(text.split()))
    history = conversation(5_000, tools_every=4)
    selected = window(history, max_tokens=300, tokenizer=counter)
    first = len(counted)
    assert first < 4 * len(selected) + 20  # only the window (and one unit past it) was measured
    window(history, max_tokens=300, tokenizer=counter)
    assert len(counted) == first  # and measured once: counts are cached per message


# Properties ------------------------------------------------------------------------------------------------------


def _is_subsequence(part: list[Message], whole: list[Message]) -> bool:
    remaining = iter(whole)
    return all(any(m is w for w in remaining) for m in part)


@settings(max_examples=300, deadline=None)
@given(
    history=histories(),
    max_messages=st.none() | st.integers(min_value=1, max_value=12),
    max_tokens=st.none() | st.integers(min_value=1, max_value=300),
    keep_first=st.integers(min_value=0, max_value=3),
)
def test_property_budget_orphans_head(
    history: list[Message], max_messages: int | None, max_tokens: int | None, keep_first: int
) -> None:
    counter = MessageTokenCounter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OversizedTurnWarning)
        selected = window(
            history, max_messages=max_messages, max_tokens=max_tokens, tokenizer=counter, keep_first=keep_first
        )
    result = selected.messages
    assert _is_subsequence(result, history)
    assert_no_orphans(result)
    assert selected.tokens == counter.total(result)
    assert selected.omitted == len(history) - len(result)
    instructions = 0
    while instructions < len(history) and history[instructions].role in ("system", "developer"):
        instructions += 1
    head = head_end(history, keep_first)
    assert head >= instructions
    pinned = without_orphans(history[:head])
    assert [id(m) for m in result[: len(pinned)]] == [id(m) for m in pinned]  # the head, always
    if selected.over_budget:  # the documented exception: the head and the newest complete unit alone
        assert [id(m) for m in result[len(pinned) :]] == [id(m) for m in _newest_unit(history, head)]
    else:
        assert max_messages is None or len(result) <= max_messages
        assert max_tokens is None or selected.tokens <= max_tokens
    if _newest_unit(history, head):
        assert len(result) > len(pinned), "a window always holds the newest usable turn"


def _newest_unit(history: list[Message], floor: int) -> list[Message]:
    """The spec of a unit, independently: the newest message, or tool results with the call before them."""
    end = len(history)
    while end > floor:
        if history[end - 1].role != "tool":
            return history[end - 1 : end]
        start = end - 1
        while start > floor and history[start - 1].role == "tool":
            start -= 1
        if start > floor and history[start - 1].role == "assistant" and history[start - 1].tool_calls:
            ids = {call.id for call in history[start - 1].tool_calls}
            return [history[start - 1], *(m for m in history[start:end] if m.tool_call_id in ids)]
        end = start
    return []


# As a view of a session, on every backend ----------------------------------------------------------------------


def test_context_window_over_a_session(chat_memory: ChatMemory) -> None:
    chat_memory.save("s", [Message(role="system", content="sys"), *conversation(20)])
    view = ContextWindow(chat_memory, "s", max_messages=6)
    selected = view.load()
    assert selected.messages[0].text == "sys"
    assert len(selected) <= 6
    assert selected.messages[-1].text == "answer 19"
    assert_no_orphans(selected.messages)
    assert asyncio.run(view.aload()) == selected
    assert chat_memory.load("s")[1].text == "question 0"  # nothing was removed from storage


def test_context_window_of_a_summarizing_memory_keeps_pins_and_summary(chat_memory: ChatMemory) -> None:
    memory = SummarizingChatMemory(
        chat_memory, summarizer=lambda ms: f"{len(ms)} messages", trigger=12, keep_first=1, keep_recent=4
    )
    memory.append("s", [Message(role="user", content="my name is Ada")])
    for turn in range(8):
        memory.append("s", conversation(1, tools_every=0, start=turn))
    selected = memory.context_window("s", max_messages=3).load()
    assert selected.messages[0].text == "my name is Ada"
    assert selected.messages[1].role == "system"
    assert SUMMARY_KEY in selected.messages[1].metadata
    assert selected.messages[2].text == "answer 7"
