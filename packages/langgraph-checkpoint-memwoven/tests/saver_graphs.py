"""Graphs for the checkpointer tests, importable by a second process: a tool-calling agent (a fake chat model from
langchain_core, a `ToolNode`, a memwoven store) and a draft-review graph that stops at `interrupt()`.

``python saver_graphs.py agent|review <url> <thread_id>`` runs the second process's part on a fresh saver at
`url` and prints what it found as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.base import BaseStore
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph.checkpoint.memwoven import MemwovenSaver
from langgraph.store.memwoven import MemwovenStore


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    """A model reply asking for one tool call."""
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


def agent(replies: Iterable[BaseMessage], saver: MemwovenSaver, store: BaseStore) -> Any:
    """A tool-calling agent whose model answers with `replies`, in order; each turn counts in the store."""
    model = GenericFakeChatModel(messages=iter(replies))

    def think(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
        seen = store.get(("turns",), "count")
        store.put(("turns",), "count", {"n": (seen.value["n"] if seen else 0) + 1})
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", think)
    builder.add_node("tools", ToolNode([add]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver, store=store)


class Review(TypedDict, total=False):
    topic: str
    draft: str
    verdict: str


def write(state: Review) -> Review:
    return {"draft": f"a note on {state['topic']}"}


def review(state: Review) -> Review:
    return {"verdict": interrupt({"draft": state["draft"]})}


def reviewer(saver: MemwovenSaver) -> Any:
    """Write a draft, then wait (`interrupt`) for a person's verdict."""
    builder = StateGraph(Review).add_sequence([write, review])
    builder.add_edge(START, "write")
    return builder.compile(checkpointer=saver)


def second_process(kind: str, url: str, thread_id: str) -> dict[str, Any]:
    """Resume `thread_id` from a fresh saver at `url`: the agent's fourth turn, or the review's verdict."""
    config = {"configurable": {"thread_id": thread_id}}
    with MemwovenSaver.from_url(url) as saver, MemwovenStore.from_url(url, namespace=("store",)) as store:
        if kind == "agent":
            graph = agent([AIMessage("that was all")], saver, store)
            before = graph.get_state(config).values["messages"]
            after = graph.invoke({"messages": [("user", "anything else?")]}, config)["messages"]
            turns = store.get(("turns",), "count")
            return {
                "before": [[m.type, m.content, [c["name"] for c in getattr(m, "tool_calls", [])]] for m in before],
                "after": [m.content for m in after[len(before) :]],
                "turns": turns.value["n"] if turns else 0,
            }
        graph = reviewer(saver)
        waiting = graph.get_state(config)
        result = graph.invoke(Command(resume="approved"), config)
        return {"next": list(waiting.next), "interrupts": [i.value for i in waiting.interrupts], "result": result}


if __name__ == "__main__":
    print(json.dumps(second_process(*sys.argv[1:4])))
