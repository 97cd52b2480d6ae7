"""Appends retried after an unknown outcome are stored once on Redis (CM10, issue 19 §3).

Two ways to lose the reply of a write the server applied, on a private Redis (AOF, fsync always) on a free
loopback port: a proxy that lets the server run the append script and then cuts the connection instead of passing
the reply on (deterministic: each such write is checked to be stored before the retry), and the server killed
(SIGKILL) and restarted under a writer, over and over (with the proxy in between as well, so that every run has
lost replies to retry, whatever the moments of the kills). A killed server restarts as Redis documents after a
crash: its append-only file repaired first (`redis-check-aof --fix`, see `RedisServer`), as Redis 7.0's own repair
of a write cut mid-way can apply half of a script's effects later. The writer retries each append on any error until it
succeeds, by hand or through redis-py's `Retry`. Afterwards every message is stored exactly once and in order:
no duplicate, no acknowledged write lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from memwoven import Message
from memwoven.backends.redis import RedisChatMemory
from memwoven_test_support.redis_servers import RedisServer, redis_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
MAX_ATTEMPTS = 200  # per append: a bound, never reached when the server comes back


def _message(run: int, i: int) -> Message:
    return Message(role="user", content=f"{run}:{i}", id=f"r{run}-m{i}")


class LossyProxy:
    """A loopback proxy to a Redis server that cuts the connection, instead of passing the reply on, after every
    `every`-th request carrying `marker` (the server has run it by then: its reply came back)."""

    def __init__(self, upstream_port: int, marker: bytes, every: int) -> None:
        self.upstream_port, self.marker, self.every = upstream_port, marker, every
        self.requests = self.cut = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:  # the server is down (being restarted): so is this connection
                _close(client)
                continue
            self._sockets += [client, server]
            cut_next_reply = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, cut_next_reply), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, cut_next_reply), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, cut_next_reply: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.marker in data:
                    with self._lock:
                        self.requests += 1
                        if self.requests % self.every == 0:
                            cut_next_reply.set()
                server.sendall(data)
        _close(client, server)

    def _replies(self, server: socket.socket, client: socket.socket, cut_next_reply: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if cut_next_reply.is_set():
                    with self._lock:
                        self.cut += 1
                    break
                client.sendall(data)
        _close(client, server)

    def close(self) -> None:
        self._listener.close()
        _close(*self._sockets)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@contextlib.contextmanager
def _proxied_server(every: int) -> Iterator[tuple[RedisServer, LossyProxy, bytes]]:
    """A private durable Redis, a proxy cutting the reply of every `every`-th append, and the append script's sha."""
    with redis_server(*DURABLE) as server:
        with RedisChatMemory(server.url) as probe:
            sha = probe._scripts["append"].sha.encode()
        proxy = LossyProxy(server.port, sha, every)
        try:
            yield server, proxy, sha
        finally:
            proxy.close()


def _check(memory: RedisChatMemory, session: str, expected: list[Message]) -> None:
    stored = memory.load(session)
    ids = [m.id for m in stored]
    assert len(ids) == len(set(ids)), f"duplicates: {sorted({i for i in ids if ids.count(i) > 1})}"
    assert stored == expected, f"lost or out of order: {sorted({m.id for m in expected} - set(ids))}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reply_lost_after_the_append_was_applied_is_retried_without_a_duplicate(mode: str) -> None:
    with _proxied_server(every=3) as (server, proxy, _):
        memory = RedisChatMemory(f"redis://127.0.0.1:{proxy.port}/0", prefix="lost", socket_timeout=2)
        direct = redis.Redis.from_url(server.url)
        msgs = memory._keys("s")[1]
        applied_unacknowledged = 0

        def append(message: Message) -> Any:
            if mode == "sync":
                return memory.append("s", [message])
            return loop.run_until_complete(memory.aappend("s", [message]))

        loop = asyncio.new_event_loop()
        expected = [_message(0, i) for i in range(60)]
        for i, message in enumerate(expected):
            for _ in range(MAX_ATTEMPTS):
                try:
                    append(message)
                    break
                except Exception:  # the outcome is unknown to the client: retry, as a caller would
                    applied_unacknowledged += direct.llen(msgs) == i + 1
            else:
                pytest.fail(f"append {i} never succeeded")
        loop.run_until_complete(memory.aclose())
        loop.close()
        direct.close()
        assert proxy.cut >= 20
        assert applied_unacknowledged == proxy.cut
        with RedisChatMemory(server.url, prefix="lost") as fresh:
            _check(fresh, "s", expected)


def test_redis_py_retry_on_a_lost_reply_stores_the_append_once() -> None:
    """With a client that retries by itself (redis-py `Retry`), a lost reply is retried inside one `append`."""
    with _proxied_server(every=4) as (server, proxy, _):
        url = f"redis://127.0.0.1:{proxy.port}/0"
        memory = RedisChatMemory(
            redis.Redis.from_url(url, retry=Retry(NoBackoff(), 3)),
            async_client=redis.asyncio.Redis.from_url(url, retry=AsyncRetry(NoBackoff(), 3)),
            prefix="retry",
        )
        expected = [_message(0, i) for i in range(40)]
        for message in expected[:20]:
            memory.append("s", [message])  # never raises: redis-py sends the script again

        async def append_rest() -> None:
            for message in expected[20:]:
                await memory.aappend("s", [message])
            await memory.aclose()

        asyncio.run(append_rest())
        assert proxy.cut == proxy.requests // 4 >= 10
        with RedisChatMemory(server.url, prefix="retry") as fresh:
            _check(fresh, "s", expected)


@dataclass
class _Writer:
    """Appends `count` id-carrying messages to one session, each retried on any error until it succeeds.

    After a failed try it also loads the session (retrying too) to see whether that try was stored after all;
    the append retried then must write nothing (return the version just loaded)."""

    run: int
    url: str
    count: int
    is_async: bool
    acked: int = 0
    failures: int = 0
    deduplicated: int = 0  # failed tries found stored, whose retry wrote nothing
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        loop = asyncio.new_event_loop() if self.is_async else None
        memory = RedisChatMemory(self.url, prefix="restarts", socket_timeout=1)

        def call(name: str, *args: Any) -> Any:
            if loop is None:
                return getattr(memory, name)(*args)
            return loop.run_until_complete(getattr(memory, "a" + name)(*args))

        try:
            self._write(call)
        except BaseException as error:
            self.errors.append(error)
        finally:
            call("close")
            if loop is not None:
                loop.close()

    def _write(self, call: Callable[..., Any]) -> None:
        session = f"run{self.run}"
        for i in range(self.count):
            message, stored_at = _message(self.run, i), None
            for _ in range(MAX_ATTEMPTS):
                try:
                    version = call("append", session, [message])
                    break
                except Exception:
                    self.failures += 1
                    time.sleep(0.01)
                    stored_at = self._stored_at(call, session, message)
            else:
                raise AssertionError(f"append {i} never succeeded")
            if stored_at is not None:
                assert version == stored_at, "an append retried after its message was stored wrote again"
                self.deduplicated += 1
            self.acked += 1

    def _stored_at(self, call: Callable[..., Any], session: str, message: Message) -> int | None:
        """The session's version if `message` is stored, else None."""
        for _ in range(MAX_ATTEMPTS):
            try:
                messages, version = call("load_versioned", session)
            except Exception:  # any failure of the damaged server: try again
                time.sleep(0.01)
            else:
                return version if message in messages else None
        raise AssertionError("the session could not be loaded")

    def wait_for(self, acked: int) -> None:
        deadline = time.monotonic() + 60
        while self.acked < acked and self.thread.is_alive():
            assert time.monotonic() < deadline, "the writer made no progress"
            time.sleep(0.001)


def test_appends_retried_through_server_restarts_are_stored_once() -> None:
    runs, per_run, restarts = 10, 400, 3
    totals = {"failures": 0, "deduplicated": 0, "duplicates": 0, "lost": 0}
    with _proxied_server(every=50) as (server, proxy, _):
        for run in range(runs):
            writer = _Writer(run, f"redis://127.0.0.1:{proxy.port}/0", per_run, is_async=run % 2 == 1)
            writer.thread.start()
            for restart in range(restarts):
                writer.wait_for(per_run * (restart + 1) // (restarts + 1))
                server.stop(kill=True)  # SIGKILL, most likely in the middle of an append
                time.sleep(0.05)
                server.start()
            writer.thread.join(120)
            assert not writer.thread.is_alive(), "the writer hung"
            assert not writer.errors, writer.errors
            with RedisChatMemory(server.url, prefix="restarts") as fresh:
                ids = [m.id for m in fresh.load(f"run{run}")]
            totals["failures"] += writer.failures
            totals["deduplicated"] += writer.deduplicated
            totals["duplicates"] += len(ids) - len(set(ids))
            totals["lost"] += len({f"r{run}-m{i}" for i in range(writer.acked)} - set(ids))
            assert ids == [f"r{run}-m{i}" for i in range(per_run)], f"run {run}: {ids}"
            assert writer.deduplicated >= 1, f"run {run}: no failed append was stored after all"
    print(f"\n{runs} runs x {restarts} restarts, {proxy.cut} replies cut, {server.aof_repairs} AOFs repaired: {totals}")
    assert totals["failures"] >= runs * restarts  # every restart failed at least one append
    assert totals["duplicates"] == totals["lost"] == 0


def test_an_append_cut_mid_write_by_a_crash_is_gone_after_the_restart_and_its_retry_stored_once() -> None:
    """The kill that writes only part of an append's effects to the append-only file (SIGKILL between two pages of
    one write), made deterministic: the file is cut inside the append's MULTI block, after its first command."""
    with redis_server(*DURABLE) as server:
        expected = [_message(0, i) for i in range(4)]
        with RedisChatMemory(server.url, prefix="cut") as memory:
            memory.append("s", expected[:3])
            memory.append("s", [expected[3]])
        server.stop(kill=True)
        (incr,) = (server.directory / "appendonlydir").glob("*.incr.aof")
        data = incr.read_bytes()
        multi = data.rindex(b"*1\r\n$5\r\nMULTI\r\n")
        first_command = data.index(b"\r\n*", multi + 13) + 2  # the block's first command (RPUSH of the message)
        incr.write_bytes(data[: data.index(b"\r\n*", first_command) + 2 + 5])  # ...and 5 bytes of the next one
        server.start()
        with RedisChatMemory(server.url, prefix="cut") as memory:
            assert memory.load("s") == expected[:3]
            memory.append("s", [expected[3]])  # the caller's retry
        server.stop(kill=True)
        server.start()  # the file is read again from its start: a half block left in it would be applied now
        assert server.aof_repairs == 1
        with RedisChatMemory(server.url, prefix="cut") as fresh:
            _check(fresh, "s", expected)
