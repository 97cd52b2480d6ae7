"""What a `memwoven` CLI plugin builds on, so that its commands read and look like the core's.

A plugin is a `typer.Typer` declared in the ``memwoven.cli`` entry point group (its name is the command group's):
``[project.entry-points."memwoven.cli"] threads = "langgraph.checkpoint.memwoven._cli:app"``. The core loads it
when a command it does not know is asked for, or for ``--help``.
"""

from __future__ import annotations

from memwoven.cli._app import Json, Url
from memwoven.cli._app import _namespace as namespace_argument
from memwoven.cli._app import _print_json as print_json
from memwoven.cli._render import messages_table, plural, stdout_console, when
from memwoven.cli._stores import NAMESPACE_SYNTAX, Failure, Store

__all__ = [
    "NAMESPACE_SYNTAX",
    "Failure",
    "Json",
    "Store",
    "Url",
    "messages_table",
    "namespace_argument",
    "plural",
    "print_json",
    "stdout_console",
    "when",
]
