"""Smoke test of one installed distribution, run by `nox -s wheels` inside a virtual environment that holds only
the built wheel and its declared dependencies (no workspace, no test tools).

`python smoke.py CHECK`: imports what the install promises and makes one real call. The server checks read
`MEMWOVEN_<KIND>_URL` (default: the standard port on 127.0.0.1); an unreachable server is reported and passed,
unless `MEMWOVEN_REQUIRE_SERVICES=1`, where it fails.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

SERVERS = {
    "postgres": ("MEMWOVEN_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    "mysql": ("MEMWOVEN_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    "redis": ("MEMWOVEN_REDIS_URL", "redis://127.0.0.1:6379/0"),
}


def server_url(kind: str) -> str | None:
    """The server's URL, or None (after saying so) when it does not answer and services are not required."""
    variable, default = SERVERS[kind]
    url = os.environ.get(variable) or default
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 0), timeout=2).close()
    except OSError as error:
        if os.environ.get("MEMWOVEN_REQUIRE_SERVICES", "") not in ("", "0", "false", "no"):
            raise SystemExit(f"{kind} server unreachable at {url}: {error} (MEMWOVEN_REQUIRE_SERVICES=1)") from None
        print(f"{kind} server unreachable at {url} ({error}): its check did not run")
        return None
    return url


def round_trip(chat: object) -> None:
    """Append to a session of `chat` and read it back equal."""
    from memwoven import ChatMemory, Message

    assert isinstance(chat, ChatMemory)
    session = f"smoke-{uuid.uuid4().hex}"
    messages = [Message(role="user", content="hello"), Message(role="assistant", content="hi")]
    chat.append(session, messages)
    assert chat.load(session) == messages
    chat.clear(session)


def check_core() -> None:
    """The core alone: the models import light, SQLite by URL, exact in-memory search."""
    light = "import memwoven.models, sys; assert 'sqlalchemy' not in sys.modules and 'numpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", light], check=True)
    from memwoven import InMemoryVectorMemory, VectorDocument, open_chat_memory
    from memwoven.embed import HashingEmbedFn

    with tempfile.TemporaryDirectory() as directory:
        chat = open_chat_memory(f"sqlite:///{directory}/smoke.db")
        round_trip(chat)
        chat.close()
    embed = HashingEmbedFn(dimension=64)
    notes = InMemoryVectorMemory(dimension=64)
    notes.store([VectorDocument(id=text, content=text, embedding=embed(text)) for text in ("tea", "coffee")])
    assert notes.search(embed("tea"), top_k=1)[0].document.id == "tea"


def check_sql_server(kind: str) -> None:
    """One round trip through the extra's driver, in tables of its own that are dropped afterwards."""
    from memwoven import SQLChatMemory

    url = server_url(kind)
    if url is None:
        return
    chat = SQLChatMemory(url, table_prefix=f"smoke_{uuid.uuid4().hex[:8]}_")
    try:
        round_trip(chat)
    finally:
        chat.drop_tables()
        chat.close()


def check_redis() -> None:
    """One round trip through redis-py under a key prefix of its own."""
    from memwoven.backends.redis import RedisChatMemory

    url = server_url("redis")
    if url is not None:
        round_trip(RedisChatMemory(url, prefix=f"smoke-{uuid.uuid4().hex[:8]}"))


def check_qdrant() -> None:
    """qdrant-client's local mode: store and search."""
    from memwoven import VectorDocument
    from memwoven.backends.qdrant import QdrantVectorMemory

    notes = QdrantVectorMemory("qdrant+memory://", collection="smoke", dimension=2)
    notes.store([VectorDocument(id="a", embedding=[1.0, 0.0]), VectorDocument(id="b", embedding=[0.0, 1.0])])
    assert notes.search([1.0, 0.1], top_k=1)[0].document.id == "a"


def check_cli() -> None:
    """The `memwoven` command the extra installs: `--version` and the offline demo."""
    command = Path(sys.executable).with_name("memwoven")
    subprocess.run([command, "--version"], check=True)
    with tempfile.TemporaryDirectory() as directory:
        subprocess.run([command, "demo", "--url", f"sqlite:///{directory}/demo.db"], check=True)


def check_encryption() -> None:
    """AES-GCM over an in-memory backend: what is stored is not the plain text, what is read is."""
    from memwoven import InMemoryChatMemory
    from memwoven.encryption import EncryptedChatMemory, generate_key

    inner = InMemoryChatMemory()
    round_trip(EncryptedChatMemory(inner, key=generate_key()))


def check_simd() -> None:
    """The bfloat16 pre-scan (SimSIMD) gives the float32 scan's result."""
    from memwoven import InMemoryVectorMemory, VectorDocument

    notes = InMemoryVectorMemory(dimension=2, scan="bfloat16")
    notes.store([VectorDocument(id="a", embedding=[1.0, 0.0]), VectorDocument(id="b", embedding=[0.0, 1.0])])
    assert notes.search([1.0, 0.1], top_k=1)[0].document.id == "a"


def check_testing() -> None:
    """The conformance suite imports with pytest, which the extra brings."""
    import memwoven.testing

    assert memwoven.testing.__all__


def check_langchain() -> None:
    """The LangChain adapter: chat history and vector store, in memory."""
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_memwoven import MemwovenChatMessageHistory, MemwovenVectorStore
    from memwoven import InMemoryChatMemory, InMemoryVectorMemory
    from memwoven.embed import HashingEmbedFn

    history = MemwovenChatMessageHistory(InMemoryChatMemory(), "s")
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    assert [message.content for message in history.messages] == ["hi", "hello"]
    store = MemwovenVectorStore(InMemoryVectorMemory(dimension=64), HashingEmbedFn(dimension=64))
    store.add_texts(["green tea", "black coffee"], ids=["t", "c"])
    assert store.similarity_search("tea", k=1)[0].id == "t"


def check_langgraph() -> None:
    """The LangGraph store: on SQLite by URL, with semantic search through a plain embedding function; the
    checkpointer: a checkpoint and a write put and read back through a second saver."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph.checkpoint.memwoven import MemwovenSaver
    from langgraph.store.memwoven import MemwovenStore
    from memwoven.embed import HashingEmbedFn

    embed = HashingEmbedFn(dimension=64)
    index = {"dims": 64, "embed": embed.embed_many, "fields": ["text"]}
    with (
        tempfile.TemporaryDirectory() as directory,
        MemwovenStore.from_url(f"sqlite:///{directory}/s.db", index=index) as store,
    ):
        store.setup()
        store.put(("users", "u1"), "m1", {"text": "likes green tea"})
        store.put(("users", "u1"), "m2", {"text": "rides a bicycle"})
        item = store.get(("users", "u1"), "m1")
        assert item is not None
        assert item.value == {"text": "likes green tea"}
        assert store.search(("users",), query="green tea", limit=1)[0].key == "m1"
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/c.db"
        with MemwovenSaver.from_url(url) as saver:
            saver.setup()
            checkpoint = {**empty_checkpoint(), "channel_values": {"count": 1}, "channel_versions": {"count": "1"}}
            config = saver.put({"configurable": {"thread_id": "t"}}, checkpoint, {"step": 0}, {"count": "1"})
            saver.put_writes(config, [("count", 2)], task_id="task")
        with MemwovenSaver.from_url(url) as saver:
            found = saver.get_tuple({"configurable": {"thread_id": "t"}})
            assert found is not None
            assert found.checkpoint["channel_values"] == {"count": 1}
            assert found.pending_writes == [("task", "count", 2)]


def check_llama_index() -> None:
    """The LlamaIndex adapter: its seven import paths, a chat store and agent `Memory` round trip, a docstore, the
    fact memory block reading stored facts."""
    from llama_index.core.data_structs.data_structs import IndexDict
    from llama_index.core.llms import ChatMessage, MockLLM
    from llama_index.core.memory import Memory
    from llama_index.core.schema import TextNode

    from llama_index.embeddings.memwoven import EmbedFnEmbedding
    from llama_index.memory.memwoven import MemwovenFactMemoryBlock
    from llama_index.storage.chat_store.memwoven import MemwovenChatStore, MemwovenDBChatStore
    from llama_index.storage.docstore.memwoven import MemwovenDocumentStore
    from llama_index.storage.index_store.memwoven import MemwovenIndexStore
    from llama_index.storage.kvstore.memwoven import MemwovenKVStore
    from llama_index.vector_stores.memwoven import MemwovenVectorStore
    from memwoven import InMemoryItemMemory
    from memwoven.embed import HashingEmbedFn

    chat_store = MemwovenChatStore.from_url("memory://")
    chat_store.add_message("user-1", ChatMessage(role="user", content="hello"))
    assert [message.content for message in chat_store.get_messages("user-1")] == ["hello"]
    with tempfile.TemporaryDirectory() as directory:
        memory = Memory.from_defaults(
            session_id="user-1", chat_store=MemwovenDBChatStore.from_url(f"sqlite:///{directory}/agent.db")
        )
        memory.put(ChatMessage(role="user", content="hello"))
        assert [message.content for message in memory.get_all()] == ["hello"]
    assert EmbedFnEmbedding(HashingEmbedFn(dimension=8)).get_text_embedding("x")
    assert MemwovenVectorStore.from_url("memory://", collection="docs") is not None
    kvstore = MemwovenKVStore(InMemoryItemMemory())
    MemwovenDocumentStore(kvstore).add_documents([TextNode(id_="n1", text="hello")])
    assert MemwovenDocumentStore(kvstore).get_document("n1").get_content() == "hello"
    MemwovenIndexStore(kvstore).add_index_struct(IndexDict(index_id="i"))
    assert MemwovenIndexStore(kvstore).get_index_struct("i") == IndexDict(index_id="i")
    items = InMemoryItemMemory()
    items.put(("llama_index", "facts"), "user-1", {"facts": ["likes tea"]})
    block = MemwovenFactMemoryBlock(items, key="user-1", llm=MockLLM())
    assert asyncio.run(block.aget()) == "<fact>likes tea</fact>"


CHECKS: dict[str, Callable[[], None]] = {
    "core": check_core,
    "postgres": lambda: check_sql_server("postgres"),
    "mysql": lambda: check_sql_server("mysql"),
    "redis": check_redis,
    "qdrant": check_qdrant,
    "cli": check_cli,
    "encryption": check_encryption,
    "simd": check_simd,
    "testing": check_testing,
    "langchain": check_langchain,
    "langgraph": check_langgraph,
    "llama-index": check_llama_index,
}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"smoke {name}: ok")
