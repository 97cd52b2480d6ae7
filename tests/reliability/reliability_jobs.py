"""What the forked writers do (run by `reliability_processes`), and the data they write, shared with the checks.

Every job opens its own memory objects from a picklable `Store`, so it talks to the database over its own
connections, exactly like an independent application process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import struct
import time
from typing import Any

from reliability_stores import Store

from memwoven import Message, VectorDocument

# Concurrency: 8 writers add turns to one session -----------------------------------------------------------

CHAT_PATHS = ("core-append", "core-update", "langchain", "llamaindex")
MESSAGES_PER_TURN = {"core-append": 1, "core-update": 1, "langchain": 2, "llamaindex": 1}


def turn_text(writer: int, index: int) -> str:
    """The text of a writer's turn: `w<writer>:<index>`."""
    return f"w{writer}:{index}"


def chat_turns(store: Store, session: str, path: str, writer: int, turns: int) -> None:
    """Add `turns` turns to `session` through `path`; odd writers use the async API, even writers the sync one."""
    memory = store.chat()
    if writer % 2:
        asyncio.run(_async_turns(memory, session, path, writer, turns))
        return
    try:
        if path == "langchain":
            from langchain_core.messages import AIMessage, HumanMessage

            from langchain_memwoven import MemwovenChatMessageHistory

            history = MemwovenChatMessageHistory(memory, session)
            for i in range(turns):
                text = turn_text(writer, i)
                history.add_messages([HumanMessage(text), AIMessage(f"{text} reply")])
        elif path == "llamaindex":
            from llama_index.core.llms import ChatMessage

            from llama_index.storage.chat_store.memwoven import MemwovenChatStore

            chat_store = MemwovenChatStore(memory)
            for i in range(turns):
                chat_store.add_message(session, ChatMessage(role="user", content=turn_text(writer, i)))
        elif path == "core-update":
            for i in range(turns):
                message = Message(role="user", content=turn_text(writer, i))
                memory.update(session, lambda messages, m=message: [*messages, m], retries=RETRIES)
        else:
            for i in range(turns):
                memory.append(session, [Message(role="user", content=turn_text(writer, i))])
    finally:
        memory.close()


async def _async_turns(memory: Any, session: str, path: str, writer: int, turns: int) -> None:
    try:
        if path == "langchain":
            from langchain_core.messages import AIMessage, HumanMessage

            from langchain_memwoven import MemwovenChatMessageHistory

            history = MemwovenChatMessageHistory(memory, session)
            for i in range(turns):
                text = turn_text(writer, i)
                await history.aadd_messages([HumanMessage(text), AIMessage(f"{text} reply")])
        elif path == "llamaindex":
            from llama_index.core.llms import ChatMessage

            from llama_index.storage.chat_store.memwoven import MemwovenChatStore

            chat_store = MemwovenChatStore(memory)
            for i in range(turns):
                await chat_store.async_add_message(session, ChatMessage(role="user", content=turn_text(writer, i)))
        elif path == "core-update":
            for i in range(turns):
                message = Message(role="user", content=turn_text(writer, i))
                await memory.aupdate(session, lambda messages, m=message: [*messages, m], retries=RETRIES)
        else:
            for i in range(turns):
                await memory.aappend(session, [Message(role="user", content=turn_text(writer, i))])
    finally:
        await memory.aclose()


# Concurrency: 8 writers store and delete documents of one collection ---------------------------------------

DIMENSION = 4
RETRIES = int(os.environ.get("MW_RETRIES", "16"))


def vector_for(tag: str) -> list[float]:
    """A distinct, deterministic, non-zero embedding for a write's tag."""
    digest = hashlib.sha256(tag.encode()).digest()
    return [1.0 + digest[i] / 64.0 for i in range(DIMENSION)]


def vector_writes(store: Store, collection: str, writer: int, operations: int, ids: int, log_path: str) -> None:
    """Random stores (of 1-3 documents, atomic) and deletes over shared ids; log each with its start and end time.

    Times are `time.monotonic_ns()`, one clock for every process of the machine, so the check can tell which
    writes certainly came after which.
    """
    rng = random.Random(1000 + writer)
    memory = store.vector(collection, dimension=DIMENSION)
    log: list[tuple[str, str | None, int, int]] = []
    try:
        for n in range(operations):
            chosen = rng.sample(range(ids), rng.randint(1, 3))
            doc_ids = [f"d{i}" for i in chosen]
            if rng.random() < 0.3:
                start = time.monotonic_ns()
                memory.delete(doc_ids)
                end = time.monotonic_ns()
                log += [(doc_id, None, start, end) for doc_id in doc_ids]
            else:
                tags = [f"w{writer}:{n}:{doc_id}" for doc_id in doc_ids]
                documents = [
                    VectorDocument(id=d, content=t, embedding=vector_for(t), metadata={"tag": t})
                    for d, t in zip(doc_ids, tags)
                ]
                start = time.monotonic_ns()
                memory.store(documents)
                end = time.monotonic_ns()
                log += [(d, t, start, end) for d, t in zip(doc_ids, tags)]
            if n % 10 == 0:
                memory.search(vector_for("probe"), top_k=3)  # reads interleaved with the writes
    finally:
        memory.close()
        with open(log_path, "w") as stream:
            json.dump(log, stream)


# Crash safety: a writer killed at random moments -----------------------------------------------------------

CHAT_ACK, VECTOR_ACK = 1, 2
CRASH_DOCS = 6


def history(generation: int) -> list[Message]:
    """The history saved in state 2g: 1-40 messages tagged with the generation (lengths vary, so a torn
    rewrite could not pass for a whole one)."""
    size = 1 + (generation * 7919) % 40
    return [
        Message(role="user" if j % 2 == 0 else "assistant", content=f"g{generation}:{j}", metadata={"g": generation})
        for j in range(size)
    ]


def extra(generation: int) -> Message:
    """The message appended in state 2g+1."""
    return Message(role="tool", tool_call_id=f"t{generation}", content=f"g{generation}:extra")


def chat_state(generation: int, appended: bool) -> list[Message]:
    """The history of state 2g (saved) or 2g+1 (saved, then one message appended)."""
    return history(generation) + ([extra(generation)] if appended else [])


def documents(generation: int) -> list[VectorDocument]:
    """The collection of state 2g: `CRASH_DOCS` documents tagged with the generation (state 2g+1: without d5)."""
    return [
        VectorDocument(
            id=f"d{i}", content=f"g{generation}", embedding=vector_for(f"g{generation}:{i}"), metadata={"g": generation}
        )
        for i in range(CRASH_DOCS)
    ]


def crash_writer(store: Store, session: str, collection: str, ack_path: str, first_generation: int) -> None:
    """Write forever (until SIGKILL): save, append, store, delete; acknowledge each write once it returned.

    An acknowledgement is one 16-byte `write` (what, state) to a file opened with O_APPEND, so the parent reads
    every write that completed before the kill, and at most the write in flight is unknown.
    """
    chat = store.chat()
    vectors = store.vector(collection, dimension=DIMENSION)
    acks = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    generation = first_generation
    while True:
        chat.save(session, history(generation))
        os.write(acks, struct.pack("<qq", CHAT_ACK, 2 * generation))
        chat.append(session, [extra(generation)])
        os.write(acks, struct.pack("<qq", CHAT_ACK, 2 * generation + 1))
        vectors.store(documents(generation))
        os.write(acks, struct.pack("<qq", VECTOR_ACK, 2 * generation))
        vectors.delete([f"d{CRASH_DOCS - 1}"])
        os.write(acks, struct.pack("<qq", VECTOR_ACK, 2 * generation + 1))
        generation += 1


def read_acks(ack_path: str) -> list[tuple[int, int]]:
    """The (what, state) records of a crash writer's acknowledgement file (a torn last record is ignored)."""
    try:
        with open(ack_path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % 16
    return [struct.unpack_from("<qq", data, offset) for offset in range(0, whole, 16)]  # type: ignore[misc]
