"""Backends the policy tests run on: every embedded one (in-memory, file, SQLite) and PostgreSQL.

PostgreSQL is skipped when the test server is down (failed under MEMWEAVE_REQUIRE_SERVICES=1); each test gets its
own `table_prefix` and drops only its own tables afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memweave import ChatMemory, FileChatMemory, InMemoryChatMemory, Message, ToolCall
from memweave.backends.sql import SQLChatMemory
from memweave_test_support import postgres_url, unique_name

BACKENDS = ["memory", "file", "sqlite", pytest.param("postgresql", marks=pytest.mark.service)]
EMBEDDED = ["memory", "file", "sqlite"]


def open_backend(kind: str, tmp_path: Path) -> ChatMemory:
    """A fresh, empty chat memory of `kind` (its tables or files private to the test)."""
    if kind == "memory":
        return InMemoryChatMemory()
    if kind == "file":
        return FileChatMemory(tmp_path / "chat")
    if kind == "sqlite":
        return SQLChatMemory(f"sqlite:///{tmp_path}/chat.db")
    return SQLChatMemory(postgres_url(), table_prefix=unique_name("mwpol") + "_")


def reopen(memory: ChatMemory) -> ChatMemory:
    """A second object over the same storage (the object itself for the in-memory backend)."""
    if isinstance(memory, FileChatMemory):
        return FileChatMemory(memory.directory)
    if isinstance(memory, SQLChatMemory):
        return SQLChatMemory(memory.engine.url, table_prefix=memory.table_prefix)
    return memory


def dispose(memory: ChatMemory) -> None:
    """Close the memory; on a server, drop this test's tables (and only those)."""
    try:
        if isinstance(memory, SQLChatMemory) and memory.engine.dialect.name != "sqlite":
            memory.drop_tables()
    finally:
        memory.close()


def backend_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatMemory]:
    """The body of a `chat_memory` fixture parametrized over `BACKENDS`."""
    memory = open_backend(request.param, tmp_path)
    try:
        yield memory
    finally:
        dispose(memory)


def conversation(turns: int, *, tools_every: int = 3, start: int = 0) -> list[Message]:
    """`turns` turns of user / assistant; every `tools_every`-th turn calls two tools before answering."""
    messages: list[Message] = []
    for turn in range(start, start + turns):
        messages.append(Message(role="user", content=f"question {turn}"))
        if tools_every and turn % tools_every == 0:
            calls = [ToolCall(id=f"c{turn}-{k}", name="lookup", arguments={"turn": turn, "k": k}) for k in range(2)]
            messages.append(Message(role="assistant", tool_calls=calls))
            messages += [Message(role="tool", tool_call_id=c.id, name=c.name, content=f"result {c.id}") for c in calls]
        messages.append(Message(role="assistant", content=f"answer {turn}"))
    return messages


def assert_no_orphans(messages: list[Message]) -> None:
    """Every tool result follows (through other tool results) the assistant message that called it."""
    open_calls: set[str] = set()
    for position, message in enumerate(messages):
        if message.role == "tool":
            assert message.tool_call_id in open_calls, f"orphaned tool result at {position}: {message}"
        elif message.role == "assistant" and message.tool_calls:
            open_calls = {call.id for call in message.tool_calls}
        else:
            open_calls = set()
