"""`memwoven threads`: the LangGraph threads a `MemwovenSaver` keeps, on the memwoven command line.

A plugin of the core CLI (entry point group ``memwoven.cli``, declared in this distribution's pyproject): `memwoven
threads list URL` lists the threads, `memwoven threads show URL THREAD_ID` shows a thread's latest state (its
channel values, the messages channel as `memwoven sessions show` shows a session); `--json` exports either.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.table import Table
from rich.text import Text

from langgraph.checkpoint.memwoven.base import MemwovenSaver, messages_of
from memwoven.cli.plugins import (
    NAMESPACE_SYNTAX,
    Failure,
    Json,
    Store,
    Url,
    messages_table,
    namespace_argument,
    plural,
    print_json,
    stdout_console,
    when,
)

__all__ = ["app"]

app = typer.Typer(
    help="LangGraph threads of a checkpointer (MemwovenSaver): list, show.", no_args_is_help=True, rich_markup_mode=None
)
SaverNamespace = Annotated[
    str,
    typer.Option(
        "--namespace",
        metavar="NAMESPACE",
        help=f"The saver's namespace (MemwovenSaver(namespace=...)): {NAMESPACE_SYNTAX}.",
    ),
]
DEFAULT_NAMESPACE = "langgraph_checkpoints"
_INTERNAL = ("branch:", "__")  # LangGraph's own channels: edges waiting to be taken, tasks, ...


def _saver(url: str, namespace: str) -> tuple[Store, MemwovenSaver | None]:
    """The store at `url` and a saver on its items (None when nothing was ever stored there)."""
    store = Store(url)
    store.check_exists()
    store.require_items()
    labels = namespace_argument(namespace, hint="--namespace")
    if not store.holds_items():
        return store, None
    return store, MemwovenSaver(store.open_items(), namespace=labels, owns_items=True)


def _plain(value: Any) -> Any:
    """A channel value as JSON can hold it: objects and arrays of plain values; pydantic models and dataclasses
    as their fields; keys other than strings, numbers, booleans and None, NaN, infinities and anything else as
    their repr."""
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {key if isinstance(key, str) else _key(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return repr(value)


def _key(key: Any) -> str:
    """An object key as JSON text: as `json.dumps` writes numbers, booleans and None, else its repr."""
    if key is None or isinstance(key, (bool, int)) or (isinstance(key, float) and math.isfinite(key)):
        return json.dumps(key)
    return repr(key)


@app.command("list")
def threads_list(url: Url, namespace: SaverNamespace = DEFAULT_NAMESPACE, as_json: Json = False) -> None:
    """List the threads of a checkpointer.

    For each: its id, last write and, for a saver with a TTL, when it expires.
    """
    store, saver = _saver(url, namespace)
    threads = []
    if saver is not None:
        with saver:
            threads = saver.list_threads()
    if as_json:
        print_json(
            [
                {
                    "thread_id": thread.thread_id,
                    "updated_at": None if thread.updated_at is None else thread.updated_at.isoformat(),
                    "expires_at": None if thread.expires_at is None else thread.expires_at.isoformat(),
                }
                for thread in threads
            ]
        )
        return
    console = stdout_console()
    if threads:
        table = Table()
        table.add_column("thread", overflow="fold")
        table.add_column("last write", no_wrap=True)
        table.add_column("expires", no_wrap=True)
        for thread in threads:
            table.add_row(Text(thread.thread_id), when(thread.updated_at), when(thread.expires_at))
        console.print(table)
    console.print(Text(f"{plural(len(threads), 'thread')} at {store.shown}", style="dim"))


@app.command("show")
def threads_show(
    url: Url,
    thread_id: Annotated[str, typer.Argument(metavar="THREAD_ID", help="The thread id.", show_default=False)],
    checkpoint_ns: Annotated[
        str, typer.Option("--checkpoint-ns", metavar="NS", help="A subgraph's checkpoint namespace (default: root).")
    ] = "",
    channel: Annotated[
        str, typer.Option("--messages", metavar="CHANNEL", help="The channel holding the messages.")
    ] = "messages",
    internal: Annotated[
        bool, typer.Option("--internal", help="Show LangGraph's internal channels too (branch:..., __...).")
    ] = False,
    namespace: SaverNamespace = DEFAULT_NAMESPACE,
    as_json: Json = False,
) -> None:
    """Show a thread's latest state: its checkpoint, channel values and messages.

    The messages channel is shown as `sessions show` shows a session; --json exports the state (messages as
    memwoven messages, other values as JSON, or their repr).
    """
    store, saver = _saver(url, namespace)
    found = None
    if saver is not None:
        with saver:
            found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}})
    if found is None:
        raise Failure(f"no thread {thread_id!r} at {store.shown}")
    values: dict[str, Any] = {
        name: value
        for name, value in found.checkpoint["channel_values"].items()
        if internal or not name.startswith(_INTERNAL)
    }
    messages = messages_of(found, channel) if channel in values else []
    values.pop(channel, None)
    parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    step = found.metadata.get("step")
    if as_json:
        plain = {name: _plain(value) for name, value in values.items()}
        print_json(
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": found.checkpoint["id"],
                "parent_checkpoint_id": parent,
                "created_at": found.checkpoint["ts"],
                "metadata": _plain(found.metadata),
                "channel_values": plain,
                "messages": [m.model_dump(mode="json") for m in messages],
                "pending_writes": len(found.pending_writes or []),
            }
        )
        return
    console = stdout_console()
    table = Table(show_header=False, title=Text(f"{thread_id}  ·  step {step}"), title_justify="left")
    table.add_column("field", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, shown in (
        ("checkpoint", found.checkpoint["id"]),
        ("parent", parent or "-"),
        ("created", found.checkpoint["ts"]),
        ("source", str(found.metadata.get("source", "-"))),
        ("pending writes", str(len(found.pending_writes or []))),
    ):
        table.add_row(name, Text(shown))
    for name, value in sorted(values.items()):
        table.add_row(Text(name, style="bold"), Text(json.dumps(_plain(value), ensure_ascii=False)))
    console.print(table)
    if messages:
        shown_messages = messages_table(thread_id, messages, 0)
        shown_messages.title = Text(f"{channel}  ·  {plural(len(messages), 'message')}")
        console.print(shown_messages)
