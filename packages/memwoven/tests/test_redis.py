from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster
import redis_support
from redis_support import RedisHooks, delete_prefix

from memwoven import Message, VectorDocument
from memwoven.backends._redis import MAX_IN_FLIGHT
from memwoven.backends.redis import RedisChatMemory
from memwoven.backends.redis_items import RedisItemMemory
from memwoven.backends.redis_vector import RedisVectorMemory
from memwoven.contracts import ChatMemory
from memwoven.errors import BackendUnavailableError, CorruptMemoryError, InvalidInputError
from memwoven.history import encode_message
from memwoven.testing import ChatMemoryContract, turn
from memwoven_test_support import redis_url, unique_name
from memwoven_test_support.redis_servers import redis_server


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    """A unique key prefix on the shared Redis; its keys are deleted afterwards (never FLUSH)."""
    url, prefix = redis_url(), unique_name("mwtest")
    yield url, prefix
    delete_prefix(url, prefix)


class RedisChatHooks(RedisHooks, ChatMemoryContract):
    """The chat contract on Redis: other objects on the server, under the memory's prefix or one extending it."""

    def sibling(self, memory: RedisChatMemory, suffix: str) -> RedisChatMemory:
        return RedisChatMemory(self.url(memory), prefix=memory.prefix + suffix)

    def empty(self, memory: RedisChatMemory) -> None:
        for session_id in memory.sessions():
            memory.clear(session_id)


class TestRedisChatMemory(RedisChatHooks):
    @pytest.fixture
    def chat_memory(self, redis_prefix: tuple[str, str]) -> ChatMemory:
        url, prefix = redis_prefix
        return RedisChatMemory(url, prefix=prefix)

    def url(self, memory: RedisChatMemory) -> str:
        return redis_url()  # not the memory's URL, where a password would be redacted

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        forge_first_message(memory, session_id)


def forge_first_message(memory: ChatMemory, session_id: str) -> None:
    """Replace the first stored message with another valid one: only the rolling digests can tell."""
    assert isinstance(memory, RedisChatMemory)
    memory._client.lset(memory._keys(session_id)[1], 0, encode_message(Message(role="user", content="forged")))


def evict_meta(memory: ChatMemory, session_id: str) -> None:
    """Delete the session's meta key and nothing else, as an eviction under memory pressure may."""
    assert isinstance(memory, RedisChatMemory)
    memory._client.delete(memory._keys(session_id)[0])


def test_a_stranger_object_saves_over_an_existing_session(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    with RedisChatMemory(url, prefix=prefix) as first, RedisChatMemory(url, prefix=prefix) as second:
        first.save("s", [turn(i) for i in range(5)])
        second.save("s", [turn(i) for i in range(3)] + [turn(9)])  # never loaded by `second`
        assert first.load("s") == [turn(0), turn(1), turn(2), turn(9)]
        first.append("s", [turn(10)])
        second.save("s", [*second.load("s"), turn(11)])
        assert [m.text for m in first.load("s")] == ["w-0", "w-1", "w-2", "w-9", "w-10", "w-11"]


def _count_written(memory: RedisChatMemory) -> list[int]:
    """Record how many messages each `save` script call writes."""
    written: list[int] = []
    script = memory._scripts["save"]

    def counting(keys: list[str], args: list[Any]) -> Any:
        written.append(int(args[4]))
        return script(keys=keys, args=args)

    memory._scripts["save"] = counting
    return written


def test_save_writes_only_the_changed_suffix(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    with RedisChatMemory(url, prefix=prefix) as memory:
        memory.save("s", [turn(i) for i in range(50)])
        written = _count_written(memory)
        memory.save("s", [turn(i) for i in range(50)] + [turn(99)])  # through the snapshot of the last write
        memory._cache.drop("s")
        memory.save("s", [turn(i) for i in range(51)] + [turn(98)])  # through the stored messages and digests
        assert written == [1, 2]
        assert [m.text for m in memory.load("s")][-3:] == ["w-49", "w-50", "w-98"]


@pytest.mark.parametrize("damage", ["forged", "not-canonical"])
def test_a_save_keeps_no_stored_message_it_did_not_verify(redis_prefix: tuple[str, str], damage: str) -> None:
    """A stored message altered behind memwoven's back (even to another valid encoding) is rewritten by the next
    save of the history from an object that does not remember it, never kept because its digest still fits."""
    url, prefix = redis_prefix
    history = [turn(i) for i in range(6)]
    with RedisChatMemory(url, prefix=prefix) as writer, RedisChatMemory(url, prefix=prefix) as other:
        writer.save("s", history)
        msgs = writer._keys("s")[1]
        body = encode_message(Message(role="user", content="forged")).encode()
        writer._client.lset(msgs, 2, body if damage == "forged" else b" " + writer._client.lindex(msgs, 2))
        with pytest.raises(CorruptMemoryError, match="'s'"):
            other.load("s")
        written = _count_written(other)
        other.save("s", [*history, turn(6)])
        assert written == [5]  # messages 2.. rewritten
        with RedisChatMemory(url, prefix=prefix) as fresh:
            assert fresh.load("s") == [*history, turn(6)]


def test_a_save_repairing_a_damaged_history_after_another_repair_compares_again(
    redis_prefix: tuple[str, str],
) -> None:
    """A plain save that found the history damaged, then lost the race to another writer's repair, starts again
    from what is stored now (it used to resend the damaged version's base forever)."""
    url, prefix = redis_prefix
    with RedisChatMemory(url, prefix=prefix) as first, RedisChatMemory(url, prefix=prefix) as second:
        first.save("s", [_message("1"), _message("2")])
        first._client.srem(first._keys("s")[3], "2")  # the ids set lost a member (an eviction, say)
        script, calls = second._scripts["save"], []

        def racing(keys: list[str], args: list[Any]) -> Any:
            calls.append(args)
            if len(calls) == 2:  # `second` was told the history is damaged; `first` repairs it meanwhile
                first.save("s", [_message("9")])
            if len(calls) > 10:
                raise AssertionError("the save kept sending the same stale version")
            return script(keys=keys, args=args)

        second._scripts["save"] = racing
        second.save("s", [_message("1"), _message("3")])
        assert len(calls) == 3
        with RedisChatMemory(url, prefix=prefix) as fresh:
            assert fresh.load("s") == [_message("1"), _message("3")]


def test_a_full_server_refuses_writes_with_its_own_error_not_as_damage() -> None:
    """Out of memory (maxmemory, noeviction), Redis refuses a script's writes: that is the server's error, raised
    as it is, not `CorruptMemoryError` (which would tell an operator to delete healthy keys). Every Redis backend
    reads errors through `_redis.redis_errors`; the chat save's script is let through at a full server at times."""
    with redis_server("--maxmemory", "2mb", "--maxmemory-policy", "noeviction") as server:
        client = redis.Redis.from_url(server.url)
        writes = {
            "items": lambda: RedisItemMemory(server.url).put(("n",), "k", {"v": 1}),
            "vectors": lambda: RedisVectorMemory(server.url, collection="c").store(
                [VectorDocument(id="a", content="a", embedding=[1.0, 0.0])]
            ),
        }
        for name, write in writes.items():
            with contextlib.suppress(redis.exceptions.OutOfMemoryError):  # filled to the brim before each write
                for index in range(10_000):
                    client.set(f"fill:{name}:{index}", b"x" * 1_000)
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                write()
        client.close()


def test_chat_and_vectors_refuse_clients_that_decode_replies(redis_prefix: tuple[str, str]) -> None:
    """Their replies are binary (digests, float32 vectors): a decoding client made a fresh object read a healthy
    session or collection as damaged. Refused at construction, given as a client or in the URL."""
    url, prefix = redis_prefix
    decoding = redis.Redis.from_url(url, decode_responses=True)
    for make in (RedisChatMemory, lambda *a, **k: RedisVectorMemory(*a, collection="c", **k)):
        with pytest.raises(InvalidInputError, match="decode_responses=False"):
            make(decoding, prefix=prefix)
        with pytest.raises(InvalidInputError, match="decode_responses=False"):
            make(f"{url}?decode_responses=true", prefix=prefix)
        with pytest.raises(InvalidInputError, match="decode_responses=False"):
            make(redis.Redis.from_url(url), async_client=redis.asyncio.Redis.from_url(url, decode_responses=True))
    decoding.close()


def test_ttl_expires_idle_sessions(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    client = redis.Redis.from_url(url)
    with RedisChatMemory(url, prefix=prefix, ttl=60) as memory:
        memory.save("s", [turn(1).model_copy(update={"id": "m1"})])
        memory.append("s", [turn(2)])
        deadlines = {client.pexpiretime(key) for key in memory._keys("s")}
        assert len(deadlines) == 1  # one deadline for all four keys: they expire together
        assert 0 < deadlines.pop() - time.time() * 1000 <= 60_000
        memory.clear("s")
    with RedisChatMemory(url, prefix=prefix, ttl=0.2) as memory:
        for i in range(20):
            memory.append(f"s{i}", [turn(i).model_copy(update={"id": f"m{i}"})])
        time.sleep(0.3)
        assert memory.sessions() == []  # expired, never reported as damaged
        assert all(memory.load(f"s{i}") == [] for i in range(20))
    client.close()


cluster_url = redis_support.cluster_url  # a private cluster, for this module


class TestRedisClusterChatMemory(RedisChatHooks):
    @pytest.fixture
    def chat_memory(self, cluster_url: str) -> ChatMemory:
        return RedisChatMemory(cluster_url, prefix=unique_name("mwc"))

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        evict_meta(memory, session_id)


def test_a_ttl_under_a_millisecond_still_expires(redis_prefix: tuple[str, str]) -> None:
    """A ttl is kept in whole milliseconds, at least one: 0.4 ms was rounded to 0, Redis's "no expiry"."""
    url, prefix = redis_prefix
    with RedisChatMemory(url, prefix=prefix, ttl=0.0004) as memory:
        memory.save("s", [turn(0)])
        assert memory._client.pttl(memory._keys("s")[0]) in (-2, 0, 1)  # gone, or going within a millisecond


def test_sessions_spread_over_every_cluster_node(cluster_url: str) -> None:
    with RedisChatMemory(cluster_url, prefix=unique_name("mwc")) as memory:
        ids = [f"user-{i}" for i in range(60)]
        for session_id in ids:
            memory.append(session_id, [turn(1, session_id)])
        nodes = {memory._client.keyslot(memory._keys(i)[0]) // 5462 for i in ids}
        assert nodes == {0, 1, 2}  # 16384 slots over 3 masters
        assert memory.sessions() == sorted(ids)


def test_a_restarted_server_keeps_acknowledged_writes_and_the_client_recovers() -> None:
    with (
        redis_server("--appendonly", "yes", "--appendfsync", "always") as server,
        RedisChatMemory(server.url, prefix="restart") as memory,
    ):
        for i in range(20):
            memory.append("s", [turn(i)])
        server.stop(kill=True)
        with pytest.raises(BackendUnavailableError) as raised:
            memory.append("s", [turn(20)])
        assert "127.0.0.1" in str(raised.value)
        server.start()
        memory.append("s", [turn(21)])
        texts = [m.text for m in memory.load("s")]
        assert texts[:20] == [f"w-{i}" for i in range(20)]
        assert texts[-1] == "w-21"


# Event loops --------------------------------------------------------------------------------------------------


def _message(name: str) -> Message:
    return Message(role="user", content=f"text of {name}", id=name)


async def _append_at_once(memory: RedisChatMemory, names: list[str], sessions: int = 1) -> None:
    """Append one message per name, all at once, spread over `sessions` sessions; none may fail."""
    calls = [memory.aappend(f"s{i % sessions}", [_message(name)]) for i, name in enumerate(names)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert [r for r in results if isinstance(r, BaseException)] == []


def _stored(memory: RedisChatMemory, sessions: int = 1) -> list[str]:
    return sorted(str(m.id) for i in range(sessions) for m in memory.load(f"s{i}"))


def _connected(memory: RedisChatMemory) -> set[tuple[str, str]]:
    """The clients the server (every node of a cluster) has connected, this probe's connections included: (node,
    client id) pairs."""
    client = memory._client
    if isinstance(client, redis.cluster.RedisCluster):  # a reply per node
        replies: Any = client.client_list(target_nodes=redis.cluster.RedisCluster.ALL_NODES)
    else:
        replies = {"": client.client_list()}
    return {(node, entry["id"]) for node, entries in replies.items() for entry in entries}


@pytest.mark.parametrize("kind", ["standalone", "cluster"])
def test_calls_beyond_the_connection_pool_wait_their_turn(kind: str, request: pytest.FixtureRequest) -> None:
    """300 concurrent calls (redis-py's pools hold 100 connections) succeed through at most `MAX_IN_FLIGHT`
    connections per node, all closed when their event loop ends."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(redis_server()) if kind == "standalone" else None
        url = server.url if server else request.getfixturevalue("cluster_url")
        memory = stack.enter_context(RedisChatMemory(url, prefix=unique_name("mwq")))
        names, nodes = [f"m{i}" for i in range(300)], 1 if kind == "standalone" else 3
        idle = _connected(memory)  # only the connections opened after this count: those of earlier tests may close

        async def scenario() -> int:
            await _append_at_once(memory, names, sessions=30)
            return len(_connected(memory) - idle)  # this loop's connections are still open

        assert 0 < asyncio.run(scenario()) <= nodes * MAX_IN_FLIGHT
        deadline = time.monotonic() + 30  # a loaded host (CI) is slow to see the closes
        while _connected(memory) - idle and time.monotonic() < deadline:  # the server notices closes late
            time.sleep(0.01)
        assert _connected(memory) - idle == set()
        assert _stored(memory, sessions=30) == sorted(names)


def test_one_object_serves_successive_event_loops_and_loops_in_threads_at_once(
    redis_prefix: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, prefix = redis_prefix
    caplog.set_level(logging.DEBUG, "memwoven.redis")
    with RedisChatMemory(url, prefix=prefix) as memory:
        for i in range(5):
            asyncio.run(_append_at_once(memory, [f"a{i}"]))
        assert caplog.text.count("an async client for event loop") == 5
        assert caplog.text.count("closed the async client of event loop") == 5
        batches = [[f"t{t}-{i}" for i in range(50)] for t in range(4)]
        threads = [threading.Thread(target=asyncio.run, args=(_append_at_once(memory, b),)) for b in batches]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert _stored(memory) == sorted([f"a{i}" for i in range(5)] + [n for b in batches for n in b])


async def _increment(messages: list[Message]) -> list[Message]:
    return [*messages, Message(role="user", content=str(len(messages)))]


def test_without_an_async_client_for_the_loop_calls_run_in_threads(
    redis_prefix: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Built from a sync client (with or without an async one, which serves the first loop only), the async
    methods work from every loop: the sync client's calls run in worker threads."""
    url, prefix = redis_prefix
    caplog.set_level(logging.DEBUG, "memwoven.redis")
    lent = redis.asyncio.Redis.from_url(url)
    with (
        RedisChatMemory(redis.Redis.from_url(url), prefix=prefix) as alone,
        RedisChatMemory(redis.Redis.from_url(url), async_client=lent, prefix=f"{prefix}:x") as paired,
    ):
        for memory in (alone, paired):
            for i in range(3):
                asyncio.run(_append_at_once(memory, [f"m{i}"]))
                assert asyncio.run(memory.aupdate("u", _increment)) > 0  # an async change runs on the loop
            assert _stored(memory) == ["m0", "m1", "m2"]
            assert [m.text for m in memory.load("u")] == ["0", "1", "2"]
    assert caplog.text.count("has no async client; Redis calls run in threads") == 6 + 5  # all loops but one
    assert caplog.text.count("closed the async client of event loop") == 1  # `lent`, with its loop


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the connections left open on the closed loop
def test_the_client_of_a_loop_closed_while_it_was_open_is_dropped(
    redis_prefix: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, prefix = redis_prefix
    with RedisChatMemory(url, prefix=prefix) as memory:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_append_at_once(memory, ["before"]))
        loop.close()  # without `shutdown_asyncgens()`, which `asyncio.run` calls
        with caplog.at_level(logging.INFO, "memwoven.redis"):
            asyncio.run(_append_at_once(memory, ["after"]))
        assert "dropped the async client of event loop" in caplog.text
        assert _stored(memory) == ["after", "before"]


@pytest.mark.parametrize("twice", [False, True], ids=["once", "again-while-releasing"])
def test_a_cancelled_locked_update_releases_the_lock_at_once(redis_prefix: tuple[str, str], twice: bool) -> None:
    """aupdate's locked path cancelled just after the server set the session's update lock (before the reply was
    read: here, a pause right after it), or cancelled again while releasing it: the lock key is gone at once, not
    held for its 30 s lease."""
    from memwoven._steps import Sleep

    url, prefix = redis_prefix
    memory = RedisChatMemory(url, prefix=prefix)
    client = redis.Redis.from_url(url)
    lock_key = memory._lock_key("s")
    lock_steps, unlock_steps = memory._lock_steps, memory._unlock_steps
    events: dict[str, asyncio.Event] = {}  # made on the loop (the steps run there)

    def lock_then_pause(session_id: str, token: str) -> Any:
        yield from lock_steps(session_id, token)
        events["held"].set()
        yield Sleep(30)

    def unlock_after_a_pause(session_id: str, token: str) -> Any:
        events["releasing"].set()
        yield Sleep(0.05)
        yield from unlock_steps(session_id, token)

    async def scenario() -> tuple[int, list[str]]:
        await memory.asave("s", [turn(0)])
        events.update(held=asyncio.Event(), releasing=asyncio.Event())
        task = asyncio.ensure_future(memory._aupdate_locked("s", lambda messages: [*messages, turn(1)]))
        await events["held"].wait()
        assert client.exists(lock_key)
        task.cancel()
        if twice:
            await events["releasing"].wait()
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = client.exists(lock_key)
        texts = [message.text for message in await memory.aload("s")]
        await memory.aclose()
        return left, texts

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(memory, "_lock_steps", lock_then_pause)
            patch.setattr(memory, "_unlock_steps", unlock_after_a_pause)
            left, texts = asyncio.run(scenario())
    finally:
        client.close()
    assert left == 0
    assert texts == [turn(0).text]
