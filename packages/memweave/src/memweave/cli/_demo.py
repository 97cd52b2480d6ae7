"""`memweave demo`: one conversation written through LangChain, read back through LlamaIndex, plus semantic recall.

Offline (no API key, no model, no server). The adapters are imported here, inside the command, so that the core
never depends on them; without them the command says how to install them.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memweave.cli._render import ROLE_STYLES, human_size
from memweave.cli._stores import Failure, summarize
from memweave.embed import HashingEmbedFn
from memweave.models import VectorDocument
from memweave.urls import open_chat_memory, open_vector_memory, redact_url

__all__ = ["SESSION", "run_demo"]

SESSION = "alice/trip-planning"
NOTES = {
    "trip": "Alice is planning a hiking trip to the Dolomites in July.",
    "diet": "Alice is vegetarian and allergic to peanuts.",
    "work": "Alice works as a data engineer on streaming pipelines.",
    "pet": "Alice has a grey cat called Miso who sleeps on the sofa.",
    "music": "Alice plays jazz piano on weekends.",
}
QUESTIONS = ["Which foods is Alice allergic to?", "Where is she hiking in July?", "Does she have a cat?"]
INSTALL = (
    "memweave demo writes through the LangChain adapter and reads through the LlamaIndex one; install them with "
    "`pip install langchain-memweave llama-index-memweave` (or run the core-only demo: python -m memweave.demo)"
)


def _turns() -> list[list[Any]]:
    """The scripted conversation, turn by turn, as LangChain messages (two tool calls and their results)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    return [
        [
            SystemMessage("You are a helpful travel assistant."),
            HumanMessage("Find me a vegetarian restaurant near Cortina for my July trip."),
        ],
        [
            AIMessage(
                "",
                tool_calls=[
                    {"name": "search_restaurants", "args": {"town": "Cortina", "diet": "vegetarian"}, "id": "call_1"}
                ],
            ),
            ToolMessage('["Baita Fraina", "El Brite"]', tool_call_id="call_1", name="search_restaurants"),
            AIMessage("Baita Fraina and El Brite both have vegetarian menus."),
        ],
        [HumanMessage("And what will the weather be like on the 14th?")],
        [
            AIMessage(
                "", tool_calls=[{"name": "forecast", "args": {"town": "Cortina", "day": "07-14"}, "id": "call_2"}]
            ),
            ToolMessage("Sunny, 24°C, light wind", tool_call_id="call_2", name="forecast"),
            AIMessage("Sunny and 24°C: a good day for the Tofana trail."),
        ],
    ]


def _langchain_line(message: Any) -> Text:
    line = Text(f"{message.type:>6}  ", style="bold")
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        line.append(", ".join(f"-> {c['name']}({json.dumps(c['args'])})" for c in calls))
    elif message.type == "tool":
        line.append(f"<- {message.tool_call_id}: {message.content}")
    else:
        line.append(str(message.content))
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


def run_demo(url: str, console: Console) -> None:
    """Write, read back, store, recall and summarize at `url`, showing each step."""
    try:
        from langchain_memweave import MemweaveChatMessageHistory
        from llama_index.storage.chat_store.memweave import MemweaveChatStore
    except ImportError as error:
        raise Failure(f"{INSTALL} ({error})") from None
    embed = HashingEmbedFn(dimension=256)
    console.print(Text(f"memweave demo on {redact_url(url)}", style="bold"))
    with (
        open_chat_memory(url) as chat,
        open_vector_memory(url, collection="notes", dimension=embed.dimension) as notes,
    ):
        history = MemweaveChatMessageHistory(chat, SESSION)
        history.clear()
        console.rule(f"1. LangChain writes session {SESSION!r}, one atomic append per turn")
        for turn in _turns():
            history.add_messages(turn)
            for message in turn:
                console.print(_langchain_line(message))

        console.rule("2. LlamaIndex reads the same session back")
        table = Table(show_header=True)
        table.add_column("role", no_wrap=True)
        table.add_column("LlamaIndex ChatMessage")
        for message in MemweaveChatStore(chat).get_messages(SESSION):
            table.add_row(*_llama_index_row(message))
        console.print(table)

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
