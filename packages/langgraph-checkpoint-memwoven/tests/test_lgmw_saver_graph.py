"""`MemwovenSaver` under real graphs: an agent with a fake tool-calling model runs three turns on SQLite and a
second process resumes the thread from a fresh saver (messages, tool calls and store intact); an `interrupt()`
left by one process is resumed by another. Plus retention (`keep_last`) and O(change) writes per step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from langgraph.types import Command
from saver_graphs import agent, call, reviewer
from saver_support import kind_params, storage_url

from langgraph.checkpoint.memwoven import AsyncMemwovenSaver, MemwovenSaver
from langgraph.store.memwoven import MemwovenStore
from memwoven import open_item_memory

HERE = Path(__file__).parent


def in_second_process(kind: str, url: str, thread_id: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(HERE / "saver_graphs.py"), kind, url, thread_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", kind_params(["sqlite", "postgresql", "redis"]))
def test_an_agent_thread_resumes_in_another_process(kind: str, tmp_path: Path) -> None:
    with storage_url(kind, tmp_path) as url:
        agent_thread_resumes(url)


def agent_thread_resumes(url: str) -> None:
    config = {"configurable": {"thread_id": "t1"}}
    replies = [
        call("add", "c1", a=2, b=3),
        AIMessage("2 + 3 = 5"),
        AIMessage("hello to you too"),
        call("add", "c2", a=4, b=4),
        AIMessage("4 + 4 = 8"),
    ]
    with MemwovenSaver.from_url(url) as saver, MemwovenStore.from_url(url, namespace=("store",)) as store:
        saver.setup()
        graph = agent(replies, saver, store)
        for question in ("what is 2 + 3?", "hello", "and 4 + 4?"):
            graph.invoke({"messages": [("user", question)]}, config)
        assert len(list(saver.list(config))) > 6
    found = in_second_process("agent", url, "t1")
    assert found["before"] == [
        ["human", "what is 2 + 3?", []],
        ["ai", "", ["add"]],
        ["tool", "5", []],
        ["ai", "2 + 3 = 5", []],
        ["human", "hello", []],
        ["ai", "hello to you too", []],
        ["human", "and 4 + 4?", []],
        ["ai", "", ["add"]],
        ["tool", "8", []],
        ["ai", "4 + 4 = 8", []],
    ]
    assert found["after"] == ["anything else?", "that was all"]
    assert found["turns"] == 6  # five model calls here, one there: the store is shared too


def test_an_interrupt_is_resumed_by_another_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'review.db'}"
    config = {"configurable": {"thread_id": "r1"}}
    with MemwovenSaver.from_url(url) as saver:
        paused = reviewer(saver).invoke({"topic": "tea"}, config)
        assert paused["__interrupt__"][0].value == {"draft": "a note on tea"}
    found = in_second_process("review", url, "r1")
    assert found["next"] == ["review"]
    assert found["interrupts"] == [{"draft": "a note on tea"}]
    assert found["result"] == {"topic": "tea", "draft": "a note on tea", "verdict": "approved"}
    with MemwovenSaver.from_url(url) as saver:
        assert reviewer(saver).get_state(config).next == ()


@pytest.mark.asyncio
async def test_an_async_graph_and_keep_last(tmp_path: Path) -> None:
    items = open_item_memory(f"sqlite:///{tmp_path / 'async.db'}")
    saver = AsyncMemwovenSaver(items, keep_last=2)
    await saver.setup()
    graph = reviewer(saver)
    for thread in ("a", "b"):
        config = {"configurable": {"thread_id": thread}}
        await graph.ainvoke({"topic": thread}, config)
        await graph.ainvoke(Command(resume="ok"), config)
        kept = [t async for t in saver.alist(config)]
        assert len(kept) == 2
        assert kept[0].checkpoint["channel_values"]["verdict"] == "ok"
    # only the values the two kept checkpoints use remain, and the dropped checkpoints' writes are gone
    for thread in ("a", "b"):
        kept = [t async for t in saver.alist({"configurable": {"thread_id": thread}})]
        used = {(channel, version) for t in kept for channel, version in t.checkpoint["channel_versions"].items()}
        blobs = await items.alist((*saver.namespace, "blobs", thread))
        assert {tuple(json.loads(b.key)) for b in blobs} <= used
        writes = await items.alist((*saver.namespace, "writes", thread))
        assert {w.namespace[-1] for w in writes} <= {t.config["configurable"]["checkpoint_id"] for t in kept}
    await items.aclose()


def test_a_step_writes_only_what_changed(tmp_path: Path) -> None:
    items = open_item_memory("memory://")
    saver = MemwovenSaver(items)
    graph = reviewer(saver)
    config = {"configurable": {"thread_id": "w"}}
    graph.invoke({"topic": "cost"}, config)
    blobs = len(items.list((*saver.namespace, "blobs")))
    checkpoints = len(items.list((*saver.namespace, "checkpoints")))
    graph.invoke(Command(resume=["fine", "ship it"]), config)  # a list: a value of its own (not kept inline)
    # resuming runs one node writing one channel: one new checkpoint, and values only for the changed channels
    assert len(items.list((*saver.namespace, "checkpoints"))) == checkpoints + 1
    latest = saver.get_tuple(config)
    assert latest is not None
    changed = len(items.list((*saver.namespace, "blobs"))) - blobs
    assert 1 <= changed <= len(latest.checkpoint["updated_channels"] or []) + 1
