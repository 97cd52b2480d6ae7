"""`MemwovenSaver` under concurrent graphs: 8 threads driving 8 graph threads, and 8 driving one graph thread, on
files, SQLite, PostgreSQL, MariaDB and Redis: every checkpoint put is stored and reads back whole."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from saver_graphs import reviewer
from saver_support import item_memory, kind_params

from langgraph.checkpoint.memwoven import MemwovenSaver

WORKERS = 8


class CountingSaver(MemwovenSaver):
    """Counts the checkpoints put per graph thread (list.append is atomic under the GIL)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.puts: list[str] = []

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        stored = super().put(config, checkpoint, metadata, new_versions)
        self.puts.append(stored["configurable"]["thread_id"])
        return stored


@pytest.mark.parametrize("kind", kind_params(["file", "sqlite", "postgresql", "mariadb", "redis"]))
@pytest.mark.parametrize("shared", [False, True], ids=["own-threads", "one-thread"])
def test_concurrent_graphs_lose_no_checkpoint(kind: str, shared: bool, tmp_path: Path) -> None:
    with item_memory(kind, tmp_path) as items:
        saver = CountingSaver(items)
        graph = reviewer(saver)

        def drive(worker: int) -> None:
            config = {"configurable": {"thread_id": "shared" if shared else f"t{worker}"}}
            graph.invoke({"topic": f"topic {worker}"}, config)
            if not shared:  # on a shared thread another worker's interrupt may be the latest: resume only own ones
                graph.invoke(Command(resume=f"verdict {worker}"), config)

        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(drive, range(WORKERS)))
        for thread in set(saver.puts):
            stored = list(saver.list({"configurable": {"thread_id": thread}}))
            assert len(stored) == saver.puts.count(thread)
            assert len({t.config["configurable"]["checkpoint_id"] for t in stored}) == len(stored)
        if shared:
            assert len(saver.puts) >= WORKERS * 3
        else:
            for worker in range(WORKERS):
                state = graph.get_state({"configurable": {"thread_id": f"t{worker}"}})
                assert state.values == {
                    "topic": f"topic {worker}",
                    "draft": f"a note on topic {worker}",
                    "verdict": f"verdict {worker}",
                }
