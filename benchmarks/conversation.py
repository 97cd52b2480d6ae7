"""Whole conversations through the framework adapters against the framework's own stores, on the same medium.

Each turn does what an agent loop does: read the session, then add the user message and the reply. LangChain
histories (`MemwovenChatMessageHistory` against `FileChatMessageHistory`) go through `langchain_history.converse`;
LlamaIndex chat stores (`MemwovenChatStore` against `RedisChatStore`, `SQLAlchemyChatStore` and `SimpleChatStore`)
through `get_messages` and two `add_message` calls (the async twins for `SQLAlchemyChatStore`, which has no sync
API). The SQLite pair on LangChain is in `langchain_history`. Every conversation starts on a new session.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from harness import Report, Timing
from langchain_history import converse
from vector_search import RAM


def _li(index: int) -> list[Any]:
    from llama_index.core.llms import ChatMessage

    return [
        ChatMessage(role="user", content=f"question number {index}: " + "lorem ipsum dolor sit amet " * 3),
        ChatMessage(role="assistant", content=f"answer number {index}: " + "consectetur adipiscing elit " * 4),
    ]


def _llama_sync(store: Any, key: str, turns: int) -> float:
    script = [_li(i) for i in range(turns)]
    start = time.perf_counter()
    for messages in script:
        store.get_messages(key)
        for message in messages:
            store.add_message(key, message)
    elapsed = time.perf_counter() - start
    assert len(store.get_messages(key)) == 2 * turns
    return elapsed


def _llama_async(store: Any, key: str, turns: int) -> float:
    script = [_li(i) for i in range(turns)]
    add = getattr(store, "async_add_message", None) or store.add_message
    get = getattr(store, "aget_messages", None) or store.get_messages

    async def talk() -> float:
        start = time.perf_counter()
        for messages in script:
            await get(key)
            for message in messages:
                await add(key, message)
        elapsed = time.perf_counter() - start
        assert len(await get(key)) == 2 * turns
        return elapsed

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(talk())
    finally:
        loop.close()


def _pairs(directory: str, redis: str) -> list[tuple[str, Callable[[int], float], Callable[[int], float]]]:
    """(name, memwoven conversation, peer conversation): each callable runs `turns` turns on a new session."""
    from langchain_community.chat_message_histories import FileChatMessageHistory
    from llama_index.core.storage.chat_store import SimpleChatStore

    from langchain_memwoven import MemwovenChatMessageHistory
    from llama_index.storage.chat_store.memwoven import MemwovenChatStore
    from memwoven import FileChatMemory, InMemoryChatMemory, SQLChatMemory

    prefix = f"mwbench{uuid.uuid4().hex[:8]}"

    def key() -> str:
        return uuid.uuid4().hex

    def lc_ours(turns: int) -> float:
        with MemwovenChatMessageHistory(FileChatMemory(f"{directory}/mw_files"), key(), owns_memory=True) as history:
            return converse(history, turns)

    def lc_theirs(turns: int) -> float:
        return converse(FileChatMessageHistory(f"{directory}/{key()}.json"), turns)

    def li_memory_ours(turns: int) -> float:
        return _llama_sync(MemwovenChatStore(InMemoryChatMemory()), key(), turns)

    def li_memory_theirs(turns: int) -> float:
        return _llama_sync(SimpleChatStore(), key(), turns)

    def li_sql_ours(turns: int) -> float:
        memory = SQLChatMemory(f"sqlite:///{directory}/mw.db")
        try:
            return _llama_async(MemwovenChatStore(memory), key(), turns)
        finally:
            memory.close()

    def li_sql_theirs(turns: int) -> float:
        from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
        from sqlalchemy.ext.asyncio import create_async_engine

        url = f"sqlite+aiosqlite:///{directory}/li-{key()}.db"
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        engine = create_async_engine(url)
        store = SQLAlchemyChatStore("bench", async_database_uri=url, async_engine=engine)
        script = [_li(i) for i in range(turns)]
        session = key()

        async def talk() -> float:
            start = time.perf_counter()
            for messages in script:
                await store.get_messages(session)
                for message in messages:
                    await store.add_message(session, message)
            elapsed = time.perf_counter() - start
            assert len(await store.get_messages(session)) == 2 * turns
            await engine.dispose()
            return elapsed

        try:
            return loop.run_until_complete(talk())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    def li_redis_ours(turns: int) -> float:
        from memwoven.backends.redis import RedisChatMemory

        memory = RedisChatMemory(redis, prefix=prefix)
        session = key()
        try:
            return _llama_sync(MemwovenChatStore(memory), session, turns)
        finally:
            memory.clear(session)
            memory.close()

    def li_redis_theirs(turns: int) -> float:
        from llama_index.storage.chat_store.redis import RedisChatStore

        store = RedisChatStore(redis_url=redis)
        session = f"{prefix}_{key()}"
        try:
            return _llama_sync(store, session, turns)
        finally:
            store.delete_messages(session)

    return [
        ("LangChain history on files: MemwovenChatMessageHistory(FileChatMemory) vs FileChatMessageHistory",
         lc_ours, lc_theirs),
        ("LlamaIndex chat store in memory: MemwovenChatStore(InMemoryChatMemory) vs SimpleChatStore",
         li_memory_ours, li_memory_theirs),
        ("LlamaIndex chat store on SQLite (async): MemwovenChatStore(SQLChatMemory) vs SQLAlchemyChatStore",
         li_sql_ours, li_sql_theirs),
        ("LlamaIndex chat store on Redis: MemwovenChatStore(RedisChatMemory) vs RedisChatStore",
         li_redis_ours, li_redis_theirs),
    ]  # fmt: skip


def _timing(samples: list[float]) -> Timing:
    return Timing(sorted(samples)[len(samples) // 2], min(samples), max(samples), len(samples))


def run(report: Report, *, redis: str, turns: int, runs: int) -> list[tuple[str, float, float, float]]:
    """Add one row per side and a ≤ 1.0x target per pair; returns (label, peer / memwoven, low, high) rows."""
    directory = tempfile.mkdtemp(prefix="mwbench_conv_", dir=RAM)
    ratios = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for name, ours, theirs in _pairs(directory, redis):
                try:
                    mine = _timing([ours(turns) for _ in range(runs)])
                    other = _timing([theirs(turns) for _ in range(runs)])
                except Exception as error:
                    print(f"  skip {name}: {type(error).__name__}: {error}", flush=True)
                    report.verdicts.append(f"- SKIPPED: {name}: {type(error).__name__}: {str(error)[:120]}")
                    continue
                label = f"{turns:,}-turn conversation, {name}"
                report.add(label, "memwoven adapter", mine, "1.0")
                report.add(label, "peer", other, f"{mine.median / other.median:.2f}x (memwoven / peer)")
                report.target(f"{label}: memwoven / peer", mine.median / other.median, 1.0, False)
                short = name.split(":")[0]
                speedup = other.median / mine.median
                ratios.append((f"{turns:,} turns, {short}", speedup, other.low / mine.high, other.high / mine.low))
                print(f"  conversation: {short} done", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return ratios
