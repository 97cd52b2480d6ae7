"""`ItemMemoryContract`: the conformance tests of invariants IM1-IM11, for any `ItemMemory`, and a Hypothesis state
machine comparing a backend with a plain-Python model of the contract."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta, timezone
from typing import Any

import pytest

import memwoven._clock as _clock
from memwoven.contracts import MAX_TTL, ItemMemory, ItemWrite, PlainItem
from memwoven.errors import ConcurrentModificationError, InvalidInputError
from memwoven.filters import compile_filter
from memwoven.models import Item
from memwoven.testing._driver import MODES, Driver, StorageHooks, driving
from memwoven.testing.samples import HOSTILE_IDS, OVER_THE_LIMITS, values_at_the_limits

__all__ = ["ItemMemoryContract", "item_memory_machine"]

Address = tuple[tuple[str, ...], str]

# LangGraph's `list_namespaces` example: the namespaces of one item each
LANGGRAPH_NAMESPACES = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f")]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class ItemMemoryContract(StorageHooks[ItemMemory]):
    """Subclass this in a test module and provide the `item_memory` fixture (a fresh, empty memory).

    Optional hooks widen the suite: `reopen(memory)` returns a second object over the same storage, `neighbour`
    one whose prefix starts with this one's, and `advance(seconds)` lets time pass for expiry (the default sleeps;
    a backend whose expiry this process measures can move `memwoven._clock` forward instead, and set `ttl` small
    or large to taste). Every test runs twice: through the sync API and through the async twins.
    """

    ttl: float = 1.0
    """The ttl, in seconds, the expiry tests give items (they let 1.25 of it pass at most at once)."""
    writers: int = 4
    writes_per_writer: int = 10
    state_machine_examples: int = 200
    """How many sequences of operations the state machine test runs (per mode)."""
    state_machine_steps: int = 25

    @pytest.fixture
    def item_memory(self) -> ItemMemory:
        """A fresh, empty memory. Override in the subclass."""
        raise NotImplementedError("provide an `item_memory` fixture returning a fresh, empty ItemMemory")

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass for the memory's expiry clock. The default sleeps."""
        time.sleep(seconds)

    @pytest.fixture(params=MODES)
    def memory(self, request: pytest.FixtureRequest, item_memory: ItemMemory) -> Iterator[Driver]:
        """The memory under test, driven through the sync API or the async twins."""
        with driving(item_memory, request.param) as driver:
            yield driver

    # IM1 -----------------------------------------------------------------------------------------------------

    def test_im1_a_put_item_reads_back_as_an_immutable_value(self, memory: Driver) -> None:
        value = {"name": "Ada", "tags": ["x", "y"], "user": {"level": 3}, "ratio": 0.5, "none": None}
        version = memory.put(("users", "u1"), "profile", value)
        item = memory.get(("users", "u1"), "profile")
        assert isinstance(item, Item)
        assert (item.namespace, item.key, item.value, item.version) == (("users", "u1"), "profile", value, version)
        assert version > 0
        assert item.created_at == item.updated_at
        assert item.created_at.tzinfo is not None
        assert item.created_at.utcoffset() == timedelta(0)
        assert item.expires_at is None
        assert item.ttl is None
        stored: Any = item.value
        with pytest.raises(TypeError):
            stored["user"]["level"] = 4
        with pytest.raises(TypeError):
            stored["tags"].append("z")
        assert memory.get(("users", "u1"), "profile").value == value
        assert memory.get(["users", "u1"], "profile") == item  # a list names the same namespace

    def test_im1_every_accepted_value_reads_back_equal(self, memory: Driver) -> None:
        values = values_at_the_limits()
        for value in [values, {}, {"v": 1}, {"v": 1.0}, {"v": True}, {"v": "1"}, {"v": [1, 1.0, True]}]:
            memory.put(("n",), "k", value)
            assert _json(memory.get(("n",), "k").value) == _json(value)
        memory.put(("n",), "limits", values)
        second = self.reopen(memory.target)
        if second is not None:  # and from a fresh object, which decodes what was stored
            with driving(second, "async" if memory.is_async else "sync", memory.loop) as fresh:
                assert _json(fresh.get(("n",), "limits").value) == _json(values)

    # IM2 -----------------------------------------------------------------------------------------------------

    def test_im2_an_unknown_item_is_absent_everywhere(self, memory: Driver) -> None:
        assert memory.get(("n",), "k") is None
        assert memory.get_many([(("n",), "k"), (("m", "x"), "j")]) == [None, None]
        assert memory.delete(("n",), "k") is False
        assert memory.delete_many([(("n",), "k")]) == 0
        assert memory.list() == []
        assert memory.list(("n",)) == []
        assert memory.count() == 0
        assert memory.namespaces() == []
        assert memory.cleanup_expired() == 0

    # IM3 -----------------------------------------------------------------------------------------------------

    def test_im3_put_replaces_the_whole_value_and_keeps_created_at(self, memory: Driver) -> None:
        first = memory.put(("n",), "k", {"a": 1, "b": 2})
        created = memory.get(("n",), "k").created_at
        time.sleep(0.002)  # the times have millisecond resolution
        second = memory.put(("n",), "k", {"c": 3})
        item = memory.get(("n",), "k")
        assert item.value == {"c": 3}
        assert second > first == first
        assert item.version == second
        assert item.created_at == created
        assert item.updated_at > created

    def test_im3_updated_at_grows_with_every_write(self, memory: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
        now = _clock.wall_ms()
        monkeypatch.setattr(_clock, "wall_ms", lambda: now)  # every write within one millisecond
        memory.put(("n",), "k", {"i": 0}, ttl=self.ttl * 100)
        times = [memory.get(("n",), "k").updated_at]
        for i in range(1, 4):
            if i % 2:
                memory.put(("n",), "k", {"i": i}, ttl=self.ttl * 100)
            else:
                memory.put_many([(("n",), "k", {"i": i}, self.ttl * 100)])
            item = memory.get(("n",), "k")
            assert item.expires_at == item.updated_at + timedelta(seconds=self.ttl * 100)
            times.append(item.updated_at)
        assert times == sorted(set(times))
        assert item.created_at == times[0]

    def test_im3_versions_only_grow_even_across_a_delete(self, memory: Driver) -> None:
        versions = [memory.put(("n",), "k", {"i": i}) for i in range(3)]
        assert versions == sorted(set(versions))
        assert memory.delete(("n",), "k") is True
        assert memory.get(("n",), "k") is None
        again = memory.put(("n",), "k", {"i": 3})
        assert again > versions[-1]  # a version from before the delete is never reused
        with pytest.raises(ConcurrentModificationError):
            memory.put(("n",), "k", {"i": 4}, expected_version=versions[-1])

    @pytest.mark.usefixtures("stopped_clock")
    def test_im3_versions_are_not_reused_on_a_clock_that_stands_still(self, memory: Driver) -> None:
        """Versions are time-based: a clock that does not move between a delete and a new write (Windows' moves
        every ~16 ms, a test's is frozen, NTP steps one back) must not give the deleted item's version again."""
        before = memory.put(("n",), "k", {"v": "old"})
        assert memory.delete(("n",), "k") is True
        assert memory.put(("n",), "k", {"v": "new"}) != before
        with pytest.raises(ConcurrentModificationError):
            memory.put(("n",), "k", {"v": "stale"}, expected_version=before)
        assert memory.get(("n",), "k").value == {"v": "new"}

    def test_im3_delete_removes_one_item(self, memory: Driver) -> None:
        memory.put(("n",), "a", {"v": 1})
        memory.put(("n",), "b", {"v": 2})
        memory.put(("m",), "a", {"v": 3})
        assert memory.delete(("n",), "a") is True
        assert memory.delete(("n",), "a") is False
        assert [(i.namespace, i.key) for i in memory.list()] == [(("m",), "a"), (("n",), "b")]
        assert memory.namespaces() == [("m",), ("n",)]
        memory.delete(("m",), "a")
        assert memory.namespaces() == [("n",)]  # a namespace with no item is not listed

    # IM4 -----------------------------------------------------------------------------------------------------

    def test_im4_compare_and_set_refuses_stale_versions(self, memory: Driver) -> None:
        with pytest.raises(ConcurrentModificationError):
            memory.put(("n",), "k", {"v": 0}, expected_version=1)  # absent: only 0 matches
        first = memory.put(("n",), "k", {"v": 1}, expected_version=0)
        with pytest.raises(ConcurrentModificationError):
            memory.put(("n",), "k", {"v": 2}, expected_version=0)  # 0: must not exist
        second = memory.put(("n",), "k", {"v": 2}, expected_version=first)
        with pytest.raises(ConcurrentModificationError):
            memory.put(("n",), "k", {"v": 3}, expected_version=first)
        with pytest.raises(ConcurrentModificationError):
            memory.delete(("n",), "k", expected_version=first)
        item = memory.get(("n",), "k")
        assert (item.value, item.version) == ({"v": 2}, second)
        assert memory.delete(("n",), "k", expected_version=second) is True
        assert memory.delete(("n",), "k", expected_version=0) is False  # absent, as expected
        memory.put(("n",), "k", {"v": 4})
        with pytest.raises(ConcurrentModificationError):
            memory.delete(("n",), "k", expected_version=0)
        assert memory.get(("n",), "k").value == {"v": 4}

    def test_im4_concurrent_compare_and_set_writers_lose_nothing(self, memory: Driver) -> None:
        memory.put(("n",), "counter", {"seen": []})

        def attempt(writer: int, index: int, item: Item) -> ItemWrite:
            seen: Any = item.value["seen"]
            return ItemWrite(("n",), "counter", {"seen": [*seen, [writer, index]]}, None, item.version)

        if memory.is_async:

            async def awrite(writer: int) -> None:
                for index in range(self.writes_per_writer):
                    while True:
                        item = await memory.target.aget(("n",), "counter")
                        try:
                            await memory.target.aput_many([attempt(writer, index, item)])
                            break
                        except ConcurrentModificationError:
                            await asyncio.sleep(0)

            async def all_writers() -> None:
                await asyncio.gather(*(awrite(w) for w in range(self.writers)))

            memory.run(all_writers())
        else:

            def write(writer: int) -> None:
                for index in range(self.writes_per_writer):
                    while True:
                        item = memory.get(("n",), "counter")
                        namespace, key, value, _, expected = attempt(writer, index, item)
                        try:
                            memory.put(namespace, key, value, expected_version=expected)
                            break
                        except ConcurrentModificationError:
                            time.sleep(0.0005)

            threads = [threading.Thread(target=write, args=(w,)) for w in range(self.writers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        seen = memory.get(("n",), "counter").value["seen"]
        assert len(seen) == self.writers * self.writes_per_writer
        for writer in range(self.writers):
            assert [index for w, index in seen if w == writer] == list(range(self.writes_per_writer))

    # IM5 -----------------------------------------------------------------------------------------------------

    def test_im5_batches_read_and_write_in_order(self, memory: Driver) -> None:
        versions = memory.put_many(
            [ItemWrite(("n",), "a", {"v": 1}), (("n",), "b", {"v": 2}), (("m", "x"), "a", {"v": 3}, None, 0)]
        )
        assert len(versions) == 3
        assert all(v > 0 for v in versions)
        items = memory.get_many([(("m", "x"), "a"), (("n",), "zz"), (("n",), "a"), (("n",), "a")])
        assert [None if i is None else i.value for i in items] == [{"v": 3}, None, {"v": 1}, {"v": 1}]
        assert [i.version for i in memory.get_many([(("n",), "a"), (("n",), "b")])] == versions[:2]
        assert memory.put_many([]) == []
        assert memory.delete_many([(("n",), "a"), (("n",), "a"), (("n",), "missing"), (("m", "x"), "a")]) == 2
        assert [(i.namespace, i.key) for i in memory.list()] == [(("n",), "b")]

    def test_im5_a_batch_with_a_conflict_writes_nothing(self, memory: Driver) -> None:
        version = memory.put(("n",), "a", {"v": 1})
        before = memory.list()
        with pytest.raises(ConcurrentModificationError):
            memory.put_many(
                [
                    ItemWrite(("n",), "new", {"v": 9}),
                    ItemWrite(("n",), "a", {"v": 2}, expected_version=version),
                    ItemWrite(("n",), "b", {"v": 3}, expected_version=version),  # absent: must be 0
                ]
            )
        assert memory.list() == before

    # IM6 -----------------------------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("namespace", "key"),
        [
            ((), "k"),
            ("flat", "k"),
            (("n", ""), "k"),
            (("n", "nul\x00"), "k"),
            (("lone \ud800",), "k"),
            (("n", 3), "k"),
            (None, "k"),
            (("n",), ""),
            (("n",), "nul\x00byte"),
            (("n",), "lone \ud800 surrogate"),
            (("n",), 42),
            (("n",), None),
            (("n",), b"bytes"),
            (("x" * 40_000, "y" * 40_000), "k"),
        ],
    )
    def test_im6_unusable_addresses_are_refused(self, memory: Driver, namespace: Any, key: Any) -> None:
        with pytest.raises(InvalidInputError):
            memory.put(namespace, key, {"v": 1})
        with pytest.raises(InvalidInputError):
            memory.put_many([(("ok",), "ok", {"v": 1}), (namespace, key, {"v": 1})])
        with pytest.raises(InvalidInputError):
            memory.get(namespace, key)
        with pytest.raises(InvalidInputError):
            memory.get_many([(namespace, key)])
        with pytest.raises(InvalidInputError):
            memory.delete(namespace, key)
        with pytest.raises(InvalidInputError):
            memory.delete_many([(("ok",), "ok"), (namespace, key)])
        assert memory.list() == []

    @pytest.mark.parametrize(
        "value",
        [
            *OVER_THE_LIMITS,
            {"x": float("nan")},
            {"x": float("inf")},
            {"x": {1, 2}},
            {"x": b"bytes"},
            {"x": (1, 2)},
            {1: "int key"},
            {"x": {b"bytes key": 1}},
            {"x": "lone \ud800"},
            {"lone \udc00": 1},
            [1, 2],
            "text",
            None,
        ],
        ids=[
            "int-digits",
            "negative-int-digits",
            "depth",
            "nan",
            "inf",
            "set",
            "bytes",
            "tuple",
            "int-key",
            "bytes-key",
            "surrogate",
            "surrogate-key",
            "list",
            "str",
            "none",
        ],
    )
    def test_im6_values_that_are_no_storable_json_object_are_refused(self, memory: Driver, value: Any) -> None:
        version = memory.put(("n",), "k", {"v": 1})
        with pytest.raises(InvalidInputError):
            memory.put(("n",), "k", value)
        with pytest.raises(InvalidInputError):
            memory.put_many([(("n",), "other", {"v": 2}), (("n",), "k", value)])
        assert [(i.key, i.value, i.version) for i in memory.list()] == [("k", {"v": 1}, version)]

    @pytest.mark.parametrize(
        "options",
        [
            {"ttl": 0},
            {"ttl": -1},
            {"ttl": float("nan")},
            {"ttl": float("inf")},
            {"ttl": 1e300},
            {"ttl": MAX_TTL * 1.5},
            {"ttl": True},
            {"ttl": "10"},
            {"expected_version": -1},
            {"expected_version": 1.0},
            {"expected_version": True},
            {"expected_version": "1"},
        ],
    )
    def test_im6_bad_write_options_are_refused(self, memory: Driver, options: dict[str, Any]) -> None:
        with pytest.raises(InvalidInputError):
            memory.put(("n",), "k", {"v": 1}, **options)
        with pytest.raises(InvalidInputError):
            memory.put_many([ItemWrite(("n",), "k", {"v": 1}, options.get("ttl"), options.get("expected_version"))])
        if "expected_version" in options:
            with pytest.raises(InvalidInputError):
                memory.delete(("n",), "k", **options)
        assert memory.list() == []

    def test_im6_a_batch_writing_one_item_twice_is_refused(self, memory: Driver) -> None:
        with pytest.raises(InvalidInputError):
            memory.put_many([(("n",), "k", {"v": 1}), (("n",), "other", {"v": 1}), (["n"], "k", {"v": 2})])
        with pytest.raises(InvalidInputError):
            memory.put_many([(("n",), "k")])  # too short
        with pytest.raises(InvalidInputError):
            memory.put_many((("n",), "k", {"v": 1}))  # one write, not a list of them
        assert memory.list() == []

    @pytest.mark.parametrize(
        "query",
        [
            {"namespace_prefix": "flat"},
            {"namespace_prefix": ("n", "")},
            {"filter": {"v": {"$regex": "x"}}},
            {"filter": {"v": {"$gt": None}}},
            {"filter": ["not", "a", "dict"]},
            {"order": "up"},
            {"after": ""},
            {"before": 3},
            {"limit": -1},
            {"limit": 1.5},
            {"offset": -1},
            {"offset": None},
        ],
    )
    def test_im6_bad_queries_are_refused(self, memory: Driver, query: dict[str, Any]) -> None:
        memory.put(("n",), "k", {"v": 1})
        with pytest.raises(InvalidInputError):
            memory.list(**query)
        if set(query) <= {"namespace_prefix", "filter"}:
            with pytest.raises(InvalidInputError):
                memory.count(**query)

    @pytest.mark.parametrize(
        "query",
        [
            {"prefix": "flat"},
            {"prefix": ("a", "")},
            {"suffix": ("nul\x00",)},
            {"max_depth": 0},
            {"max_depth": True},
            {"limit": -1},
            {"offset": -2},
        ],
    )
    def test_im6_bad_namespace_queries_are_refused(self, memory: Driver, query: dict[str, Any]) -> None:
        memory.put(("n",), "k", {"v": 1})
        with pytest.raises(InvalidInputError):
            memory.namespaces(**query)

    # IM7 -----------------------------------------------------------------------------------------------------

    def test_im7_items_are_isolated_whatever_their_keys_and_labels(self, memory: Driver) -> None:
        for position, name in enumerate(HOSTILE_IDS):
            memory.put(("keys",), name, {"i": position})
            memory.put(("labels", name), "k", {"i": position})
        assert [i.key for i in memory.list(("keys",))] == sorted(HOSTILE_IDS)
        assert memory.namespaces(prefix=("labels",)) == sorted(("labels", name) for name in HOSTILE_IDS)
        for position, name in enumerate(HOSTILE_IDS):
            assert memory.get(("keys",), name).value == {"i": position}, name
            assert memory.get(("labels", name), "k").value == {"i": position}, name
            assert [i.value for i in memory.list(("labels", name))] == [{"i": position}], name
        memory.delete(("keys",), "a%")
        memory.delete(("labels", "a_"), "k")
        assert memory.get(("keys",), "a%b").value == {"i": HOSTILE_IDS.index("a%b")}
        assert memory.get(("labels", "a_b"), "k").value == {"i": HOSTILE_IDS.index("a_b")}
        assert memory.count(("keys",)) == memory.count(("labels",)) == len(HOSTILE_IDS) - 1

    def test_im7_a_namespace_prefix_is_a_boundary(self, memory: Driver) -> None:
        spaces = [("a",), ("ab",), ("a", "b"), ("a.b",), ("a", "b", "c"), ("a:b",), ("a/b",), ("b", "a")]
        for position, namespace in enumerate(spaces):
            memory.put(namespace, "k", {"i": position})

        def listed(prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
            return [item.namespace for item in memory.list(prefix)]

        assert sorted(listed(("a",))) == [("a",), ("a", "b"), ("a", "b", "c")]
        assert sorted(listed(("a", "b"))) == [("a", "b"), ("a", "b", "c")]
        assert listed(("a", "b", "c")) == [("a", "b", "c")]
        assert listed(("a", "b", "c", "d")) == []
        assert listed(("a.b",)) == [("a.b",)]
        assert listed(("ab",)) == [("ab",)]
        assert listed(("*",)) == []  # a wildcard only in `namespaces`: here a label like any other
        assert memory.count(("a",)) == 3
        assert memory.count(()) == len(spaces)
        assert memory.namespaces(prefix=("a",)) == [("a",), ("a", "b"), ("a", "b", "c")]
        assert memory.namespaces(suffix=("b",)) == [("a", "b")]
        memory.delete(("a",), "k")
        assert memory.get(("a", "b"), "k").value == {"i": 2}

    def test_im7_a_prefix_is_a_boundary_between_memories(self, memory: Driver) -> None:
        with self.neighbour(memory.target) as neighbour:
            if neighbour is None:
                pytest.skip(f"{type(memory.target).__name__} has no prefix or namespace option")
            memory.put(("n",), "k", {"v": 1})
            assert neighbour.get(("n",), "k") is None
            assert neighbour.list() == []
            assert neighbour.namespaces() == []
            neighbour.put(("n",), "k", {"v": 2})
            neighbour.delete(("n",), "k")
            assert memory.get(("n",), "k").value == {"v": 1}

    # IM8 -----------------------------------------------------------------------------------------------------

    def test_im8_list_sorts_by_key_then_namespace_in_code_point_order(self, memory: Driver) -> None:
        keys = ["b", "a", "B", "é", "e\u0301", "z", "\U0001f9e0", "a b", "ab", "a\tb"]
        for key in keys:
            memory.put(("n",), key, {"key": key})
        memory.put(("m",), "b", {"key": "b"})
        memory.put(("n", "x"), "b", {"key": "b"})
        expected = sorted([(k, ("n",)) for k in keys] + [("b", ("m",)), ("b", ("n", "x"))])
        listed = [(item.key, item.namespace) for item in memory.list()]
        assert listed == expected
        assert [(item.key, item.namespace) for item in memory.list(order="desc")] == expected[::-1]
        in_n = [(key, namespace) for key, namespace in expected if namespace[:1] == ("n",)]  # ("n", "x") too
        between = [(key, ns) for key, ns in in_n if "a" < key < "z"]
        assert [(i.key, i.namespace) for i in memory.list(("n",), after="a", before="z")] == between
        between = [(key, ns) for key, ns in in_n if "b" < key < "é"]
        assert [(i.key, i.namespace) for i in memory.list(("n",), order="desc", after="b", before="é")] == between[::-1]
        assert [i.key for i in memory.list(("n",), after="\U0001f9e0")] == []
        assert [i.key for i in memory.list(("n",), before="B")] == []

    def test_im8_list_pages_with_limit_and_offset(self, memory: Driver) -> None:
        keys = [f"k{i:02}" for i in range(25)]
        memory.put_many([(("n",), key, {"i": i}) for i, key in enumerate(keys)])
        assert [i.key for i in memory.list(("n",), limit=10)] == keys[:10]
        assert [i.key for i in memory.list(("n",), limit=10, offset=20)] == keys[20:]
        assert [i.key for i in memory.list(("n",), offset=30)] == []
        assert memory.list(("n",), limit=0) == []
        assert [i.key for i in memory.list(("n",), order="desc", limit=3, offset=1)] == keys[::-1][1:4]
        pages, after = [], None
        while True:  # a cursor: the last key seen
            page = memory.list(("n",), after=after, limit=7)
            if not page:
                break
            pages.append([i.key for i in page])
            after = page[-1].key
        assert [key for page in pages for key in page] == keys

    def test_im8_pages_beyond_64_bits_are_answered(self, memory: Driver) -> None:
        keys = ["a", "b", "c"]
        memory.put_many([(("n",), key, {"i": i}) for i, key in enumerate(keys)])
        huge, past = 2**64, 2**63  # past every SQL integer
        for prefix in [("n",), ()]:
            for spec in [None, {"i": {"$gte": 0}}]:
                for listed in (memory.list, memory.list_plain):
                    assert [i.key for i in listed(prefix, filter=spec, limit=huge)] == keys
                    assert [i.key for i in listed(prefix, filter=spec, limit=2**60, order="desc")] == keys[::-1]
                    assert [i.key for i in listed(prefix, filter=spec, limit=past, offset=1)] == keys[1:]
                    assert listed(prefix, filter=spec, offset=past) == []
                    assert listed(prefix, filter=spec, limit=1, offset=past) == []
                    assert listed(prefix, filter=spec, limit=huge, offset=huge) == []
                    assert listed(prefix, filter=spec, limit=2**62, offset=2**62) == []
        assert memory.namespaces(limit=huge) == [("n",)]
        assert memory.namespaces(offset=past) == []
        assert memory.namespaces(limit=huge, offset=huge) == []

    def test_im8_filters_select_on_the_value_with_dotted_paths(self, memory: Driver) -> None:
        values = {
            "a": {"kind": "fact", "user": {"level": 3, "access-level": "nested"}, "tags": ["x"], "flags": [True]},
            "b": {"kind": "fact", "user": {"level": 1}, "flags": [1]},
            "c": {"kind": "note", "user": "flat", "user.level": 3},
            "d": {"kind": "note", "n": 2.5},
        }
        for key, value in values.items():
            memory.put(("n",), key, value)
        memory.put(("other",), "a", values["a"])
        cases: list[tuple[dict[str, Any], list[str]]] = [
            ({}, ["a", "b", "c", "d"]),
            ({"kind": "fact"}, ["a", "b"]),
            ({"user.level": 3}, ["a", "c"]),  # "c" by its literal key "user.level"
            ({"user.access-level": "nested"}, ["a"]),
            ({"user.level": {"$gte": 2}}, ["a", "c"]),
            ({"user.level": {"$exists": False}}, ["d"]),
            ({"user": "flat"}, ["c"]),
            ({"tags": {"$contains": "x"}}, ["a"]),
            ({"n": {"$gt": 2}}, ["d"]),
            ({"$or": [{"kind": "note"}, {"user.level": 1}]}, ["b", "c", "d"]),
            ({"$not": {"kind": "fact"}}, ["c", "d"]),
            ({"kind": "missing"}, []),
            ({"flags": [1]}, ["b"]),  # booleans never equal numbers, inside arrays too
            ({"flags": {"$ne": [1]}}, ["a", "c", "d"]),
            ({"user": {"level": True}}, []),
        ]
        for spec, expected in cases:
            assert [i.key for i in memory.list(("n",), filter=spec)] == expected, spec
            assert memory.count(("n",), filter=spec) == len(expected), spec
        assert memory.count(filter={"user.level": 3}) == 3

    def test_im8_list_plain_lists_the_same_items_with_values_of_the_callers_own(self, memory: Driver) -> None:
        memory.put(("n",), "a", {"kind": "fact", "tags": ["x"], "user": {"level": 3}})
        memory.put(("n",), "b", {"kind": "note"}, ttl=MAX_TTL)
        memory.put(("n", "m"), "c", {"kind": "fact"})
        memory.put(("o",), "a", {"kind": "fact"})
        pages: list[dict[str, Any]] = [{}, {"order": "desc"}, {"limit": 1, "offset": 1}, {"after": "a"}, {"limit": 0}]
        for spec in [None, {"kind": "fact"}, {"user.level": {"$gte": 3}}]:
            for options in pages:
                items = memory.list(("n",), filter=spec, **options)
                assert memory.list_plain(("n",), filter=spec, **options) == [PlainItem.of(i) for i in items]
        first = memory.list_plain(("n",))[0]
        first.value["tags"].append("y")
        first.value["kind"] = "changed"
        assert memory.list_plain(("n",))[0].value == {"kind": "fact", "tags": ["x"], "user": {"level": 3}}

    # IM9 -----------------------------------------------------------------------------------------------------

    def test_im9_namespaces_follow_langgraph(self, memory: Driver) -> None:
        for namespace in LANGGRAPH_NAMESPACES:
            memory.put(namespace, "k", {"v": 1})
        memory.put(("users", "u1", "facts"), "k", {"v": 1})
        memory.put(("users", "u2", "facts"), "k", {"v": 1})
        memory.put(("users", "u2", "prefs"), "k", {"v": 1})
        everything = sorted([*LANGGRAPH_NAMESPACES, ("users", "u1", "facts"), ("users", "u2", "facts")])
        assert memory.namespaces() == sorted([*everything, ("users", "u2", "prefs")])
        assert memory.namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
        assert memory.namespaces(prefix=("a",), max_depth=2) == [("a", "b"), ("a", "c")]
        assert memory.namespaces(max_depth=1) == [("a",), ("users",)]
        assert memory.namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
        assert memory.namespaces(prefix=("users", "*", "facts")) == [("users", "u1", "facts"), ("users", "u2", "facts")]
        assert memory.namespaces(suffix=("*", "facts")) == [("users", "u1", "facts"), ("users", "u2", "facts")]
        assert memory.namespaces(prefix=("a", "*"), suffix=("f",), max_depth=2) == [("a", "b"), ("a", "c")]
        assert memory.namespaces(prefix=("*", "*", "*", "*")) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
        assert memory.namespaces(prefix=("a", "b", "c", "d")) == []
        assert memory.namespaces(prefix=()) == memory.namespaces()
        assert memory.namespaces(prefix=("a",), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
        assert memory.namespaces(prefix=("a",), limit=2, offset=4) == [("a", "c", "f")]
        assert memory.namespaces(max_depth=1, offset=1) == [("users",)]
        assert memory.namespaces(max_depth=9, limit=0) == []

    # IM10 ----------------------------------------------------------------------------------------------------

    def test_im10_an_expired_item_is_absent_everywhere(self, memory: Driver) -> None:
        version = memory.put(("n",), "short", {"v": 1}, ttl=self.ttl)
        memory.put(("n",), "long", {"v": 2}, ttl=self.ttl * 100)
        memory.put(("gone",), "short", {"v": 3}, ttl=self.ttl)
        memory.put(("n",), "forever", {"v": 4})
        item = memory.get(("n",), "short")
        assert item.ttl == self.ttl
        assert item.expires_at == item.updated_at + timedelta(seconds=self.ttl)
        assert item.expires_at.tzinfo == timezone.utc
        self.advance(self.ttl * 1.25)
        assert memory.get(("n",), "short") is None
        assert memory.get_many([(("n",), "short"), (("n",), "long")])[0] is None
        assert [i.key for i in memory.list()] == ["forever", "long"]
        assert memory.count() == 2
        assert memory.namespaces() == [("n",)]
        with pytest.raises(ConcurrentModificationError):  # an expired item does not exist: version 0
            memory.put(("n",), "short", {"v": 5}, expected_version=version)
        assert memory.delete(("gone",), "short", expected_version=0) is False
        removed = memory.cleanup_expired()
        assert 0 <= removed <= 2  # a backend whose store expires keys itself may have nothing left to remove
        assert memory.cleanup_expired() == 0
        assert memory.put(("n",), "short", {"v": 6}, expected_version=0) > version
        fresh = memory.get(("n",), "short")
        assert fresh.value == {"v": 6}
        assert fresh.expires_at is None
        assert fresh.created_at >= item.updated_at

    def test_im10_reads_refresh_the_expiry_only_when_asked(self, memory: Driver) -> None:
        memory.put(("n",), "slide", {"v": 1}, ttl=self.ttl)
        memory.put(("n",), "fixed", {"v": 2}, ttl=self.ttl)
        written, fixed = memory.get_many([(("n",), "slide"), (("n",), "fixed")])
        self.advance(self.ttl * 0.5)
        assert memory.get(("n",), "fixed").expires_at == fixed.expires_at  # a plain read moves nothing
        refreshed = memory.get(("n",), "slide", refresh_ttl=True)
        assert refreshed.expires_at > written.expires_at
        assert (refreshed.version, refreshed.updated_at, refreshed.value) == (
            written.version,
            written.updated_at,
            written.value,
        )
        assert memory.get_many([(("n",), "fixed"), (("n",), "forever")], refresh_ttl=True)[1] is None
        self.advance(self.ttl * 0.75)  # 1.25 ttl after the writes, 0.75 after the refreshes
        assert memory.get(("n",), "slide").value == {"v": 1}
        assert memory.get(("n",), "fixed").value == {"v": 2}  # refreshed by get_many
        self.advance(self.ttl * 0.5)
        assert memory.get(("n",), "slide") is None
        assert memory.get(("n",), "fixed") is None

    def test_im10_a_put_sets_or_clears_the_expiry(self, memory: Driver) -> None:
        memory.put(("n",), "k", {"v": 1}, ttl=self.ttl)
        memory.put(("n",), "k", {"v": 2})  # no ttl: never expires
        memory.put_many([(("n",), "j", {"v": 3}, self.ttl)])
        memory.put(("n",), "plain", {"v": 4})
        assert memory.get(("n",), "plain", refresh_ttl=True).expires_at is None
        self.advance(self.ttl * 1.25)
        assert memory.get(("n",), "k").value == {"v": 2}
        assert memory.get(("n",), "j") is None
        assert memory.get(("n",), "k").expires_at is None

    # IM11 ----------------------------------------------------------------------------------------------------

    def test_im11_writes_are_seen_through_another_object(self, memory: Driver, other: Driver) -> None:
        version = memory.put(("n", "x"), "k", {"v": 1})
        item = other.get(("n", "x"), "k")
        assert (item.value, item.version) == ({"v": 1}, version)
        changed = other.put(("n", "x"), "k", {"v": 2}, expected_version=version)
        with pytest.raises(ConcurrentModificationError):
            memory.put(("n", "x"), "k", {"v": 3}, expected_version=version)
        assert memory.get(("n", "x"), "k").version == changed
        assert memory.namespaces() == other.namespaces() == [("n", "x")]
        other.delete(("n", "x"), "k")
        assert memory.get(("n", "x"), "k") is None
        assert memory.list() == []

    # The reference model ---------------------------------------------------------------------------------------

    def test_im_state_machine_matches_the_reference_model(self, memory: Driver) -> None:
        pytest.importorskip("hypothesis", reason="the state machine test needs Hypothesis")
        from hypothesis import HealthCheck, settings
        from hypothesis.stateful import run_state_machine_as_test

        machine = item_memory_machine(memory)
        options = settings(
            max_examples=self.state_machine_examples,
            stateful_step_count=self.state_machine_steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        run_state_machine_as_test(machine, settings=options)
        assert machine.runs >= self.state_machine_examples  # every sequence started from an emptied memory


LABELS = ("a", "ab", "b", "*", "a.b")
KEYS = ("k", "k1", "K", "é", "a%", "k 2")
FILTERS: tuple[dict[str, Any] | None, ...] = (
    None,
    {},
    {"n": 1},
    {"n": {"$gte": 2}},
    {"user.level": 1},
    {"user.level": {"$exists": False}},
    {"$or": [{"n": 0}, {"tag": {"$in": ["x", "y"]}}]},
    {"$not": {"tag": "x"}},
)


def item_memory_machine(memory: Driver) -> type[Any]:
    """A Hypothesis `RuleBasedStateMachine` that runs random sequences of puts (plain and compare-and-set),
    deletes, batches, reads, listings, counts and namespace queries on `memory` (a driver: sync or async) and
    checks every result against a plain dict. Each sequence starts from an emptied memory."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

    namespaces = st.lists(st.sampled_from(LABELS), min_size=1, max_size=3).map(tuple)
    prefixes = st.lists(st.sampled_from(LABELS), max_size=3).map(tuple)
    keys = st.sampled_from(KEYS)
    values = st.fixed_dictionaries(
        {"n": st.integers(0, 3)},
        optional={
            "user": st.fixed_dictionaries({}, optional={"level": st.integers(0, 2)}),
            "tag": st.sampled_from(["x", "y", "z"]),
        },
    )
    limits = st.one_of(st.none(), st.integers(0, 6))
    offsets = st.integers(0, 4)
    cursors = st.one_of(st.none(), keys)

    def labels_match(pattern: tuple[str, ...], labels: tuple[str, ...]) -> bool:
        return all(p == "*" or p == label for p, label in zip(pattern, labels))

    class ItemMemoryMachine(RuleBasedStateMachine):
        runs = 0  # how many sequences started

        def __init__(self) -> None:
            super().__init__()
            type(self).runs += 1
            memory.delete_many([(item.namespace, item.key) for item in memory.list()])
            self.model: dict[Address, tuple[dict[str, Any], int]] = {}
            self.last_version = 0

        def version(self, address: Address) -> int:
            return self.model[address][1] if address in self.model else 0

        @rule(namespace=namespaces, key=keys, value=values, cas=st.sampled_from(["none", "current", "zero", "stale"]))
        def put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any], cas: str) -> None:
            address = (namespace, key)
            current = self.version(address)
            expected = {"none": None, "current": current, "zero": 0, "stale": current + 1}[cas]
            if expected is not None and expected != current:
                with pytest.raises(ConcurrentModificationError):
                    memory.put(namespace, key, value, expected_version=expected)
                return
            version = memory.put(namespace, key, value, expected_version=expected)
            assert version > self.last_version  # versions only grow, across items too (they are time-based)
            self.last_version = version
            self.model[address] = (value, version)

        @rule(
            writes=st.lists(st.tuples(namespaces, keys, values), max_size=4, unique_by=lambda w: (w[0], w[1])),
            conflict=st.booleans(),
        )
        def put_many(self, writes: list[tuple[tuple[str, ...], str, dict[str, Any]]], conflict: bool) -> None:
            batch = [ItemWrite(ns, key, value, None, self.version((ns, key))) for ns, key, value in writes]
            if conflict and batch:
                last = (writes[-1][0], writes[-1][1])
                batch[-1] = batch[-1]._replace(expected_version=self.version(last) + 1)
                with pytest.raises(ConcurrentModificationError):
                    memory.put_many(batch)
                return
            versions = memory.put_many(batch)
            assert len(versions) == len(batch)
            for (ns, key, value), version in zip(writes, versions):
                self.model[(ns, key)] = (value, version)

        @rule(namespace=namespaces, key=keys, cas=st.sampled_from(["none", "current", "stale"]))
        def delete(self, namespace: tuple[str, ...], key: str, cas: str) -> None:
            address = (namespace, key)
            current = self.version(address)
            expected = {"none": None, "current": current, "stale": current + 1}[cas]
            if expected is not None and expected != current:
                with pytest.raises(ConcurrentModificationError):
                    memory.delete(namespace, key, expected_version=expected)
                return
            assert memory.delete(namespace, key, expected_version=expected) is (address in self.model)
            self.model.pop(address, None)

        @rule(addresses=st.lists(st.tuples(namespaces, keys), max_size=4))
        def delete_many(self, addresses: list[Address]) -> None:
            existed = {address for address in addresses if address in self.model}
            assert memory.delete_many(addresses) == len(existed)
            for address in existed:
                del self.model[address]

        @rule(addresses=st.lists(st.tuples(namespaces, keys), max_size=4))
        def get_many(self, addresses: list[Address]) -> None:
            items = memory.get_many(addresses)
            assert [None if i is None else (i.namespace, i.key, dict(i.value), i.version) for i in items] == [
                (*address, *self.model[address]) if address in self.model else None for address in addresses
            ]

        @rule(namespace=namespaces, key=keys)
        def get(self, namespace: tuple[str, ...], key: str) -> None:
            item = memory.get(namespace, key)
            expected = self.model.get((namespace, key))
            assert (None if item is None else (item.value, item.version)) == expected

        @rule(
            prefix=prefixes,
            spec=st.sampled_from(FILTERS),
            order=st.sampled_from(["asc", "desc"]),
            after=cursors,
            before=cursors,
            limit=limits,
            offset=offsets,
        )
        def list_and_count(
            self,
            prefix: tuple[str, ...],
            spec: dict[str, Any] | None,
            order: str,
            after: str | None,
            before: str | None,
            limit: int | None,
            offset: int,
        ) -> None:
            predicate = compile_filter(spec) if spec is not None else (lambda value: True)
            matching = sorted(
                (key, ns)
                for (ns, key), (value, _) in self.model.items()
                if ns[: len(prefix)] == prefix and predicate(value)
            )
            assert memory.count(prefix, filter=spec) == len(matching)
            window = [
                (key, ns) for key, ns in matching if (after is None or key > after) and (before is None or key < before)
            ]
            if order == "desc":
                window.reverse()
            window = window[offset:] if limit is None else window[offset : offset + limit]
            listed = memory.list(
                prefix, filter=spec, order=order, after=after, before=before, limit=limit, offset=offset
            )
            assert [(i.key, i.namespace, dict(i.value), i.version) for i in listed] == [
                (key, ns, *self.model[(ns, key)]) for key, ns in window
            ]
            plain = memory.list_plain(
                prefix, filter=spec, order=order, after=after, before=before, limit=limit, offset=offset
            )
            assert plain == [PlainItem.of(item) for item in listed]

        @rule(
            prefix=st.one_of(st.none(), prefixes),
            suffix=st.one_of(st.none(), prefixes),
            max_depth=st.one_of(st.none(), st.integers(1, 3)),
            limit=limits,
            offset=offsets,
        )
        def list_namespaces(
            self,
            prefix: tuple[str, ...] | None,
            suffix: tuple[str, ...] | None,
            max_depth: int | None,
            limit: int | None,
            offset: int,
        ) -> None:
            found = set()
            for ns, _ in self.model:
                if len(ns) < len(prefix or ()) or len(ns) < len(suffix or ()):
                    continue
                if prefix and not labels_match(prefix, ns):
                    continue
                if suffix and not labels_match(suffix, ns[len(ns) - len(suffix) :]):
                    continue
                found.add(ns if max_depth is None else ns[:max_depth])
            expected = sorted(found)
            expected = expected[offset:] if limit is None else expected[offset : offset + limit]
            got = memory.namespaces(prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset)
            assert got == expected

        @invariant()
        def everything_is_counted(self) -> None:
            assert memory.count() == len(self.model)

    ItemMemoryMachine.__name__ = ItemMemoryMachine.__qualname__ = f"ItemMemoryMachine[{type(memory.target).__name__}]"
    return ItemMemoryMachine
