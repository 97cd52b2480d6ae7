"""The `memwoven` command line (extra `memwoven[cli]`): inspect, export, import and migrate memory by URL.

`memwoven demo`, `memwoven sessions list|show|delete`, `memwoven export` / `import` (the JSON Lines format of
docs/export-format.md), `memwoven migrate FROM TO` and `memwoven vectors stats|search`. Exit codes: 0 success,
1 failure (a one-line reason on stderr, passwords hidden), 2 bad usage, 130 interrupted (Ctrl-C). typer and rich
are imported only here, never by the core.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

_CLI_EXTRA = ("typer", "rich", "click")


def main(argv: Sequence[str] | None = None) -> None:
    """The `memwoven` console script: run the command line on `argv` (default: `sys.argv[1:]`)."""
    try:
        from memwoven.cli._app import run
    except ModuleNotFoundError as error:
        if error.name not in _CLI_EXTRA:
            raise
        sys.stderr.write(
            f"memwoven: error: the command line needs the cli extra: pip install 'memwoven[cli]' ({error})\n"
        )
        raise SystemExit(1) from None
    run(argv)
