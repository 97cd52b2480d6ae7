"""Running the real `memwoven` entry point in subprocesses, and the stores the CLI tests use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from memwoven import ImagePart, Message, SQLChatMemory, TextPart, ToolCall, VectorDocument
from memwoven.embed import HashingEmbedFn
from memwoven.urls import open_chat_memory, open_vector_memory
from memwoven_test_support import postgres_url, redis_url, unique_name

SCRIPT = Path(sys.executable).with_name("memwoven")  # the installed console script: the real entry point
ENV = {k: v for k, v in os.environ.items() if k not in ("MEMWOVEN_DEBUG", "MEMWOVEN_EMBED_FN")} | {"NO_COLOR": "1"}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
EMBED = HashingEmbedFn(64)

CONVERSATION = [
    Message(role="system", content="You plan trips."),
    Message(role="user", content=[TextPart(text="Where is this?"), ImagePart(data=PNG, mime_type="image/png")]),
    Message(role="assistant", tool_calls=[ToolCall(id="c1", name="locate", arguments={"precise": True})]),
    Message(role="tool", tool_call_id="c1", name="locate", content="Cortina d'Ampezzo"),
    Message(role="assistant", content="That is Cortina d'Ampezzo, in the Dolomites.", metadata={"model": "offline"}),
]
NOTES = {
    "tea": "Alice drinks green tea every morning.",
    "bike": "Bob rides a red bicycle to work.",
    "cat": "Carol has a grey cat called Miso.",
}


@dataclass(frozen=True)
class Result:
    """What one run of the command line gave."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def failed_with(self, words: str) -> bool:
        """Exit code 1 and a single `memwoven: error: ...` line on stderr containing `words`."""
        lines = self.stderr.strip().splitlines()
        return (
            self.returncode == 1 and len(lines) == 1 and lines[0].startswith("memwoven: error: ") and words in lines[0]
        )


def command(*args: str) -> list[str]:
    """The console script next to this interpreter, else `python -m memwoven.cli`."""
    return [str(SCRIPT), *args] if SCRIPT.exists() else [sys.executable, "-m", "memwoven.cli", *args]


def memwoven(
    *args: str, stdin: bytes | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Result:
    """Run `memwoven ARGS` in a subprocess (`env`: variables added to the environment)."""
    done = subprocess.run(command(*args), input=stdin, capture_output=True, timeout=300, env=ENV | (env or {}), cwd=cwd)
    return Result(args, done.returncode, done.stdout.decode(), done.stderr.decode())


def memwoven_all(*calls: tuple[str, ...]) -> list[Result]:
    """Run independent commands concurrently (each process spends most of its start-up importing)."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda args: memwoven(*args), calls))


def with_query(url: str, **params: str) -> str:
    """`url` with query parameters added."""
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{url}{'&' if urlsplit(url).query else '?'}{extra}"


@contextmanager
def place(kind: str, directory: Path, name: str = "store") -> Iterator[str]:
    """A URL of an empty store: an SQLite file, tables of a unique prefix on PostgreSQL, or a Redis key prefix.

    On the shared servers, only what this store wrote is removed afterwards.
    """
    if kind == "sqlite":
        yield f"sqlite:///{directory / name}.db"
    elif kind == "postgresql":
        prefix = unique_name("mwcli") + "_"
        try:
            yield with_query(postgres_url(), table_prefix=prefix)
        finally:
            with SQLChatMemory(postgres_url(), table_prefix=prefix) as chat:
                chat.drop_tables()
    elif kind == "redis":
        prefix = unique_name("mwcli")
        try:
            yield with_query(redis_url(), prefix=prefix)
        finally:
            client = redis.Redis.from_url(redis_url())
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(key)
            client.close()
    else:
        raise ValueError(kind)


def seed(url: str) -> None:
    """Two sessions and two collections (cosine and dot)."""
    with open_chat_memory(url) as chat:
        chat.save("trip/1", CONVERSATION)
        chat.save("notes:é", [Message(role="user", content="Remember: the café opens at 8.")])
    with open_vector_memory(url, collection="notes", dimension=EMBED.dimension) as notes:
        notes.store(
            [VectorDocument(id=k, content=v, embedding=EMBED(v), metadata={"topic": k}) for k, v in NOTES.items()]
        )
    with open_vector_memory(url, collection="dots", metric="dot") as dots:
        dots.store([VectorDocument(id="x", embedding=[1.0, 2.0, 3.0]), VectorDocument(id="y", embedding=[0.5, 0, -1])])


def contents(url: str) -> tuple[dict[str, list[Message]], dict[str, list[VectorDocument]]]:
    """Everything a store holds, read in-process: sessions and the documents of every collection."""
    from memwoven.urls import vector_collections

    with open_chat_memory(url) as chat:
        sessions = {session_id: chat.load(session_id) for session_id in chat.sessions()}
    collections = {}
    for info in vector_collections(url):
        with open_vector_memory(url, collection=info.name, metric=info.metric) as memory:
            collections[info.name] = memory.get(memory.ids())
    return sessions, collections
