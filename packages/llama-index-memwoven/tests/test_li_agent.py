"""A FunctionAgent driven by a mock function-calling LLM for 10 turns with tool calls, its memory kept in memwoven:
the agent behaves exactly as with LlamaIndex's own in-process store, and the history reloads `==`."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import BaseMemory, ChatMemoryBuffer, Memory
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index.core.tools import FunctionTool

from llama_index.storage.chat_store.memwoven import MemwovenChatStore, MemwovenDBChatStore
from memwoven import ChatMemory

TURNS = 10

# LlamaIndex's workflows inspect the agent (a pydantic model) with inspect.getmembers, which trips pydantic's
# deprecation warnings for every deprecated attribute: not this package's doing.
pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecatedSince20", "ignore::pydantic.warnings.PydanticDeprecatedSince211"
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """The mock LLM: call `add` on the numbers of the user's request, then answer with the tool's result.

    The answer counts the messages the LLM was given, so it depends on the whole history read from memory.
    """
    last = messages[-1]
    if last.role == MessageRole.TOOL:
        return ChatMessage(role="assistant", content=f"The sum is {last.content} (after {len(messages)} messages).")
    a, b = map(int, re.findall(r"\d+", last.content or ""))
    call = ToolCallBlock(tool_call_id=f"call-{a}-{b}", tool_name="add", tool_kwargs={"a": a, "b": b})
    return ChatMessage(role="assistant", blocks=[TextBlock(text=f"Adding {a} and {b}."), call])


def run_agent(memory: BaseMemory) -> list[str]:
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(fn=add)],
        llm=MockFunctionCallingLLM(response_generator=respond),
        system_prompt="You add numbers.",
    )

    async def conversation() -> list[str]:
        return [str(await agent.run(user_msg=f"Please add {i} and {i * 10}.", memory=memory)) for i in range(TURNS)]

    return asyncio.run(conversation())


def dumps(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [message.model_dump(mode="json") for message in messages]


@pytest.fixture(scope="module")
def reference() -> tuple[list[str], list[dict[str, Any]]]:
    """The same conversation with LlamaIndex's in-process chat store (which keeps the very objects it is given)."""
    memory = ChatMemoryBuffer.from_defaults(chat_store=SimpleChatStore(), token_limit=100_000)
    answers = run_agent(memory)
    return answers, dumps(memory.get_all())


@pytest.mark.parametrize("kind", ["Memory", "ChatMemoryBuffer"])
def test_a_function_agent_with_memwoven_memory(
    kind: str,
    chat_memory: ChatMemory,
    reopen_chat: ChatMemory,
    reference: tuple[list[str], list[dict[str, Any]]],
) -> None:
    def memory_over(store: ChatMemory) -> BaseMemory:
        if kind == "Memory":
            return Memory.from_defaults(session_id="agent-1", chat_store=MemwovenDBChatStore(store))
        return ChatMemoryBuffer.from_defaults(
            chat_store=MemwovenChatStore(store), chat_store_key="agent-1", token_limit=100_000
        )

    answers = run_agent(memory_over(chat_memory))
    expected_answers, expected_history = reference
    assert answers == expected_answers
    assert answers[-1] == f"The sum is {9 + 90} (after {1 + 4 * (TURNS - 1) + 3} messages)."
    reloaded = memory_over(reopen_chat).get_all()
    assert dumps(reloaded) == expected_history
    assert len(reloaded) == 4 * TURNS

    stored = reopen_chat.load("agent-1")  # the standard fields other frameworks read
    calls = [m for m in stored if m.tool_calls]
    results = [m for m in stored if m.role == "tool"]
    assert [c.tool_calls[0].arguments for c in calls] == [{"a": i, "b": i * 10} for i in range(TURNS)]
    assert [r.tool_call_id for r in results] == [c.tool_calls[0].id for c in calls]
    assert [r.text for r in results] == [str(i * 11) for i in range(TURNS)]
