"""Checkpoints encrypted at rest: `MemwovenSaver` over memwoven's `EncryptedItemMemory` (values encrypted, thread ids
and keys hashed) stores no message text, thread id or channel name in the clear, and a second saver with the key
resumes the thread; without the key nothing is readable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph
from typing_extensions import TypedDict

from langgraph.checkpoint.memwoven import MemwovenSaver
from memwoven import CorruptMemoryError, SQLItemMemory
from memwoven.encryption import EncryptedItemMemory, generate_key

SECRET = "zebra-octopus-4711"


def _graph(saver: MemwovenSaver) -> Any:
    def reply(state: MessagesState) -> dict[str, list[tuple[str, str]]]:
        return {"messages": [("assistant", f"noted: {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def test_a_thread_is_stored_encrypted_and_resumed_with_the_key(tmp_path: Path) -> None:
    database = tmp_path / "checkpoints.db"
    key, id_key = generate_key(), generate_key()
    config = {"configurable": {"thread_id": "patient-17"}}
    with EncryptedItemMemory(SQLItemMemory(f"sqlite:///{database}"), key=key, id_key=id_key) as items:
        graph = _graph(MemwovenSaver(items))
        graph.invoke({"messages": [("user", f"my locker code is {SECRET}")]}, config)
    stored = database.read_bytes() + b"".join(path.read_bytes() for path in tmp_path.glob("checkpoints.db-*"))
    for clear in (SECRET, "patient-17", "messages", "noted"):
        assert clear.encode() not in stored
    with EncryptedItemMemory(SQLItemMemory(f"sqlite:///{database}"), key=key, id_key=id_key) as items:
        graph = _graph(MemwovenSaver(items))
        graph.invoke({"messages": [("user", "and again")]}, config)
        texts = [m.content for m in graph.get_state(config).values["messages"]]
        assert texts == [
            f"my locker code is {SECRET}",
            f"noted: my locker code is {SECRET}",
            "and again",
            "noted: and again",
        ]
    other_key = EncryptedItemMemory(SQLItemMemory(f"sqlite:///{database}"), key=generate_key(), id_key=id_key)
    with other_key as items, pytest.raises(CorruptMemoryError):  # unreadable without the key, never forged
        list(MemwovenSaver(items).list(None))


class _Sealed:
    """A serde of the user's (as LangGraph's `EncryptedSerializer` is): the bytes it stores are not the value's."""

    def __init__(self) -> None:
        self.inner = JsonPlusSerializer()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self.inner.dumps_typed(obj)
        return f"sealed+{kind}", bytes(b ^ 0x5A for b in data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, payload = data
        return self.inner.loads_typed((kind.removeprefix("sealed+"), bytes(b ^ 0x5A for b in payload)))


class Note(TypedDict):
    note: str


def test_a_serde_of_the_users_sees_every_value(tmp_path: Path) -> None:
    database = tmp_path / "sealed.db"
    builder = StateGraph(Note)
    builder.add_node("echo", lambda state: {"note": state["note"] + "!"})
    builder.add_edge(START, "echo")
    config = {"configurable": {"thread_id": "t"}}
    with SQLItemMemory(f"sqlite:///{database}") as items:
        saver = MemwovenSaver(items, serde=_Sealed())
        builder.compile(checkpointer=saver).invoke({"note": SECRET}, config)  # a small string: inline by default
        assert saver.get_tuple(config).checkpoint["channel_values"] == {"note": SECRET + "!"}  # type: ignore[union-attr]
        assert all(not item.value["values"] for item in items.list(("langgraph_checkpoints", "checkpoints")))
    stored = database.read_bytes() + b"".join(path.read_bytes() for path in tmp_path.glob("sealed.db-*"))
    assert SECRET.encode() not in stored
