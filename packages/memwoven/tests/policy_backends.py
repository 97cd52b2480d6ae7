"""Backends the policy tests run on: every embedded one (in-memory, file, SQLite) and PostgreSQL (Redis for TTLs);
for working memory and user facts, the item memories (in-memory, SQLite, PostgreSQL).

A server backend is skipped when its server is down (failed under MEMWOVEN_REQUIRE_SERVICES=1); each test gets its
own PostgreSQL `table_prefix` or Redis key prefix and removes only its own tables or keys afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from redis_support import delete_prefix

from memwoven import ChatMemory, FileChatMemory, InMemoryChatMemory, InMemoryItemMemory, ItemMemory, Message, ToolCall
from memwoven._steps import Steps
from memwoven.backends.file.items import FileItemMemory
from memwoven.backends.redis_items import RedisItemMemory
from memwoven.backends.sql import SQLChatMemory, SQLItemMemory
from memwoven.policies import SUMMARY_KEY
from memwoven_test_support import postgres_url, redis_url, unique_name

BACKENDS = ["memory", "file", "sqlite", pytest.param("postgresql", marks=pytest.mark.service)]
EMBEDDED = ["memory", "file", "sqlite"]
ALL = [*BACKENDS, pytest.param("redis", marks=pytest.mark.service)]


def open_backend(kind: str, tmp_path: Path, **options: Any) -> ChatMemory:
    """A fresh, empty chat memory of `kind` (its tables, keys or files private to the test); `options` such as ttl."""
    if kind == "memory":
        return InMemoryChatMemory(**options)
    if kind == "file":
        return FileChatMemory(tmp_path / "chat", **options)
    if kind == "sqlite":
        return SQLChatMemory(f"sqlite:///{tmp_path}/chat.db", **options)
    if kind == "redis":
        from memwoven.backends.redis import RedisChatMemory

        return RedisChatMemory(redis_url(), prefix=unique_name("mwpol"), **options)
    return SQLChatMemory(postgres_url(), table_prefix=unique_name("mwpol") + "_", **options)


def reopen(memory: ChatMemory) -> ChatMemory:
    """A second object over the same storage (the object itself for the in-memory backend)."""
    if isinstance(memory, FileChatMemory):
        return FileChatMemory(memory.directory)
    if isinstance(memory, SQLChatMemory):
        return SQLChatMemory(memory.engine.url, table_prefix=memory.table_prefix)
    return memory


def dispose(memory: ChatMemory) -> None:
    """Close the memory; on a server, drop this test's tables or delete its keys (and only those)."""
    try:
        if isinstance(memory, SQLChatMemory) and memory.engine.dialect.name != "sqlite":
            memory.drop_tables()
        elif type(memory).__name__ == "RedisChatMemory":
            import redis

            from memwoven.backends.redis import RedisChatMemory

            assert isinstance(memory, RedisChatMemory)
            client = redis.Redis.from_url(redis_url())
            keys = list(client.scan_iter(match=f"{memory.prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()
    finally:
        memory.close()


def backend_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatMemory]:
    """The body of a `chat_memory` fixture parametrized over `BACKENDS`."""
    memory = open_backend(request.param, tmp_path)
    try:
        yield memory
    finally:
        dispose(memory)


@pytest.fixture(name="chat_memory", params=BACKENDS)
def chat_memory_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatMemory]:
    """The `chat_memory` fixture: a fresh chat memory on each of `BACKENDS`, disposed of afterwards. A test module
    uses it by importing it (`from policy_backends import chat_memory_fixture as chat_memory_fixture`)."""
    yield from backend_fixture(request, tmp_path)


ITEM_BACKENDS = [
    "memory",
    "file",
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.service),
    pytest.param("redis", marks=pytest.mark.service),
]
ITEMS_BESIDE = {"memory": "memory", "file": "file", "sqlite": "sqlite", "postgresql": "postgresql"}
"""The item memory a test of a chat backend keeps working memory and facts in."""


def open_items(kind: str, tmp_path: Path) -> ItemMemory:
    """A fresh, empty item memory of `kind` (on PostgreSQL, tables of its own)."""
    if kind == "memory":
        return InMemoryItemMemory()
    if kind == "file":
        return FileItemMemory(tmp_path / "items")
    if kind == "sqlite":
        return SQLItemMemory(f"sqlite:///{tmp_path}/items.db")
    if kind == "redis":
        return RedisItemMemory(redis_url(), prefix=unique_name("mwpol"))
    return SQLItemMemory(postgres_url(), table_prefix=unique_name("mwpol") + "_")


class AsyncOnly(InMemoryItemMemory):
    """An in-memory item memory whose sync methods fail: code under test from async code must call its async
    twins only."""

    def _run(self, steps: Steps[Any]) -> Any:
        steps.close()
        raise AssertionError("a sync method of the item memory was called from async code")


def reopen_items(items: ItemMemory) -> ItemMemory:
    """A second object over the same items (the object itself for the in-memory backend)."""
    if isinstance(items, SQLItemMemory):
        return SQLItemMemory(items.engine.url, table_prefix=items.table_prefix)
    if isinstance(items, FileItemMemory):
        return FileItemMemory(items.directory)
    if isinstance(items, RedisItemMemory):
        return RedisItemMemory(redis_url(), prefix=items.prefix)
    return items


def items_fixture(kind: str, tmp_path: Path) -> Iterator[ItemMemory]:
    """The body of an item memory fixture: a fresh one of `kind`, closed (its server tables dropped) afterwards."""
    items = open_items(kind, tmp_path)
    try:
        yield items
    finally:
        if isinstance(items, SQLItemMemory) and items.engine.dialect.name != "sqlite":
            items.drop_tables()
        items.close()
        if isinstance(items, RedisItemMemory):
            delete_prefix(redis_url(), items.prefix)


def run_together(workers: int, work: Callable[[int], object]) -> None:
    """Run `work(0)`, ..., `work(workers - 1)` in threads at once; raise the first error any of them raised."""
    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(work, worker) for worker in range(workers)]:
            future.result()


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


KINDS = ("instr", "user", "assistant", "tools", "orphan", "summary")


@st.composite
def histories(draw: st.DrawFn, kinds: tuple[str, ...] = KINDS, max_size: int | None = None) -> list[Message]:
    """Random histories: instructions, turns, tool calls with their results, orphaned results and summaries.

    A "tools" unit is an assistant message calling 1-3 tools followed by their results; "orphan" is results
    without a call.
    """
    words = st.integers(min_value=0, max_value=40).map(lambda n: " ".join(["tok"] * n))
    messages: list[Message] = []
    for kind in draw(st.lists(st.sampled_from(kinds), max_size=max_size)):
        text = draw(words)
        if kind == "instr":
            messages.append(Message(role=draw(st.sampled_from(["system", "developer"])), content=text))
        elif kind in ("user", "assistant"):
            messages.append(Message(role=kind, content=text))
        elif kind == "summary":
            messages.append(Message(role="system", content=text, metadata={SUMMARY_KEY: {}}))
        else:
            n = draw(st.integers(min_value=1, max_value=3))
            ids = [f"c{len(messages)}-{k}" for k in range(n)]
            if kind == "tools":
                calls = [ToolCall(id=i, name="f", arguments={"text": text}) for i in ids]
                messages.append(Message(role="assistant", tool_calls=calls))
            messages += [Message(role="tool", tool_call_id=i, content=draw(words)) for i in ids]
    return messages
