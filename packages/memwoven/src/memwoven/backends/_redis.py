"""What the Redis backends share: the key prefix rule, error translation, their ops and clients with the executors.

A backend object holds one sync client and, lazily, one async client per event loop: a redis-py asyncio client
and its connections belong to the loop they were opened on, and each `asyncio.run` (as LlamaIndex's sync methods
call it) makes a new loop. A loop's client is closed with the loop: an async generator held open for it is
finalized by `loop.shutdown_asyncgens()`, which `asyncio.run` (and `asyncio.Runner`, pytest-asyncio, ...) call
before closing the loop, or by `aclose()` on that loop. The client of a loop closed without that step is dropped
without touching the loop. An async client you pass serves the first loop that uses the object; from other loops,
and with none, each Redis call runs the sync client in a worker thread. At most `MAX_IN_FLIGHT` operations per
loop use Redis at once; more wait their turn, so no load exhausts a connection pool.

Operations are generators of I/O-free ops (`Script`, `Scan`, `Fields`, `HScan`) and the engine's steps, driven by
`memwoven._steps`: `RedisBackend` runs them with `Clients.execute` (the sync client) or `Clients.aexecute` (the
event loop's client).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from memwoven._redact import redact_text, redact_url
from memwoven._steps import Call, Invoke, Runner, Sleep, Steps, aexecute, arun, execute, run
from memwoven.backends._loops import end_this_loops_lifetime
from memwoven.errors import BackendUnavailableError, CorruptMemoryError, InvalidInputError, MemwovenError

__all__ = [
    "MAX_IN_FLIGHT",
    "Clients",
    "Fields",
    "HScan",
    "RedisBackend",
    "Scan",
    "Script",
    "as_text",
    "check_prefix",
    "clients_from_url",
    "logger",
    "redis_errors",
]

logger = logging.getLogger("memwoven.redis")

_T = TypeVar("_T")
_ENGINE_STEPS = (Call, Invoke, Sleep)
# Operations of one object on one event loop using Redis at once; below redis-py's default pool size (100
# connections per client, per node of a cluster), which would otherwise raise "Too many connections".
MAX_IN_FLIGHT = 50
# No glob or hash-tag characters. A prefix holds no '{', so in `<prefix>:{<hash>}:<part>` (chat keys) and
# `<prefix>:vec:{<name>}:<part>` (vector keys, other parts) the first '{' ends the prefix: no prefix's keys or SCAN
# patterns reach another's, even one it starts ("app", "app:x"). `\Z`, since `$` also matches before a final "\n".
_KEY_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}\Z")


def check_prefix(prefix: object) -> str:
    """`prefix` if it is a valid key prefix, else `InvalidInputError`."""
    if not isinstance(prefix, str) or not _KEY_PREFIX.match(prefix):
        raise InvalidInputError(f"prefix must match {_KEY_PREFIX.pattern}, got {prefix!r}")
    return prefix


def as_text(value: bytes | str) -> str:
    """A Redis reply as text."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _damaged(error: ResponseError | ValueError, what: str) -> Exception:
    """The error to raise for a failure inside an operation on `what`: damaged keys become `CorruptMemoryError`.

    A key of the wrong type (WRONGTYPE), a script failing on a stored value (a version that is not a number) or
    a reply that cannot be decoded means the keys were altered behind memwoven's back. Anything else is raised as
    it is: a server refusing writes (out of memory, a read-only replica, an ACL) names its refusal with an error
    code that redis-py turns into a subclass of `ResponseError`, even when a script's write was refused.
    """
    text = str(error)  # a pipeline's error names the failed command first
    if isinstance(error, ResponseError) and (
        type(error) is not ResponseError or ("WRONGTYPE" not in text and "user_script" not in text)
    ):
        return error
    return CorruptMemoryError(f"{what}: its Redis keys hold data memwoven did not write ({text[:200]})")


@contextlib.contextmanager
def redis_errors(url: str, subject: str) -> Iterator[None]:
    """Redis errors become memwoven errors: unreachable -> BackendUnavailableError, damaged keys -> corrupt."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, RedisClusterException, OSError) as error:
        logger.info("Redis at %s is unavailable (%s); the next call connects again", url, error)
        raise BackendUnavailableError(f"Redis at {url} is unavailable: {error}") from error
    except MemwovenError:
        raise
    except (ResponseError, ValueError) as error:
        raise _damaged(error, subject) from error


@dataclass(frozen=True)
class Script:
    """Run one of the backend's scripts on `keys`."""

    name: str
    keys: list[str]
    args: list[str | bytes | int]


@dataclass(frozen=True)
class Scan:
    """Find the keys matching a pattern (on every node of a cluster)."""

    pattern: str


@dataclass(frozen=True)
class Fields:
    """Read one field of each of some hashes (one pipeline)."""

    keys: list[str]
    field: str


@dataclass(frozen=True)
class HScan:
    """Read a whole hash with HSCAN (never HGETALL: no single huge reply)."""

    key: str


Op = Script | Scan | Fields | HScan


def _execute(client: Any, scripts: Mapping[str, Any], op: Op) -> Any:
    """Run `op` with a sync client and its `scripts`."""
    if isinstance(op, Script):
        return scripts[op.name](keys=op.keys, args=op.args)
    if isinstance(op, Scan):
        return list(client.scan_iter(match=op.pattern, count=1000))
    if isinstance(op, HScan):
        return dict(client.hscan_iter(op.key, count=1000))
    pipe = client.pipeline(transaction=False)
    for key in op.keys:
        pipe.hget(key, op.field)
    return pipe.execute()


async def _aexecute(client: Any, scripts: Mapping[str, Any], op: Op) -> Any:
    """`_execute` with an async client and its `scripts`."""
    if isinstance(op, Script):
        return await scripts[op.name](keys=op.keys, args=op.args)
    if isinstance(op, Scan):
        return [key async for key in client.scan_iter(match=op.pattern, count=1000)]
    if isinstance(op, HScan):
        return {field: value async for field, value in client.hscan_iter(op.key, count=1000)}
    pipe = client.pipeline(transaction=False)
    for key in op.keys:
        pipe.hget(key, op.field)
    return await pipe.execute()


@dataclass
class _LoopClient:
    """One event loop's async client (None: the sync client in worker threads), its scripts and turns."""

    client: Any
    scripts: dict[str, Any]
    turns: asyncio.Semaphore
    ready: asyncio.Event  # set once the client can be shared
    lifetime: AsyncGenerator[None, None] | None = None  # finalized when the loop shuts down its async generators


class Clients:
    """A backend's Redis clients, `scripts` registered on each, and its executors `execute` and `aexecute`.

    From a URL, or a sync client you built with optionally its asyncio twin (which serves the first event loop
    that uses it). Every client is closed by `close` (the sync one) or `aclose` (that too, and the loop's own).
    """

    def __init__(self, url_or_client: Any, async_client: Any, socket_timeout: float, scripts: Mapping[str, str]):
        self._new_async: Callable[[], Any] | None = None
        if isinstance(url_or_client, str):
            self.url = redact_url(url_or_client)
            self.client, self._new_async = clients_from_url(url_or_client, socket_timeout)
        else:
            self.url, self.client = repr(url_or_client), url_or_client
        self._bodies = dict(scripts)
        self.scripts = {name: self.client.register_script(body) for name, body in self._bodies.items()}
        self._lent = async_client
        self._loops: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._guard = threading.Lock()  # for `_loops` and `_lent`, shared by the threads running loops

    def execute(self, step: Any) -> Any:
        """Execute a step from sync code: an `Op` with the sync client, the engine's steps with `execute`."""
        if isinstance(step, _ENGINE_STEPS):
            return execute(step)
        return _execute(self.client, self.scripts, step)

    async def aexecute(self, step: Any) -> Any:
        """Execute a step from async code: an `Op` with this event loop's client (taking a turn), or with the sync
        client in a worker thread if the loop has none; the engine's steps with `aexecute`."""
        if isinstance(step, _ENGINE_STEPS):
            return await aexecute(step)
        mine = await self._this_loop()
        async with mine.turns:
            if mine.client is None:
                return await asyncio.to_thread(_execute, self.client, self.scripts, step)
            task = asyncio.current_task()
            cancelling = getattr(task, "cancelling", None)  # Python 3.11+
            asked = cancelling() if cancelling is not None else 0
            # redis-py's asyncio client can catch a cancellation while it waits for the reply, and return the reply
            # or raise a connection error (redis/redis-py#2028, #2551): the caller asked to stop, and a timeout
            # must not be lost
            try:
                result = await _aexecute(mine.client, mine.scripts, step)
            except Exception:
                if cancelling is not None and cancelling() > asked:
                    raise asyncio.CancelledError from None
                raise
            if cancelling is not None and cancelling() > asked:
                raise asyncio.CancelledError
            return result

    async def _this_loop(self) -> _LoopClient:
        """The running loop's client, made on its first use."""
        loop = asyncio.get_running_loop()
        mine = self._loops.get(loop)
        if mine is None:
            mine = self._open(loop)
            if mine.lifetime is not None:
                await anext(mine.lifetime)  # the loop now tracks it, and finalizes it before it closes
                try:  # a cluster client learns the slots once here: first calls made at once would race for it
                    await mine.client.initialize()
                finally:
                    mine.ready.set()
        await mine.ready.wait()
        return mine

    def _open(self, loop: asyncio.AbstractEventLoop) -> _LoopClient:
        """A client for `loop`: a new one, the one you passed if no loop took it yet, or none (threads)."""
        with self._guard:
            self._forget_closed_loops()
            if self._new_async is not None:
                client = self._new_async()
            else:  # the client you passed serves the first loop only: it is bound to that loop
                client, self._lent = self._lent, None
            mine = self._loops[loop] = _LoopClient(client, {}, asyncio.Semaphore(MAX_IN_FLIGHT), asyncio.Event())
        if client is None:
            logger.debug("%s: event loop %#x has no async client; Redis calls run in threads", self.url, id(loop))
            mine.ready.set()
        else:
            logger.debug("%s: an async client for event loop %#x", self.url, id(loop))
            mine.scripts = {name: client.register_script(body) for name, body in self._bodies.items()}
            mine.lifetime = self._lifetime(loop, mine)
        return mine

    async def _lifetime(self, loop: asyncio.AbstractEventLoop, mine: _LoopClient) -> AsyncGenerator[None, None]:
        """Suspended while `loop` runs; once finalized, `loop` forgets its client, which is closed."""
        try:
            yield
        finally:
            with self._guard:
                if self._loops.get(loop) is mine:
                    del self._loops[loop]
            try:
                await mine.client.aclose()
            except (RedisError, OSError, RuntimeError) as error:  # teardown never fails a call that was applied
                logger.debug("%s: closing the async client of event loop %#x: %s", self.url, id(loop), error)
            else:
                logger.debug("%s: closed the async client of event loop %#x", self.url, id(loop))

    def _forget_closed_loops(self) -> None:
        """Drop the clients of loops closed without finalizing their async generators (their sockets close when
        collected: closing them now would need their loop)."""
        for loop in [loop for loop in self._loops if loop.is_closed()]:
            mine = self._loops.pop(loop)
            if mine.client is not None:
                mine.lifetime = None  # collected at once: finalizing it does nothing on a closed loop
                logger.info("%s: dropped the async client of event loop %#x, closed with it open", self.url, id(loop))

    def close(self) -> None:
        """Close the sync client; the async clients close with their event loops."""
        with self._guard:
            self._forget_closed_loops()
        self.client.close()

    async def aclose(self) -> None:
        """Close this event loop's async client, and the sync client."""
        await end_this_loops_lifetime(self._loops)
        self.close()


class RedisBackend(Runner):
    """What a Redis backend object shares: its `Clients`, which execute its steps (`_run` with the sync client,
    `_arun` with the event loop's), and `close` / `aclose`."""

    _redis: Clients
    _url: str
    _client: Any
    _scripts: dict[str, Any]
    _reads_text_replies = False  # whether it works with clients that decode replies (decode_responses=True)

    def _connect(
        self, url_or_client: Any, async_client: Any, socket_timeout: float, scripts: Mapping[str, str]
    ) -> None:
        """Open the clients (from a URL, or those you passed) and register `scripts` on them."""
        self._redis = Clients(url_or_client, async_client, socket_timeout, scripts)
        clients = (self._redis.client, async_client or self._redis.client)
        if not self._reads_text_replies and any(client.get_encoder().decode_responses for client in clients):
            if isinstance(url_or_client, str):
                self._redis.close()
            raise InvalidInputError(f"{type(self).__name__} reads binary replies: it needs decode_responses=False")
        self._url, self._client, self._scripts = self._redis.url, self._redis.client, self._redis.scripts

    def _run(self, steps: Steps[_T]) -> _T:
        return run(steps, self._redis.execute)

    async def _arun(self, steps: Steps[_T]) -> _T:
        return await arun(steps, self._redis.aexecute)

    def close(self) -> None:
        """Close the sync client's connections (each event loop's async client closes with its loop)."""
        self._redis.close()

    async def aclose(self) -> None:
        """Close this event loop's async client and the sync client."""
        await self._redis.aclose()


def clients_from_url(url: str, socket_timeout: float) -> tuple[Any, Callable[[], Any]]:
    """A sync client for a `redis://`, `rediss://` or `redis+cluster://` URL, and a maker of async ones."""
    options: dict[str, Any] = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
    scheme, _, rest = url.partition("://")
    try:
        if scheme in ("redis+cluster", "rediss+cluster"):
            plain = f"{scheme.split('+')[0]}://{rest}"
            client = redis.cluster.RedisCluster.from_url(plain, **options)  # connects at once, to learn the slots
            return client, lambda: redis.asyncio.cluster.RedisCluster.from_url(plain, **options)
        if scheme not in ("redis", "rediss", "unix"):
            raise InvalidInputError(f"not a Redis URL: {redact_url(url)!r}")
        return redis.Redis.from_url(url, **options), lambda: redis.asyncio.Redis.from_url(url, **options)
    except (RedisConnectionError, RedisTimeoutError, RedisClusterException) as error:
        raise BackendUnavailableError(
            f"Redis at {redact_url(url)} is unavailable: {redact_text(str(error), url)}"
        ) from None
    except ValueError as error:  # a port or database number that is not a number, an unknown option, ...
        if isinstance(error, InvalidInputError):
            raise
        raise InvalidInputError(f"malformed Redis URL {redact_url(url)!r}: {redact_text(str(error), url)}") from None
