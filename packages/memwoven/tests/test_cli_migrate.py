"""`memwoven migrate` through the real entry point: a round trip SQLite -> PostgreSQL -> Redis -> SQLite of 100
sessions and 10k vectors, the progress bar, --dry-run, and resuming after the process is killed mid-copy."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_support import ENV, PNG, command, memwoven, place

from memwoven import ImagePart, ItemWrite, Message, OpaquePart, TextPart, ToolCall, VectorDocument
from memwoven.contracts import CollectionInfo
from memwoven.urls import open_chat_memory, open_item_memory, open_vector_memory, vector_collections

pytestmark = pytest.mark.slow

Snapshot = tuple[
    dict[str, list[Message]], dict[CollectionInfo, dict[str, VectorDocument]], dict[tuple[Any, str], tuple[Any, Any]]
]


def conversation(i: int) -> list[Message]:
    """A session of 2 to 22 messages: text, images, tool calls and results, metadata, timestamps, unicode."""
    messages = [Message(role="system", content=f"Session {i}: you plan trips ✈", name="planner" if i % 5 else None)]
    for turn in range(i % 7 + 1):
        messages.append(Message(role="user", content=f"question {turn} of {i} «ünïcode» 🙂\nsecond line"))
        if turn % 3 == 1:
            call = ToolCall(id=f"c{i}-{turn}", name="lookup", arguments={"q": [turn, i / 7, None, {"deep": True}]})
            messages.append(Message(role="assistant", tool_calls=[call]))
            messages.append(Message(role="tool", tool_call_id=call.id, name="lookup", content=f"result {turn}"))
        elif turn % 3 == 2:
            parts = [
                TextPart(text="this?"),
                ImagePart(data=PNG, mime_type="image/png"),
                ImagePart(url="https://x/a.png"),
            ]
            messages.append(Message(role="user", content=[*parts, OpaquePart(kind="audio", data={"seconds": 1.5})]))
        messages.append(
            Message(
                role="assistant",
                content=f"answer {turn}",
                metadata={"model": "offline", "tokens": turn * 11, "ratio": i / 3},
                created_at=datetime(2026, 1, 1 + i % 28, turn, 30, tzinfo=timezone.utc),
            )
        )
    return messages


def seed_big(url: str, *, sessions: int, documents: int) -> None:
    """`sessions` sessions and two collections: `documents` cosine vectors (dimension 16) and 3 dot vectors."""
    with open_chat_memory(url) as chat:
        for i in range(sessions):
            chat.save(f"user-{i % 10}/conv:{i} é", conversation(i))
    embeddings = np.random.default_rng(8).standard_normal((documents, 16)).astype(np.float32)
    with open_vector_memory(url, collection="big", dimension=16) as big:
        big.store(
            [
                VectorDocument(
                    id=f"doc-{i:05d}",
                    content="" if i % 97 == 0 else f"document {i} — ünïcode",
                    embedding=embeddings[i].tolist(),
                    metadata={"i": i, "third": i / 3, "even": i % 2 == 0, "tags": ["a", str(i % 5)], "none": None},
                )
                for i in range(documents)
            ]
        )
    with open_vector_memory(url, collection="dots", metric="dot") as dots:
        dots.store([VectorDocument(id=f"d{i}", embedding=[float(i), -0.25, 1e-3]) for i in range(3)])
    with open_item_memory(url) as items:  # 1,500 items in 30 namespaces, a third with a ttl
        items.put_many(
            [
                ItemWrite(("users", f"u{i % 30}", "facts"), f"fact {i // 30} ✓", {"i": i, "deep": {"ok": [i]}}, ttl)
                for i in range(1500)
                for ttl in [3600.0 if i % 3 == 0 else None]
            ]
        )


def snapshot(url: str) -> Snapshot:
    """Every session, message by message, every collection (metric, dimension) with its documents by id, and every
    item's value and ttl by address."""
    with open_chat_memory(url) as chat:
        sessions = {session_id: chat.load(session_id) for session_id in chat.sessions()}
    collections = {}
    for info in vector_collections(url):
        with open_vector_memory(url, collection=info.name, dimension=info.dimension, metric=info.metric) as memory:
            collections[info] = {document.id: document for document in memory.get(memory.ids())}
    with open_item_memory(url) as items:
        stored = {(item.namespace, item.key): (item.value, item.ttl) for item in items.list()}
    return sessions, collections, stored


def written(stdout: str) -> tuple[int, int]:
    """How many sessions and documents a migration reports it wrote."""
    found = re.search(r"messages; (\d+) written\).*documents; (\d+) written\); counts verified", stdout)
    assert found, stdout
    return int(found[1]), int(found[2])


def test_round_trip_sqlite_postgresql_redis_sqlite(tmp_path: Path) -> None:
    with (
        place("sqlite", tmp_path, "origin") as origin,
        place("postgresql", tmp_path) as postgresql,
        place("redis", tmp_path) as redis,
        place("sqlite", tmp_path, "back") as back,
    ):
        seed_big(origin, sessions=100, documents=10_000)
        expected = snapshot(origin)
        assert len(expected[0]) == 100
        assert sorted(len(c) for c in expected[1].values()) == [3, 10_000]
        assert len(expected[2]) == 1500

        dry = memwoven("migrate", origin, postgresql, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "100 sessions" in dry.stdout
        assert "10000 documents (cosine, dimension 16)" in dry.stdout
        assert "3 documents (dot, dimension 3)" in dry.stdout
        assert "nothing was written" in dry.stdout
        assert vector_collections(postgresql) == []

        hops = [(origin, postgresql), (postgresql, redis), (redis, back)]
        for number, (source, target) in enumerate(hops):
            # the first hop as on a terminal, to see the progress bars (on stderr)
            result = memwoven("migrate", source, target, env={"FORCE_COLOR": "1"} if number == 0 else None)
            assert result.returncode == 0, result.stderr
            assert "100 sessions" in result.stdout
            assert "10003 documents" in result.stdout
            assert "1500 items (1500 written)" in result.stdout
            assert written(result.stdout) == (100, 10_003)
            if number == 0:
                assert "100/100" in result.stderr, result.stderr[-500:]
                assert "10000/10000" in result.stderr, result.stderr[-500:]
            else:
                assert result.stderr == ""  # not a terminal: no progress bars
            assert snapshot(target) == expected, f"hop {number + 1}: {source} -> {target}"

        again = memwoven("migrate", redis, back)  # everything already there: nothing written, counts verified
        assert again.returncode == 0, again.stderr
        assert written(again.stdout) == (0, 0)
        assert "1500 items (0 written)" in again.stdout


def _stderr_reader(process: subprocess.Popen[bytes]) -> list[bytes]:
    chunks: list[bytes] = []

    def read() -> None:
        assert process.stderr is not None
        while chunk := os.read(process.stderr.fileno(), 65536):
            chunks.append(chunk)

    threading.Thread(target=read, daemon=True).start()
    return chunks


def _interrupt(args: list[str], documents: int, at_least: int, sig: signal.Signals) -> tuple[int, str]:
    """Run a migration on a pretend terminal; send `sig` once its progress bar shows `at_least` documents copied.

    Returns the exit code and stderr.
    """
    process = subprocess.Popen(
        command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV | {"FORCE_COLOR": "1"},
        # A job started in the background by a shell without job control inherits SIGINT ignored (POSIX), and so
        # would the CLI: give it the default disposition, as an interactive terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    chunks = _stderr_reader(process)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            shown = [int(n) for n in re.findall(rf"collection big\D*?(\d+)/{documents}", b"".join(chunks).decode())]
            if shown and max(shown) >= at_least:
                process.send_signal(sig)
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"the migration ended or stalled before reaching {at_least} documents")
        code = process.wait(timeout=60)
    finally:
        process.kill()
        process.wait()
    time.sleep(0.1)  # the reader thread drains the pipe
    return code, b"".join(chunks).decode()


def test_resumes_after_an_interrupt_and_a_kill(tmp_path: Path) -> None:
    documents = 3000
    with place("sqlite", tmp_path) as origin, place("postgresql", tmp_path) as target:
        seed_big(origin, sessions=20, documents=documents)
        args = ["migrate", origin, target, "--batch-size", "3"]  # small batches: a long run to interrupt

        code, stderr = _interrupt(args, documents, 1, signal.SIGINT)  # Ctrl-C: the shell's exit code for it
        assert code == 130, stderr[-2000:]
        last = stderr.strip().splitlines()[-1]
        assert last.endswith("memwoven: error: interrupted; run the same migrate again and it resumes"), stderr[-300:]

        code, _ = _interrupt(args, documents, 600, signal.SIGKILL)  # a crash
        assert code == -signal.SIGKILL
        with open_vector_memory(target, collection="big") as big:
            copied = big.count()
        assert 600 <= copied < documents

        resumed = memwoven(*args)
        assert resumed.returncode == 0, resumed.stderr
        assert written(resumed.stdout) == (0, documents - copied + 3)  # only what was missing
        assert snapshot(target) == snapshot(origin)
