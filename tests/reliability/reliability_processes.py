"""Writer processes for the concurrency and crash tests: one warm interpreter that forks writers on demand.

Importing memwoven, SQLAlchemy, the drivers, LangChain and LlamaIndex takes seconds: too long to pay for 8
writers per test, or for 200 writers per crash test. So the test session spawns one clean interpreter, the
zygote, which imports everything once and then only forks. It is single-threaded and opens no connection or
file, so each fork starts clean in a few milliseconds; the child opens its own memory objects, runs one job
from `reliability_jobs` and leaves with `os._exit` (its exit code says whether the job raised; the traceback
goes to a file).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRELOAD = (
    "memwoven",
    "memwoven.backends.redis",
    "memwoven.backends.redis_vector",
    "psycopg",
    "pymysql",
    "aiomysql",
    "aiosqlite",
    "langchain_memwoven",
    "llama_index.storage.chat_store.memwoven",
    "reliability_jobs",
)


@dataclass(frozen=True)
class Outcome:
    """How one forked writer ended: its wait status decoded, and the traceback it left (if it raised)."""

    exit_code: int | None  # None if it was killed by a signal
    signal: int | None
    error: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _decode(status: int, error: str) -> Outcome:
    if os.WIFSIGNALED(status):
        return Outcome(None, os.WTERMSIG(status), error)
    return Outcome(os.WEXITSTATUS(status), None, error)


def _child(job: str, args: tuple[Any, ...], error_file: Path, gate: tuple[int, int] | None) -> None:
    """The body of a forked writer: wait at the gate, run the job, leave without any cleanup of the zygote's."""
    code = 1
    try:
        if gate is not None:
            os.close(gate[1])
            os.read(gate[0], 1)  # returns at EOF, when the zygote closes its write end: every writer at once
            os.close(gate[0])
        jobs = importlib.import_module("reliability_jobs")
        getattr(jobs, job)(*args)
        code = 0
    except BaseException:
        with contextlib.suppress(OSError):
            error_file.write_text(traceback.format_exc())
    finally:
        os._exit(code)


def _wait(pids: list[int], deadline: float) -> dict[int, int]:
    """Reap `pids` (our own children); SIGKILL any still running at `deadline`."""
    statuses: dict[int, int] = {}
    while len(statuses) < len(pids):
        for pid in pids:
            if pid not in statuses:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    statuses[pid] = status
        if len(statuses) < len(pids):
            if time.monotonic() > deadline:
                for pid in pids:
                    if pid not in statuses:
                        os.kill(pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.005)
    return statuses


def _zygote(connection: Any, preload: tuple[str, ...]) -> None:
    """The zygote's loop: import once, then fork writers as asked until told to stop."""
    for module in preload:
        importlib.import_module(module)
    gc.collect()
    gc.freeze()  # forked children then share these pages instead of copying them on the first collection
    scratch = Path(tempfile.mkdtemp(prefix="mw-zygote-"))
    serial = 0
    connection.send("ready")
    while True:
        request = connection.recv()
        if request[0] == "stop":
            shutil.rmtree(scratch, ignore_errors=True)
            return
        if request[0] == "group":  # run one job in several writers released together; wait for all of them
            _, job, arguments, timeout = request
            gate = os.pipe()
            pids, errors = [], []
            for args in arguments:
                serial += 1
                errors.append(scratch / f"error-{serial}.txt")
                pid = os.fork()
                if pid == 0:
                    _child(job, args, errors[-1], gate)
                pids.append(pid)
            os.close(gate[0])
            os.close(gate[1])  # the gate opens
            statuses = _wait(pids, time.monotonic() + timeout)
            connection.send([_decode(statuses[pid], _read(error)) for pid, error in zip(pids, errors)])
        elif request[0] == "fork":  # start one writer and return its pid at once
            _, job, args = request
            serial += 1
            error = scratch / f"error-{serial}.txt"
            pid = os.fork()
            if pid == 0:
                _child(job, args, error, None)
            connection.send((pid, str(error)))
        elif request[0] == "reap":
            _, pid, error, timeout = request
            status = _wait([pid], time.monotonic() + timeout)[pid]
            connection.send(_decode(status, _read(Path(error))))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


class Zygote:
    """The parent's handle on the zygote process (one per test session)."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, theirs = context.Pipe()
        self._process = context.Process(target=_zygote, args=(theirs, preload), daemon=True, name="mw-zygote")
        self._process.start()
        theirs.close()
        if not self._connection.poll(120) or self._connection.recv() != "ready":
            raise RuntimeError("the zygote process did not start")

    def group(self, job: str, arguments: list[tuple[Any, ...]], timeout: float = 240.0) -> list[Outcome]:
        """Fork one writer per argument tuple, release them together and wait for all (killing any past `timeout`)."""
        self._connection.send(("group", job, arguments, timeout))
        return self._answer(timeout + 30)  # type: ignore[no-any-return]

    def fork(self, job: str, *args: Any) -> tuple[int, str]:
        """Start one writer running `job(*args)`; return its pid (and where its traceback would go)."""
        self._connection.send(("fork", job, args))
        return self._answer(30)  # type: ignore[no-any-return]

    def reap(self, pid: int, error: str, timeout: float = 30.0) -> Outcome:
        """Wait for a writer started by `fork` (SIGKILL it after `timeout`) and return how it ended."""
        self._connection.send(("reap", pid, error, timeout))
        return self._answer(timeout + 30)  # type: ignore[no-any-return]

    def _answer(self, timeout: float) -> Any:
        if not self._connection.poll(timeout):
            raise TimeoutError("the zygote did not answer")
        return self._connection.recv()

    def close(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self._connection.send(("stop",))
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)
        self._connection.close()
