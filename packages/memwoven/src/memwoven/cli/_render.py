"""How the command line shows things: rich tables and readable messages (user text is never read as markup)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memwoven.cli._stores import SessionSummary, item_size, show_namespace
from memwoven.models import ImagePart, Item, Message, OpaquePart, ScoredDocument, TextPart

__all__ = [
    "ROLE_STYLES",
    "human_size",
    "item_table",
    "items_table",
    "message_text",
    "messages_table",
    "plural",
    "search_table",
    "sessions_table",
    "stdout_console",
    "when",
]

ROLE_STYLES = {"system": "magenta", "developer": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}


def stdout_console() -> Console:
    """A console on stdout; wide and plain when stdout is not a terminal, so piped output is not wrapped."""
    terminal = sys.stdout.isatty()
    return Console(highlight=False, width=None if terminal else 200, soft_wrap=not terminal)


def plural(count: int, word: str) -> str:
    """`1 session`, `2 sessions`."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def human_size(size: int) -> str:
    """Bytes as B, kB, MB or GB (powers of 1000)."""
    value = float(size)
    for unit in ("B", "kB", "MB"):
        if value < 1000:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def when(moment: datetime | None) -> str:
    """A UTC time to the second, or '-' when unknown."""
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _arguments(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


def _part(part: TextPart | ImagePart | OpaquePart) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        if part.url is not None:
            shown = part.url if len(part.url) <= 80 else part.url[:77] + "..."
            return f"[image: {shown}]"
        return f"[image: {part.mime_type}, {human_size(len(part.data or '') * 3 // 4)} inline]"
    return f"[{part.kind}]"


def message_text(message: Message) -> Text:
    """A message's content as plain text: its text, images and other parts as [brackets], tool calls as arrows."""
    lines: list[str] = []
    if message.tool_call_id is not None:
        lines.append(f"<- result of {message.tool_call_id}")
    if isinstance(message.content, str):
        if message.content:
            lines.append(message.content)
    else:
        pieces = [_part(part) for part in message.content]
        if pieces:
            lines.append(" ".join(pieces))
    for call in message.tool_calls:
        lines.append(f"-> {call.name}({_arguments(call.arguments)})  [{call.id}]")
    return Text("\n".join(lines) or "(empty)")


def _role(message: Message) -> Text:
    role = Text(message.role, style=ROLE_STYLES.get(message.role, ""))
    if message.name:
        role.append(f" ({message.name})", style="dim")
    return role


def messages_table(session_id: str, messages: list[Message], version: int) -> Table:
    """One session, one row per message."""
    table = Table(title=Text(f"{session_id}  ·  {len(messages)} messages  ·  version {version}"), title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("role", no_wrap=True)
    table.add_column("content", overflow="fold")
    for position, message in enumerate(messages):
        table.add_row(str(position), _role(message), message_text(message))
    return table


def sessions_table(summaries: list[SessionSummary]) -> Table:
    """The sessions of a store."""
    table = Table()
    table.add_column("session", overflow="fold")
    table.add_column("messages", justify="right")
    table.add_column("last activity", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    for summary in summaries:
        table.add_row(Text(summary.id), str(summary.messages), when(summary.last_activity), human_size(summary.size))
    return table


def _preview(value: object, width: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= width else text[: width - 3] + "..."


def items_table(items: list[Item]) -> Table:
    """Items, one row each: address, version, times, size and the start of the value."""
    table = Table()
    table.add_column("namespace", overflow="fold")
    table.add_column("key", overflow="fold")
    table.add_column("version", justify="right", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    table.add_column("expires", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("value", overflow="fold", style="dim")
    for item in items:
        table.add_row(
            Text(show_namespace(item.namespace)),
            Text(item.key),
            str(item.version),
            when(item.updated_at),
            when(item.expires_at),
            human_size(item_size(item.value)),
            Text(_preview(item.value)),
        )
    return table


def item_table(item: Item) -> Table:
    """One item: its fields, then its value as indented JSON."""
    table = Table(show_header=False, title=Text(f"{show_namespace(item.namespace)}  ·  {item.key}"))
    table.title_justify = "left"
    table.add_column("field", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")
    ttl = "-" if item.ttl is None else f"{item.ttl:g} s"
    for name, shown in (
        ("version", str(item.version)),
        ("created", when(item.created_at)),
        ("updated", when(item.updated_at)),
        ("expires", when(item.expires_at)),
        ("ttl", ttl),
        ("size", human_size(item_size(item.value))),
        ("value", json.dumps(item.value, ensure_ascii=False, indent=2)),
    ):
        table.add_row(name, Text(shown))
    return table


def search_table(hits: list[ScoredDocument]) -> Table:
    """Search hits, best first."""
    table = Table()
    table.add_column("#", justify="right", style="dim")
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("id", overflow="fold")
    table.add_column("content", overflow="fold")
    table.add_column("metadata", overflow="fold", style="dim")
    for rank, hit in enumerate(hits, 1):
        document = hit.document
        content = document.content if len(document.content) <= 160 else document.content[:157] + "..."
        metadata = json.dumps(document.metadata, ensure_ascii=False) if document.metadata else ""
        table.add_row(str(rank), f"{hit.score:.4f}", Text(document.id), Text(content), Text(metadata))
    return table
