"""`FileItemMemory`: the ItemMemory contract (IM1-IM11 and the state machine, sync and async) on files, plus what is
particular to the file layout: names on any file system, prefixes reading only their subtree, damage, versions
that never repeat, all-or-nothing batches across namespaces, and compare-and-set from several processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import filelock
import pytest
from clock_support import Clock
from process_support import process_context, start

import memwoven
import memwoven._clock as _clock
from memwoven import FileItemMemory, ItemMemory
from memwoven.backends.file import _fs
from memwoven.backends.file.items import _HEADER_FIELDS
from memwoven.errors import (
    BackendUnavailableError,
    ConcurrentModificationError,
    CorruptMemoryError,
    InvalidInputError,
)
from memwoven.testing import HOSTILE_IDS, ItemMemoryContract


class TestFileItems(ItemMemoryContract):
    @pytest.fixture
    def item_memory(self, clock: Clock, tmp_path: Path) -> ItemMemory:
        self.clock = clock
        return FileItemMemory(tmp_path / "items")

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def reopen(self, memory: ItemMemory) -> ItemMemory:
        assert isinstance(memory, FileItemMemory)
        return FileItemMemory(memory.directory)

    @contextmanager
    def neighbour(self, memory: ItemMemory) -> Iterator[ItemMemory]:
        assert isinstance(memory, FileItemMemory)
        with FileItemMemory(memory.directory.with_name(memory.directory.name + "s")) as neighbour:
            yield neighbour


# The layout ------------------------------------------------------------------------------------------------------


def _files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("items.jsonl"))


def test_hostile_labels_get_distinct_names_inside_the_directory(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path / "items")
    labels = [*HOSTILE_IDS, "Ab", "aB", "CON", "nul", "\u00e9" * 16_000, "%41", "=a", "#", "+"]
    for position, label in enumerate(labels):
        memory.put((label, label), "k", {"i": position})
    files = _files(tmp_path)
    assert len(files) == len(labels)
    assert all(path.is_relative_to(tmp_path / "items") for path in files)
    assert len({str(path).casefold() for path in files}) == len(labels)  # apart on a case-insensitive file system too
    assert max(len(part) for path in files for part in path.parts) <= 97  # long labels are hashed
    assert (tmp_path / "items" / "=%41b" / "=%41b" / "items.jsonl").exists()  # "Ab": readable names where short
    fresh = FileItemMemory(tmp_path / "items")
    for position, label in enumerate(labels):
        assert fresh.get((label, label), "k").value == {"i": position}  # type: ignore[union-attr]
        assert fresh.path_of((label, label)) in files
    assert fresh.namespaces(max_depth=1) == sorted((label,) for label in labels)


def test_deep_namespaces_are_listed_by_any_prefix(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path)
    deep = tuple(f"l{i}" for i in range(12))
    spaces = [deep, deep[:9], deep[:8], (*deep[:8], "other"), (*deep[:10], "x"), deep[:3]]
    for position, namespace in enumerate(spaces):
        memory.put(namespace, "k", {"i": position})
    for prefix in (deep[:2], deep[:8], deep[:9], deep[:10], deep, ()):
        expected = sorted(ns for ns in spaces if ns[: len(prefix)] == prefix)
        assert memory.namespaces(prefix=prefix) == expected
        assert sorted(item.namespace for item in memory.list(prefix)) == expected
        assert memory.count(prefix) == len(expected)
    assert memory.namespaces(prefix=deep[:9], max_depth=10) == [deep[:9], deep[:10]]
    assert memory.path_of(deep).parent.parent == memory.path_of(deep[:8]).parent  # one "+" directory, not nested
    assert memory.path_of(deep).parent.name.startswith("+")


def test_a_prefix_reads_only_its_own_namespaces(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path)
    memory.put(("a", "x"), "k", {"v": 1})
    memory.put(("b",), "k", {"v": 2})
    memory.put(("ab",), "k", {"v": 3})
    for namespace in (("b",), ("ab",)):
        memory.path_of(namespace).write_bytes(b"garbage, never read by a listing of ('a',)")
    fresh = FileItemMemory(tmp_path)
    assert [item.value for item in fresh.list(("a",))] == [{"v": 1}]
    assert fresh.count(("a",)) == 1
    assert fresh.namespaces(prefix=("a",)) == [("a", "x")]
    with pytest.raises(CorruptMemoryError):
        fresh.list()


def test_the_file_format_is_plain_and_checksummed(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path)
    version = memory.put(("users", "u1"), "profile", {"name": "Ada"}, ttl=60)
    header_line, line = memory.path_of(("users", "u1")).read_bytes().splitlines(keepends=True)
    header, item = json.loads(header_line), json.loads(line)
    assert header.pop("sha256") == hashlib.sha256(_compact(header) + b"\n" + line).hexdigest()
    assert header == {
        "format": 1,
        "namespace": ["users", "u1"],
        "floor": version,
        "count": 1,
        "expires_first": item["expires_ms"],
        "expires_last": item["expires_ms"],
    }
    assert item["key"] == "profile"
    assert item["value"] == {"name": "Ada"}
    assert (item["version"], item["ttl"]) == (version, 60.0)
    assert item["expires_ms"] == item["updated_ms"] + 60_000


def _compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def test_the_directory_is_created_and_options_are_checked(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path / "a" / "b")
    assert memory.directory.is_dir()
    assert repr(memory) == f"FileItemMemory({str(tmp_path / 'a' / 'b')!r})"
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError):
        FileItemMemory(tmp_path / "file")
    for bad in ({"lock_timeout": -1}, {"lock_timeout": "1"}, {"cache_size": -1}):
        with pytest.raises(InvalidInputError):
            FileItemMemory(tmp_path, **bad)
    with pytest.raises(InvalidInputError):
        memory.path_of(())
    assert memwoven.FileItemMemory is FileItemMemory


# Damage ----------------------------------------------------------------------------------------------------------


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x01  # one bit of an item line
    path.write_bytes(bytes(data))


def _garble_header(path: Path) -> None:
    path.write_bytes(b"{not json\n" + path.read_bytes().split(b"\n", 1)[1])


def _move(path: Path) -> None:
    """The file of another namespace, copied into this one's directory."""
    other = path.parent.parent / "=intact" / "items.jsonl"
    path.write_bytes(other.read_bytes())


DAMAGES = {"truncated": _truncate, "garbled": _garble, "garbled-header": _garble_header, "misplaced": _move}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_files_raise_and_spare_other_namespaces(tmp_path: Path, damage: str) -> None:
    memory = FileItemMemory(tmp_path)
    memory.put_many([(("damaged",), f"k{i}", {"i": i, "text": "x" * 30}) for i in range(3)])
    memory.put(("intact",), "k", {"v": 1})
    memory.get(("damaged",), "k0")  # cached: the damage must still be noticed
    DAMAGES[damage](memory.path_of(("damaged",)))
    for reader in (memory, FileItemMemory(tmp_path)):
        with pytest.raises(CorruptMemoryError, match=r"damaged|a namespace"):
            reader.get(("damaged",), "k0")
        with pytest.raises(CorruptMemoryError):
            reader.list(("damaged",))
        with pytest.raises(CorruptMemoryError):
            reader.put(("damaged",), "k9", {"v": 2})  # never rewrites a damaged namespace
        with pytest.raises(CorruptMemoryError):
            reader.delete(("damaged",), "k0")
        with pytest.raises(CorruptMemoryError):
            reader.put_many([(("intact",), "k", {"v": 3}), (("damaged",), "k", {"v": 3})])
        assert reader.get(("intact",), "k").value == {"v": 1}  # type: ignore[union-attr]
        assert [item.key for item in reader.list(("intact",))] == ["k"]
    if damage in ("garbled-header", "misplaced"):
        with pytest.raises(CorruptMemoryError):
            memory.namespaces()
    else:  # namespaces reads header lines only
        assert memory.namespaces() == [("damaged",), ("intact",)]
    memory.path_of(("damaged",)).unlink()  # the way to repair: remove (or restore) the file
    assert memory.get(("damaged",), "k0") is None
    assert memory.put(("damaged",), "k0", {"v": 4}, expected_version=0) > 0


@pytest.mark.parametrize(
    ("field", "damage"),
    [("created_ms", 10**16), ("updated_ms", 10**16), ("expires_ms", 10**16), ("expires_ms", 10**20), ("ttl", 1e400)],
)
def test_an_item_line_out_of_range_under_a_valid_checksum_raises(tmp_path: Path, field: str, damage: Any) -> None:
    """An item line whose time is beyond `datetime`'s range, or whose ttl is infinite, re-checksummed as memwoven
    would (so only the item check can tell): CorruptMemoryError naming the namespace, never an OverflowError."""
    memory = FileItemMemory(tmp_path)
    memory.put(("damaged",), "k", {"v": 1}, ttl=600.0)
    path = memory.path_of(("damaged",))
    header_line, line, rest = path.read_bytes().split(b"\n")
    assert rest == b""
    header, item = json.loads(header_line), json.loads(line)
    item[field] = damage
    if field == "expires_ms":  # the header's expiry bounds follow the item's
        header["expires_first"] = header["expires_last"] = damage
    damaged = json.dumps(item, ensure_ascii=False, separators=(",", ":")).replace("Infinity", "1e400")
    body = damaged.encode() + b"\n"
    header["sha256"] = _fs.checksum({name: header[name] for name in _HEADER_FIELDS}, [body])
    path.write_bytes(_fs.dumps(header) + b"\n" + body)
    for reader in (memory, FileItemMemory(tmp_path)):
        with pytest.raises(CorruptMemoryError, match=r"'damaged'.*undecodable item"):
            reader.get(("damaged",), "k")
        with pytest.raises(CorruptMemoryError, match=r"'damaged'.*undecodable item"):
            reader.list(("damaged",))
        with pytest.raises(CorruptMemoryError, match=r"'damaged'.*undecodable item"):
            asyncio.run(reader.alist(("damaged",)))


def test_a_file_where_a_namespace_directory_should_be_raises(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path)
    memory.put(("a", "b"), "k", {"v": 1})
    directory = memory.path_of(("a",)).parent
    for child in sorted(directory.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    directory.rmdir()
    directory.write_text("not a directory")  # the namespace ("a",)'s directory, replaced by a file
    for reader in (memory, FileItemMemory(tmp_path)):
        with pytest.raises(CorruptMemoryError):
            reader.get(("a", "b"), "k")
        with pytest.raises(CorruptMemoryError):
            reader.list(("a",))  # not [] as if nothing were stored


def test_a_stale_temp_file_is_ignored_then_overwritten(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path)
    memory.put(("n",), "k", {"v": 1})
    path = memory.path_of(("n",))
    temp = path.with_name(path.name + ".tmp")
    temp.write_bytes(b"left by a crashed writer")
    assert [item.value for item in FileItemMemory(tmp_path).list()] == [{"v": 1}]
    memory.put(("n",), "k", {"v": 2})
    assert not temp.exists()
    assert FileItemMemory(tmp_path).get(("n",), "k").value == {"v": 2}  # type: ignore[union-attr]


# Versions, batches, expiry ---------------------------------------------------------------------------------------


def test_versions_never_repeat_even_if_the_clock_steps_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = FileItemMemory(tmp_path)
    first = memory.put(("n",), "k", {"v": 1})
    assert memory.delete(("n",), "k") is True
    assert memory.namespaces() == []
    assert memory.path_of(("n",)).exists()  # the emptied namespace keeps its floor
    import memwoven.contracts

    monkeypatch.setattr(memwoven.contracts, "time", SimpleNamespace(time_ns=lambda: 1))  # the wall clock went back
    again = FileItemMemory(tmp_path).put(("n",), "k", {"v": 2})
    other = memory.put(("n",), "j", {"v": 3})
    assert first < again < other
    with pytest.raises(ConcurrentModificationError):
        memory.put(("n",), "k", {"v": 4}, expected_version=first)


def test_a_batch_across_namespaces_is_checked_whole_before_anything_is_written(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path)
    version = memory.put(("b",), "k", {"v": 1})
    with pytest.raises(ConcurrentModificationError):
        memory.put_many([(("a",), "k", {"v": 2}), (("c", "d"), "k", {"v": 2}), (("b",), "k", {"v": 2}, None, 0)])
    assert memory.namespaces() == [("b",)]
    versions = memory.put_many(
        [(("c", "d"), "k", {"v": 3}), (("a",), "k", {"v": 3}), (("b",), "k", {"v": 3}, None, version)]
    )
    assert [item.version for item in memory.list()] == [versions[1], versions[2], versions[0]]


def test_a_failure_while_writing_a_batch_leaves_every_namespace_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = FileItemMemory(tmp_path)
    memory.put_many([(("a",), "k", {"v": 1}), (("b",), "k", {"v": 1})])
    before = memory.list()
    real = _fs.Staged.write.__func__  # type: ignore[attr-defined]
    calls = []

    def failing(cls: Any, target: Path, write: Any, **options: Any) -> Any:
        calls.append(target)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(cls, target, write, **options)

    monkeypatch.setattr(_fs.Staged, "write", classmethod(failing))
    with pytest.raises(OSError, match="No space"):
        memory.put_many([(("a",), "k", {"v": 2}), (("b",), "k", {"v": 2})])
    monkeypatch.undo()
    assert len(calls) == 2
    assert FileItemMemory(tmp_path).list() == memory.list() == before
    assert not list(tmp_path.rglob("*.tmp"))


def test_cleanup_rewrites_only_namespaces_with_expired_items(tmp_path: Path, clock: Clock) -> None:
    memory = FileItemMemory(tmp_path)
    memory.put_many([(("n",), f"k{i}", {"i": i}, 1.0) for i in range(3)])
    memory.put(("n",), "forever", {"v": 1})
    memory.put(("m",), "k", {"v": 1}, ttl=100)
    memory.put(("plain",), "k", {"v": 1})
    untouched = {ns: memory.path_of(ns).stat().st_mtime_ns for ns in (("m",), ("plain",))}
    clock.advance(2)
    assert memory.count() == 3
    assert memory.cleanup_expired() == 3
    assert memory.cleanup_expired() == 0
    assert [json.loads(line)["key"] for line in memory.path_of(("n",)).read_bytes().splitlines()[1:]] == ["forever"]
    assert {ns: memory.path_of(ns).stat().st_mtime_ns for ns in untouched} == untouched
    clock.advance(200)
    assert memory.namespaces() == [("n",), ("plain",)]
    assert memory.cleanup_expired() == 1
    assert memory.namespaces() == [("n",), ("plain",)]


def test_a_ttl_under_half_a_millisecond_lives_one_millisecond(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = FileItemMemory(tmp_path)
    now = time.time_ns() // 1_000_000
    monkeypatch.setattr(_clock, "wall_ms", lambda: now)  # time stands still: rounded to 0 ms it expired at once
    memory.put(("n",), "k", {"v": 1}, ttl=1e-6)
    assert [json.loads(line)["expires_ms"] for line in memory.path_of(("n",)).read_bytes().splitlines()[1:]] == [
        now + 1
    ]
    assert memory.get(("n",), "k", refresh_ttl=True) is not None  # a refresh, too, moves it 1 ms on
    item = memory.get(("n",), "k")
    assert item is not None
    assert (item.ttl, item.expires_at) == (1e-6, _clock.utc(now + 1))
    monkeypatch.setattr(_clock, "wall_ms", lambda: now + 1)
    assert memory.get(("n",), "k") is None


# Locks and processes ---------------------------------------------------------------------------------------------


def test_a_held_lock_times_out_as_backend_unavailable_and_readers_never_wait(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path, lock_timeout=0.1)
    memory.put(("n",), "k", {"v": 1})
    with filelock.FileLock(str(memory.path_of(("n",)).with_name("lock"))):  # as another process would hold it
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="locked"):
            memory.put_many([(("m",), "k", {"v": 2}), (("n",), "k", {"v": 2})])
        assert time.monotonic() - started < 5
        assert memory.get(("n",), "k").value == {"v": 1}  # type: ignore[union-attr]
        assert memory.namespaces() == [("n",)]  # nothing of the batch was written
    memory.put(("n",), "k", {"v": 3})


def test_threads_writing_overlapping_batches_never_deadlock(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path, lock_timeout=30)
    spaces = [(f"n{i}",) for i in range(6)]
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for round_ in range(10):
                batch = [(spaces[(offset + round_ + j) % 6], f"w{offset}", {"r": round_}) for j in range(3)]
                memory.put_many(batch)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert memory.count() == 4 * 6


def test_async_twins_do_their_file_work_off_the_event_loop(tmp_path: Path) -> None:
    memory = FileItemMemory(tmp_path)
    threads: list[int] = []
    real = FileItemMemory._disk

    def spy(self: FileItemMemory, work: Any) -> Any:
        threads.append(threading.get_ident())
        return real(self, work)

    async def use() -> Any:
        await memory.aput(("n",), "k", {"v": 1})
        return await memory.aget(("n",), "k")

    FileItemMemory._disk = spy  # type: ignore[method-assign]
    try:
        item = asyncio.run(use())
    finally:
        FileItemMemory._disk = real  # type: ignore[method-assign]
    assert item.value == {"v": 1}
    assert len(threads) == 2
    assert threading.get_ident() not in threads


INCREMENTER = """
from memwoven.backends.file import FileItemMemory
from memwoven.errors import ConcurrentModificationError

memory = FileItemMemory(directory)
ready.wait()
done = 0
while done < count:
    item = memory.get(("counters",), "c")
    try:
        memory.put(
            ("counters",), "c", {"n": item.value["n"] + 1, "by": name}, expected_version=item.version
        )
    except ConcurrentModificationError:
        continue
    memory.put_many([(("log", name), str(done), {"n": item.value["n"] + 1})])
    done += 1
"""


def test_eight_processes_incrementing_one_counter_lose_nothing(tmp_path: Path) -> None:
    FileItemMemory(tmp_path).put(("counters",), "c", {"n": 0})
    context = process_context()
    ready = context.Event()
    names = [f"proc{n}" for n in range(8)]
    children = [start(context, INCREMENTER, directory=str(tmp_path), ready=ready, name=n, count=15) for n in names]
    started = time.monotonic()
    ready.set()
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    assert time.monotonic() - started < 120
    memory = FileItemMemory(tmp_path)
    assert memory.get(("counters",), "c").value["n"] == 120  # type: ignore[union-attr]
    seen = sorted(item.value["n"] for item in memory.list(("log",)))
    assert seen == list(range(1, 121))  # every increment saw a distinct value: none was lost
    assert memory.namespaces(prefix=("log",)) == [("log", name) for name in names]
