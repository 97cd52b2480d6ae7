"""A LangChain 1.x agent with memwoven's short- and long-term memory, resumed by a second process.

`create_agent(..., checkpointer=MemwovenSaver, store=MemwovenStore)` on one SQLite file: the checkpointer keeps the
conversation of each thread (messages, tool calls, interrupts), the store keeps what outlives threads. Three turns
run here; then a second process opens the same file with fresh objects and continues the thread, and a turn that
asks for approval (`interrupt_before=["tools"]`) is approved from a third process. The model is a scripted stand-in
(offline); any LangChain chat model that calls tools works the same way.

    python examples/langgraph_agent.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.types import Command

from langgraph.checkpoint.memwoven import MemwovenSaver
from langgraph.store.memwoven import MemwovenStore


class ScriptedModel(GenericFakeChatModel):
    """A chat model answering with the next scripted message (a stand-in for a real one: no network, no key)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        """The same model: the script already holds the tool calls."""
        return self


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(call_id: str, a: int, b: int) -> AIMessage:
    """A model reply asking for `add(a, b)`."""
    return AIMessage("", tool_calls=[{"name": "add", "args": {"a": a, "b": b}, "id": call_id, "type": "tool_call"}])


@contextmanager
def agent(url: str, script: list[BaseMessage], **options: Any) -> Iterator[tuple[Any, MemwovenStore]]:
    """The agent on the memory at `url` (checkpointer and store), answering with `script`; and the store."""
    with MemwovenSaver.from_url(url) as saver, MemwovenStore.from_url(url) as store:
        model = ScriptedModel(messages=iter(script))
        yield create_agent(model, [add], checkpointer=saver, store=store, **options), store


def show(messages: list[BaseMessage]) -> None:
    """Print a thread's messages, tool calls included."""
    for message in messages:
        calls = [f"{c['name']}({c['args']})" for c in getattr(message, "tool_calls", [])]
        print(f"  {message.type}: {message.content or ''}{' -> ' + ', '.join(calls) if calls else ''}")


def first_process(url: str) -> None:
    """Three turns on thread-1 (two with a tool call), and a fact in the store."""
    config: Any = {"configurable": {"thread_id": "thread-1"}}
    script: list[BaseMessage] = [call("c1", 2, 3), AIMessage("2 + 3 = 5"), AIMessage("Hello, Ada!")]
    script += [call("c2", 40, 2), AIMessage("40 + 2 = 42")]
    with agent(url, script) as (graph, store):
        store.put(("users",), "ada", {"name": "Ada", "likes": "sums"})
        for question in ("What is 2 + 3?", "Hi, I am Ada.", "And 40 + 2?"):
            graph.invoke({"messages": [("user", question)]}, config)
        print(f"first process: {len(graph.get_state(config).values['messages'])} messages in thread-1")


def second_process(url: str) -> None:
    """Fresh objects on the same file: thread-1 continues where the first process left it."""
    config: Any = {"configurable": {"thread_id": "thread-1"}}
    with agent(url, [AIMessage("Your first sum was 5, Ada.")]) as (graph, store):
        graph.invoke({"messages": [("user", "What was my first sum?")]}, config)
        ada = store.get(("users",), "ada")
        print(f"second process resumed thread-1 ({ada.value['name'] if ada else 'nobody'} in the store):")
        show(graph.get_state(config).values["messages"])


def approval(url: str, step: str) -> None:
    """`ask`: a turn on thread-2 stops before its tool call; `approve` (in another process): it runs on."""
    config: Any = {"configurable": {"thread_id": "thread-2"}}
    script: list[BaseMessage] = [call("c3", 7, 8), AIMessage("7 + 8 = 15")]
    with agent(url, script if step == "ask" else script[1:], interrupt_before=["tools"]) as (graph, _):
        if step == "ask":
            graph.invoke({"messages": [("user", "What is 7 + 8?")]}, config)
            print(f"paused before the tool call: next = {graph.get_state(config).next}")
        else:
            graph.invoke(Command(resume=True), config)  # another process approves and the run continues
            print(f"approved in another process: {graph.get_state(config).values['messages'][-1].content}")


def in_another_process(*arguments: str) -> None:
    """Run this script with `arguments` in a new Python process."""
    subprocess.run(  # noqa: S603 - this very script, with arguments it built
        [sys.executable, __file__, *arguments], check=True, env=os.environ
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "second":
        second_process(sys.argv[2])
    elif len(sys.argv) == 3:
        approval(sys.argv[2], sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as directory:
            memory = f"sqlite:///{Path(directory) / 'agent.db'}"
            first_process(memory)
            in_another_process("second", memory)
            in_another_process("ask", memory)
            in_another_process("approve", memory)
