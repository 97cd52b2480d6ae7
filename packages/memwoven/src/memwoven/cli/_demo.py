"""`memwoven demo`: one conversation written through LangChain, read back through LlamaIndex, plus semantic recall.

Offline: no API key, no model, no server. This is the one place in the memwoven package that reaches the
framework adapters, and only optionally. The adapters are separate packages that depend on memwoven, never the
reverse, so they are looked up at run time with `importlib` rather than imported. When one is not installed, its
step goes through the core API instead (`ChatSession.append` / `ChatSession.load`) and the demo says how to
install it.
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memwoven.cli._render import ROLE_STYLES, human_size, message_text, messages_table
from memwoven.cli._stores import summarize
from memwoven.contracts import ChatMemory
from memwoven.embed import HashingEmbedFn
from memwoven.models import Message, ToolCall, VectorDocument
from memwoven.urls import open_chat_memory, open_vector_memory, redact_url

__all__ = ["ADAPTERS", "SESSION", "TURNS", "closing_hint", "core_message", "run_demo"]

SESSION = "alice/trip-planning"
ADAPTERS = {"langchain": "langchain_memwoven", "llama_index": "llama_index.storage.chat_store.memwoven"}
"""The adapter modules the demo uses when they are installed (pip names: langchain-memwoven, llama-index-memwoven)."""


@dataclass(frozen=True)
class Call:
    """An assistant's tool call."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Result:
    """A tool's result for the call `id`."""

    id: str
    name: str
    content: str


TURNS: list[list[tuple[str, str | Call | Result]]] = [
    [
        ("system", "You are a helpful travel assistant."),
        ("user", "Find me a vegetarian restaurant near Cortina for my July trip."),
    ],
    [
        ("assistant", Call("call_1", "search_restaurants", {"town": "Cortina", "diet": "vegetarian"})),
        ("tool", Result("call_1", "search_restaurants", '["Baita Fraina", "El Brite"]')),
        ("assistant", "Baita Fraina and El Brite both have vegetarian menus."),
    ],
    [("user", "And what will the weather be like on the 14th?")],
    [
        ("assistant", Call("call_2", "forecast", {"town": "Cortina", "day": "07-14"})),
        ("tool", Result("call_2", "forecast", "Sunny, 24°C, light wind")),
        ("assistant", "Sunny and 24°C: a good day for the Tofana trail."),
    ],
]
"""The scripted conversation, turn by turn (each turn is one atomic append, as an agent loop would write it)."""

NOTES = {
    "trip": "Alice is planning a hiking trip to the Dolomites in July.",
    "diet": "Alice is vegetarian and allergic to peanuts.",
    "work": "Alice works as a data engineer on streaming pipelines.",
    "pet": "Alice has a grey cat called Miso who sleeps on the sofa.",
    "music": "Alice plays jazz piano on weekends.",
}
QUESTIONS = ["Which foods is Alice allergic to?", "Where is she hiking in July?", "Does she have a cat?"]


def core_message(role: str, body: str | Call | Result) -> Message:
    """One step of the script as a memwoven `Message`."""
    if isinstance(body, Call):
        return Message(role=role, tool_calls=[ToolCall(id=body.id, name=body.name, arguments=body.arguments)])
    if isinstance(body, Result):
        return Message(role=role, tool_call_id=body.id, name=body.name, content=body.content)
    return Message(role=role, content=body)


def _langchain_message(role: str, body: str | Call | Result) -> Any:
    """One step of the script as a LangChain message."""
    messages = importlib.import_module("langchain_core.messages")
    if isinstance(body, Call):
        return messages.AIMessage("", tool_calls=[{"name": body.name, "args": body.arguments, "id": body.id}])
    if isinstance(body, Result):
        return messages.ToolMessage(body.content, tool_call_id=body.id, name=body.name)
    kind = {"system": "SystemMessage", "user": "HumanMessage", "assistant": "AIMessage"}[role]
    return getattr(messages, kind)(body)


def _langchain_line(message: Any) -> Text:
    line = Text(f"{type(message).__name__:>13}  ", style="bold")
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        line.append(", ".join(f"-> {c['name']}({json.dumps(c['args'])})  [{c['id']}]" for c in calls))
    elif message.type == "tool":
        line.append(f"<- {message.tool_call_id}: {message.content}")
    else:
        line.append(str(message.content))
    return line


def _core_line(message: Message) -> Text:
    line = Text(f"{message.role:>9}  ", style=f"bold {ROLE_STYLES.get(message.role, '')}")
    line.append(" | ".join(message_text(message).plain.splitlines()))
    return line


def _llama_index_row(message: Any) -> tuple[Text, Text]:
    role = str(getattr(message.role, "value", message.role))
    parts = [str(message.content)] if message.content else []
    for block in message.blocks:
        if getattr(block, "block_type", None) == "tool_call":
            parts.append(f"-> {block.tool_name}({json.dumps(block.tool_kwargs)})  [{block.tool_call_id}]")
    tool_call_id = message.additional_kwargs.get("tool_call_id")
    if tool_call_id:
        parts.insert(0, f"<- result of {tool_call_id}")
    return Text(role, style=ROLE_STYLES.get(role, "")), Text("\n".join(parts))


def _adapter(name: str) -> tuple[ModuleType | None, str]:
    """The adapter module if it can be imported, else None and why not."""
    try:
        return importlib.import_module(ADAPTERS[name]), ""
    except ImportError as error:
        return None, str(error)


def _write(chat: ChatMemory, console: Console, langchain: ModuleType | None, missing: str) -> None:
    if langchain is None:
        console.rule(f"1. The core API writes session {SESSION!r}, one atomic append per turn")
        session = chat.session(SESSION)
        session.clear()
        for turn in TURNS:
            messages = [core_message(role, body) for role, body in turn]
            session.append(messages)
            for message in messages:
                console.print(_core_line(message))
        console.print(Text(f"(LangChain adapter not installed: {missing})", style="dim"))
        return
    console.rule(f"1. LangChain writes session {SESSION!r} (MemwovenChatMessageHistory), one atomic append per turn")
    history = langchain.MemwovenChatMessageHistory(chat, SESSION)
    history.clear()
    for turn in TURNS:
        lc_messages = [_langchain_message(role, body) for role, body in turn]
        history.add_messages(lc_messages)
        for lc_message in lc_messages:
            console.print(_langchain_line(lc_message))


def _read(chat: ChatMemory, console: Console, llama_index: ModuleType | None, missing: str) -> None:
    if llama_index is None:
        console.rule("2. The core API reads the same session back")
        messages, version = chat.load_versioned(SESSION)
        console.print(messages_table(SESSION, messages, version))
        console.print(Text(f"(LlamaIndex adapter not installed: {missing})", style="dim"))
        return
    console.rule("2. LlamaIndex reads the same session back (MemwovenChatStore)")
    table = Table(show_header=True)
    table.add_column("role", no_wrap=True)
    table.add_column("LlamaIndex ChatMessage")
    for message in llama_index.MemwovenChatStore(chat).get_messages(SESSION):
        table.add_row(*_llama_index_row(message))
    console.print(table)


def run_demo(url: str, console: Console) -> None:
    """Write, read back, store, recall and summarize at `url`, showing each step."""
    adapters = {name: _adapter(name) for name in ADAPTERS}
    embed = HashingEmbedFn(dimension=256)
    console.print(Text(f"memwoven demo on {redact_url(url)}", style="bold"))
    with (
        open_chat_memory(url) as chat,
        open_vector_memory(url, collection="notes", dimension=embed.dimension) as notes,
    ):
        _write(chat, console, *adapters["langchain"])
        _read(chat, console, *adapters["llama_index"])

        console.rule("3. Documents stored and recalled by meaning (HashingEmbedFn, offline)")
        notes.store(
            [VectorDocument(id=k, content=v, embedding=embed(v), metadata={"topic": k}) for k, v in NOTES.items()]
        )
        recall = Table()
        recall.add_column("question")
        recall.add_column("best note")
        recall.add_column("score", justify="right")
        for question in QUESTIONS:
            best = notes.search(embed(question), top_k=1)[0]
            recall.add_row(question, best.document.content, f"{best.score:.2f}")
        console.print(recall)

        console.rule("4. What is stored")
        stored = Table()
        stored.add_column("kind")
        stored.add_column("name")
        stored.add_column("items", justify="right")
        stored.add_column("size / dimension", justify="right")
        for session_id in chat.sessions():
            summary = summarize(chat, session_id)
            stored.add_row("session", Text(session_id), f"{summary.messages} messages", human_size(summary.size))
        stored.add_row("collection", "notes", f"{notes.count()} documents", f"dimension {notes.dimension}")
        console.print(stored)
    if any(module is None for module, _ in adapters.values()):
        console.print(
            Text(
                "\nTo see this session written through LangChain and read back through LlamaIndex, install the "
                "adapters:\n"
                "  pip install ./packages/langchain-memwoven ./packages/llama-index-memwoven  # in a clone, for now\n"
                "  pip install langchain-memwoven llama-index-memwoven  # once they are published",
                style="bold",
            )
        )


def closing_hint(url: str | None) -> str:
    """What to run next (`url`: where the demo stored, None for a temporary file), as commands for the user's shell.

    Under `nox -s demo` the `memwoven` command exists only in nox's virtual environment, not in the shell that
    started nox: the hint then names `nox -s demo` and that environment's script.
    """
    under_nox = os.environ.get("NOX_CURRENT_SESSION") == "demo"
    command = _own_script() if under_nox else "memwoven"
    if url is not None:
        return f"Inspect it: {command} sessions show {shlex.quote(redact_url(url))} {SESSION}"
    again = "nox -s demo -- --url sqlite:///demo.db" if under_nox else "memwoven demo --url sqlite:///demo.db"
    return (
        "That was a temporary SQLite file. Keep one and inspect it:\n"
        f"  {again}\n  {command} sessions show sqlite:///demo.db {SESSION}"
    )


def _own_script() -> str:
    """The running environment's `memwoven` script, relative to the working directory when inside it."""
    found = shutil.which("memwoven", path=str(Path(sys.executable).parent))
    if found is None:
        return "memwoven"
    path = Path(found).absolute()
    return shlex.quote(str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path))
