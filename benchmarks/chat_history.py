"""Chat history cost per turn against history length, on every memwoven backend and on the peers' stores.

For each history length L (10 to 10,000 messages) a session is filled with L messages, then one turn's write is
timed: on memwoven `save(history + 2)` (what a framework holding the whole list does) and `append(2)`; on the
peers their own way of adding two messages (LangChain `add_messages`; LlamaIndex `add_message` twice, plus
`persist` for `SimpleChatStore`, which otherwise loses the turn). `load` of the whole session is timed too.
A flat line (same cost at 10,000 messages as at 10) is the goal; the peers that append are the bar per turn.
Files and SQLite databases of both sides live on tmpfs (/dev/shm) where there is one, so that fsync latency of
a shared disk does not drown the code being compared.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from chat_save import _message, save_after_two
from harness import Report, Timing, measure
from vector_search import RAM

from memwoven import ChatMemory, FileChatMemory, InMemoryChatMemory, SQLChatMemory


@dataclass
class Curve:
    """One subject's per-turn timings by history length."""

    subject: str
    operation: str  # "save +2", "append 2" or "load"
    memwoven: bool
    points: dict[int, Timing] = field(default_factory=dict)


def _memwoven_backends(directory: str, postgres: str, redis: str) -> dict[str, Callable[[], ChatMemory]]:
    prefix = f"mwbench_{uuid.uuid4().hex[:8]}_"
    backends: dict[str, Callable[[], ChatMemory]] = {
        "InMemoryChatMemory": InMemoryChatMemory,
        "FileChatMemory": lambda: FileChatMemory(f"{directory}/files"),
        "SQLChatMemory (SQLite)": lambda: SQLChatMemory(f"sqlite:///{directory}/chat.db", table_prefix=prefix),
        "SQLChatMemory (PostgreSQL)": lambda: SQLChatMemory(postgres, table_prefix=prefix),
    }

    def redis_memory() -> ChatMemory:
        from memwoven.backends.redis import RedisChatMemory

        return RedisChatMemory(redis, prefix=prefix.rstrip("_"))

    backends["RedisChatMemory"] = redis_memory
    return backends


def memwoven_curves(sizes: tuple[int, ...], runs: int, *, postgres: str, redis: str) -> tuple[list[Curve], list[str]]:
    """save +2, append 2 and load against history length on every memwoven chat backend that can run here."""
    curves: list[Curve] = []
    skipped: list[str] = []
    directory = tempfile.mkdtemp(prefix="mwbench_chat_", dir=RAM)
    try:
        for name, make in _memwoven_backends(directory, postgres, redis).items():
            try:
                memory = make()
                memory.load("probe")
            except Exception as error:
                skipped.append(f"{name}: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
                print(f"  skip {name}: {skipped[-1]}", flush=True)
                continue
            save, append, load = (Curve(name, op, True) for op in ("save +2", "append 2", "load"))
            saved = {size: f"bench-save-{size}" for size in sizes}
            sessions = list(saved.values())
            try:
                save.points.update(save_after_two(memory, saved, runs))
                for size in sizes:
                    session = saved[size]
                    load.points[size] = measure(partial(memory.load, session), runs=runs, warmup=1)
                    session = f"bench-append-{size}"
                    sessions.append(session)
                    memory.save(session, [_message(i) for i in range(size)])
                    pair = [_message(size), _message(size + 1)]
                    append.points[size] = measure(partial(memory.append, session, pair), runs=runs, warmup=2)
            finally:
                for session in sessions:
                    memory.clear(session)
                getattr(memory, "drop_tables", lambda: None)()
                memory.close()
            curves += [save, append, load]
            print(f"  chat per-turn: {name} done", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return curves, skipped


class Peer:
    """A peer chat store: fill a session, add one turn (two messages), read the session."""

    name = ""

    def fill(self, key: str, count: int) -> None:
        raise NotImplementedError

    def message(self, index: int) -> Any:
        """The framework's message for `index` (built outside the timed call)."""
        return _li(index)

    def add_turn(self, key: str, pair: list[Any]) -> None:
        raise NotImplementedError

    def read(self, key: str) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the store holds."""


def _lc(index: int) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage

    kind = HumanMessage if index % 2 == 0 else AIMessage
    return kind(f"message number {index}: " + "lorem ipsum dolor sit amet " * 4)


def _li(index: int) -> Any:
    from llama_index.core.llms import ChatMessage

    role = "user" if index % 2 == 0 else "assistant"
    return ChatMessage(role=role, content=f"message number {index}: " + "lorem ipsum dolor sit amet " * 4)


class LangChainSQL(Peer):
    name = "LangChain SQLChatMessageHistory (SQLite)"

    def __init__(self, directory: str) -> None:
        self.url = f"sqlite:///{directory}/langchain.db"
        self.histories: dict[str, Any] = {}

    def history(self, key: str) -> Any:
        from langchain_community.chat_message_histories import SQLChatMessageHistory

        if key not in self.histories:
            self.histories[key] = SQLChatMessageHistory(key, connection=self.url)
        return self.histories[key]

    def fill(self, key: str, count: int) -> None:
        self.history(key).add_messages([_lc(i) for i in range(count)])

    def message(self, index: int) -> Any:
        return _lc(index)

    def add_turn(self, key: str, pair: list[Any]) -> None:
        self.history(key).add_messages(pair)

    def read(self, key: str) -> int:
        return len(self.history(key).messages)


class LangChainFile(LangChainSQL):
    name = "LangChain FileChatMessageHistory"

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.histories = {}

    def fill(self, key: str, count: int) -> None:
        """Write the file as `add_messages` would, in one go: it adds one message at a time, rewriting the file."""
        from langchain_core.messages import messages_to_dict

        history = self.history(key)
        history.file_path.write_text(json.dumps(messages_to_dict([_lc(i) for i in range(count)])), encoding="utf-8")

    def history(self, key: str) -> Any:
        from langchain_community.chat_message_histories import FileChatMessageHistory

        if key not in self.histories:
            self.histories[key] = FileChatMessageHistory(f"{self.directory}/{key}.json")
        return self.histories[key]


class LlamaSimple(Peer):
    name = "LlamaIndex SimpleChatStore + persist"

    def __init__(self, directory: str) -> None:
        from llama_index.core.storage.chat_store import SimpleChatStore

        self.store = SimpleChatStore()
        self.path = f"{directory}/simple_chat_store.json"
        self.store.set_messages("probe", [_li(0)])
        try:
            self.store.persist(self.path)
            self.persist = True
        except Exception as error:  # llama-index-core 0.14.25 with pydantic 2.14: the serializer's handler fails
            print(f"  SimpleChatStore.persist fails here ({type(error).__name__}); timed in memory only", flush=True)
            self.persist = False
            self.name = "LlamaIndex SimpleChatStore (persist fails here: in memory only)"
        self.store.delete_messages("probe")

    def fill(self, key: str, count: int) -> None:
        self.store.set_messages(key, [_li(i) for i in range(count)])
        if self.persist:
            self.store.persist(self.path)

    def add_turn(self, key: str, pair: list[Any]) -> None:
        for message in pair:
            self.store.add_message(key, message)
        if self.persist:
            self.store.persist(self.path)

    def read(self, key: str) -> int:
        return len(self.store.get_messages(key))


class LlamaRedis(Peer):
    name = "LlamaIndex RedisChatStore"

    def __init__(self, url: str) -> None:
        from llama_index.storage.chat_store.redis import RedisChatStore

        self.store = RedisChatStore(redis_url=url)
        self.prefix = f"mwbench_{uuid.uuid4().hex[:8]}_"
        self.keys: list[str] = []

    def fill(self, key: str, count: int) -> None:
        self.keys.append(self.prefix + key)
        self.store.set_messages(self.prefix + key, [_li(i) for i in range(count)])

    def add_turn(self, key: str, pair: list[Any]) -> None:
        for message in pair:
            self.store.add_message(self.prefix + key, message)

    def read(self, key: str) -> int:
        return len(self.store.get_messages(self.prefix + key))

    def close(self) -> None:
        for key in self.keys:
            self.store.delete_messages(key)


class LlamaSQLAlchemy(Peer):
    name = "LlamaIndex SQLAlchemyChatStore (SQLite, async)"

    def __init__(self, directory: str) -> None:
        from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
        from sqlalchemy.ext.asyncio import create_async_engine

        self.loop = asyncio.new_event_loop()
        url = f"sqlite+aiosqlite:///{directory}/llama_index.db"
        self.engine = create_async_engine(url)
        self.store = SQLAlchemyChatStore("bench", async_database_uri=url, async_engine=self.engine)

    def fill(self, key: str, count: int) -> None:
        self.loop.run_until_complete(self.store.set_messages(key, [_li(i) for i in range(count)]))

    def add_turn(self, key: str, pair: list[Any]) -> None:
        async def turn() -> None:
            for message in pair:
                await self.store.add_message(key, message)

        self.loop.run_until_complete(turn())

    def read(self, key: str) -> int:
        return len(self.loop.run_until_complete(self.store.get_messages(key)))

    def close(self) -> None:
        self.loop.run_until_complete(self.engine.dispose())
        self.loop.close()


def peer_curves(sizes: tuple[int, ...], runs: int, *, redis: str) -> tuple[list[Curve], list[str]]:
    """Adding one turn and loading, against history length, on each peer store that can run here."""
    curves: list[Curve] = []
    skipped: list[str] = []
    directory = tempfile.mkdtemp(prefix="mwbench_peers_", dir=RAM)
    makers: list[Callable[[], Peer]] = [
        lambda: LangChainSQL(directory),
        lambda: LangChainFile(directory),
        lambda: LlamaSimple(directory),
        lambda: LlamaSQLAlchemy(directory),
        lambda: LlamaRedis(redis),
    ]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for make in makers:
                try:
                    peer = make()
                    peer.read("probe")
                except Exception as error:
                    skipped.append(f"{type(error).__name__}: {str(error).splitlines()[0][:120]}")
                    print(f"  skip peer: {skipped[-1]}", flush=True)
                    continue
                add, load = Curve(peer.name, "append 2", False), Curve(peer.name, "load", False)
                try:
                    for size in sizes:
                        key = f"bench-{size}"
                        peer.fill(key, size)
                        counter = iter(range(size, 10**9, 2))
                        turn: list[Any] = []

                        def prepare(p: Peer = peer, c: Iterator[int] = counter, t: list[Any] = turn) -> None:
                            index = next(c)
                            t[:] = [p.message(index), p.message(index + 1)]

                        add.points[size] = measure(
                            partial(peer.add_turn, key, turn), runs=runs, warmup=1, setup=prepare
                        )
                        load.points[size] = measure(partial(peer.read, key), runs=max(3, runs // 3), warmup=1)
                finally:
                    peer.close()
                curves += [add, load]
                print(f"  chat per-turn: {peer.name} done", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return curves, skipped


PAIRS = [
    ("SQLChatMemory (SQLite)", "LangChain SQLChatMessageHistory (SQLite)"),
    ("SQLChatMemory (SQLite)", "LlamaIndex SQLAlchemyChatStore (SQLite, async)"),
    ("FileChatMemory", "LangChain FileChatMessageHistory"),
    ("FileChatMemory", "LlamaIndex SimpleChatStore + persist"),
    ("InMemoryChatMemory", "LlamaIndex SimpleChatStore (persist fails here: in memory only)"),
    ("RedisChatMemory", "LlamaIndex RedisChatStore"),
]


def markdown(curves: list[Curve], skipped: list[str]) -> str:
    """One table: subject and operation by history length (median, with min and max)."""
    sizes = sorted({size for curve in curves for size in curve.points})
    lines = [
        "| subject | operation | " + " | ".join(f"{s:,} messages" for s in sizes) + " | largest / smallest |",
        "| --- | --- | " + " | ".join("---" for _ in sizes) + " | --- |",
    ]
    for curve in curves:
        cells = [str(curve.points[s]) if s in curve.points else "" for s in sizes]
        growth = curve.points[sizes[-1]].median / curve.points[sizes[0]].median
        lines.append(f"| {curve.subject} | {curve.operation} | " + " | ".join(cells) + f" | {growth:.2f}x |")
    lines += [f"- skipped {reason}" for reason in skipped]
    return "\n".join(lines)


def targets(report: Report, curves: list[Curve]) -> None:
    """Flat save per memwoven backend; memwoven append per turn against the best append-only peer at the top size."""
    ours = [c for c in curves if c.memwoven and c.operation in ("save +2", "append 2")]
    peers = [c for c in curves if not c.memwoven and c.operation == "append 2"]
    for curve in ours:
        if curve.operation == "save +2":
            sizes = sorted(curve.points)
            report.target(
                f"{curve.subject} save +2: {sizes[-1]:,}-message / {sizes[0]}-message history",
                curve.points[sizes[-1]].median / curve.points[sizes[0]].median,
                1.5,
                False,
            )
    for mine, theirs in PAIRS:
        for operation in ("save +2", "append 2"):
            a = next((c for c in ours if c.subject == mine and c.operation == operation), None)
            b = next((c for c in peers if c.subject == theirs), None)
            if a is None or b is None:
                continue
            size = max(set(a.points) & set(b.points))
            report.target(
                f"{mine} {operation} / {theirs} add turn, {size:,}-message history",
                a.points[size].median / b.points[size].median,
                1.0,
                False,
            )


def ratio_rows(curves: list[Curve]) -> list[tuple[str, float, float, float]]:
    """(label, peer add-turn / memwoven save +2, lowest, highest) at the largest history length both measured."""
    rows = []
    for mine, theirs in PAIRS:
        a = next((c for c in curves if c.subject == mine and c.operation == "save +2"), None)
        b = next((c for c in curves if c.subject == theirs and c.operation == "append 2"), None)
        if a is None or b is None:
            continue
        size = max(set(a.points) & set(b.points))
        x, y = a.points[size], b.points[size]
        label = f"turn at {size:,} msgs: {theirs} / {mine} save"
        rows.append((label, y.median / x.median, y.low / x.high, y.high / x.low))
    return rows
