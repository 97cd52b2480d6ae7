"""What the adapters accept is what the core can read back: values over the JSON limits (`MAX_JSON_DEPTH`,
`MAX_INT_DIGITS`) in a framework's own fields are refused with `InvalidInputError` before anything is written,
and values at the limits are read back equal by a fresh object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.llms import ChatMessage

from langchain_memwoven import MemwovenChatMessageHistory
from llama_index.storage.chat_store.memwoven import MemwovenChatStore
from memwoven import SQLChatMemory
from memwoven.errors import InvalidInputError
from memwoven.models import MAX_INT_DIGITS, MAX_JSON_DEPTH


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


TOO_BIG = 10**MAX_INT_DIGITS
BIGGEST = TOO_BIG - 1
# the adapters keep a framework's own fields inside their extras object, a few levels below its top
TOO_DEEP = nested(MAX_JSON_DEPTH)
DEEP_ENOUGH = nested(MAX_JSON_DEPTH - 8)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/adapters.db"


@pytest.mark.parametrize(
    "message",
    [
        HumanMessage("x", additional_kwargs={"n": TOO_BIG}),
        HumanMessage("x", additional_kwargs={"deep": TOO_DEEP}),
        AIMessage("", tool_calls=[{"id": "c", "name": "f", "args": {"n": -TOO_BIG}}]),
        AIMessage("x", response_metadata={"deep": TOO_DEEP}),
    ],
    ids=["kwargs-int", "kwargs-deep", "tool-args-int", "response-metadata-deep"],
)
def test_langchain_refuses_what_cannot_be_read_back(url: str, message: Any) -> None:
    history = MemwovenChatMessageHistory(SQLChatMemory(url), "s")
    history.add_messages([HumanMessage("before")])
    with pytest.raises(InvalidInputError):
        history.add_messages([message])
    assert [m.content for m in MemwovenChatMessageHistory(SQLChatMemory(url), "s").messages] == ["before"]


def test_langchain_reads_back_values_at_the_limits(url: str) -> None:
    message = AIMessage(
        "x",
        additional_kwargs={"n": BIGGEST, "m": -BIGGEST, "deep": DEEP_ENOUGH},
        tool_calls=[{"id": "c", "name": "f", "args": {"n": BIGGEST}, "type": "tool_call"}],
    )
    MemwovenChatMessageHistory(SQLChatMemory(url), "s").add_messages([message])
    assert MemwovenChatMessageHistory(SQLChatMemory(url), "s").messages == [message]


@pytest.mark.parametrize(
    "kwargs", [{"n": TOO_BIG}, {"deep": TOO_DEEP}, {"n": [[-TOO_BIG]]}], ids=["int", "deep", "int-in-list"]
)
def test_llama_index_refuses_what_cannot_be_read_back(url: str, kwargs: dict[str, Any]) -> None:
    store = MemwovenChatStore.from_url(url)
    store.add_message("s", ChatMessage(role="user", content="before"))
    with pytest.raises(InvalidInputError):
        store.add_message("s", ChatMessage(role="user", content="x", additional_kwargs=kwargs))
    with pytest.raises(InvalidInputError):
        store.set_messages("s", [ChatMessage(role="user", content="x", additional_kwargs=kwargs)])
    assert [m.content for m in MemwovenChatStore.from_url(url).get_messages("s")] == ["before"]


def test_llama_index_reads_back_values_at_the_limits(url: str) -> None:
    message = ChatMessage(role="user", content="x", additional_kwargs={"n": BIGGEST, "deep": DEEP_ENOUGH})
    MemwovenChatStore.from_url(url).add_message("s", message)
    assert MemwovenChatStore.from_url(url).get_messages("s") == [message]
