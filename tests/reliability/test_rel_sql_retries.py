"""Appends retried after an outcome the client could not know are stored once (CM10), on PostgreSQL.

A writer appends messages that carry ids and retries each append on any error until it succeeds, as an
application would. Two faults make outcomes unknown: a private PostgreSQL (own cluster, free loopback port)
stopped at once and restarted under the writer, and a loopback proxy that drops the connection right after the
server acknowledged a COMMIT, before the client hears it (the write was applied; the client sees an error).
Afterwards the session must hold every id exactly once, in order: no duplicate, no acknowledged write lost.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa

from memwoven import Message, SQLChatMemory
from memwoven_test_support import postgres_url, unique_name
from memwoven_test_support.postgres_servers import postgres_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RUNS = 8
DEADLINE = 60.0  # seconds one append may keep retrying


def _batch(run: int, first: int) -> list[Message]:
    """Two messages with ids: an append is a batch, and a batch is stored whole or not at all."""
    return [Message(role="user", content=f"r{run}-{i}", id=f"r{run}-{i}") for i in (first, first + 1)]


@dataclass
class RetryingWriter:
    """A thread appending batches of id-carrying messages, each retried on any error until it is acknowledged."""

    memory: SQLChatMemory
    run: int
    use_async: bool
    acked: int = 0  # batches acknowledged, in order
    retried: int = 0  # failed attempts that were retried
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            if self.use_async:
                asyncio.run(self._write_async())
            else:
                self._write()
        except BaseException as error:  # reported by wait_for and check
            self.errors.append(error)

    def _write(self) -> None:
        while not self.stop.is_set():
            deadline = time.monotonic() + DEADLINE
            while True:
                try:
                    self.memory.append("s", _batch(self.run, 2 * self.acked))
                    break
                except Exception:
                    assert time.monotonic() < deadline, "an append kept failing"
                    self.retried += 1
                    time.sleep(0.02)
            self.acked += 1

    async def _write_async(self) -> None:
        while not self.stop.is_set():
            deadline = time.monotonic() + DEADLINE
            while True:
                try:
                    await self.memory.aappend("s", _batch(self.run, 2 * self.acked))
                    break
                except Exception:
                    assert time.monotonic() < deadline, "an append kept failing"
                    self.retried += 1
                    await asyncio.sleep(0.02)
            self.acked += 1
        await self.memory.aclose()

    def wait_for(self, count: int, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while self.acked < count:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"timed out waiting for {count} acknowledged appends"
            time.sleep(0.01)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(DEADLINE + 10)
        assert not self.thread.is_alive(), "the writer hung"
        assert not self.errors, self.errors

    def check(self, reader: SQLChatMemory) -> None:
        """Every acknowledged batch is stored exactly once, in order, and nothing else is."""
        stored = [m.id for m in reader.load("s")]
        assert len(stored) == len(set(stored)), f"duplicated: {sorted({i for i in stored if stored.count(i) > 1})}"
        assert stored == [f"r{self.run}-{i}" for i in range(2 * self.acked)]


class CommitAckDropper:
    """A loopback TCP proxy to PostgreSQL that drops every `every`-th connection (0: none) whose server has just
    acknowledged a COMMIT, before the acknowledgement reaches the client: the write was applied, the client sees
    an error. `before_drop` runs first, holding the acknowledgement back; `single` disarms after one drop."""

    # The backend's CommandComplete message for COMMIT: 'C', int32 length 11, "COMMIT\0".
    COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.every = 0
        self.single = False
        self.before_drop: Callable[[], object] = lambda: None
        self.commits = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:  # the server is down: so is this connection
                client.close()
                continue
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _drop_now(self, tail: bytes, data: bytes) -> bool:
        with self._lock:
            if not self.every or self.COMMIT_DONE not in tail + data:
                return False
            self.commits += 1
            if self.commits % self.every:
                return False
            self.dropped += 1
            if self.single:
                self.every = 0
        self.before_drop()
        return True

    def _pipe(self, source: socket.socket, sink: socket.socket, from_server: bool) -> None:
        tail = b""
        try:
            while data := source.recv(65536):
                if from_server and self._drop_now(tail, data):
                    break
                sink.sendall(data)
                tail = data[-len(self.COMMIT_DONE) :]
        except OSError:
            pass
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        for sock in [self._server, *self._sockets]:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_appends_retried_across_postgresql_restarts_are_stored_once() -> None:
    """Each run stops the server while it holds an applied COMMIT whose acknowledgement the client never gets, and
    restarts it; the writer retries through the outage (sync and async runs alternate)."""
    with postgres_server() as server:
        proxy = CommitAckDropper(("127.0.0.1", server.port))
        applied, released = threading.Event(), threading.Event()
        proxy.single = True
        proxy.before_drop = lambda: (applied.set(), released.wait(DEADLINE))
        url = sa.engine.make_url(server.url).set(port=proxy.port)
        try:
            for run in range(RUNS):
                prefix = f"restart{run}_"
                memory = SQLChatMemory(url, table_prefix=prefix, pool_timeout=2)
                writer = RetryingWriter(memory, run, use_async=run % 2 == 1)
                writer.thread.start()
                writer.wait_for(10)
                applied.clear()
                released.clear()
                proxy.every = 1  # hold back the next COMMIT's acknowledgement
                assert applied.wait(DEADLINE), "no COMMIT went through the proxy"
                server.stop()  # immediate, while the client still waits for that acknowledgement
                released.set()
                time.sleep(0.2)  # appends meanwhile fail (connection refused) and are retried
                server.start()
                writer.wait_for(writer.acked + 10)
                writer.finish()
                assert writer.retried >= 1
                with SQLChatMemory(server.url, table_prefix=prefix) as reader:
                    writer.check(reader)
                memory.close()
        finally:
            proxy.close()
        assert proxy.dropped == RUNS


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_appends_whose_commit_acknowledgement_was_lost_are_stored_once(use_async: bool) -> None:
    """The shared PostgreSQL (this test's tables only) through the proxy, every third acknowledgement dropped."""
    url, prefix = sa.engine.make_url(postgres_url()), unique_name("mwretry") + "_"
    proxy = CommitAckDropper((url.host or "127.0.0.1", url.port or 5432))
    try:
        memory = SQLChatMemory(url.set(host="127.0.0.1", port=proxy.port), table_prefix=prefix, pool_timeout=2)
        memory.load("s")  # tables created before the proxy starts dropping
        proxy.every = 3
        writer = RetryingWriter(memory, 0, use_async=use_async)
        writer.thread.start()
        writer.wait_for(30)
        writer.finish()
        proxy.every = 0
        assert proxy.dropped >= RUNS, "too few acknowledgements were dropped"
        assert writer.retried >= proxy.dropped  # every dropped acknowledgement failed an append that was applied
        with SQLChatMemory(postgres_url(), table_prefix=prefix) as reader:
            writer.check(reader)
        memory.close()
    finally:
        proxy.close()
        with SQLChatMemory(postgres_url(), table_prefix=prefix) as memory:
            memory.drop_tables()
