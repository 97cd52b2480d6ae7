"""`MemwovenFactMemoryBlock` in LlamaIndex's own `Memory`, with a scripted LLM: the facts extracted when `Memory`
flushes are stored, a fresh block (another `Memory`, another object over the storage, another process) reads them,
concurrent extractions lose none of them, and damaged stored facts raise `CorruptMemoryError`."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from li_fact_llm import ScriptedFactLLM, flushing_memory, tell
from llama_index.core.memory import Memory
from llama_index.core.memory.memory_blocks.fact import FactExtractionMemoryBlock

from llama_index.memory.memwoven import DEFAULT_NAMESPACE, FACTS_FIELD, MemwovenFactMemoryBlock
from memwoven import InMemoryItemMemory, ItemMemory, SQLItemMemory, contracts
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven_test_support import redis_url, unique_name

SCRIPT = Path(__file__).with_name("li_fact_llm.py")
SERVERS = ["postgresql", "mariadb", "redis"]
FACTS = ["Alice is allergic to peanuts", "Alice lives in Lyon", "Alice prefers tea to coffee"]


@pytest.fixture(params=["memory", "sqlite", *(pytest.param(name, marks=pytest.mark.service) for name in SERVERS)])
def item_backend(request: pytest.FixtureRequest) -> str:
    """The item backends of the package's fixtures (in memory, SQLite, PostgreSQL, MariaDB), and Redis."""
    return str(request.param)


@pytest.fixture
def items(item_backend: str, request: pytest.FixtureRequest) -> Iterator[ItemMemory]:
    """A fresh, empty item memory on `item_backend` (Redis: keys under a prefix of its own, deleted at the end)."""
    if item_backend != "redis":
        yield request.getfixturevalue("item_memory")
        return
    redis = pytest.importorskip("redis")
    from memwoven.backends.redis_items import RedisItemMemory

    url, prefix = redis_url(), unique_name("limf")
    memory = RedisItemMemory(url, prefix=prefix)
    try:
        yield memory
    finally:
        memory.close()
        with redis.Redis.from_url(url) as client:  # its keys only (never FLUSH: the server is shared)
            for name in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(name)


@pytest.fixture
def again(items: ItemMemory, request: pytest.FixtureRequest) -> Iterator[ItemMemory]:
    """A second object over the same items (the same object on the in-memory backend)."""
    if isinstance(items, (InMemoryItemMemory, SQLItemMemory)):
        yield request.getfixturevalue("reopen_items")
        return
    from memwoven.backends.redis_items import RedisItemMemory

    assert isinstance(items, RedisItemMemory)
    memory = RedisItemMemory(redis_url(), prefix=items.prefix)
    yield memory
    memory.close()


def block(items: ItemMemory, llm: ScriptedFactLLM | None = None, **kwargs: Any) -> MemwovenFactMemoryBlock:
    return MemwovenFactMemoryBlock(items, key=kwargs.pop("key", "alice"), llm=llm or ScriptedFactLLM(), **kwargs)


def stored_facts(items: ItemMemory, key: str = "alice") -> list[str]:
    """The facts stored under `key`, read from the item memory itself."""
    item = items.get(DEFAULT_NAMESPACE, key)
    assert item is not None
    facts = item.value[FACTS_FIELD]
    assert isinstance(facts, list)
    return [str(fact) for fact in facts]


def lined_up(count: int) -> Callable[[], Awaitable[None]]:
    """An LLM pause that returns once `count` calls have reached it: extractions that each read the stored facts
    before the others wrote."""
    arrived: list[None] = []
    everyone = asyncio.Event()

    async def pause() -> None:
        arrived.append(None)
        if len(arrived) >= count:
            everyone.set()
        await everyone.wait()

    return pause


async def tell_at_once(blocks: list[MemwovenFactMemoryBlock], said: list[list[str]]) -> None:
    """Each block, in a `Memory` of its own, told its facts at the same time as the others."""
    memories = [flushing_memory(b, f"session-{i}") for i, b in enumerate(blocks)]
    await asyncio.gather(*(tell(memory, facts) for memory, facts in zip(memories, said)))


def facts_in(memory: Memory) -> list[str]:
    """The facts `Memory.get()` puts into its system message."""
    system = [message for message in memory.get() if message.role == "system"]
    text = "".join(message.content or "" for message in system)
    return [line.removeprefix("<fact>").removesuffix("</fact>") for line in text.splitlines() if "<fact>" in line]


def test_facts_extracted_through_memory_are_read_by_a_fresh_block(items: ItemMemory, again: ItemMemory) -> None:
    llm = ScriptedFactLLM()
    first = block(items, llm)
    asyncio.run(tell(flushing_memory(first), FACTS))
    assert llm.calls == ["extract"] * len(llm.calls)
    assert first.facts == FACTS
    assert stored_facts(items) == FACTS

    # Another Memory (another session, its chat history empty) with another block object over the same storage.
    second = block(again)
    fresh = flushing_memory(second, session_id="session-2")
    assert facts_in(fresh) == FACTS
    assert asyncio.run(second.aget()) == "\n".join(f"<fact>{fact}</fact>" for fact in FACTS)
    assert second.facts == FACTS

    # It extracts on top of them; the first block reads that back.
    asyncio.run(tell(fresh, ["Alice has a cat named Miso", "Alice lives in Lyon"]))
    assert asyncio.run(first.aget()).splitlines()[-1] == "<fact>Alice has a cat named Miso</fact>"
    assert first.facts == [*FACTS, "Alice has a cat named Miso"]


def test_keys_and_namespaces_keep_facts_apart(items: ItemMemory) -> None:
    asyncio.run(tell(flushing_memory(block(items)), FACTS[:1]))
    assert asyncio.run(block(items, key="bob").aget()) == ""
    assert asyncio.run(block(items, namespace=("my-app", "facts")).aget()) == ""
    assert asyncio.run(block(items).aget()) == f"<fact>{FACTS[0]}</fact>"


def test_past_max_facts_the_facts_are_condensed_and_stored(items: ItemMemory, again: ItemMemory) -> None:
    llm = ScriptedFactLLM()
    asyncio.run(tell(flushing_memory(block(items, llm, max_facts=2)), FACTS))
    assert "condense" in llm.calls
    stored = block(again, max_facts=2)
    asyncio.run(stored.aget())
    assert len(stored.facts) <= 2
    text = " ".join(stored.facts)
    assert all(fact in text for fact in FACTS)


def test_concurrent_extractions_lose_no_fact(items: ItemMemory, again: ItemMemory) -> None:
    """Two blocks (two objects over the storage) read the same stored facts, then both write: compare-and-set
    refuses the second write, which merges its facts into the first's."""
    items.put(DEFAULT_NAMESPACE, "alice", {FACTS_FIELD: ["Alice is 34"]})
    pause = lined_up(2)
    blocks = [block(memory, ScriptedFactLLM(pause=pause)) for memory in (items, again)]
    asyncio.run(tell_at_once(blocks, [FACTS[:2], FACTS[1:]]))  # one fact in common
    facts = stored_facts(items)
    assert facts[0] == "Alice is 34"
    assert sorted(facts) == sorted(["Alice is 34", *FACTS])


def test_one_block_in_two_memories_at_once_loses_no_fact(items: ItemMemory) -> None:
    """One block object in two `Memory` objects (two sessions of a user) flushed into at the same time: each
    extraction works on a list of its own."""
    shared = block(items, ScriptedFactLLM(pause=lined_up(2)))
    asyncio.run(tell_at_once([shared, shared], [FACTS[:1], FACTS[1:]]))
    assert sorted(stored_facts(items)) == sorted(FACTS)
    assert sorted(shared.facts) == sorted(FACTS)


def test_a_merge_past_max_facts_is_condensed(items: ItemMemory, again: ItemMemory) -> None:
    """Each of two concurrent extractions stays within `max_facts`; together they do not, so the one merging
    condenses what both found."""
    pause = lined_up(2)
    llms = [ScriptedFactLLM(pause=pause), ScriptedFactLLM(pause=pause)]
    said = [["Bob likes jazz", "Bob plays chess"], ["Bob owns a bike", "Bob speaks Dutch"]]
    asyncio.run(tell_at_once([block(m, llm, max_facts=2) for m, llm in zip((items, again), llms)], said))
    assert sorted(call for llm in llms for call in llm.calls) == ["condense", "extract", "extract"]
    facts = stored_facts(items)
    assert len(facts) <= 2
    assert all(fact in " ".join(facts) for fact in [*said[0], *said[1]])


def test_facts_that_keep_changing_are_retried_with_the_core_backoff_then_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every write conflicts: it is tried 16 times, pausing with memwoven's back-off in between, then
    `ConcurrentModificationError`, the stored facts and the block's left as they were."""
    pauses: list[int] = []
    monkeypatch.setattr(contracts, "_backoff", lambda tried: pauses.append(tried) or 0.0)
    items = InMemoryItemMemory()
    items.put(DEFAULT_NAMESPACE, "alice", {FACTS_FIELD: ["Alice is 34"]})
    writes: list[int | None] = []

    async def always_beaten(*args: Any, expected_version: int | None = None, **kwargs: Any) -> int:
        writes.append(expected_version)
        raise ConcurrentModificationError("another writer got there first")

    monkeypatch.setattr(items, "aput", always_beaten)
    llm = ScriptedFactLLM()
    beaten = block(items, llm)
    with pytest.raises(ConcurrentModificationError, match=r"the facts at 'alice' in .* gave up after 16 tries"):
        asyncio.run(tell(flushing_memory(beaten), FACTS[:1]))
    stored = items.get(DEFAULT_NAMESPACE, "alice")
    assert stored is not None
    assert writes == [stored.version] * 16  # each under the version it read
    assert pauses == list(range(16))
    assert llm.calls == ["extract"]  # extracted once, merged again after each conflict
    assert stored_facts(items) == ["Alice is 34"]
    assert beaten.facts == []


@pytest.mark.parametrize(
    "value",
    [{FACTS_FIELD: "Alice lives in Lyon"}, {FACTS_FIELD: [1, 2]}, {FACTS_FIELD: [""]}, {"notes": []}],
    ids=["a string", "numbers", "an empty fact", "no facts field"],
)
def test_damaged_facts_raise_corrupt_memory_error(items: ItemMemory, value: dict[str, Any]) -> None:
    items.put(DEFAULT_NAMESPACE, "alice", value)
    llm = ScriptedFactLLM()
    damaged = block(items, llm)
    with pytest.raises(CorruptMemoryError, match="does not hold facts"):
        asyncio.run(damaged.aget())
    with pytest.raises(CorruptMemoryError):
        flushing_memory(damaged).get()
    with pytest.raises(CorruptMemoryError):
        asyncio.run(tell(flushing_memory(damaged), FACTS))
    assert llm.calls == []  # nothing extracted over them, nothing written
    stored = items.get(DEFAULT_NAMESPACE, "alice")
    assert stored is not None
    assert stored.value == value


def test_undecodable_stored_facts_raise_corrupt_memory_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/facts.db"
    with SQLItemMemory(url) as items:
        asyncio.run(tell(flushing_memory(block(items)), FACTS[:1]))
        table = f"{items.table_prefix}items"
    with sqlite3.connect(tmp_path / "facts.db") as connection:
        assert connection.execute(f"UPDATE {table} SET value = ?", (b'{"facts": ["Alice',)).rowcount == 1
    connection.close()
    damaged = MemwovenFactMemoryBlock.from_url(url, key="alice", llm=ScriptedFactLLM())
    try:
        with pytest.raises(CorruptMemoryError):
            asyncio.run(damaged.aget())
    finally:
        asyncio.run(damaged.aclose())


def run_script(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def test_another_process_reads_and_extends_the_facts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/facts.db"
    here = MemwovenFactMemoryBlock.from_url(url, key="alice", llm=ScriptedFactLLM())
    try:
        asyncio.run(tell(flushing_memory(here), FACTS[:2]))
        # The other process extracts one more fact on top of the stored ones and prints what its block holds.
        assert run_script(url, "alice", FACTS[2]) == [f"<fact>{fact}</fact>" for fact in FACTS]
        assert facts_in(flushing_memory(here, session_id="later")) == FACTS
    finally:
        here.close()


@pytest.mark.slow
def test_processes_extracting_at_once_lose_no_fact(tmp_path: Path) -> None:
    """Four processes read the same stored facts, extract (each waiting for all four to have read) and write:
    three writes conflict and merge."""
    url = f"sqlite:///{tmp_path}/facts.db"
    SQLItemMemory(url).close()  # the tables, made once
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    said = {worker: [f"Fact {worker}.{n}" for n in range(3)] for worker in range(4)}
    environment = {**os.environ, "LI_FACT_BARRIER": f"{barrier}:{len(said)}"}
    workers = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), url, "team", *facts],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for facts in said.values()
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, out + err
    reader = MemwovenFactMemoryBlock.from_url(url, key="team", llm=ScriptedFactLLM())
    try:
        asyncio.run(reader.aget())
        assert sorted(reader.facts) == sorted(fact for facts in said.values() for fact in facts)
    finally:
        reader.close()


def test_it_is_llama_index_s_fact_block_with_its_own_options(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/facts.db"
    opened = MemwovenFactMemoryBlock.from_url(
        url, key="alice", namespace=["app", "facts"], llm=ScriptedFactLLM(), max_facts=5, name="Facts",
        priority=1, table_prefix="facts_",
    )  # fmt: skip
    try:
        assert isinstance(opened, FactExtractionMemoryBlock)
        assert (opened.name, opened.max_facts, opened.priority) == ("Facts", 5, 1)
        assert opened.namespace == ("app", "facts")
        assert isinstance(opened.items, SQLItemMemory)
        assert opened.items.table_prefix == "facts_"
    finally:
        opened.close()
    with pytest.raises(InvalidInputError):
        MemwovenFactMemoryBlock.from_url(url, key="alice", llm=ScriptedFactLLM(), no_such_option=1)


@pytest.mark.parametrize(
    "arguments",
    [
        {"items": "sqlite:///facts.db"},
        {"key": ""},
        {"key": 7},
        {"namespace": ()},
        {"namespace": "facts"},
        {"facts": ["Alice lives in Lyon"]},
    ],
    ids=["not an item memory", "an empty key", "a key not a string", "no namespace", "a string namespace", "facts"],
)
def test_bad_arguments_raise_invalid_input_error(arguments: dict[str, Any]) -> None:
    options: dict[str, Any] = {"items": InMemoryItemMemory(), "key": "alice", "llm": ScriptedFactLLM(), **arguments}
    with pytest.raises(InvalidInputError):
        MemwovenFactMemoryBlock(options.pop("items"), **options)
