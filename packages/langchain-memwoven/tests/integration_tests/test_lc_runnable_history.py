"""End to end: `RunnableWithMessageHistory` around a chat model that calls tools, for 20 turns, sync and async.

The reloaded history (through a new memory object on the same storage) must hold exactly what the model produced
and exactly what LangChain's own in-memory history holds for the same conversation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_memwoven import MemwovenChatMessageHistory
from memwoven import ChatMemory
from memwoven_test_support import unique_name

TURNS = 20


def script() -> list[AIMessage]:
    """What the fake model answers, turn by turn: every third turn calls tools."""
    replies = []
    for turn in range(TURNS):
        usage = {"input_tokens": 10 * turn, "output_tokens": turn + 1, "total_tokens": 11 * turn + 1}
        if turn % 3 == 0:
            calls = [{"name": "lookup", "args": {"q": f"topic {turn}", "page": turn}, "id": f"call_{turn}_a"}]
            if turn % 2 == 0:
                calls.append({"name": "calc", "args": {"expr": f"{turn} * 2", "exact": True}, "id": f"call_{turn}_b"})
            replies.append(
                AIMessage(
                    content="",
                    tool_calls=calls,
                    usage_metadata=usage,  # type: ignore[arg-type]
                    response_metadata={"finish_reason": "tool_calls", "model_name": "fake"},
                )
            )
        else:
            replies.append(AIMessage(content=f"Answer {turn}: caf\u00e9 \U0001f600", usage_metadata=usage))  # type: ignore[arg-type]
    return replies


def next_input(turn: int, previous: AIMessage | None) -> list[BaseMessage]:
    """Tool results if the model just called tools, else a user message (multimodal every fourth turn)."""
    if previous is not None and previous.tool_calls:
        return [
            ToolMessage(
                content=f"result of {call['name']}",
                tool_call_id=call["id"] or "",
                name=call["name"],
                artifact={"rows": [turn, call["args"]]},
                status="error" if index else "success",
            )
            for index, call in enumerate(previous.tool_calls)
        ]
    if turn % 4 == 1:
        content: Any = [
            {"type": "text", "text": f"Question {turn} about this picture"},
            {"type": "image", "url": f"https://example.com/{turn}.png"},
        ]
        return [HumanMessage(content=content, id=f"human-{turn}")]
    return [HumanMessage(content=f"Question {turn}")]


def chain_over(factory: Callable[[str], BaseChatMessageHistory]) -> RunnableWithMessageHistory:
    return RunnableWithMessageHistory(GenericFakeChatModel(messages=iter(script())), factory)


class Conversation:
    """Drives the same scripted conversation through our history and through LangChain's in-memory reference.

    The reference matters because `RunnableWithMessageHistory` hands the history its own re-serialized copy of
    the inputs (e.g. v1 image blocks come back in OpenAI's `image_url` form): the history must store exactly
    what LangChain gives it, which is what LangChain's own history stores.
    """

    def __init__(self, memory: ChatMemory) -> None:
        self.session = unique_name("conversation")
        self.config: Any = {"configurable": {"session_id": self.session}}
        self.reference = InMemoryChatMessageHistory()
        self.ours = chain_over(lambda session_id: MemwovenChatMessageHistory(memory, session_id))
        self.theirs = chain_over(lambda session_id: self.reference)
        self.outputs: list[AIMessage] = []

    def inputs(self, turn: int) -> list[BaseMessage]:
        return next_input(turn, self.outputs[-1] if self.outputs else None)

    def record(self, ours: Any, theirs: Any) -> None:
        assert isinstance(ours, AIMessage)
        assert isinstance(theirs, AIMessage)
        assert ours.model_copy(update={"id": None}) == theirs.model_copy(update={"id": None})
        self.outputs.append(ours)

    def check(self, reloaded: list[BaseMessage]) -> None:
        assert len(self.outputs) == TURNS
        assert sum(1 for m in self.outputs if m.tool_calls) == 7
        assert [m for m in reloaded if isinstance(m, AIMessage)] == self.outputs  # exactly what the model produced
        assert len(reloaded) == len(self.reference.messages)
        for mine, reference in zip(reloaded, self.reference.messages):
            assert mine.id  # every stored message has an id (CM10); the reference history gives none
            assert mine.model_copy(update={"id": None}) == reference.model_copy(update={"id": None})


def test_twenty_turns_sync(backend) -> None:  # type: ignore[no-untyped-def]
    memory = backend.chat()
    conversation = Conversation(memory)
    for turn in range(TURNS):
        inputs = conversation.inputs(turn)
        conversation.record(
            conversation.ours.invoke(inputs, conversation.config),
            conversation.theirs.invoke(inputs, conversation.config),
        )
    conversation.check(MemwovenChatMessageHistory(backend.reopen_chat(memory), conversation.session).messages)


async def test_twenty_turns_async(backend) -> None:  # type: ignore[no-untyped-def]
    memory = backend.chat()
    conversation = Conversation(memory)
    for turn in range(TURNS):
        inputs = conversation.inputs(turn)
        conversation.record(
            await conversation.ours.ainvoke(inputs, conversation.config),
            await conversation.theirs.ainvoke(inputs, conversation.config),
        )
    history = MemwovenChatMessageHistory(backend.reopen_chat(memory), conversation.session)
    conversation.check(await history.aget_messages())


def test_from_url_as_the_session_factory(persistent_backend) -> None:  # type: ignore[no-untyped-def]
    url, options = persistent_backend.url, persistent_backend.options
    opened: list[MemwovenChatMessageHistory] = []

    def factory(session_id: str) -> MemwovenChatMessageHistory:
        opened.append(MemwovenChatMessageHistory.from_url(url, session_id, **options))
        return opened[-1]

    model = GenericFakeChatModel(messages=iter([AIMessage("one"), AIMessage("two")]))
    chain = RunnableWithMessageHistory(model, factory)
    session = unique_name("s")
    for text in ("first", "second"):
        chain.invoke(text, {"configurable": {"session_id": session}})
    for history in opened:
        history.close()
    with MemwovenChatMessageHistory.from_url(url, session, **options) as history:
        assert [m.content for m in history.messages] == ["first", "one", "second", "two"]
