"""`MemwovenSaver` beyond the conformance suite: bad input refused before anything is written, damaged storage
raising `CorruptMemoryError`, pickle never loaded unless the serde opts in, `from_url` options, pruning's channel
values, and copies independent of their source."""

from __future__ import annotations

import base64
import enum
import json
import operator
import pickle
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph.store.memory import InMemoryStore
from saver_graphs import agent, call
from saver_support import item_memory, kind_params
from typing_extensions import TypedDict

from langgraph.checkpoint.memwoven import MemwovenSaver
from langgraph.checkpoint.memwoven import base as saver_module
from memwoven import ItemMemory
from memwoven._steps import Call, execute
from memwoven.contracts import MAX_ID_BYTES
from memwoven.errors import CorruptMemoryError, InvalidInputError


@pytest.fixture(params=["memory", "sqlite"])
def items(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ItemMemory]:
    with item_memory(request.param, tmp_path) as memory:
        yield memory


def checkpoint(**values: Any) -> Checkpoint:
    return {
        "v": 1,
        "id": str(uuid6(clock_seq=-1)),
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": {name: f"{1:032}.0" for name in values},
        "versions_seen": {},
        "updated_channels": None,
    }


def put(saver: MemwovenSaver, thread: str, parent: str | None = None, **values: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    new = checkpoint(**values)
    if parent is not None:  # every value changes: a new version
        new["channel_versions"] = {name: saver.get_next_version(f"{1:032}.0", None) for name in values}
    return saver.put(config, new, {"source": "loop", "step": 0}, dict(new["channel_versions"]))  # type: ignore[arg-type]


def test_bad_input_is_refused_before_anything_is_written(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    with pytest.raises(InvalidInputError):
        saver.put({"configurable": {}}, checkpoint(a=1), {}, {"a": 1})
    with pytest.raises(InvalidInputError, match="thread_id cannot be empty"):
        saver.put({"configurable": {"thread_id": ""}}, checkpoint(a=1), {}, {"a": 1})
    with pytest.raises(InvalidInputError, match="thread_id cannot be empty"):  # a read says so too
        saver.get_tuple({"configurable": {"thread_id": ""}})
    for empty in (
        lambda: saver.delete_thread(""),
        lambda: saver.prune([""]),
        lambda: saver.copy_thread("", "t"),
        lambda: list(saver.list({"configurable": {"thread_id": ""}})),
    ):
        with pytest.raises(InvalidInputError, match="thread_id cannot be empty"):
            empty()
    with pytest.raises(InvalidInputError):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("a", 1)], "task")
    with pytest.raises(InvalidInputError):
        saver.prune(["t"], strategy="keep_some")
    assert items.list(()) == []
    for bad in ({"keep_last": 0}, {"keep_last": True}, {"namespace": "lg"}, {"namespace": ()}):
        with pytest.raises(InvalidInputError):
            MemwovenSaver(items, **bad)
    with pytest.raises(InvalidInputError):
        MemwovenSaver({})  # type: ignore[arg-type]


def test_a_thread_id_too_long_for_its_writes_is_refused_by_put(items: ItemMemory) -> None:
    """A checkpoint's writes namespace is one label longer than its own: a thread id fitting the checkpoint but not
    its writes was stored, then every read of the thread failed."""
    saver = MemwovenSaver(items)
    new = checkpoint(a=1)
    room = MAX_ID_BYTES - sum(len(label) for label in (*saver.namespace, "writes", "=", new["id"]))
    with pytest.raises(InvalidInputError, match="writes namespace"):
        saver.put({"configurable": {"thread_id": "x" * (room + 1), "checkpoint_ns": ""}}, new, {}, {"a": 1})
    assert items.list(()) == []
    stored = saver.put({"configurable": {"thread_id": "x" * room, "checkpoint_ns": ""}}, new, {}, {"a": 1})
    saver.put_writes(stored, [("a", 2)], "task")
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [("task", "a", 2)]
    assert len(list(saver.list({"configurable": {"thread_id": "x" * room}}))) == 1


def test_damaged_storage_raises_corrupt_memory_error(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    stored = put(saver, "t", a=1)
    saver.put_writes(stored, [("a", 2)], "task")
    cid = stored["configurable"]["checkpoint_id"]
    (task,) = items.list((*saver.namespace, "writes"))
    (write,) = task.value["writes"]
    for damage in ({"writes": [{**write, "idx": "zero"}]}, {"writes": "none"}, {"task_id": 1}):
        items.put(task.namespace, task.key, {**task.value, **damage})
        with pytest.raises(CorruptMemoryError):
            saver.get_tuple(stored)
    items.put(task.namespace, task.key, task.value)
    assert saver.get_tuple(stored) is not None
    address = ((*saver.namespace, "checkpoints", "t", "="), cid)
    original = items.get(*address)
    assert original is not None
    for damage in ({"type": "msgpack", "data": "not base64!"}, {"type": "msgpack", "data": "AAAA"}, None):
        items.put(*address, {**original.value, "checkpoint": damage})
        with pytest.raises(CorruptMemoryError):
            saver.get_tuple(stored)
        with pytest.raises(CorruptMemoryError):
            list(saver.list(None))
    for damage in (["a"], "values"):
        items.put(*address, {**original.value, "values": damage})
        with pytest.raises(CorruptMemoryError):
            saver.get_tuple(stored)
        with pytest.raises(CorruptMemoryError):
            list(saver.list(None))


def test_stored_fields_decoding_to_the_wrong_type_raise_corrupt_memory_error(items: ItemMemory) -> None:
    """A damaged checkpoint or metadata that still decodes, to a list: `CorruptMemoryError`, not a list returned
    as metadata or an AttributeError."""
    saver = MemwovenSaver(items)
    first = put(saver, "t", a=1)
    second = put(saver, "t", first["configurable"]["checkpoint_id"], a=2)
    thread: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    reads = {
        "metadata": [
            lambda: saver.get_tuple(second),
            lambda: list(saver.list(thread, filter={"step": 0})),
            lambda: saver.prune(["t"]),
        ],
        "checkpoint": [lambda: saver.get_delta_channel_history(config=second, channels=["a"])],
    }
    for field, calls in reads.items():
        damaged = first if field == "checkpoint" else second
        address = ((*saver.namespace, "checkpoints", "t", "="), damaged["configurable"]["checkpoint_id"])
        original = items.get(*address)
        assert original is not None
        items.put(*address, {**original.value, field: saver._dump([1, 2])})
        for read in calls:
            with pytest.raises(CorruptMemoryError, match=field):
                read()
        items.put(*address, original.value)
    metadata = {"source": "loop", "step": 0, "channel_versions": "mine"}  # a checkpoint's field name, in metadata
    saver.put(second, checkpoint(a=3), metadata, {})  # type: ignore[arg-type]
    assert saver.get_tuple(thread).metadata["channel_versions"] == "mine"  # type: ignore[union-attr]


UNPICKLED: list[bool] = []


def mark_unpickled() -> None:
    UNPICKLED.append(True)


class _Flag:
    def __reduce__(self) -> tuple[Any, ...]:
        return (mark_unpickled, ())


def test_pickle_is_never_loaded_unless_the_serde_opts_in(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    stored = put(saver, "t", a=1)
    saver.put_writes(stored, [("a", 2)], "task")
    (task,) = items.list((*saver.namespace, "writes"))
    payload = {"type": "pickle", "data": base64.b64encode(pickle.dumps(_Flag())).decode()}
    items.put(task.namespace, task.key, {**task.value, "writes": [{**task.value["writes"][0], "value": payload}]})
    UNPICKLED.clear()
    with pytest.raises(NotImplementedError, match="pickle"):
        saver.get_tuple(stored)
    assert UNPICKLED == []
    trusting = MemwovenSaver(items, serde=JsonPlusSerializer(pickle_fallback=True))
    assert trusting.get_tuple(stored) is not None
    assert UNPICKLED == [True]


def test_from_url_passes_the_saver_options_and_owns_the_memory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cp.db'}"
    with MemwovenSaver.from_url(url, namespace=("mine",), keep_last=1) as saver:
        first = put(saver, "t", a=1)
        put(saver, "t", first["configurable"]["checkpoint_id"], a=2)
        assert [t.checkpoint["channel_values"] for t in saver.list(None)] == [{"a": 2}]
        assert {item.namespace[0] for item in saver.items.list(())} == {"mine"}
    with pytest.raises(InvalidInputError):
        MemwovenSaver.from_url(url, keep_last=-1)


def test_prune_keeps_the_latest_values_and_drops_the_others(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    first = put(saver, "t", a=["old"], b=["kept"])  # lists: values of their own (not kept inside checkpoints)
    second_config = {"configurable": {**first["configurable"]}}
    new = checkpoint(a=["new"], b=["kept"])
    new["channel_versions"] = {"a": saver.get_next_version(f"{1:032}.0", None), "b": f"{1:032}.0"}
    second = saver.put(second_config, new, {"source": "loop", "step": 1}, {"a": new["channel_versions"]["a"]})  # type: ignore[arg-type]
    saver.put_writes(first, [("a", "pending")], "task")
    saver.prune(["t"])
    latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert latest is not None
    assert latest.config == second
    assert latest.checkpoint["channel_values"] == {"a": ["new"], "b": ["kept"]}
    assert len(items.list((*saver.namespace, "blobs"))) == 2  # "old" went with its checkpoint
    assert items.list((*saver.namespace, "writes")) == []


class Color(enum.StrEnum):
    RED = "red"


def test_small_values_live_inside_the_checkpoint_and_others_in_blobs(items: ItemMemory) -> None:
    saver = MemwovenSaver(items, serde=JsonPlusSerializer(allowed_msgpack_modules=[(__name__, "Color")]))
    values: dict[str, Any] = {
        "n": 3,
        "f": 1.5,
        "yes": True,
        "none": None,
        "s": "short",
        "max": "m" * 1024,
        "big": 10**18,
        "long": "x" * 1025,
        "list": ["a"],
        "color": Color.RED,
        "inf": float("inf"),
    }
    first = put(saver, "t", **values)
    blobs = namespace_keys(items, (*saver.namespace, "blobs"))
    assert {json.loads(key)[0] for key in blobs} == {"big", "long", "list", "color", "inf"}
    found = saver.get_tuple(first)
    assert found is not None
    assert found.checkpoint["channel_values"] == values
    assert [type(found.checkpoint["channel_values"][name]) for name in ("n", "f", "color")] == [int, float, Color]
    # a step changing one small value writes no blob, and the others keep their values
    second = checkpoint(**{**values, "n": 4})
    second["channel_versions"] = {**second["channel_versions"], "n": saver.get_next_version(f"{1:032}.0", None)}
    stored = saver.put(first, second, {"source": "loop", "step": 1}, {"n": second["channel_versions"]["n"]})  # type: ignore[arg-type]
    assert namespace_keys(items, (*saver.namespace, "blobs")) == blobs
    saver.prune(["t"])
    latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {**values, "n": 4}
    # a checkpoint stored before small values were kept inside (every value in a blob) still reads
    address = ((*saver.namespace, "checkpoints", "t", "="), stored["configurable"]["checkpoint_id"])
    item = items.get(*address)
    assert item is not None
    for channel, value in item.value["values"].items():
        key = json.dumps([channel, latest.checkpoint["channel_versions"][channel]], ensure_ascii=False)
        items.put((*saver.namespace, "blobs", "t", "="), key, {"value": saver._dump(value)})
    items.put(*address, {key: value for key, value in item.value.items() if key != "values"})
    again = saver.get_tuple(stored)
    assert again is not None
    assert again.checkpoint["channel_values"] == {**values, "n": 4}
    # a string no item can hold (a lone surrogate) goes to a blob, through the serde
    lone = put(saver, "u", s="\ud800")
    assert {json.loads(key)[0] for key in namespace_keys(items, (*saver.namespace, "blobs", "u"))} == {"s"}
    assert saver.get_tuple(lone) is not None


class Profile(TypedDict):
    name: str
    count: int
    log: Annotated[list[int], operator.add]


class OwnSerde(JsonPlusSerializer):
    """A serde of the user's: it sees every value, so its saver keeps none inside checkpoints."""


def test_a_thread_continued_with_another_serde_keeps_its_unchanged_values(items: ItemMemory) -> None:
    builder = StateGraph(Profile)
    builder.add_node("step", lambda state: {"log": [len(state["log"])]})  # name and count never change
    builder.add_edge(START, "step")
    config: Any = {"configurable": {"thread_id": "t"}}
    default, own = MemwovenSaver(items), MemwovenSaver(items, serde=OwnSerde())
    builder.compile(checkpointer=default).invoke({"name": "alice", "count": 7, "log": []}, config)
    # both ways, by savers that wrote the parent or not, with retention dropping the parents
    continuing = [own, default, own, MemwovenSaver(items, serde=OwnSerde(), keep_last=1), default]
    for turn, saver in enumerate(continuing, start=1):
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"log": []}, config)
        for reader in (default, own):
            assert builder.compile(checkpointer=reader).get_state(config).values == {
                "name": "alice",
                "count": 7,
                "log": list(range(turn + 1)),
            }
        if saver is own:
            own.prune(["t"])


ERROR = "__error__"  # a special channel (WRITES_IDX_MAP): its write is replaced, not kept


def test_a_tasks_writes_are_one_item_merged_when_put_again(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    stored = put(saver, "t", a=1)
    saver.put_writes(stored, [("a", 1), ("b", 2)], "task", "p")
    assert len(items.list((*saver.namespace, "writes"))) == 1
    (before,) = items.list((*saver.namespace, "writes"))
    saver.put_writes(stored, [("a", 9), ("b", 8)], "task", "p")  # regular writes stored already: kept
    (after,) = items.list((*saver.namespace, "writes"))
    assert after.version == before.version
    saver.put_writes(stored, [("a", 9), ("b", 8), ("c", 3)], "task", "p")  # a new index: added
    saver.put_writes(stored, [(ERROR, "first")], "task", "p")
    saver.put_writes(stored, [(ERROR, "second")], "task", "p")  # a special channel's write: replaced
    saver.put_writes(stored, [("a", 5)], "other")
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [
        ("other", "a", 5),
        ("task", ERROR, "second"),
        ("task", "a", 1),
        ("task", "b", 2),
        ("task", "c", 3),
    ]
    # writes stored one item each (before a task's were one item) still read, a task's item winning over them
    namespace = after.namespace
    for index, (channel, value) in enumerate([("a", 7), ("d", 4)]):
        items.put(
            namespace,
            json.dumps(["old", index]),
            {"task_id": "old", "channel": channel, "value": saver._dump(value), "task_path": "", "idx": index},
        )
    items.put(
        namespace,
        json.dumps(["task", 0]),
        {"task_id": "task", "channel": "a", "value": saver._dump(0), "task_path": "p", "idx": 0},
    )
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes[:2] == [("old", "a", 7), ("old", "d", 4)]
    assert ("task", "a", 1) in found.pending_writes
    assert ("task", "a", 0) not in found.pending_writes


def namespace_keys(items: ItemMemory, prefix: tuple[str, ...]) -> set[str]:
    return {item.key for item in items.list(prefix)}


def test_a_copy_outlives_its_source(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    stored = put(saver, "src", a=[1, 2])
    saver.put_writes(stored, [("a", 3)], "task")
    saver.copy_thread("src", "dst")
    saver.delete_thread("src")
    assert saver.get_tuple({"configurable": {"thread_id": "src"}}) is None
    copied = saver.get_tuple({"configurable": {"thread_id": "dst"}})
    assert copied is not None
    assert copied.checkpoint["channel_values"] == {"a": [1, 2]}
    assert copied.pending_writes == [("task", "a", 3)]
    assert copied.config["configurable"]["checkpoint_id"] == stored["configurable"]["checkpoint_id"]


@pytest.mark.asyncio
async def test_delta_channel_history_matches_the_base_class_walk(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    replies = [
        call("add", "c1", a=1, b=2),
        AIMessage("3"),
        AIMessage("hi"),
        call("add", "c2", a=2, b=2),
        AIMessage("4"),
    ]
    graph = agent(replies, saver, InMemoryStore())
    config = {"configurable": {"thread_id": "d"}}
    for question in ("1 + 2?", "hello", "2 + 2?"):
        graph.invoke({"messages": [("user", question)]}, config)
    tuples = list(saver.list(config))
    channels = [*sorted({channel for t in tuples for channel in t.checkpoint["channel_versions"]}), "absent"]
    compared = 0
    for target in [config, *(t.config for t in tuples)]:
        ours = saver.get_delta_channel_history(config=target, channels=channels)
        walked = BaseCheckpointSaver.get_delta_channel_history(saver, config=target, channels=channels)
        assert ours == walked
        assert await saver.aget_delta_channel_history(config=target, channels=channels) == walked
        compared += sum(len(entry["writes"]) for entry in walked.values())
    assert compared > 0
    assert saver.get_delta_channel_history(config=config, channels=[]) == {}


def test_a_thread_named_by_the_wildcard_reaches_no_other_thread(items: ItemMemory) -> None:
    """`ItemMemory.namespaces` reads a ``"*"`` label as LangGraph's wildcard; a thread of that name is a name."""
    saver = MemwovenSaver(items, keep_last=2)
    paused = put(saver, "a", a=1)
    saver.put_writes(paused, [("__interrupt__", "waiting")], "task")
    star = put(saver, "*", b=1)
    for _ in range(3):
        star = put(saver, "*", star["configurable"]["checkpoint_id"], b=2)
    assert pending(saver, "a") == [("task", "__interrupt__", "waiting")]
    by_id = {"configurable": {"thread_id": "*", "checkpoint_id": paused["configurable"]["checkpoint_id"]}}
    assert list(saver.list(by_id)) == []
    saver.prune(["*"])
    assert pending(saver, "a") == [("task", "__interrupt__", "waiting")]
    with pytest.raises(InvalidInputError):
        MemwovenSaver(items, namespace=("lg", "*"))


def pending(saver: MemwovenSaver, thread: str) -> Any:
    found = saver.get_tuple({"configurable": {"thread_id": thread}})
    return None if found is None else found.pending_writes


def test_ids_given_as_one_string_are_refused(items: ItemMemory) -> None:
    saver = MemwovenSaver(items)
    put(saver, "t", a=1)
    with pytest.raises(TypeError):
        saver.prune("t")
    with pytest.raises(TypeError):
        saver.delete_for_runs("run")
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 1


def test_a_pruned_parent_is_no_parent(items: ItemMemory) -> None:
    """As PostgresSaver clears a kept checkpoint's parent when pruning it: no `parent_config` naming nothing."""
    saver = MemwovenSaver(items)
    first = put(saver, "t", a=1)
    second = put(saver, "t", first["configurable"]["checkpoint_id"], a=2)
    assert [t.parent_config for t in saver.list(second)] == [first]
    saver.prune(["t"])
    assert [t.parent_config for t in saver.list(second)] == [None]
    kept = MemwovenSaver(items, namespace=("kept",), keep_last=2)
    last = put(kept, "t", a=0)
    for value in range(1, 4):
        last = put(kept, "t", last["configurable"]["checkpoint_id"], a=value)
    tuples = list(kept.list({"configurable": {"thread_id": "t"}}))
    assert [t.parent_config for t in tuples] == [tuples[1].config, None]


def test_a_read_overlapping_a_put_that_drops_its_checkpoint_returns_a_whole_checkpoint(items: ItemMemory) -> None:
    """With `keep_last`, a put deletes the checkpoint a read listed, its blobs and writes with it, before the read
    fetched them: the read returns the newest checkpoint whole (it returned the old one without its values)."""
    saver = MemwovenSaver(items, keep_last=1)
    large = "x" * 2_000  # kept in a blob, not inside the checkpoint
    first = put(saver, "t", a=large)
    reading = saver._get_tuple({"configurable": {"thread_id": "t"}})
    step = next(reading)
    while not (isinstance(step, Call) and step.method == "get_many"):  # the newest listed, its blobs not yet read
        step = reading.send(execute(step))
    newer = put(saver, "t", first["configurable"]["checkpoint_id"], a=large + "y")
    read = _finish(reading, step)
    assert read.config == newer
    assert read.checkpoint["channel_values"] == {"a": large + "y"}
    assert saver.get_tuple(first) is None


def _finish(steps: Any, step: Any) -> Any:
    """Run a step generator on to its end from `step`, the one it yielded last; its result."""
    try:
        while True:
            step = steps.send(execute(step))
    except StopIteration as done:
        return done.value


@pytest.mark.parametrize("kind", kind_params(["memory", "file", "sqlite"]))
@pytest.mark.parametrize(
    "drop", [lambda saver: saver.delete_for_runs(["r1"]), lambda saver: saver.prune(["t"])], ids=["runs", "prune"]
)
def test_deleting_old_checkpoints_keeps_the_values_of_a_put_under_way(
    kind: str, drop: Callable[[MemwovenSaver], None], tmp_path: Path
) -> None:
    """A put's values are visible before its checkpoint (the file backend makes a batch visible namespace by
    namespace): `delete_for_runs` and `prune` meanwhile leave them (they deleted them, used by no checkpoint)."""
    with item_memory(kind, tmp_path) as items:
        saver = MemwovenSaver(items)
        parent = None
        for step, run in enumerate(["r1", "r2", "r2"]):
            config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "run_id": run}}
            if parent:
                config["configurable"]["checkpoint_id"] = parent
            new = checkpoint(big=[step])  # a list: a value of its own
            new["id"] = str(uuid6(clock_seq=step))
            new["channel_versions"] = {"big": saver.get_next_version(f"{step:032}.0", None)}
            putting = saver._put(config, new, {"source": "loop", "step": step}, dict(new["channel_versions"]))
            stored = next(putting)
            if step < 2:
                parent = _finish(putting, stored)["configurable"]["checkpoint_id"]
        assert isinstance(stored, Call)
        assert stored.method == "put_many"
        writes = stored.args[0]
        values = [write for write in writes if "blobs" in write.namespace]
        assert writes[: len(values)] == values
        versions = items.put_many(values)
        drop(saver)
        versions += items.put_many(writes[len(values) :])  # then the checkpoint
        with pytest.raises(StopIteration) as done:
            putting.send(versions)
        newest = saver.get_tuple(done.value.value)
        assert newest is not None
        assert newest.checkpoint["channel_values"] == {"big": [2]}


def test_prune_refuses_threads_using_a_delta_channel(items: ItemMemory) -> None:
    """As PostgresSaver: keeping only the newest checkpoint would cut the writes a DeltaChannel is rebuilt from."""
    saver = MemwovenSaver(items)
    config: dict[str, Any] = {"configurable": {"thread_id": "delta", "checkpoint_ns": ""}}
    metadata: Any = {"source": "loop", "step": 1, "counters_since_delta_snapshot": {"messages": (1, 1)}}
    saver.put(config, checkpoint(a=1), metadata, {"a": f"{1:032}.0"})
    put(saver, "plain", a=1)
    with pytest.raises(NotImplementedError, match="delta"):
        saver.prune(["plain", "delta"])
    assert len(list(saver.list({"configurable": {"thread_id": "plain"}}))) == 1
    saver.prune(["delta"], strategy="delete")
    assert list(saver.list({"configurable": {"thread_id": "delta"}})) == []


def _concatenated(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    return [*state, *(value for write in writes for value in write)]


class Logged(TypedDict):
    log: Annotated[list[str], DeltaChannel(_concatenated, snapshot_frequency=4)]


def test_keep_last_never_cuts_the_writes_a_delta_channel_is_rebuilt_from(items: ItemMemory) -> None:
    """A DeltaChannel's value is rebuilt from its writes back to a snapshot, a fork's through its ancestors however
    old: `keep_last` prunes such a thread only when each kept checkpoint holds the value, so every checkpoint
    kept reads back whole (it used to drop the older ones, and the state read back short)."""
    builder = StateGraph(Logged)
    builder.add_node("step", lambda state: {"log": [f"entry {len(state['log'])}"]})
    builder.add_edge(START, "step")
    saver = MemwovenSaver(items, keep_last=1)
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "delta"}}
    expected: list[str] = []
    for turn in range(11):
        graph.invoke({"log": []}, config)
        expected.append(f"entry {turn}")
        assert graph.get_state(config).values["log"] == expected
        history = [snapshot.values["log"] for snapshot in graph.get_state_history(config)]
        assert history[0] == expected
        assert all(log == expected[: len(log)] for log in history)  # each kept checkpoint whole
    assert len(history) < 2 * 11  # retention ran: not every checkpoint of the 11 turns is kept
    graph.update_state(config, {"log": ["by hand"]})  # a fork: its value rebuilt from the writes before it
    expected.append("by hand")
    for _ in range(5):
        assert graph.get_state(config).values["log"] == expected
        graph.invoke({"log": []}, config)
        expected.append(f"entry {len(expected)}")
    assert graph.get_state(config).values["log"] == expected
    assert all(s.values["log"] == expected[: len(s.values["log"])] for s in graph.get_state_history(config))


def test_list_pages_by_key_so_checkpoints_written_meanwhile_shift_nothing(
    items: ItemMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing longer than a page reads page after page; a checkpoint put (or pruned) between two pages must
    not make it return one twice or skip one (it paged by offset, and a new checkpoint on top shifted the rest)."""
    monkeypatch.setattr(saver_module, "_PAGE", 3)
    saver = MemwovenSaver(items)
    last = put(saver, "t", a=0)
    for value in range(1, 8):
        last = put(saver, "t", last["configurable"]["checkpoint_id"], a=value)
    before = [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": "t"}})]
    listing = items.list
    pages = []

    def list_then_write(*args: Any, **kwargs: Any) -> Any:
        found = listing(*args, **kwargs)
        pages.append(found)
        if len(pages) == 1:  # between the first page and the second
            put(saver, "t", last["configurable"]["checkpoint_id"], a=8)
        return found

    monkeypatch.setattr(items, "list", list_then_write)
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": "t"}})]
    assert len(pages) >= 3
    assert listed == before
    monkeypatch.setattr(items, "list", listing)
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 9
    saver.copy_thread("t", "u")  # the same checkpoint ids in two threads: pages end inside a run of equal keys
    everywhere = [(t.config["configurable"]["thread_id"], t.checkpoint["id"]) for t in saver.list(None)]
    ids = [checkpoint_id for thread, checkpoint_id in everywhere if thread == "t"]
    assert sorted(everywhere) == sorted((thread, checkpoint_id) for thread in "tu" for checkpoint_id in ids)
    assert len(everywhere) == 18


class Counted(TypedDict):
    count: int


def test_keep_last_and_prune_drop_the_subgraph_calls_of_dropped_checkpoints(items: ItemMemory) -> None:
    """A subgraph called as a node writes a namespace per call ("child:<task id>"): retention must not keep every
    call's namespace for ever (as PostgresSaver's prune drops a call once its root checkpoint is gone)."""
    child = StateGraph(Counted)
    child.add_node("inner", lambda state: {"count": state["count"] + 1})
    child.add_edge(START, "inner")
    parent = StateGraph(Counted)
    parent.add_node("child", child.compile())
    parent.add_edge(START, "child")

    def calls(saver: MemwovenSaver) -> list[tuple[str, ...]]:
        spaces = items.namespaces(prefix=(*saver.namespace, "checkpoints", "t"))
        return [space for space in spaces if ":" in space[-1]]

    for keep_last, namespace in ((2, ("kept",)), (None, ("pruned",))):
        saver = MemwovenSaver(items, namespace=namespace, keep_last=keep_last)
        graph = parent.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "t"}}
        for _ in range(4):
            graph.invoke({"count": 0}, config, durability="sync")
        if keep_last is None:
            assert len(calls(saver)) == 4
            saver.prune(["t"])  # keeps the root's newest checkpoint, after the last call
            assert calls(saver) == []
        else:
            assert len(calls(saver)) == 1  # the last run's: it started from one of the two root checkpoints kept
        assert graph.get_state(config).values == {"count": 1}


def test_keep_last_costs_a_put_a_few_item_calls_whatever_it_keeps(items: ItemMemory) -> None:
    """Retention in the steady state: one listing of the newest checkpoints (the dropped one among them), one of
    the dropped one's writes, one delete of it all; the looks for leftovers every `_HOUSEKEEPING` passes. What is
    left is exactly the kept checkpoints, their writes and the values they use."""
    for keep in (2, 30):
        saver = MemwovenSaver(items, namespace=(f"keep{keep}",), keep_last=keep)
        calls: list[str] = []
        saver.items = _Counting(items, calls)  # type: ignore[assignment]
        last = put(saver, "t", a=0)
        for value in range(1, keep + 40):
            if value == keep + 8:
                calls.clear()  # the steady state: one checkpoint dropped by each put
            saver.put_writes(last, [("a", value)], f"task{value}")
            last = put(saver, "t", last["configurable"]["checkpoint_id"], a=value)
        retention = [name for name in calls if name not in ("put", "put_many")]  # put_writes' put, the put's
        assert len(retention) / 32 <= 3 + 4 / saver_module._HOUSEKEEPING, calls
        kept = list(saver.list({"configurable": {"thread_id": "t"}}))
        assert len(kept) == keep
        ids = {t.config["configurable"]["checkpoint_id"] for t in kept}
        writes = items.list((*saver.namespace, "writes", "t"))
        assert {w.namespace[-1] for w in writes} == ids - {last["configurable"]["checkpoint_id"]}
        used = {saver_module._blob_key(c, v) for t in kept for c, v in t.checkpoint["channel_versions"].items()}
        assert {b.key for b in items.list((*saver.namespace, "blobs", "t"))} <= used


class _Counting:
    """An item memory's proxy noting the name of each method called."""

    def __init__(self, items: ItemMemory, calls: list[str]) -> None:
        self._items, self._calls = items, calls

    def __getattr__(self, name: str) -> Any:
        self._calls.append(name)
        return getattr(self._items, name)


def test_keep_last_deletes_the_writes_another_saver_left_for_a_dropped_checkpoint(items: ItemMemory) -> None:
    """A saver in another process knows no floor: its late write for a checkpoint this one dropped stays (read by
    nothing) until this one next looks for leftovers, within `_HOUSEKEEPING` puts."""
    saver, other = MemwovenSaver(items, keep_last=2), MemwovenSaver(items)
    configs = [put(saver, "t", a=0)]
    for value in range(1, 4):
        configs.append(put(saver, "t", configs[-1]["configurable"]["checkpoint_id"], a=value))
    dropped = configs[0]["configurable"]["checkpoint_id"]
    other.put_writes(configs[0], [("a", 9)], "late")
    writes = (*saver.namespace, "writes", "t")
    assert [w.namespace[-1] for w in items.list(writes)] == [dropped]  # left behind for now
    for value in range(4, 4 + saver_module._HOUSEKEEPING):
        configs.append(put(saver, "t", configs[-1]["configurable"]["checkpoint_id"], a=value))
    assert items.list(writes) == []


def test_a_thread_deleted_then_copied_into_keeps_its_new_writes(items: ItemMemory) -> None:
    """`keep_last` remembers a thread's floor for `put_writes`: deleting the thread, or copying another into it,
    forgets it, so writes to the new (older) checkpoints are kept."""
    saver = MemwovenSaver(items, keep_last=2)
    source = put(saver, "s", a=0)  # older than every checkpoint of t
    last = put(saver, "t", a=0)
    for value in range(1, 4):
        last = put(saver, "t", last["configurable"]["checkpoint_id"], a=value)
    saver.delete_thread("t")
    saver.copy_thread("s", "t")
    copied = {"configurable": {**source["configurable"], "thread_id": "t"}}
    saver.put_writes(copied, [("a", 5)], "task")
    assert pending(saver, "t") == [("task", "a", 5)]


def test_keep_last_catches_up_on_puts_that_skipped_their_retention(items: ItemMemory) -> None:
    """A cancelled `aput` may land its checkpoint and skip its retention (a saver without `keep_last` writes
    alike): the next completed put drops every older checkpoint, with its writes and values, however many."""
    unretained, saver = MemwovenSaver(items), MemwovenSaver(items, keep_last=3)
    last = put(unretained, "t", a=0)
    for step in range(1, 24):
        last = put(unretained, "t", last["configurable"]["checkpoint_id"], a=step)
        unretained.put_writes(last, [("a", step)], f"task{step}")
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 24
    put(saver, "t", last["configurable"]["checkpoint_id"], a=24)
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 3
    assert len(items.list((*saver.namespace, "writes", "t"))) == 2  # of the two older kept checkpoints
    assert len(items.list((*saver.namespace, "blobs", "t"))) <= 3
