"""Server faults mid-run: a private Redis and a private PostgreSQL killed and restarted while a writer runs, a
paused Redis, and the shared PostgreSQL with this test's connections terminated under it.

During an outage every call must fail promptly with `BackendUnavailableError` (never hang, never another error);
every write that was acknowledged must be there afterwards, exactly once and in order; and the very same memory
objects must work again once the server is back. Only servers started by the test are stopped, and on the shared
PostgreSQL only the backends carrying this test's own `application_name` are terminated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa

from memwoven import ChatMemory, Message, SQLChatMemory, SQLVectorMemory, VectorDocument, VectorMemory
from memwoven.backends.redis import RedisChatMemory
from memwoven.backends.redis_vector import RedisVectorMemory
from memwoven.errors import BackendUnavailableError
from memwoven_test_support import postgres_url, unique_name
from memwoven_test_support.postgres_servers import postgres_server
from memwoven_test_support.redis_servers import redis_server

PROMPT = 5.0  # seconds a failing call may take (the clients' timeouts are 1-2 s)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _message(i: int) -> Message:
    return Message(role="user", content=f"m{i}")


def _document(i: int) -> VectorDocument:
    return VectorDocument(id=f"d{i}", content=f"c{i}", embedding=[1.0, float(i % 7), 1.0, 2.0], metadata={"i": i})


@dataclass
class Writer:
    """A thread that appends messages and stores documents until stopped, recording what was acknowledged."""

    chat: ChatMemory
    vectors: VectorMemory
    acked: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    slowest_failure: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.chat.append("s", [_message(i)])
                self.vectors.store([_document(i)])
                self.acked.append(i)
            except BackendUnavailableError:
                self.failed.append(i)
                self.slowest_failure = max(self.slowest_failure, time.monotonic() - started)
                time.sleep(0.02)
            except BaseException as error:  # anything else is a failure of the test
                self.errors.append(error)
                return
            i += 1

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)

    def check(self) -> None:
        """Every acknowledged write is stored once, in order; a failed one at most once (it may have committed)."""
        assert not self.errors, self.errors
        assert self.slowest_failure < PROMPT, f"a call took {self.slowest_failure:.1f} s to fail"
        texts = [m.text for m in self.chat.load("s")]
        numbers = [int(text[1:]) for text in texts]
        assert numbers == sorted(set(numbers)), "a message is duplicated or out of order"
        assert set(self.acked) <= set(numbers), f"acknowledged messages lost: {sorted(set(self.acked) - set(numbers))}"
        assert set(numbers) <= set(self.acked) | set(self.failed)
        ids = {f"d{i}" for i in self.acked}
        stored = {d.id: d for d in self.vectors.get(sorted(ids))}
        assert set(stored) == ids, f"acknowledged documents lost: {sorted(ids - set(stored))}"
        assert all(d.metadata == {"i": int(d.id[1:])} for d in stored.values())


def _outage(writer: Writer, stop_server: Callable[[], None], start_server: Callable[[], None]) -> None:
    """Let the writer run, take the server away under it, bring it back, and let it run again."""
    writer.thread.start()
    writer.wait_for(lambda: len(writer.acked) >= 20, "writes before the outage")
    stop_server()
    writer.wait_for(lambda: len(writer.failed) >= 5, "calls failing during the outage")
    start_server()
    after = len(writer.acked)
    writer.wait_for(lambda: len(writer.acked) >= after + 20, "writes after the outage")
    writer.stop.set()
    writer.thread.join(30)
    assert not writer.thread.is_alive(), "the writer hung"


def test_a_killed_and_restarted_redis(tmp_path: Any) -> None:
    with redis_server("--appendonly", "yes", "--appendfsync", "always") as server:
        chat = RedisChatMemory(server.url, prefix="faults", socket_timeout=1)
        vectors = RedisVectorMemory(server.url, prefix="faults", collection="c", dimension=4, socket_timeout=1)
        writer = Writer(chat, vectors)
        _outage(writer, lambda: server.stop(kill=True), server.start)
        writer.check()  # through the very objects that saw the outage
        chat.close()
        vectors.close()


def test_a_paused_redis_times_out_instead_of_hanging() -> None:
    with redis_server() as server:
        chat = RedisChatMemory(server.url, prefix="paused", socket_timeout=1)
        vectors = RedisVectorMemory(server.url, prefix="paused", collection="c", dimension=4, socket_timeout=1)
        chat.append("s", [_message(0)])
        vectors.store([_document(0)])
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)  # alive and accepting, but never answering
        try:
            for call in (lambda: chat.load("s"), lambda: chat.append("s", [_message(1)]), vectors.count):
                started = time.monotonic()
                with pytest.raises(BackendUnavailableError):
                    call()
                assert time.monotonic() - started < PROMPT
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        chat.append("s", [_message(2)])
        texts = [m.text for m in chat.load("s")]
        assert texts[0] == "m0"
        assert texts[-1] == "m2"
        assert len(texts) in (2, 3)
        assert vectors.get(["d0"]) == [_document(0)]
        chat.close()
        vectors.close()


def test_a_killed_and_restarted_postgresql() -> None:
    with postgres_server() as server:
        chat = SQLChatMemory(server.url, table_prefix="faults_", pool_timeout=2)
        vectors = SQLVectorMemory(server.url, table_prefix="faults_", collection="c", dimension=4, pool_timeout=2)
        writer = Writer(chat, vectors)
        _outage(writer, server.stop, server.start)
        writer.check()
        chat.close()
        vectors.close()


@pytest.fixture
def own_application() -> Iterator[tuple[str, str, str]]:
    """A URL of the shared PostgreSQL whose connections carry a unique application_name; its tables dropped after."""
    name, prefix = unique_name("mwr_app"), unique_name("mwr") + "_"
    url = sa.engine.make_url(postgres_url()).update_query_dict({"application_name": name})
    yield url.render_as_string(hide_password=False), name, prefix
    with SQLChatMemory(postgres_url(), table_prefix=prefix) as memory:
        memory.drop_tables()


def test_the_shared_postgresql_terminating_our_connections(own_application: tuple[str, str, str]) -> None:
    url, name, prefix = own_application
    chat = SQLChatMemory(url, table_prefix=prefix, pool_timeout=2)
    vectors = SQLVectorMemory(url, table_prefix=prefix, collection="c", dimension=4, pool_timeout=2)
    admin = sa.create_engine(postgres_url(), isolation_level="AUTOCOMMIT")
    terminated = 0

    def terminate() -> int:
        with admin.connect() as connection:
            rows = connection.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            ).all()
        return len(rows)

    writer = Writer(chat, vectors)
    writer.thread.start()
    try:
        for _ in range(15):  # terminate every connection of ours, over and over, while the writer writes
            done = len(writer.acked)
            writer.wait_for(lambda done=done: len(writer.acked) >= done + 3, "writes between terminations")
            terminated += terminate()
    finally:
        writer.stop.set()
        writer.thread.join(30)
    assert not writer.thread.is_alive(), "the writer hung"
    assert terminated >= 15, "the test did not terminate our connections"
    writer.check()  # the same objects, on new connections

    async def async_round_trip() -> list[Message]:  # the async engine's pool recovers too
        await chat.aappend("async", [_message(1)])
        terminate()
        await chat.aappend("async", [_message(2)])
        return await chat.aload("async")

    try:
        loaded = asyncio.run(async_round_trip())
    except BackendUnavailableError:  # a terminated pooled connection may surface once; the next call reconnects
        loaded = asyncio.run(chat.aload("async"))
    assert loaded[0].text == "m1"
    asyncio.run(chat.aclose())
    vectors.close()
    admin.dispose()
