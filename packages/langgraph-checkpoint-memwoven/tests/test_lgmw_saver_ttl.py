"""`MemwovenSaver(ttl=...)`: threads expiring after their last put (sliding on write), swept whole by `sweep_ttl`
(or pruned, strategy ``keep_latest``) and by the sweeper thread / task, on memory, file, SQLite (also through
the encryption wrapper, whose filters run in process), PostgreSQL, MariaDB and Redis; a put racing the sweep
(driven step by step) either keeps the thread or fails writing nothing; a continued run never resurrects a
deleted thread; savers writing one thread concurrently lose no checkpoint. Expiry runs on memwoven's clock
(`memwoven._clock`), moved forward instead of sleeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command
from saver_graphs import reviewer
from saver_support import item_memory, kind_params

from langgraph.checkpoint.memwoven import MemwovenSaver, ThreadDeletedError
from memwoven import ItemMemory
from memwoven._steps import execute
from memwoven.contracts import MAX_TTL
from memwoven.errors import ConcurrentModificationError, InvalidInputError

if TYPE_CHECKING:
    from conftest import Clock

TTL: Any = {"default_ttl": 1}  # one minute
ALL = ["memory", "file", "sqlite", "encrypted-sqlite", "postgresql", "mariadb", "redis"]


@pytest.fixture(params=kind_params(ALL))
def items(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ItemMemory]:
    with item_memory(request.param, tmp_path) as memory:
        yield memory


@pytest.fixture(params=["memory", "sqlite"])
def local_items(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ItemMemory]:
    with item_memory(request.param, tmp_path) as memory:
        yield memory


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def run(saver: MemwovenSaver, thread: str, topic: str = "tea") -> None:
    """A real graph on `thread`: write a draft, stop at the review's interrupt, resume it."""
    graph = reviewer(saver)
    graph.invoke({"topic": topic}, config(thread))
    graph.invoke(Command(resume="ok"), config(thread))


def stored_threads(saver: MemwovenSaver, items: ItemMemory) -> set[str]:
    """The threads with any checkpoint, channel value or write stored."""
    depth = len(saver.namespace) + 1
    kinds = ("checkpoints", "blobs", "writes")
    return {ns[depth] for kind in kinds for ns in items.namespaces(prefix=(*saver.namespace, kind))}


def test_an_idle_thread_expires_and_the_sweep_deletes_it_whole(items: ItemMemory, clock: Clock) -> None:
    saver = MemwovenSaver(items, ttl=TTL)
    run(saver, "a")
    run(saver, "b")
    clock.advance(30)
    run(saver, "b", "coffee")  # b's minute starts again
    clock.advance(40)
    assert saver.get_tuple(config("a")) is not None  # expired, not swept yet: still readable
    assert saver.sweep_ttl() == 1
    assert saver.get_tuple(config("a")) is None
    assert stored_threads(saver, items) == {"b"}
    assert reviewer(saver).get_state(config("b")).values["verdict"] == "ok"
    assert saver.sweep_ttl() == 0
    clock.advance(61)  # b expires; a's tombstone too (a second pass, then it is dropped)
    assert saver.sweep_ttl() == 1
    assert stored_threads(saver, items) == set()
    (left,) = items.list((*saver.namespace,))  # b's tombstone, for one more minute
    assert (left.key, left.value["state"]) == ("b", "deleted")
    clock.advance(61)
    assert saver.sweep_ttl() == 0
    assert items.list(()) == []
    run(saver, "b", "juice")  # a fresh start on a deleted thread's id
    assert reviewer(saver).get_state(config("b")).values["topic"] == "juice"


async def test_the_async_sweep_and_keep_latest(local_items: ItemMemory, clock: Clock) -> None:
    saver = MemwovenSaver(local_items, ttl={**TTL, "strategy": "keep_latest"})
    graph = reviewer(saver)
    await graph.ainvoke({"topic": "tea"}, config("t"))
    await graph.ainvoke(Command(resume="ok"), config("t"))
    assert len([c async for c in saver.alist(config("t"))]) > 1
    clock.advance(61)
    assert await saver.asweep_ttl() == 1
    kept = [c async for c in saver.alist(config("t"))]
    assert len(kept) == 1
    assert (await graph.aget_state(config("t"))).values["verdict"] == "ok"
    clock.advance(600)
    assert await saver.asweep_ttl() == 0  # pruned once; the next write starts a new minute
    await graph.ainvoke({"topic": "more"}, config("t"))
    clock.advance(61)
    assert await saver.asweep_ttl() == 1


def drive_until(steps: Any, method: str) -> Any:
    """Run the steps of an operation up to (not including) the first `Call` of `method`; that step is returned."""
    step = steps.send(None)
    while getattr(step, "method", None) != method:
        step = steps.send(execute(step))
    return step


def finish(steps: Any, step: Any) -> Any:
    """Run the rest of the steps from `step` on (exceptions thrown back into them, as `memwoven._steps.run`)."""
    try:
        while True:
            try:
                result = execute(step)
            except ConcurrentModificationError as error:
                step = steps.throw(error)
            else:
                step = steps.send(result)
    except StopIteration as done:
        return done.value


def test_a_put_landing_before_the_claim_keeps_the_thread(items: ItemMemory, clock: Clock) -> None:
    runner, sweeper = MemwovenSaver(items, ttl=TTL), MemwovenSaver(items, ttl=TTL)
    run(runner, "t")
    clock.advance(61)
    sweep = sweeper._sweep_ttl()
    claim = drive_until(sweep, "put")  # the sweep has listed t as expired
    run(runner, "t", "again")  # ... and the run writes it meanwhile
    assert finish(sweep, claim) == 0  # the claim's compare-and-set fails: t is kept
    assert reviewer(runner).get_state(config("t")).values["topic"] == "again"
    assert sweeper.sweep_ttl() == 0


def test_a_put_racing_the_deletion_fails_and_writes_nothing(items: ItemMemory, clock: Clock) -> None:
    runner, sweeper, other = (MemwovenSaver(items, ttl=TTL) for _ in range(3))
    run(runner, "t")
    run(runner, "u")
    latest = runner.get_tuple(config("t"))
    assert latest is not None
    resumed = other.get_tuple(config("t"))  # a second process read the thread (no record version known)
    assert resumed is not None
    clock.advance(61)
    sweep = sweeper._sweep_ttl()
    step = drive_until(sweep, "delete_many")  # claimed "deleting", deleting the items now
    for saver, parent in ((runner, latest), (other, resumed)):
        with pytest.raises(ThreadDeletedError, match="being deleted"):
            run_on(saver, parent.config)
    with pytest.raises(ThreadDeletedError, match="being deleted"):
        run(MemwovenSaver(items, ttl=TTL), "t")  # not even a fresh start, until the sweep is done
    assert finish(sweep, step) == 2
    assert stored_threads(runner, items) == set()
    for saver, parent in ((runner, latest), (other, resumed), (MemwovenSaver(items, ttl=TTL), latest)):
        with pytest.raises(ThreadDeletedError, match="was deleted"):  # a continued run resurrects nothing
            run_on(saver, parent.config)
    assert stored_threads(runner, items) == set()
    run(MemwovenSaver(items, ttl=TTL), "t", "fresh")  # a fresh start is fine (a new incarnation of t)
    with pytest.raises(ThreadDeletedError, match="was deleted"):  # the old run still cannot continue
        run_on(runner, latest.config)
    assert reviewer(other).get_state(config("t")).values["topic"] == "fresh"


def run_on(saver: MemwovenSaver, parent: Any) -> None:
    """Continue a thread from the checkpoint `parent` names (a fork: `update_state` puts a checkpoint)."""
    reviewer(saver).update_state(parent, {"verdict": "changed"})


def test_delete_thread_with_a_ttl_refuses_the_old_run_and_allows_a_new_one(local_items: ItemMemory) -> None:
    saver, other = MemwovenSaver(local_items, ttl=TTL), MemwovenSaver(local_items, ttl=TTL)
    run(saver, "t")
    latest = other.get_tuple(config("t"))
    assert latest is not None
    run_on(other, latest.config)  # other now knows t's record
    saver.delete_thread("t")
    assert saver.get_tuple(config("t")) is None
    with pytest.raises(ThreadDeletedError):
        run_on(other, latest.config)
    run(other, "t", "new")
    assert reviewer(saver).get_state(config("t")).values["topic"] == "new"
    saver.copy_thread("t", "copy")
    saver.delete_thread("t")
    assert reviewer(saver).get_state(config("copy")).values["topic"] == "new"


def test_the_sweeper_thread_and_task_sweep_on_schedule(local_items: ItemMemory, clock: Clock) -> None:
    saver = MemwovenSaver(local_items, ttl={**TTL, "sweep_interval_minutes": 0.001})  # every 60 ms
    run(saver, "t")
    clock.advance(61)
    done = saver.start_ttl_sweeper()
    deadline = time.monotonic() + 10
    while saver.get_tuple(config("t")) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert saver.stop_ttl_sweeper(timeout=10)
    assert done.result(timeout=1) is None
    assert saver.get_tuple(config("t")) is None

    async def scheduled() -> None:
        run(saver, "u")
        clock.advance(61)
        await saver.astart_ttl_sweeper()
        for _ in range(500):  # the task runs every 60 ms
            if await saver.aget_tuple(config("u")) is None:
                break
            await asyncio.sleep(0.02)
        assert await saver.astop_ttl_sweeper(timeout=10)

    asyncio.run(scheduled())
    assert saver.get_tuple(config("u")) is None
    with MemwovenSaver(local_items) as plain:  # no ttl: nothing to sweep, on no schedule
        assert plain.sweep_ttl() == 0
        assert plain.start_ttl_sweeper().result(timeout=1) is None


def test_a_second_start_returns_a_future_that_stops_the_running_sweeper(local_items: ItemMemory) -> None:
    """As LangGraph's stores: starting a running sweeper again returns a pending future; cancelling it stops the
    sweeper (it returned a finished future, which cannot be cancelled)."""
    saver = MemwovenSaver(local_items, ttl={**TTL, "sweep_interval_minutes": 10})
    first = saver.start_ttl_sweeper()
    again = saver.start_ttl_sweeper()
    assert not again.done()
    assert again.cancel()
    assert first.result(timeout=10) is None  # the sweeper stopped
    assert saver.stop_ttl_sweeper(timeout=10)


def test_a_sweep_handles_at_most_sweep_limit_threads(local_items: ItemMemory, clock: Clock) -> None:
    saver = MemwovenSaver(local_items, ttl={**TTL, "sweep_limit": 2})
    for thread in "abcde":
        run(saver, thread)
    clock.advance(61)
    assert [saver.sweep_ttl() for _ in range(4)] == [2, 2, 1, 0]


def test_bad_ttl_configs_are_refused(local_items: ItemMemory) -> None:
    for bad in (
        {"default_ttl": 0},
        {"default_ttl": "1"},
        {"strategy": "archive"},
        {"sweep_limit": 0},
        {"sweep_interval_minutes": -1},
        {"default_tll": 1},
        "1",
    ):
        with pytest.raises(InvalidInputError):
            MemwovenSaver(local_items, ttl=bad)  # type: ignore[arg-type]
    assert local_items.list(()) == []


def test_a_default_ttl_up_to_max_ttl_is_taken_and_a_longer_one_refused(items: ItemMemory) -> None:
    for minutes in (MAX_TTL / 60 * 1.001, 1e300):  # their expiries were past what list_threads could show
        with pytest.raises(InvalidInputError, match="at most"):
            MemwovenSaver(items, ttl={"default_ttl": minutes})
    saver = MemwovenSaver(items, ttl={"default_ttl": MAX_TTL / 60})
    saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    [thread] = saver.list_threads()
    assert thread.expires_at is not None
    assert thread.expires_at.year > 2300
    assert saver.sweep_ttl() == 0


@pytest.mark.parametrize("kind", kind_params(["sqlite", "postgresql", "redis"]))
def test_savers_writing_one_thread_concurrently_lose_nothing(kind: str, tmp_path: Path) -> None:
    with item_memory(kind, tmp_path) as items:
        savers = [MemwovenSaver(items, ttl=TTL) for _ in range(6)]

        def drive(worker: int) -> int:
            graph = reviewer(savers[worker])
            graph.invoke({"topic": f"topic {worker}"}, config("shared"))
            return len(list(savers[worker].list(config("shared"))))

        with ThreadPoolExecutor(len(savers)) as pool:
            list(pool.map(drive, range(len(savers))))
        stored = list(savers[0].list(config("shared")))
        assert len(stored) >= 3 * len(savers)  # input, write, review of each run
        (record,) = items.list((*savers[0].namespace, "threads"))
        assert record.value["state"] == "live"


def test_a_deletion_left_by_a_dead_deleter_is_finished_once_its_lease_runs_out(items: ItemMemory, clock: Clock) -> None:
    runner, deleter = MemwovenSaver(items, ttl=TTL), MemwovenSaver(items, ttl=TTL)
    run(runner, "t")
    latest = runner.get_tuple(config("t"))
    assert latest is not None
    dead = deleter._delete_thread("t")
    pending = drive_until(dead, "delete_many")  # claimed, its process killed here: never driven again
    with pytest.raises(ThreadDeletedError, match="being deleted"):
        start(MemwovenSaver(items, ttl=TTL), "t")  # its lease holds
    clock.advance(61)
    start(MemwovenSaver(items, ttl=TTL), "t")  # takes the deletion over, finishes it, starts afresh
    with pytest.raises(ThreadDeletedError, match="was deleted"):
        run_on(runner, latest.config)
    run(MemwovenSaver(items, ttl=TTL), "t", "fresh")
    fresh = list(runner.list(config("t")))
    assert reviewer(runner).get_state(config("t")).values["topic"] == "fresh"
    assert {c.checkpoint["channel_values"].get("topic") for c in fresh} == {"fresh", None}
    finish(dead, pending)  # the old deleter wakes up: its claim is lost, it deletes nothing of the new thread
    assert [c.config for c in runner.list(config("t"))] == [c.config for c in fresh]
    (record,) = items.list((*runner.namespace, "threads"))
    assert record.value["state"] == "live"


def test_a_stale_claim_is_finished_by_the_sweep_and_by_delete_thread(local_items: ItemMemory, clock: Clock) -> None:
    saver = MemwovenSaver(local_items, ttl={"default_ttl": 60})
    for thread in ("s", "d"):
        run(saver, thread)
        drive_until(MemwovenSaver(local_items, ttl=TTL)._delete_thread(thread), "delete_many")
    clock.advance(61)  # the leases ran out, the threads' own hour did not
    assert saver.sweep_ttl() == 2
    assert stored_threads(saver, local_items) == set()
    run(saver, "d")
    drive_until(MemwovenSaver(local_items, ttl=TTL)._delete_thread("d"), "delete_many")
    clock.advance(61)
    saver.delete_thread("d")
    assert stored_threads(saver, local_items) == set()


@pytest.mark.parametrize("kind", kind_params(["sqlite", "postgresql", "redis"]))
async def test_a_cancelled_delete_thread_leaves_the_thread_writable(kind: str, tmp_path: Path) -> None:
    with item_memory(kind, tmp_path) as items:
        saver = MemwovenSaver(items, ttl=TTL)
        for turns in range(2, 23, 2):
            thread = f"t{turns}"
            graph = reviewer(saver)
            await graph.ainvoke({"topic": "tea"}, config(thread))
            before = {c.checkpoint["id"] async for c in saver.alist(config(thread))}
            deleting = asyncio.ensure_future(saver.adelete_thread(thread))
            for _ in range(turns):
                await asyncio.sleep(0)
            deleting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await deleting
            fresh = MemwovenSaver(items, ttl=TTL)
            await start(fresh, thread, asynchronous=True)  # a fresh start is accepted
            left = {c.checkpoint["id"] async for c in fresh.alist(config(thread))} & before
            assert left in (set(), before), turns  # deleted whole, or (cancelled before it began) not at all
            await reviewer(fresh).ainvoke({"topic": "fresh"}, config(thread))
            assert (await reviewer(fresh).aget_state(config(thread))).values["topic"] == "fresh"


def start(saver: MemwovenSaver, thread: str, *, asynchronous: bool = False) -> Any:
    """A fresh start of `thread`: a checkpoint put without a parent."""
    args = (config(thread), empty_checkpoint(), {"source": "input", "step": -1}, {})
    return saver.aput(*args) if asynchronous else saver.put(*args)
