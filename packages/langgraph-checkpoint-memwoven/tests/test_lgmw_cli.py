"""`memwoven threads list|show` (this distribution's plugin of memwoven's command line) on threads real graphs
wrote to SQLite: through the installed console script (the entry point) and typer's CliRunner; and
`MemwovenSaver.list_threads` behind it, with and without a TTL, on memory, SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.store.memory import InMemoryStore
from saver_graphs import agent, call, reviewer
from saver_support import item_memory, kind_params
from typer.testing import CliRunner

from langgraph.checkpoint.memwoven import MemwovenSaver
from memwoven import ItemMemory
from memwoven.cli._app import app, load_plugins

if TYPE_CHECKING:
    from conftest import Clock

SCRIPT = Path(sys.executable).with_name("memwoven")  # the installed console script
ENV = {k: v for k, v in os.environ.items() if k != "MEMWOVEN_DEBUG"} | {"NO_COLOR": "1"}


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite file with an agent's thread (a tool call and its result), written with a TTL, and a review thread
    (channels of its own, stopped at an interrupt) written without."""
    where = f"sqlite:///{tmp_path / 'threads.db'}"
    with MemwovenSaver.from_url(where, ttl={"default_ttl": 60}) as saver:
        graph = agent([call("add", "c1", a=2, b=3), AIMessage("5")], saver, InMemoryStore())
        graph.invoke({"messages": [("user", "2 + 3?")]}, {"configurable": {"thread_id": "chat"}})
    with MemwovenSaver.from_url(where) as saver:
        reviewer(saver).invoke({"topic": "tea"}, {"configurable": {"thread_id": "review"}})
    return where


def memwoven(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=ENV, timeout=120, check=False)


def test_the_console_script_lists_and_shows_threads(url: str) -> None:
    listed = memwoven("threads", "list", url, "--json")
    assert listed.returncode == 0, listed.stderr
    threads = json.loads(listed.stdout)
    assert [t["thread_id"] for t in threads] == ["chat", "review"]
    assert threads[0]["expires_at"] > threads[0]["updated_at"]  # written with a TTL
    assert threads[1]["expires_at"] is None
    assert threads[1]["updated_at"]
    shown = memwoven("threads", "show", url, "chat")
    assert shown.returncode == 0, shown.stderr
    for text in ("chat", "user", "2 + 3?", '-> add({"a": 2, "b": 3})  [c1]', "<- result of c1", "4 messages"):
        assert text in shown.stdout
    missing = memwoven("threads", "show", url, "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"memwoven: error: no thread 'nope' at {url}"


def test_show_json_exports_the_latest_state(url: str) -> None:
    load_plugins()
    runner = CliRunner()
    result = runner.invoke(app, ["threads", "show", url, "chat", "--json"])
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)
    with MemwovenSaver.from_url(url) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "chat"}})
        assert latest is not None
        assert state["checkpoint_id"] == latest.checkpoint["id"]
        assert state["messages"] == [m.model_dump(mode="json") for m in saver.thread_messages("chat")]
    assert [m["role"] for m in state["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert state["metadata"]["step"] == latest.metadata["step"]
    review = json.loads(runner.invoke(app, ["threads", "show", url, "review", "--json"]).stdout)
    assert review["channel_values"] == {"topic": "tea", "draft": "a note on tea"}
    assert review["messages"] == []
    assert review["pending_writes"] == 1
    everything = json.loads(runner.invoke(app, ["threads", "show", url, "review", "--json", "--internal"]).stdout)
    assert everything["channel_values"] == {**review["channel_values"], "branch:to:review": None}
    table = runner.invoke(app, ["threads", "show", url, "review"])
    assert table.exit_code == 0
    assert "draft" in table.stdout
    assert '"a note on tea"' in table.stdout
    listed = runner.invoke(app, ["threads", "list", url])
    assert "2 threads at" in listed.stdout
    other = runner.invoke(app, ["threads", "list", url, "--namespace", "elsewhere"])
    assert "0 threads at" in other.stdout


def test_show_prints_any_channel_value_as_valid_json(tmp_path: Path) -> None:
    """Keys JSON has no form for (a tuple) and NaN: the command failed on the first and printed `NaN`, which is not
    JSON, for the second. Such keys and numbers are shown as their repr."""
    url = f"sqlite:///{tmp_path / 'odd.db'}"
    odd = {"pairs": {(1, 2): "pair", 3: [float("nan"), float("inf")], None: True}, "ratio": float("nan")}
    with MemwovenSaver.from_url(url) as saver:
        saver.put(
            {"configurable": {"thread_id": "odd", "checkpoint_ns": ""}},
            {
                "v": 1,
                "id": "1",
                "ts": "2026-11-29T00:00:00+00:00",
                "channel_values": odd,
                "channel_versions": dict.fromkeys(odd, "1"),
                "versions_seen": {},
                "updated_channels": None,
            },
            {"source": "input", "step": -1},
            dict.fromkeys(odd, "1"),
        )
    load_plugins()
    runner = CliRunner()
    shown = runner.invoke(app, ["threads", "show", url, "odd", "--json"])
    assert shown.exit_code == 0, shown.output
    state = json.loads(shown.stdout, parse_constant=lambda constant: pytest.fail(f"not JSON: {constant}"))
    assert state["channel_values"] == {
        "pairs": {"(1, 2)": "pair", "3": ["nan", "inf"], "null": True},
        "ratio": "nan",
    }
    table = runner.invoke(app, ["threads", "show", url, "odd"])
    assert table.exit_code == 0, table.output
    assert '"(1, 2)": "pair"' in table.stdout


def test_a_missing_database_is_an_error_not_a_new_file(tmp_path: Path) -> None:
    result = memwoven("threads", "list", f"sqlite:///{tmp_path / 'none.db'}")
    assert result.returncode == 1
    assert "no SQLite database" in result.stderr
    assert not (tmp_path / "none.db").exists()


@pytest.fixture(params=kind_params(["memory", "sqlite", "postgresql", "redis"]))
def items(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ItemMemory]:
    with item_memory(request.param, tmp_path) as memory:
        yield memory


async def test_list_threads_with_and_without_records(items: ItemMemory, clock: Clock) -> None:
    plain, expiring = MemwovenSaver(items), MemwovenSaver(items, ttl={"default_ttl": 1})
    config: Any = {"configurable": {"thread_id": "old"}}
    await reviewer(plain).ainvoke({"topic": "tea"}, config)
    clock.advance(5)
    await reviewer(expiring).ainvoke({"topic": "tea"}, {"configurable": {"thread_id": "new"}})
    threads = await plain.alist_threads()
    assert [t.thread_id for t in threads] == ["new", "old"]
    new, old = threads
    assert old.expires_at is None
    assert old.updated_at is not None
    assert new.expires_at is not None
    assert new.updated_at is not None
    assert (new.expires_at - new.updated_at).total_seconds() == 60
    assert new.updated_at > old.updated_at
    clock.advance(61)
    assert expiring.sweep_ttl() == 1
    assert [t.thread_id for t in plain.list_threads()] == ["old"]
