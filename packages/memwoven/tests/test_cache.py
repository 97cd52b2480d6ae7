"""`LRUCache`, the one bounded LRU the chat backends and the encrypted wrapper keep recent sessions in, and the
three caches built on it: `SnapshotCache` (SQL, Redis), `FileChatMemory`'s and `EncryptedChatMemory`'s."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memwoven import ConcurrentModificationError, FileChatMemory, InMemoryChatMemory, InvalidInputError, Message
from memwoven._cache import LRUCache
from memwoven.encryption import EncryptedChatMemory, generate_key
from memwoven.history import Snapshot, SnapshotCache
from memwoven.testing import turn

KEY = generate_key()


# LRUCache ------------------------------------------------------------------------------------------------------


def test_the_least_recently_used_goes_first() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    assert cache.get("a") is None
    assert len(cache) == 0
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a read makes "a" the most recently used ...
    cache.put("c", 3)  # ... so "b" goes
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    assert len(cache) == 2
    cache.put("a", 10)  # a write replaces, and makes "a" the most recently used
    cache.put("d", 4)
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == (10, None, 4)


def test_a_falsy_value_is_still_remembered() -> None:
    cache: LRUCache[str, int] = LRUCache(1)
    cache.put("zero", 0)
    assert cache.get("zero") == 0


def test_drop_and_clear_forget() -> None:
    cache: LRUCache[int, str] = LRUCache(4)
    for key in range(3):
        cache.put(key, str(key))
    cache.drop(1)
    cache.drop(99)  # not remembered: nothing happens
    assert [cache.get(key) for key in range(3)] == ["0", None, "2"]
    cache.clear()
    assert len(cache) == 0
    assert cache.get(0) is None


def test_size_zero_keeps_nothing() -> None:
    cache: LRUCache[str, int] = LRUCache(0)
    cache.put("a", 1)
    assert cache.get("a") is None
    assert len(cache) == 0


@pytest.mark.parametrize("size", [-1, True, 1.5, "3", None])
def test_a_size_must_be_a_non_negative_int(size: object) -> None:
    with pytest.raises(InvalidInputError, match="cache_size must be a non-negative int"):
        LRUCache(size)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="cache_size must be a non-negative int"):
        SnapshotCache(size)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="cache_size must be a non-negative int"):
        EncryptedChatMemory(InMemoryChatMemory(), key=KEY, cache_size=size)  # type: ignore[arg-type]


def test_threads_share_one_cache() -> None:
    cache: LRUCache[int, int] = LRUCache(8)
    start = threading.Barrier(8)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(5000):
            key = rng.randrange(32)
            operation = rng.random()
            if operation < 0.45:
                cache.put(key, key * 2)
            elif operation < 0.9:
                value = cache.get(key)
                assert value is None or value == key * 2
            else:
                cache.drop(key)
            assert len(cache) <= 8

    with ThreadPoolExecutor(8) as pool:
        for done in [pool.submit(work, seed) for seed in range(8)]:
            done.result()  # raises what the thread raised
    assert len(cache) <= 8


# The caches built on it ----------------------------------------------------------------------------------------


def test_a_snapshot_of_an_absent_session_is_forgotten() -> None:
    cache = SnapshotCache(2)
    cache.put("s", Snapshot(3, [turn(0)]))
    assert cache.get("s") == Snapshot(3, [turn(0)])
    cache.put("s", Snapshot(0, []))  # version 0: the session is gone
    assert cache.get("s") is None
    assert len(cache) == 0
    for name in "abc":
        cache.put(name, Snapshot(1, []))
    assert cache.get("a") is None
    assert len(cache) == 2


def test_the_encrypted_cache_forgets_an_emptied_session() -> None:
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY, cache_size=4)
    chat.save("s", [turn(0)])
    assert len(chat._cache) == 1
    chat.save("s", [])  # an empty session takes no room in the cache
    assert len(chat._cache) == 0
    assert chat.load("s") == []


@pytest.mark.parametrize("cache_size", [-5, 0, 1])
def test_a_file_memory_takes_any_int_cache_size(tmp_path: Path, cache_size: int) -> None:
    chat = FileChatMemory(tmp_path, cache_size=cache_size)  # a negative size is 0, as it always was
    chat.save("a", [turn(0)])
    chat.save("b", [turn(1)])
    assert chat.load("a") == [turn(0)]
    assert chat.load("b") == [turn(1)]
    assert len(chat._cache) == max(0, cache_size)


def _run(chat: EncryptedChatMemory, other: EncryptedChatMemory, seed: int) -> list[object]:
    """A random run over five sessions, with failed saves and another object writing the same store; returns
    everything it saw (the messages, and whether a session exists: versions differ from run to run)."""
    rng = random.Random(seed)
    seen: list[object] = []
    for step in range(300):
        session, operation = f"s{rng.randrange(5)}", rng.randrange(7)
        if operation == 0:
            seen.append(chat.load_versioned(session).version > 0)
        elif operation == 1:  # a save that keeps a prefix of what is stored, and adds to it
            kept = chat.load(session)[: rng.randrange(4) + 1]
            chat.save(session, [*kept, turn(step)])
        elif operation == 2:
            chat.append(session, [Message(role="user", content=f"appended {step}")])
        elif operation == 3:  # a failed save: read the cache, never wrote it
            with pytest.raises(ConcurrentModificationError):
                chat.save(session, [turn(step)], expected_version=10_000)
        elif operation == 4:
            chat.update(session, lambda messages: messages[1:])
        elif operation == 5:  # another object's write: this one's cache entry, if any, is stale now
            other.save(session, [turn(-step), *other.load(session)[1:]])
        else:
            chat.clear(session)
        seen.append(chat.load(session))
    return seen


@pytest.mark.parametrize("seed", range(4))
def test_what_the_encrypted_cache_keeps_changes_no_result(seed: int) -> None:
    """Which sessions `EncryptedChatMemory` remembers never changes a result, only how much it re-encrypts:
    every cached ciphertext is checked against the stored one before its plaintext is used (so its old cache,
    which did not count a read as a use, and this LRU, which does, give the same answers). Every size gives the
    results of no cache at all."""
    runs = []
    for cache_size in (0, 1, 2, 256):
        inner = InMemoryChatMemory()
        chat = EncryptedChatMemory(inner, key=KEY, cache_size=cache_size)
        runs.append(_run(chat, EncryptedChatMemory(inner, key=KEY), seed))
    assert all(run == runs[0] for run in runs[1:])


def test_a_read_keeps_a_session_remembered() -> None:
    """A session read (even by a save that then failed) stays remembered, so its next save re-encrypts only what
    changed."""
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY, cache_size=2)
    chat.save("a", [turn(0)])
    chat.save("b", [turn(1)])
    with pytest.raises(ConcurrentModificationError):
        chat.save("a", [turn(0), turn(2)], expected_version=99)
    chat.save("c", [turn(3)])  # "b" is the least recently used now
    before = chat.inner.load("a")
    chat.save("a", [turn(0), turn(2)])
    assert chat.inner.load("a")[0] == before[0]  # its ciphertext reused
