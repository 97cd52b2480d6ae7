"""`MemwovenSaver` from 8 processes at once: 8 graphs on 8 threads, and 8 writers on one thread (each chaining its
own checkpoints and writes). Afterwards every checkpoint each process wrote reads back whole from a fresh saver:
its channel values, metadata, parent and pending writes; none lost, none mixed up."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from saver_support import kind_params, storage_url

from langgraph.checkpoint.memwoven import MemwovenSaver

PROCESSES = 8
STEPS = 20  # graph super-steps per thread
PUTS = 15  # checkpoints each writer puts on the shared thread

GRAPH = textwrap.dedent(
    """
    import sys
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    from langgraph.checkpoint.memwoven import MemwovenSaver

    url, thread_id, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])


    class State(TypedDict):
        count: int
        trail: str


    def step(state: State) -> dict:
        return {"count": state["count"] + 1, "trail": state["trail"] + "."}


    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda state: "step" if state["count"] < steps else END)
    with MemwovenSaver.from_url(url) as saver:
        config = {"configurable": {"thread_id": thread_id}, "recursion_limit": steps + 10}
        builder.compile(checkpointer=saver).invoke({"count": 0, "trail": ""}, config, durability="sync")
    """
)

WRITER = textwrap.dedent(
    """
    import json
    import sys

    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from langgraph.checkpoint.memwoven import MemwovenSaver

    url, thread_id, tag, puts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    written = []
    with MemwovenSaver.from_url(url) as saver:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        version = None
        for i in range(puts):
            version = saver.get_next_version(version, None)
            checkpoint = {**empty_checkpoint(), "id": str(uuid6()), "channel_values": {"v": f"{tag}-{i}"}}
            checkpoint["channel_versions"] = {"v": version}
            metadata = {"source": "loop", "step": i, "parents": {}, "writer": tag}
            config = saver.put(config, checkpoint, metadata, {"v": version})
            saver.put_writes(config, [("v", f"write-{tag}-{i}")], task_id=f"task-{tag}-{i}")
            written.append(config["configurable"]["checkpoint_id"])
    print(json.dumps(written))
    """
)


def _run_all(commands: list[list[str]]) -> list[str]:
    """Start every command at once; wait for all; return their outputs (each must succeed)."""
    running = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    outputs = []
    for process in running:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
        outputs.append(out)
    return outputs


@pytest.mark.parametrize("kind", kind_params(["sqlite", "postgresql", "redis"]))
def test_eight_processes_on_eight_threads(kind: str, tmp_path: Path) -> None:
    with storage_url(kind, tmp_path) as url:
        threads = [f"thread-{n}" for n in range(PROCESSES)]
        _run_all([[sys.executable, "-c", GRAPH, url, thread, str(STEPS)] for thread in threads])
        with MemwovenSaver.from_url(url) as saver:
            for thread in threads:
                config = {"configurable": {"thread_id": thread}}
                history = list(saver.list(config))
                assert len(history) == STEPS + 2  # the input, then one per step: none lost
                latest = saver.get_tuple(config)
                assert latest is not None
                assert latest.checkpoint["channel_values"] == {"count": STEPS, "trail": "." * STEPS}
                ids = {t.checkpoint["id"] for t in history}
                assert all(
                    t.parent_config is None or t.parent_config["configurable"]["checkpoint_id"] in ids for t in history
                )


@pytest.mark.parametrize("kind", kind_params(["sqlite", "postgresql", "redis"]))
def test_eight_processes_on_one_thread(kind: str, tmp_path: Path) -> None:
    with storage_url(kind, tmp_path) as url:
        tags = [f"w{n}" for n in range(PROCESSES)]
        outputs = _run_all([[sys.executable, "-c", WRITER, url, "shared", tag, str(PUTS)] for tag in tags])
        written = {tag: json.loads(out) for tag, out in zip(tags, outputs)}
        with MemwovenSaver.from_url(url) as saver:
            stored = {t.checkpoint["id"]: t for t in saver.list({"configurable": {"thread_id": "shared"}})}
            assert len(stored) == PROCESSES * PUTS
            for tag, ids in written.items():
                for i, checkpoint_id in enumerate(ids):
                    found = stored[checkpoint_id]
                    assert found.checkpoint["channel_values"] == {"v": f"{tag}-{i}"}
                    assert (found.metadata["writer"], found.metadata["step"]) == (tag, i)
                    assert found.pending_writes == [(f"task-{tag}-{i}", "v", f"write-{tag}-{i}")]
                    parent = None if i == 0 else ids[i - 1]
                    assert (found.parent_config or {}).get("configurable", {}).get("checkpoint_id") == parent
