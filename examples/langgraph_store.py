"""A LangGraph graph with long-term memory in a `MemwovenStore` on one SQLite file. Runs offline.

    uv run python examples/langgraph_store.py [path/to/memory.db]

Each run of the graph stores what the user says as a memory in the user's namespace, then recalls the memories
closest in meaning to the message (semantic search with `HashingEmbedFn`, no model, no API key). The store is
LangGraph's `BaseStore`, so nodes use it through `store.put` / `store.search` as with any other store; the items
live in memwoven chat sessions and their vectors in a memwoven collection, in the same file. Run it twice: the
second run recalls the memories of the first.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict

from langgraph.store.memwoven import MemwovenStore
from memwoven.embed import HashingEmbedFn

MESSAGES = [
    ("alice", "I am vegetarian and I love spicy food."),
    ("alice", "My favourite drink is green tea."),
    ("bob", "I drink black coffee every morning."),
    ("alice", "What should I order to drink with a spicy curry?"),
]


class State(TypedDict, total=False):
    """The graph's state: who speaks, what they said, and what was recalled."""

    user: str
    text: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> State:
    """Store the message as a memory of its user (LangGraph injects the store given to `compile`).

    The key is derived from the text, so saying the same thing again replaces the memory instead of adding one.
    """
    key = str(uuid.uuid5(uuid.NAMESPACE_URL, state["text"]))
    store.put(("users", state["user"], "memories"), key, {"text": state["text"], "kind": "said"})
    return {}


def recall(state: State, *, store: BaseStore) -> State:
    """Find the user's two memories closest in meaning to the message (the message itself is one of them)."""
    hits = store.search(("users", state["user"]), query=state["text"], filter={"kind": "said"}, limit=3)
    return {"recalled": [hit.value["text"] for hit in hits if hit.value["text"] != state["text"]][:2]}


def build(store: MemwovenStore):  # type: ignore[no-untyped-def]
    """The graph: remember, then recall."""
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(store=store)


def main(path: Path) -> None:
    """Run the graph on each message with a store in the SQLite file at `path`, then show what it holds."""
    index = {"dims": 256, "embed": HashingEmbedFn(256), "fields": ["text"]}
    store = MemwovenStore.from_url(f"sqlite:///{path}", index=index)  # type: ignore[arg-type]
    try:
        graph = build(store)
        for user, text in MESSAGES:
            result = graph.invoke({"user": user, "text": text})
            print(f"{user}: {text}")
            for memory in result["recalled"]:
                print(f"    recalled: {memory}")
        namespaces = store.list_namespaces(prefix=("users",))
        counts = {ns[1]: len(store.search(ns, limit=100)) for ns in namespaces}
        print(f"namespaces: {namespaces}")
        print(f"memories per user: {counts} in {path}")
    finally:
        store.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "langgraph-store.db")
