"""LangChain messages <-> core `Message`: exact round trips, standard fields, foreign messages, refusals."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    ChatMessageChunk,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
    convert_to_openai_messages,
)
from pydantic import BaseModel

from langchain_memwoven._convert import EXTRAS_KEY, from_core, to_core, to_core_many
from memwoven import ImagePart, InvalidInputError, Message, OpaquePart, TextPart, ToolCall
from memwoven.models import thaw
from memwoven.testing import sample_conversation

MULTIMODAL = [
    {"type": "text", "text": "What is in these pictures?"},
    "a bare string block",
    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
    {"type": "image_url", "image_url": "data:image/png;base64,iVBORw0KGgo="},
    {"type": "image", "url": "https://example.com/dog.jpg"},
    {"type": "image", "base64": "R0lGODlh", "mime_type": "image/gif", "id": "img-1"},
    {"type": "image", "source_type": "base64", "data": "UklGRg==", "mime_type": "image/webp"},
    {"type": "image", "file_id": "file-123"},
    {"type": "audio", "base64": "UklGRiQ=", "mime_type": "audio/wav"},
    {"type": "reasoning", "reasoning": "thinking...", "extras": {"signature": "abc"}},
]

MESSAGES: list[BaseMessage] = [
    HumanMessage(content=MULTIMODAL, id="h1", name="alice", additional_kwargs={"k": [1, 2]}),
    HumanMessage('caf\u00e9 \u65e5\u672c \U0001f600\nnew line \\ "quoted"'),
    AIMessage(
        content="",
        id="a1",
        name="bot",
        tool_calls=[
            {"name": "search", "args": {"q": "tea", "n": 3, "deep": {"x": [1.5, None, True]}}, "id": "call_1"},
            {"name": "noop", "args": {}, "id": None},
        ],
        invalid_tool_calls=[{"name": "bad", "args": "{oops", "id": "call_2", "error": "bad json"}],
        usage_metadata={
            "input_tokens": 10,
            "output_tokens": 5,
            "total_tokens": 15,
            "input_token_details": {"cache_read": 2},
            "output_token_details": {"reasoning": 1},
        },
        response_metadata={"model_name": "fake-1", "finish_reason": "tool_calls", "logprobs": None},
        additional_kwargs={"refusal": None},
    ),
    AIMessage(content=[{"type": "text", "text": "Here", "annotations": [{"url": "https://a.b"}]}]),
    ToolMessage(content="42", tool_call_id="call_1", artifact={"rows": [[1, "a"]], "ok": True}, status="error"),
    ToolMessage(content=[{"type": "text", "text": "result"}], tool_call_id="call_3", name="search", artifact=[1, 2]),
    SystemMessage("You are terse."),
    SystemMessage("Answer in English.", additional_kwargs={"__openai_role__": "developer"}),
    ChatMessage(role="critic", content="Too long."),
    ChatMessage(role="assistant", content="Noted."),
    FunctionMessage(name="legacy_fn", content='{"done": true}'),
    AIMessageChunk(
        content="partial",
        tool_call_chunks=[{"name": "search", "args": '{"q": "te', "id": "c9", "index": 0}],
        chunk_position="last",
    ),
    HumanMessageChunk(content="hc"),
    SystemMessageChunk(content="sc"),
    ToolMessageChunk(content="tc", tool_call_id="c9"),
    ChatMessageChunk(role="user", content="cc"),
    FunctionMessageChunk(name="f", content="fc"),
]


@pytest.mark.filterwarnings("ignore:ChatMessage role 'critic'")
@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_is_exact(message: BaseMessage) -> None:
    core = to_core(message)
    back = from_core(core)
    assert back == message
    assert type(back) is type(message)
    # also through JSON, as every persistent backend stores it
    assert from_core(Message.model_validate_json(core.model_dump_json())) == message


@pytest.mark.filterwarnings("ignore:ChatMessage role 'critic'")
def test_standard_fields_are_mapped() -> None:
    human, _, ai, _, tool, _, system, developer, critic, chat_ai, function, chunk, *_ = to_core_many(MESSAGES)
    assert human.role == "user"
    assert human.id == "h1"
    assert human.name == "alice"
    assert human.content == [
        TextPart(text="What is in these pictures?"),
        TextPart(text="a bare string block"),
        ImagePart(url="https://example.com/cat.png", detail="high"),
        ImagePart(data="iVBORw0KGgo=", mime_type="image/png"),
        ImagePart(url="https://example.com/dog.jpg"),
        ImagePart(data="R0lGODlh", mime_type="image/gif"),
        ImagePart(data="UklGRg==", mime_type="image/webp"),
        OpaquePart(kind="image", data={"type": "image", "file_id": "file-123"}),
        OpaquePart(kind="audio", data={"type": "audio", "base64": "UklGRiQ=", "mime_type": "audio/wav"}),
        OpaquePart(kind="reasoning", data=MULTIMODAL[-1]),
    ]
    assert ai.role == "assistant"
    assert ai.tool_calls == [
        ToolCall(id="call_1", name="search", arguments={"q": "tea", "n": 3, "deep": {"x": [1.5, None, True]}}),
        ToolCall(id="", name="noop", arguments={}),
    ]
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "call_1", "42")
    assert (system.role, developer.role, critic.role, chat_ai.role) == ("system", "developer", "user", "assistant")
    assert (function.role, function.name, function.tool_call_id) == ("tool", "legacy_fn", None)
    assert chunk.role == "assistant"
    assert chunk.tool_calls == [ToolCall(id="c9", name="search", arguments={"q": "te"})]  # LangChain's partial JSON
    assert human.extras[EXTRAS_KEY]["type"] == "human"
    assert chunk.extras[EXTRAS_KEY]["type"] == "AIMessageChunk"


def test_messages_written_by_other_frameworks_are_read_from_the_standard_fields() -> None:
    converted = [from_core(message) for message in sample_conversation()]
    assert [type(m).__name__ for m in converted] == [
        "SystemMessage",
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
        "AIMessage",
        "HumanMessage",
        "HumanMessage",
        "AIMessage",
    ]
    developer, user, assistant, tool = converted[1], converted[2], converted[3], converted[4]
    assert developer.additional_kwargs == {"__openai_role__": "developer"}
    assert user.content == [
        {"type": "text", "text": "What is in this picture? \u00e9\u65e5\U0001f600"},
        {"type": "image", "url": "https://example.com/cat.png", "extras": {"detail": "high"}},
        {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
        {"type": "non_standard", "value": {"format": "wav", "seconds": 1.5}},
    ]
    assert (user.id, user.name) == ("u1", "alice")
    assert isinstance(assistant, AIMessage)
    assert assistant.tool_calls == [
        {
            "id": "call_1",
            "name": "describe_image",
            "args": {"detail": "high", "max": 3, "flags": [True]},
            "type": "tool_call",
        },
        {"id": "call_2", "name": "lookup", "args": {}, "type": "tool_call"},
    ]
    assert isinstance(tool, ToolMessage)
    assert (tool.tool_call_id, tool.name) == ("call_1", "describe_image")
    # the sample's assistant message carries a partial `extras["langchain"]` that is not a serialization
    assert isinstance(from_core(Message(role="tool", name="fn", content="x")), FunctionMessage)


def _typed(part: Any) -> Any:
    """An opaque part as LangChain writes it back: a foreign block as a `non_standard` one."""
    if isinstance(part, OpaquePart) and "type" not in part.data:
        return OpaquePart(kind="non_standard", data={"type": "non_standard", "value": part.data})
    return part


def test_foreign_messages_convert_back_to_the_same_standard_fields() -> None:
    for message in sample_conversation():
        again = to_core(from_core(message))
        for field in ("role", "tool_calls", "tool_call_id", "name", "id"):
            assert getattr(again, field) == getattr(message, field), field
        if isinstance(message.content, str):
            assert again.content == message.content
        else:
            assert again.content == [_typed(part) for part in message.content]


def test_an_edited_message_is_read_from_its_standard_fields() -> None:
    original = AIMessage("original text", id="a1", response_metadata={"model_name": "m"})
    edited = to_core(original).model_copy(update={"content": "edited by another framework"})
    assert from_core(edited) == AIMessage("edited by another framework", id="a1")


def test_an_unreadable_langchain_serialization_is_ignored() -> None:
    message = Message(role="user", content="hi", extras={EXTRAS_KEY: {"type": "martian", "data": {}}})
    assert from_core(message) == HumanMessage("hi")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"raw bytes", "bytes"),
        ((1, 2), "tuple"),
        (datetime(2026, 1, 1), "datetime"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ({1: "int key"}, "non-string key"),
        ({"nested": [{"deep": {1, 2}}]}, "set"),
    ],
)
def test_values_json_cannot_hold_are_refused(value: Any, problem: str) -> None:
    with pytest.raises(InvalidInputError, match=problem):
        to_core(ToolMessage(content="x", tool_call_id="c", artifact=value))
    with pytest.raises(InvalidInputError):
        to_core(AIMessage("x", response_metadata={"v": value}))


def test_things_that_are_not_chat_messages_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="RemoveMessage"):
        to_core(RemoveMessage(id="m1"))
    with pytest.raises(InvalidInputError, match="not a LangChain BaseMessage"):
        to_core_many([{"role": "user", "content": "hi"}])  # type: ignore[list-item]


class Answer(BaseModel):
    city: str


@dataclasses.dataclass
class Point:
    x: int


def test_documents_in_a_message_come_back_as_documents() -> None:
    docs = [Document(page_content="doc", metadata={"source": "a.txt", "lc": 1}, id="d1")]
    tool = ToolMessage("found", tool_call_id="c1", id="t1", artifact=docs)  # a retriever tool's result
    ai = AIMessage("x", id="a1", additional_kwargs={"docs": docs}, response_metadata={"doc": docs[0]})
    for message in (tool, ai):
        core = to_core(message)
        assert from_core(Message.model_validate_json(core.model_dump_json())) == message
    assert from_core(to_core(tool)).artifact[0] == docs[0]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "message",
    [
        AIMessage("{}", additional_kwargs={"parsed": Answer(city="Paris")}),
        ToolMessage("p", tool_call_id="c", artifact=Point(1)),
        ToolMessage("p", tool_call_id="c", artifact={"point": Point(1)}),
        AIMessage("x", response_metadata={"when": [datetime(2026, 1, 1)]}),
        AIMessage("", tool_calls=[{"name": "f", "args": {"p": Answer(city="x")}, "id": "c"}]),
    ],
)
def test_objects_that_message_to_dict_would_turn_into_dicts_are_refused(message: BaseMessage) -> None:
    with pytest.raises(InvalidInputError, match="JSON cannot hold"):
        to_core(message)


def test_a_self_referencing_value_is_refused() -> None:
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(InvalidInputError, match="nests deeper"):
        to_core(AIMessage("x", additional_kwargs={"v": cycle}))


def test_chat_message_roles_of_other_providers() -> None:
    assert [to_core(ChatMessage("x", role=role)).role for role in ("model", "chatbot", "Model")] == ["assistant"] * 3
    with pytest.warns(UserWarning, match="role 'critic' has no memwoven role"):
        assert to_core(ChatMessage("x", role="critic")).role == "user"


def test_llama_index_blocks_become_standard_blocks() -> None:
    def li(kind: str, **fields: Any) -> OpaquePart:
        return OpaquePart(kind=kind, data={"block_type": kind, **fields})

    message = Message(
        role="user",
        content=[
            li("audio", audio="UklGRg==", path=None, url=None, format="wav"),
            li("audio", audio=None, path=None, url="https://example.com/a.mp3", format=None),
            li("document", data="JVBERi0=", path=None, url=None, title="report", document_mimetype="application/pdf"),
            li("thinking", content="hmm", num_tokens=None, additional_information={"signature": "s"}),
            li("image", image=None, path="/tmp/a.png", url=None, image_mimetype="image/png", detail=None),
            OpaquePart(kind="custom", data={"x": 1}),
        ],
    )
    converted = from_core(message)
    assert converted.content == [
        {"type": "audio", "base64": "UklGRg==", "mime_type": "audio/wav"},
        {"type": "audio", "url": "https://example.com/a.mp3"},
        {"type": "file", "base64": "JVBERi0=", "mime_type": "application/pdf", "extras": {"filename": "report"}},
        {"type": "reasoning", "reasoning": "hmm", "extras": {"signature": "s"}},
        {"type": "non_standard", "value": thaw(message.content[4].data)},  # type: ignore[union-attr]
        {"type": "non_standard", "value": {"x": 1}},
    ]
    sendable = converted.model_copy(update={"content": [converted.content[0], converted.content[2]]})
    assert [block["type"] for block in convert_to_openai_messages([sendable])[0]["content"]] == ["input_audio", "file"]


def test_a_call_with_unusable_arguments_from_another_framework_is_an_invalid_tool_call() -> None:
    invalid = {"type": "invalid_tool_call", "id": "c1", "name": "rm", "args": '{"path": ', "error": "not JSON"}
    message = Message(
        role="assistant",
        content=[TextPart(text="deleting"), OpaquePart(kind="invalid_tool_call", data=invalid)],
        tool_calls=[ToolCall(id="c2", name="ls", arguments={})],
    )
    converted = from_core(message)
    assert isinstance(converted, AIMessage)
    assert converted.invalid_tool_calls == [invalid]
    assert [call["id"] for call in converted.tool_calls] == ["c2"]
    assert converted.content == [{"type": "text", "text": "deleting"}]
