"""`MemwovenStore` as the long-term memory of a LangGraph graph (`compile(store=...)`), sync and async, on every
backend (`memwoven_backend` of conftest.py); moved here from langchain-memwoven with the store."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict

from langgraph.store.memwoven import MemwovenStore
from memwoven.embed import HashingEmbedFn
from memwoven_test_support import unique_name


class State(TypedDict, total=False):
    user: str
    note: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> State:
    store.put(("users", state["user"], "notes"), unique_name("note"), {"text": state["note"]})
    return {}


def recall(state: State, *, store: BaseStore) -> State:
    hits = store.search(("users", state["user"]), query=state["note"], limit=2)
    return {"recalled": [hit.value["text"] for hit in hits]}


async def arecall(state: State, *, store: BaseStore) -> State:
    hits = await store.asearch(("users", state["user"]), query=state["note"], limit=2)
    return {"recalled": [hit.value["text"] for hit in hits]}


def graph_with(store: MemwovenStore, recall_node=recall):  # type: ignore[no-untyped-def]
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall_node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(store=store)


INDEX = {"dims": 64, "embed": HashingEmbedFn(64), "fields": ["text"]}


def test_a_graph_remembers_across_runs(memwoven_backend) -> None:  # type: ignore[no-untyped-def]
    user = unique_name("u")
    graph = graph_with(memwoven_backend.open(MemwovenStore, "graph.db", index=INDEX))
    graph.invoke({"user": user, "note": "likes green tea"})
    graph.invoke({"user": user, "note": "rides a red bicycle"})
    reopened = graph_with(memwoven_backend.open(MemwovenStore, "graph.db", index=INDEX))  # the same storage again
    result = reopened.invoke({"user": user, "note": "green tea with lemon"})
    assert result["recalled"] == ["green tea with lemon", "likes green tea"]


async def test_a_graph_remembers_async(memwoven_backend) -> None:  # type: ignore[no-untyped-def]
    graph = graph_with(memwoven_backend.open(MemwovenStore, index=INDEX), arecall)
    user = unique_name("u")
    await graph.ainvoke({"user": user, "note": "drinks black coffee"})
    result = await graph.ainvoke({"user": user, "note": "black coffee, no sugar"})
    assert result["recalled"] == ["black coffee, no sugar", "drinks black coffee"]
