"""Child processes for the multi-process tests: started cheaply, running a script that needs no importable module."""

from __future__ import annotations

import multiprocessing
from typing import Any


def process_context() -> Any:
    """Forkserver where available (fast: memwoven and pytest are imported once, children fork from it), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["memwoven.backends.file", "memwoven.testing"])
    return context


def start(context: Any, script: str, **variables: Any) -> Any:
    """Run `script` in a child process with `variables` as its globals (exec needs no importable test module)."""
    process = context.Process(target=exec, args=(script, {"__name__": "__child__", **variables}), daemon=True)
    process.start()
    return process
