from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import random
import signal
import threading
import time
import unicodedata
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import filelock
import numpy as np
import pytest
from cancel_support import cancel_a_locked_update
from process_support import process_context, start

from memwoven import Message, VectorDocument
from memwoven.backends.file import FileChatMemory, FileItemMemory, FileVectorMemory, _fs
from memwoven.backends.file import chat as file_chat
from memwoven.contracts import ChatMemory, VectorMemory
from memwoven.errors import (
    BackendUnavailableError,
    ConcurrentModificationError,
    CorruptMemoryError,
    DimensionMismatchError,
    InvalidInputError,
)
from memwoven.testing import HOSTILE_IDS, ChatMemoryContract, VectorMemoryContract, turn
from memwoven.urls import open_vector_memory

# Conformance -----------------------------------------------------------------------------------------------------


class TestFileChat(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self, tmp_path: Path) -> ChatMemory:
        return FileChatMemory(tmp_path / "chat")

    def reopen(self, memory: ChatMemory) -> ChatMemory:
        assert isinstance(memory, FileChatMemory)
        return FileChatMemory(memory.directory)

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        assert isinstance(memory, FileChatMemory)
        path = memory.path_of(session_id)
        data = path.read_bytes()
        path.write_bytes(data[:-7])  # a torn write that escaped the atomic rename (e.g. copied by hand)


class TestFileVector(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self, tmp_path: Path) -> Callable[..., VectorMemory]:
        counter = itertools.count()
        return lambda dimension, metric: FileVectorMemory(
            tmp_path / f"collection{next(counter)}" / "vectors.npz", dimension=dimension, metric=metric
        )

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        assert isinstance(memory, FileVectorMemory)
        return FileVectorMemory(memory.path, metric=memory.metric)


# Helpers ---------------------------------------------------------------------------------------------------------


def _history(tag: str, size: int) -> list[Message]:
    return [Message(role="user" if i % 2 == 0 else "assistant", content=f"{tag}-{i}") for i in range(size)]


def _compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _forge(path: Path, session_id: str, lines: list[bytes], *, version: int = 7, count: int | None = None) -> None:
    """Write a session file by hand, with a correct checksum over whatever `lines` hold."""
    count = len(lines) if count is None else count
    fields = {"format": 1, "session_id": session_id, "version": version, "count": count}
    body = b"".join(line + b"\n" for line in lines)
    digest = hashlib.sha256(_compact(fields) + b"\n" + body).hexdigest()
    path.write_bytes(_compact({**fields, "sha256": digest}) + b"\n" + body)


def _axis(i: int, dimension: int = 4) -> list[float]:
    vector = [0.1] * dimension
    vector[i % dimension] = 1.0
    return vector


def _generation(tag: str, size: int = 6) -> list[VectorDocument]:
    """A collection state: every document carries `tag`, so a mix of two states is visible."""
    shift = 0 if tag == "A" else 1
    return [
        VectorDocument(id=f"d{i}", content=tag, embedding=_axis(i + shift), metadata={"g": tag}) for i in range(size)
    ]


# Chat: ids and files ---------------------------------------------------------------------------------------------

NFC = unicodedata.normalize("NFC", "caf\u00e9 \u212b")
NFD = unicodedata.normalize("NFD", NFC)
EXTRA_HOSTILE_IDS = (
    "Ab",
    "aB",
    "../../etc/passwd",
    "..\\..\\windows\\win.ini",
    "/abs/path",
    "a/b",
    ".",
    "..",
    "~",
    ".locks",
    "CON",
    "nul",
    "aux.txt",
    "x.session.jsonl",
    NFC,
    NFD,
    "y" * 10_000,
    "\u00e9" * 32_000,  # 64,000 bytes of UTF-8, just under the limit
    "line\nbreak",
    "\u2028\u2029",
)


def test_hostile_ids_stay_inside_the_directory_and_never_collide(tmp_path: Path) -> None:
    assert NFC != NFD
    assert unicodedata.normalize("NFC", NFD) == NFC
    ids = sorted(set(HOSTILE_IDS) | set(EXTRA_HOSTILE_IDS))
    store = tmp_path / "root" / "store"
    memory = FileChatMemory(store)
    for position, session_id in enumerate(ids):
        memory.save(session_id, [turn(position, "id")])
    assert memory.sessions() == ids
    reopened = FileChatMemory(store)
    for position, session_id in enumerate(ids):
        assert reopened.load(session_id) == [turn(position, "id")], session_id[:40]
    # nothing was created outside the store, and inside it only hashed names
    everything = list(tmp_path.rglob("*"))
    assert all(path == store.parent or path == store or store in path.parents for path in everything)
    names = sorted(path.name for path in store.iterdir())
    assert names == sorted([".locks"] + [hashlib.sha256(i.encode()).hexdigest() + ".session.jsonl" for i in ids])
    assert all(len(lock.name) == 64 + len(".lock") for lock in (store / ".locks").iterdir())
    memory.clear("Ab")
    memory.clear(NFD)
    assert memory.load("aB") == [turn(ids.index("aB"), "id")]
    assert memory.load(NFC) == [turn(ids.index(NFC), "id")]
    assert sorted(set(ids) - {"Ab", NFD}) == memory.sessions()


def test_the_file_format_is_plain_and_checksummed(tmp_path: Path) -> None:
    memory = FileChatMemory(tmp_path)
    history = _history("fmt", 3)
    version = memory.save("café", history)
    raw = memory.path_of("café").read_bytes()
    header_line, body = raw.split(b"\n", 1)
    header = json.loads(header_line)
    assert header == {"format": 1, "session_id": "café", "version": version, "count": 3, "sha256": header["sha256"]}
    assert [Message.model_validate_json(line) for line in body.splitlines()] == history
    fields = {key: header[key] for key in ("format", "session_id", "version", "count")}
    assert hashlib.sha256(_compact(fields) + b"\n" + body).hexdigest() == header["sha256"]
    assert memory.path_of("café").name == hashlib.sha256("café".encode()).hexdigest() + ".session.jsonl"


def test_the_directory_is_created_and_must_be_one(tmp_path: Path) -> None:
    FileChatMemory(tmp_path / "a" / "b" / "c").save("s", [turn(1)])
    assert (tmp_path / "a" / "b" / "c").is_dir()
    (tmp_path / "plain-file").write_text("x")
    with pytest.raises(InvalidInputError):
        FileChatMemory(tmp_path / "plain-file")
    for bad in (-5, "1", True):
        with pytest.raises(InvalidInputError, match="lock_timeout"):
            FileChatMemory(tmp_path / "chat", lock_timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="lock_timeout"):
            FileVectorMemory(tmp_path / "vectors.jsonl", lock_timeout=bad)  # type: ignore[arg-type]


# Chat: damaged files ---------------------------------------------------------------------------------------------


def _flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]


DAMAGES: dict[str, Callable[[Path, bytes], object]] = {
    "truncated": lambda path, data: path.write_bytes(data[: len(data) // 2]),
    "last-newline-cut": lambda path, data: path.write_bytes(data[:-1]),
    "flipped-body-byte": lambda path, data: path.write_bytes(_flip(data, len(data) - 5)),
    "flipped-version-digit": lambda path, data: path.write_bytes(data.replace(b'"version":', b'"version":1', 1)),
    "empty": lambda path, data: path.write_bytes(b""),
    "binary-garbage": lambda path, data: path.write_bytes(bytes(range(256)) * 4),
    "header-only": lambda path, data: path.write_bytes(data.split(b"\n", 1)[0] + b"\n"),
    "header-not-json": lambda path, data: path.write_bytes(b"{not json\n" + data.split(b"\n", 1)[1]),
    "nan-version": lambda path, data: path.write_bytes(
        b'{"format":1,"session_id":"damaged","version":NaN,"count":1,"sha256":"' + b"0" * 64 + b'"}\n{}\n'
    ),
    "unknown-format": lambda path, data: _forge_format(path, data),
    "other-session-copied-in": lambda path, data: path.write_bytes(path.with_name(_name("intact")).read_bytes()),
    "invalid-message-valid-checksum": lambda path, data: _forge(path, "damaged", [b'{"role":"wizard"}']),
    "nan-in-message-valid-checksum": lambda path, data: _forge(
        path, "damaged", [b'{"role":"user","content":"x","metadata":{"x":NaN}}']
    ),
    "count-mismatch-valid-checksum": lambda path, data: _forge(path, "damaged", [b'{"role":"user"}'], count=2),
    "bool-version-valid-checksum": lambda path, data: _forge(path, "damaged", [b'{"role":"user"}'], version=True),
}


def _name(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest() + ".session.jsonl"


def _forge_format(path: Path, data: bytes) -> None:
    path.write_bytes(data.replace(b'{"format":1,', b'{"format":2,', 1))


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_files_raise_and_spare_other_sessions(tmp_path: Path, damage: str) -> None:
    memory = FileChatMemory(tmp_path)
    memory.save("damaged", _history("d", 4))
    memory.save("intact", _history("i", 2))
    memory.load("damaged")  # cached: the damage must still be noticed
    path = memory.path_of("damaged")
    DAMAGES[damage](path, path.read_bytes())
    for reader in (memory, FileChatMemory(tmp_path)):
        with pytest.raises(CorruptMemoryError, match="damaged"):
            reader.load("damaged")
        with pytest.raises(CorruptMemoryError, match="damaged"):
            reader.append("damaged", [turn(1)])  # never extends a damaged history
        with pytest.raises((CorruptMemoryError, ConcurrentModificationError)):  # header unreadable, or not at 1
            reader.save("damaged", [turn(1)], expected_version=1)
        assert reader.load("intact") == _history("i", 2)
    # a plain save replaces the damaged history: the way to repair it
    version = memory.save("damaged", [turn(2)])
    assert FileChatMemory(tmp_path).load_versioned("damaged") == ([turn(2)], version)
    assert memory.sessions() == ["damaged", "intact"]


def test_sessions_reports_a_damaged_header_but_not_a_damaged_body(tmp_path: Path) -> None:
    memory = FileChatMemory(tmp_path)
    memory.save("a", _history("a", 3))
    memory.save("b", _history("b", 3))
    path = memory.path_of("b")
    path.write_bytes(path.read_bytes()[:-3])
    assert memory.sessions() == ["a", "b"]  # the listing reads headers only; load("b") raises
    path.write_bytes(b"garbage")
    with pytest.raises(CorruptMemoryError, match=path.name):
        memory.sessions()
    memory.clear("b")
    assert memory.sessions() == ["a"]


def test_a_stale_temp_file_is_ignored_then_overwritten(tmp_path: Path) -> None:
    memory = FileChatMemory(tmp_path)
    path = memory.path_of("s")
    temp = path.with_name(path.name + ".tmp")
    temp.write_bytes(b"left by a crashed writer")
    assert memory.sessions() == []
    assert memory.load("s") == []
    memory.save("s", [turn(1)])
    assert not temp.exists()
    assert FileChatMemory(tmp_path).load("s") == [turn(1)]


# Chat: concurrency and caching -----------------------------------------------------------------------------------


def test_the_cache_never_hides_a_rewrite_of_the_same_size(tmp_path: Path) -> None:
    reader, writer = FileChatMemory(tmp_path), FileChatMemory(tmp_path)
    first, second = _history("x", 5), _history("y", 5)  # byte-for-byte the same size
    for i in range(40):
        expected = first if i % 2 == 0 else second
        version = writer.save("s", expected)
        assert reader.load_versioned("s") == (expected, version)


def test_a_save_re_encodes_exactly_what_is_not_the_stored_objects(tmp_path: Path) -> None:
    memory = FileChatMemory(tmp_path)
    memory.save("s", _history("a", 6))
    history = memory.load("s")
    steps: list[Callable[[list[Message]], list[Message]]] = [
        lambda h: [*h, turn(6), turn(7)],  # grown
        lambda h: [*h[:2], Message(role="user", content="edited"), *h[3:]],  # changed in the middle
        lambda h: h[:-1],  # shortened
        lambda h: [h[1], h[0], *h[2:]],  # reordered: the same objects, not at their positions
        lambda h: [*h[:3], Message(role="user", content="x", metadata={"n": True})],
        lambda h: [*h[:3], Message(role="user", content="x", metadata={"n": 1})],  # equal to the last, not the same
        lambda h: [*h, *h[:2]],  # stored objects again at new positions
    ]
    for step in steps:
        expected = step(history)
        memory.save("s", expected)
        assert FileChatMemory(tmp_path).load("s") == expected
        fresh = FileChatMemory(tmp_path).load("s")[-1].metadata
        assert json.dumps(fresh) == json.dumps(expected[-1].metadata)  # True stays true, 1 stays 1
        history = memory.load("s")
        assert history == expected
    memory.update("s", lambda h: [*h, turn(9)])
    memory.append("s", [turn(10)])
    assert FileChatMemory(tmp_path).load("s") == [*history, turn(9), turn(10)]


def test_a_save_does_not_reuse_a_cached_history_another_writer_replaced(tmp_path: Path) -> None:
    one, two = FileChatMemory(tmp_path), FileChatMemory(tmp_path)
    one.save("s", _history("a", 4))
    seen = one.load("s")
    two.save("s", _history("b", 4))  # same size, another history: one's cache is stale
    one.save("s", [*seen, turn(4)])
    assert FileChatMemory(tmp_path).load("s") == [*seen, turn(4)]
    for _ in range(40):  # many saves from one cache: the body stays one file's worth, never pieces of two
        seen = one.load("s")
        one.save("s", [*seen, turn(len(seen))])
    assert FileChatMemory(tmp_path).load("s") == one.load("s") == [*_history("a", 4), *map(turn, range(4, 45))]


def test_compare_and_swap_across_objects(tmp_path: Path) -> None:
    one, two = FileChatMemory(tmp_path), FileChatMemory(tmp_path)
    one.save("s", [turn(0)])
    seen_by_one, seen_by_two = one.load_versioned("s"), two.load_versioned("s")
    assert seen_by_one.version == seen_by_two.version
    one.save("s", [*seen_by_one.messages, turn(1, "one")], expected_version=seen_by_one.version)
    with pytest.raises(ConcurrentModificationError):
        two.save("s", [*seen_by_two.messages, turn(1, "two")], expected_version=seen_by_two.version)
    two.update("s", lambda messages: [*messages, turn(2, "two")])
    assert one.load("s") == [turn(0), turn(1, "one"), turn(2, "two")]


def test_locked_async_updates_whose_change_needs_a_worker_thread_all_finish(tmp_path: Path) -> None:
    # Updates waiting for the session's lock must not hold the workers the holder's `change` awaits.
    memory = FileChatMemory(tmp_path, lock_timeout=5)
    memory.save("s", [])

    async def change(messages: list[Message]) -> list[Message]:
        await asyncio.to_thread(time.sleep, 0.01)
        return [*messages, turn(len(messages))]

    async def updates() -> list[int]:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))  # few workers, as on small hosts
        return await asyncio.gather(*(memory._aupdate_locked("s", change) for _ in range(6)))

    started = time.monotonic()
    assert len(set(asyncio.run(updates()))) == 6
    assert time.monotonic() - started < 4  # not one lock timeout after another
    assert memory.load("s") == [turn(i) for i in range(6)]


def test_a_held_lock_times_out_as_backend_unavailable_and_readers_never_wait(tmp_path: Path) -> None:
    memory = FileChatMemory(tmp_path, lock_timeout=0.2)
    memory.save("s", [turn(1)])
    lock = filelock.FileLock(str(tmp_path / ".locks" / (hashlib.sha256(b"s").hexdigest() + ".lock")))
    with lock:
        with pytest.raises(BackendUnavailableError):
            memory.append("s", [turn(2)])
        with pytest.raises(BackendUnavailableError):
            memory.save("s", [turn(2)])
        assert memory.load("s") == [turn(1)]
        memory.save("other", [turn(3)])  # other sessions have their own lock
    assert memory.append("s", [turn(2)]) > 0
    assert memory.load("s") == [turn(1), turn(2)]


def test_async_twins_do_their_file_io_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[int] = set()
    real = file_chat.atomic_write

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(file_chat, "atomic_write", spy)

    async def main() -> list[Message]:
        memory = FileChatMemory(tmp_path)
        await memory.asave("s", [turn(1)])
        await memory.aappend("s", [turn(2)])
        return await memory.aload("s")

    assert asyncio.run(main()) == [turn(1), turn(2)]
    assert threads
    assert threading.get_ident() not in threads


def test_a_cancelled_async_update_cancels_its_change_and_writes_nothing(tmp_path: Path) -> None:
    """aupdate's locked path with a coroutine `change`, cancelled while `change` awaits: the caller gets
    CancelledError, `change` is cancelled, and the worker thread writes nothing and releases the session's lock.
    (Before, the thread waited for `change` regardless and wrote its result after the caller had given up.)"""
    memory, other = FileChatMemory(tmp_path, lock_timeout=5), FileChatMemory(tmp_path, lock_timeout=5)
    history, cancelled, took = asyncio.run(cancel_a_locked_update(memory, other))
    assert cancelled
    assert took < 2
    assert history == [turn(0), turn(2)]
    assert FileChatMemory(tmp_path).load("s") == [turn(0), turn(2)]


def _chat_case(tmp_path: Path, name: str) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]:
    memory = FileChatMemory(tmp_path, lock_timeout=5)
    memory.save("s", [turn(0)])
    cancelled = {
        "chat asave": lambda: memory.asave("s", [turn(1)]),
        "chat aappend": lambda: memory.aappend("s", [turn(1)]),
        "chat asave empty": lambda: memory.asave("s", []),
        "chat aupdate": lambda: memory._aupdate_locked("s", lambda messages: [*messages, turn(1)]),
    }[name]
    return cancelled, lambda: memory.append("s", [turn(2)]), lambda: FileChatMemory(tmp_path).load("s")


def _items_case(tmp_path: Path, name: str) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]:
    memory = FileItemMemory(tmp_path, lock_timeout=5)
    memory.put(["a"], "k", {"v": 0})
    memory.put(["b"], "k", {"v": 0})
    cancelled = {
        "items aput": lambda: memory.aput(["a"], "k", {"v": 1}),
        "items aput_many": lambda: memory.aput_many([(["a"], "k", {"v": 1}), (["b"], "k", {"v": 1})]),
    }[name]

    def after() -> None:
        memory.put_many([(["a"], "k2", {"v": 2}), (["b"], "k2", {"v": 2})])

    def stored() -> list[Any]:
        reopened = FileItemMemory(tmp_path)
        found = reopened.get_many([(["a"], "k"), (["b"], "k"), (["a"], "k2"), (["b"], "k2")])
        return [None if item is None else item.value for item in found]

    return cancelled, after, stored


def _vector_case(tmp_path: Path, name: str) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]:
    path = tmp_path / "vectors.npz"
    memory = FileVectorMemory(path, dimension=4)
    memory.store([VectorDocument(id="a", content="a", embedding=_axis(0))])
    cancelled = {
        "vectors astore": lambda: memory.astore([VectorDocument(id="b", content="b", embedding=_axis(1))]),
        "vectors adelete": lambda: memory.adelete(["a"]),
    }[name]

    def after() -> None:
        memory.store([VectorDocument(id="c", content="c", embedding=_axis(2))])

    return cancelled, after, lambda: FileVectorMemory(path).ids()


CANCELLED_WRITES = {
    "chat asave": (_chat_case, "Staged.write", [turn(0), turn(2)]),
    "chat aappend": (_chat_case, "Staged.write", [turn(0), turn(2)]),
    "chat asave empty": (_chat_case, "remove", [turn(0), turn(2)]),
    "chat aupdate": (_chat_case, "Staged.write", [turn(0), turn(2)]),
    "items aput": (_items_case, "Staged.write", [{"v": 0}, {"v": 0}, {"v": 2}, {"v": 2}]),
    "items aput_many": (_items_case, "Staged.write", [{"v": 0}, {"v": 0}, {"v": 2}, {"v": 2}]),
    "vectors astore": (_vector_case, "Staged.write", ["a", "c"]),
    "vectors adelete": (_vector_case, "Staged.write", ["a", "c"]),
}


@pytest.mark.parametrize("name", list(CANCELLED_WRITES))
def test_an_async_write_cancelled_before_its_file_is_replaced_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """An async write cancelled while its worker thread writes the temp file (or is about to delete the file):
    the caller gets CancelledError at once, and the thread, finding its caller gone, skips the rename (or the
    deletion), leaves no temp file and releases its locks. The next write, which waits for those locks, keeps only
    its own change. (Before, the thread wrote after the caller had given up: a retry applied the change twice.)"""
    case, gated, expected = CANCELLED_WRITES[name]
    cancelled, after, stored = case(tmp_path, name)
    entered, release = threading.Event(), threading.Event()
    first = [True]
    owner, attribute = (_fs.Staged, "write") if gated == "Staged.write" else (file_chat, "remove")
    real = getattr(owner, attribute)

    def gate(*args: Any, **kwargs: Any) -> Any:
        if first:
            first.clear()
            entered.set()
            release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, attribute, staticmethod(gate) if owner is _fs.Staged else gate)

    async def scenario() -> None:
        task = asyncio.ensure_future(cancelled())
        assert await asyncio.to_thread(entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    asyncio.run(scenario())
    after()  # waits for the cancelled write's locks: runs once its thread is done
    assert stored() == expected
    assert not list(tmp_path.rglob("*.tmp"))


# Chat and vectors: processes -------------------------------------------------------------------------------------

CRASH_WRITER = """
import itertools
from memwoven.backends.file import FileChatMemory, FileVectorMemory

chat = FileChatMemory(directory)
vectors = FileVectorMemory(vector_path, dimension=4)
running.set()
for i in itertools.count():
    chat.save("s", histories[i % 2])
    vectors.store(generations[i % 2])
"""


def test_a_writer_killed_at_random_moments_leaves_a_complete_state(tmp_path: Path) -> None:
    context = process_context()
    histories = [_history("long", 60), _history("short", 9)]
    generations = [_generation("A"), _generation("B")]
    vector_path = tmp_path / "vectors" / "v.npz"
    FileChatMemory(tmp_path).save("s", histories[0])
    FileVectorMemory(vector_path, dimension=4).store(generations[0])
    randomness = random.Random(20261121)
    kills = 30
    for _ in range(kills):
        running = context.Event()
        child = start(
            context,
            CRASH_WRITER,
            directory=str(tmp_path),
            vector_path=str(vector_path),
            histories=histories,
            generations=generations,
            running=running,
        )
        assert running.wait(60), "the writer did not start"
        time.sleep(randomness.uniform(0.0, 0.03))
        child.kill()
        child.join(10)
        if os.name == "posix":
            assert child.exitcode == -signal.SIGKILL, "the writer died on its own"
        chat = FileChatMemory(tmp_path)
        messages, version = chat.load_versioned("s")
        assert messages in histories
        assert chat.sessions() == ["s"]
        chat.save("s", messages, expected_version=version)  # the store stays writable (the lock was released)
        vectors = FileVectorMemory(vector_path, dimension=4)
        documents = vectors.get([f"d{i}" for i in range(6)])
        assert len(documents) == 6
        assert len({d.content for d in documents}) == 1
        tag = documents[0].content
        assert [list(d.embedding) for d in documents] == [pytest.approx(list(d.embedding)) for d in _generation(tag)]
        vectors.store(_generation(tag))


APPENDER = """
from memwoven.backends.file import FileChatMemory
from memwoven.testing import turn

memory = FileChatMemory(directory)
ready.wait()
for i in range(count):
    memory.append("shared", [turn(i, name)])
"""


def test_processes_appending_to_one_session_lose_nothing(tmp_path: Path) -> None:
    context = process_context()
    ready = context.Event()
    names = [f"proc{n}" for n in range(4)]
    children = [start(context, APPENDER, directory=str(tmp_path), ready=ready, name=n, count=25) for n in names]
    ready.set()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    loaded = FileChatMemory(tmp_path).load("shared")
    assert len(loaded) == 100
    for name in names:
        assert [m.metadata["index"] for m in loaded if m.metadata["writer"] == name] == list(range(25))


# Vectors ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def vector_path(tmp_path: Path) -> Path:
    return tmp_path / "deep" / "er" / "collection.npz"


def test_vectors_persist_with_their_dimension_and_metric(vector_path: Path) -> None:
    memory = FileVectorMemory(vector_path, dimension=4, metric="dot")
    memory.store(_generation("A"))
    reopened = FileVectorMemory(vector_path, metric="dot")
    assert (reopened.dimension, reopened.count()) == (4, 6)
    assert reopened.get(["d2"]) == memory.get(["d2"])
    assert FileVectorMemory(vector_path, dimension=4, metric="dot").count() == 6
    with pytest.raises(DimensionMismatchError):
        FileVectorMemory(vector_path, dimension=5, metric="dot")
    with pytest.raises(InvalidInputError):
        FileVectorMemory(vector_path, dimension=4)  # cosine is the default metric
    with pytest.raises(InvalidInputError):
        FileVectorMemory(vector_path, metric="euclid")  # type: ignore[arg-type]


def test_another_dimension_fails_at_open_by_url_too(tmp_path: Path) -> None:
    FileVectorMemory(tmp_path / "notes.npz").store([{"id": "a", "embedding": [1.0, 2.0, 3.0]}])
    written = (tmp_path / "notes.npz").read_bytes()
    with pytest.raises(DimensionMismatchError, match="has dimension 3, not 4"):
        open_vector_memory(f"file://{tmp_path}", collection="notes", dimension=4)
    assert (tmp_path / "notes.npz").read_bytes() == written
    with open_vector_memory(f"file://{tmp_path}", collection="notes", dimension=3) as notes:
        assert notes.count() == 1


def test_a_lazy_dimension_is_persisted_by_the_first_store_or_opener(vector_path: Path) -> None:
    lazy = FileVectorMemory(vector_path)
    assert (lazy.dimension, FileVectorMemory(vector_path).dimension) == (None, None)
    FileVectorMemory(vector_path, dimension=3)  # fixes it for everyone
    assert lazy.dimension == 3
    with pytest.raises(DimensionMismatchError):
        FileVectorMemory(vector_path, dimension=2)
    with pytest.raises(DimensionMismatchError):
        lazy.store([{"id": "x", "embedding": [1.0, 2.0]}])
    lazy.store([{"id": "x", "embedding": [1.0, 2.0, 3.0]}])
    assert FileVectorMemory(vector_path).get(["x"])[0].embedding == [1.0, 2.0, 3.0]


def test_the_file_is_a_plain_npz(vector_path: Path) -> None:
    memory = FileVectorMemory(vector_path, dimension=4)
    memory.store([VectorDocument(id="é", content="c", embedding=_axis(1), metadata={"k": [1, None]})])
    with np.load(vector_path, allow_pickle=False) as archive:
        assert json.loads(archive["header"].tobytes()) == {"format": 1, "dimension": 4, "metric": "cosine", "count": 1}
        assert archive["embeddings"].dtype == np.float32
        assert archive["embeddings"].tolist() == [pytest.approx(_axis(1))]
        assert json.loads(archive["documents"].tobytes()) == [{"id": "é", "content": "c", "metadata": {"k": [1, None]}}]


def _rewrite_npz(path: Path, **changes: Any) -> None:
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays.update(changes)
    with open(path, "wb") as stream:
        np.savez(stream, **{name: value for name, value in arrays.items() if value is not None})


def _json_array(value: Any) -> Any:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def _flip_embedding_byte(path: Path) -> None:
    data = path.read_bytes()
    with np.load(path, allow_pickle=False) as archive:
        position = data.find(archive["embeddings"].tobytes())
    assert position > 0
    path.write_bytes(_flip(data, position + 5))


VECTOR_DAMAGES: dict[str, Callable[[Path], object]] = {
    "truncated": lambda path: path.write_bytes(path.read_bytes()[:-40]),
    "empty": lambda path: path.write_bytes(b""),
    "garbage": lambda path: path.write_bytes(os.urandom(2000)),
    "flipped-embedding-byte": _flip_embedding_byte,
    "missing-member": lambda path: _rewrite_npz(path, documents=None),
    "extra-member": lambda path: _rewrite_npz(path, extra=np.zeros(3)),
    "float64-embeddings": lambda path: _rewrite_npz(path, embeddings=np.ones((6, 4))),
    "nan-embedding": lambda path: _rewrite_npz(path, embeddings=np.full((6, 4), np.nan, dtype=np.float32)),
    "object-array": lambda path: _rewrite_npz(path, documents=np.array([{"x": 1}], dtype=object)),
    "header-nan": lambda path: _rewrite_npz(
        path, header=np.frombuffer(b'{"format":1,"dimension":NaN,"metric":"cosine","count":6}', dtype=np.uint8)
    ),
    "header-count-wrong": lambda path: _rewrite_npz(
        path, header=_json_array({"format": 1, "dimension": 4, "metric": "cosine", "count": 5})
    ),
    "duplicate-ids": lambda path: _rewrite_npz(
        path, documents=_json_array([{"id": "d0", "content": "", "metadata": {}}] * 6)
    ),
    "bad-metadata": lambda path: _rewrite_npz(
        path, documents=_json_array([{"id": f"d{i}", "content": "", "metadata": [1]} for i in range(6)])
    ),
}


@pytest.mark.parametrize("damage", list(VECTOR_DAMAGES))
def test_a_damaged_vector_file_raises_corrupt_memory(vector_path: Path, damage: str) -> None:
    memory = FileVectorMemory(vector_path, dimension=4)
    memory.store(_generation("A"))
    assert memory.count() == 6
    VECTOR_DAMAGES[damage](vector_path)
    with pytest.raises(CorruptMemoryError, match=r"collection\.npz"):
        memory.search(_axis(0))
    with pytest.raises(CorruptMemoryError):
        memory.store(_generation("B"))
    with pytest.raises(CorruptMemoryError):
        FileVectorMemory(vector_path, dimension=4)


def test_a_failed_write_leaves_file_and_object_consistent(vector_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = FileVectorMemory(vector_path, dimension=4)
    memory.store(_generation("A"))
    before = vector_path.read_bytes()

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    with pytest.raises(OSError, match="No space left"):
        memory.store([VectorDocument(id="new", embedding=_axis(0))])
    with pytest.raises(OSError, match="No space left"):
        memory.delete(["d0"])
    monkeypatch.undo()
    assert vector_path.read_bytes() == before
    assert not vector_path.with_name(vector_path.name + ".tmp").exists()
    assert memory.count() == 6
    assert memory.get(["new"]) == []
    memory.store([VectorDocument(id="new", embedding=_axis(0))])
    assert FileVectorMemory(vector_path).count() == 7


def test_another_object_sees_every_rewrite_even_of_the_same_size(vector_path: Path) -> None:
    writer, reader = FileVectorMemory(vector_path, dimension=4), FileVectorMemory(vector_path, dimension=4)
    for i in range(40):
        writer.store([VectorDocument(id="x", content="same", embedding=_axis(i))])
        assert reader.get(["x"])[0].embedding == pytest.approx(_axis(i))


def test_a_deleted_file_reads_as_empty_and_is_recreated(vector_path: Path) -> None:
    memory = FileVectorMemory(vector_path, dimension=4)
    memory.store(_generation("A"))
    vector_path.unlink()
    assert memory.count() == 0
    assert memory.dimension == 4
    memory.store(_generation("B"))
    assert FileVectorMemory(vector_path).count() == 6
