"""ChatMessage <-> core Message: LlamaIndex round trips are exact, standard fields are filled for other frameworks,
and a session another framework wrote (LangChain-shaped, written by hand here) reads as the equivalent messages
and is written back unchanged."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import (
    AudioBlock,
    CacheControl,
    CachePoint,
    ChatMessage,
    CitableBlock,
    CitationBlock,
    DocumentBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    VideoBlock,
)
from llama_index.core.bridge.pydantic import BaseModel

from llama_index.storage.chat_store.memwoven import MemwovenChatStore
from llama_index.storage.chat_store.memwoven._convert import NAMESPACE, to_chat, to_chat_many, to_core, to_core_many
from memwoven import (
    ChatMemory,
    ImagePart,
    InMemoryChatMemory,
    InvalidInputError,
    Message,
    OpaquePart,
    TextPart,
    ToolCall,
)

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


class OpenAIFunction(BaseModel):
    name: str
    arguments: str


class OpenAIToolCall(BaseModel):
    """Stands in for the OpenAI SDK's tool call objects that LlamaIndex keeps in `additional_kwargs`."""

    id: str
    type: str = "function"
    function: OpenAIFunction


def dumps(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [message.model_dump(mode="json") for message in messages]


def rich_conversation(tmp_path: Path) -> list[ChatMessage]:
    """Every role and every block type LlamaIndex has."""
    picture = tmp_path / "picture.png"
    picture.write_bytes(PNG)
    return [
        ChatMessage(role="system", content="You are careful."),
        ChatMessage(role="developer", content="Answer in English."),
        ChatMessage(
            role="user",
            blocks=[
                TextBlock(text="What is in these? \u00e9\u65e5\U0001f600"),
                ImageBlock(url="https://example.com/cat.png", detail="high"),
                ImageBlock(image=PNG, image_mimetype="image/png"),
                ImageBlock(image=PNG),  # mime type guessed by LlamaIndex
                ImageBlock(path=picture),
                AudioBlock(audio=b"RIFF....WAVE", format="wav"),
                VideoBlock(url="https://example.com/clip.mp4"),
                DocumentBlock(data=b"%PDF-1.4 hello", title="doc"),
                CachePoint(cache_control=CacheControl(type="ephemeral")),
                CitableBlock(title="t", source="https://example.com", content=[TextBlock(text="quoted")]),
            ],
            additional_kwargs={"raw": "AAE=", "nested": {"list": [1, 2.5, None, True]}},
        ),
        ChatMessage(
            role="assistant",
            blocks=[
                ThinkingBlock(content="Let me look.", num_tokens=3, additional_information={"signature": "sig"}),
                TextBlock(text="Calling tools."),
                ToolCallBlock(tool_call_id="call_1", tool_name="describe", tool_kwargs={"detail": "high", "n": 3}),
                ToolCallBlock(tool_call_id="call_2", tool_name="lookup", tool_kwargs='{"q": "cat"}'),
            ],
            additional_kwargs={
                "tool_calls": [OpenAIToolCall(id="call_3", function=OpenAIFunction(name="add", arguments='{"a": 1}'))]
            },
        ),
        ChatMessage(role="tool", content="A cat.", additional_kwargs={"tool_call_id": "call_1", "name": "describe"}),
        ChatMessage(role="function", content="42", additional_kwargs={"name": "add"}),
        ChatMessage(role="chatbot", content="Cohere says hi."),
        ChatMessage(role="model", content="Gemini says hi."),
        ChatMessage(
            role="assistant",
            blocks=[
                CitationBlock(cited_content=TextBlock(text="x"), source="s", title="t", additional_location_info={})
            ],
        ),
        ChatMessage(role="assistant", content=""),
        ChatMessage(role="user", blocks=[]),
    ]


def test_a_llama_index_round_trip_is_exact_after_json_normalization(tmp_path: Path) -> None:
    conversation = rich_conversation(tmp_path)
    assert dumps(to_chat_many(to_core(m) for m in conversation)) == dumps(conversation)


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool"])
def test_core_roles_map_to_themselves(role: str) -> None:
    assert to_core(ChatMessage(role=role, content="x")).role == role


@pytest.mark.parametrize(
    ("role", "core_role"), [("function", "tool"), ("chatbot", "assistant"), ("model", "assistant")]
)
def test_other_roles_map_to_the_nearest_core_role_and_come_back(role: str, core_role: str) -> None:
    message = to_core(ChatMessage(role=role, content="x"))
    assert message.role == core_role
    assert to_chat(message).role.value == role


def test_standard_fields_are_filled_for_other_frameworks(tmp_path: Path) -> None:
    system, _, user, assistant, tool, function, *_ = [to_core(m) for m in rich_conversation(tmp_path)]
    assert system.content == "You are careful."
    assert system.role == "system"
    assert isinstance(user.content, list)
    text, url_image, inline_image, guessed, by_path, audio, video, document, cache, citable = user.content
    assert text == TextPart(text="What is in these? \u00e9\u65e5\U0001f600")
    assert url_image == ImagePart(url="https://example.com/cat.png", mime_type="image/png", detail="high")
    assert inline_image == ImagePart(data="iVBORw0KGgoAAAANSUhEUg==", mime_type="image/png")
    assert guessed == inline_image
    assert isinstance(by_path, OpaquePart)
    assert by_path.kind == "image"
    assert [p.kind for p in (audio, video, document, cache, citable) if isinstance(p, OpaquePart)] == [
        "audio",
        "video",
        "document",
        "cache",
        "citable",
    ]
    assert assistant.tool_calls == [
        ToolCall(id="call_1", name="describe", arguments={"detail": "high", "n": 3}),
        ToolCall(id="call_2", name="lookup", arguments={"q": "cat"}),
        ToolCall(id="call_3", name="add", arguments={"a": 1}),
    ]
    assert assistant.content == [
        OpaquePart(
            kind="thinking",
            data={
                "block_type": "thinking",
                "content": "Let me look.",
                "num_tokens": 3,
                "additional_information": {"signature": "sig"},
            },
        ),
        TextPart(text="Calling tools."),
    ]
    assert (tool.role, tool.tool_call_id, tool.name, tool.content) == ("tool", "call_1", "describe", "A cat.")
    assert (function.role, function.name) == ("tool", "add")


def test_an_empty_message_reads_back_as_it_was() -> None:
    for message in (ChatMessage(role="assistant", content=""), ChatMessage(role="assistant", blocks=[])):
        assert to_core(message).content == ""
        assert to_chat(to_core(message)).model_dump(mode="json") == message.model_dump(mode="json")


def test_messages_read_are_plain_mutable_values() -> None:
    message = to_chat(to_core(ChatMessage(role="user", content="x", additional_kwargs={"tags": ["a"]})))
    message.additional_kwargs["tags"].append("b")  # LlamaIndex's Memory writes into additional_kwargs
    message.additional_kwargs["session_id"] = "s"
    assert message.additional_kwargs == {"tags": ["a", "b"], "session_id": "s"}


def test_a_message_edited_by_another_framework_reads_from_its_standard_fields() -> None:
    written = to_core(ChatMessage(role="user", content="original", additional_kwargs={"k": 1}))
    edited = written.model_copy(update={"content": "edited by LangChain"})
    assert to_chat(edited).model_dump(mode="json") == ChatMessage(
        role="user", content="edited by LangChain"
    ).model_dump(mode="json")


# A session written by another framework -----------------------------------------------------------------------

WHEN = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


def langchain_session() -> list[Message]:
    """What langchain-memwoven writes: standard fields, LangChain's own serialization under extras["langchain"]."""
    return [
        Message(role="system", content="Be brief.", extras={"langchain": {"type": "system", "id": "s1"}}),
        Message(
            role="user",
            id="h1",
            created_at=WHEN,
            content=[
                TextPart(text="What is this?"),
                ImagePart(url="https://example.com/cat.png"),
                ImagePart(data="iVBORw0KGgo=", mime_type="image/png"),
            ],
            extras={"langchain": {"type": "human", "example": False}},
        ),
        Message(
            role="assistant",
            id="a1",
            tool_calls=[ToolCall(id="call_1", name="describe", arguments={"detail": "high"})],
            metadata={"model": "gpt-test", "usage": {"input": 12, "output": 3}},
            extras={"langchain": {"type": "ai", "response_metadata": {"finish_reason": "tool_calls"}}},
        ),
        Message(
            role="tool",
            tool_call_id="call_1",
            name="describe",
            content="A cat on a sofa.",
            extras={"langchain": {"type": "tool", "status": "success", "artifact": None}},
        ),
        Message(
            role="assistant",
            content=[
                TextPart(text="It is a cat."),
                OpaquePart(kind="reasoning", data={"type": "reasoning", "reasoning": "looked"}),
            ],
            extras={"langchain": {"type": "ai", "response_metadata": {"finish_reason": "stop"}}},
        ),
    ]


def langchain_session_as_llama_index() -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(
            role="user",
            blocks=[
                TextBlock(text="What is this?"),
                ImageBlock(url="https://example.com/cat.png"),
                ImageBlock(image=b"iVBORw0KGgo=", image_mimetype="image/png"),
            ],
        ),
        ChatMessage(
            role="assistant",
            blocks=[ToolCallBlock(tool_call_id="call_1", tool_name="describe", tool_kwargs={"detail": "high"})],
        ),
        ChatMessage(
            role="tool", content="A cat on a sofa.", additional_kwargs={"tool_call_id": "call_1", "name": "describe"}
        ),
        ChatMessage(role="assistant", blocks=[TextBlock(text="It is a cat."), ThinkingBlock(content="looked")]),
    ]


@pytest.fixture
def shared() -> tuple[ChatMemory, MemwovenChatStore]:
    memory = InMemoryChatMemory()
    memory.save("s", langchain_session())
    return memory, MemwovenChatStore(memory)


def test_a_langchain_session_reads_as_the_equivalent_chat_messages(
    shared: tuple[ChatMemory, MemwovenChatStore],
) -> None:
    _, store = shared
    assert dumps(store.get_messages("s")) == dumps(langchain_session_as_llama_index())


def test_a_langchain_session_read_and_written_back_is_stored_unchanged(
    shared: tuple[ChatMemory, MemwovenChatStore],
) -> None:
    memory, store = shared
    store.set_messages("s", store.get_messages("s"))
    assert memory.load("s") == langchain_session()


def test_editing_a_langchain_session_keeps_the_untouched_messages_exactly(
    shared: tuple[ChatMemory, MemwovenChatStore],
) -> None:
    memory, store = shared
    messages = store.get_messages("s")
    messages[4].blocks = [TextBlock(text="It is a sleepy cat.")]
    del messages[0]
    store.set_messages("s", [*messages, ChatMessage(role="user", content="Thanks!")])
    stored = memory.load("s")
    original = langchain_session()
    assert stored[:3] == original[1:4]
    assert stored[3].text == "It is a sleepy cat."
    assert "langchain" not in stored[3].extras
    assert stored[4].text == "Thanks!"
    assert stored[4].extras == {}
    store.delete_message("s", 0)
    assert memory.load("s")[:2] == original[2:4]


def test_unchanged_duplicates_are_each_kept_once() -> None:
    twice = [Message(role="user", content="hi", extras={"langchain": {"n": i}}) for i in range(2)]
    assert to_core_many(to_chat_many(twice), twice) == twice
    assert to_core_many(to_chat_many(twice[::-1]), twice) == twice  # same content: first match first
    added = to_core_many(to_chat_many(twice) * 2, twice)[2:]  # new messages: each with an id of its own
    assert [m.model_copy(update={"id": None}) for m in added] == [Message(role="user", content="hi")] * 2
    assert added[0].id
    assert added[1].id
    assert added[0].id != added[1].id


def test_an_image_whose_file_is_gone_is_left_out_rather_than_failing_the_read(tmp_path: Path) -> None:
    picture = tmp_path / "gone.png"
    picture.write_bytes(PNG)
    stored = to_core(ChatMessage(role="user", blocks=[TextBlock(text="look"), ImageBlock(path=picture)]))
    picture.unlink()
    assert to_chat(stored).model_dump(mode="json") == ChatMessage(role="user", content="look").model_dump(mode="json")


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool"])
def test_a_plain_text_message_is_stored_without_extras_and_reads_back_exactly(role: str) -> None:
    message = ChatMessage(role=role, content="Hello, \u00e9\u65e5 world")
    core = to_core(message)
    assert core.extras == {}
    assert core.text == "Hello, \u00e9\u65e5 world"
    assert to_chat(core).model_dump(mode="json") == message.model_dump(mode="json")


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage(role="user", content=""),
        ChatMessage(role="function", content="x"),
        ChatMessage(role="user", content="x", additional_kwargs={"k": 1}),
        ChatMessage(role="assistant", blocks=[TextBlock(text="a"), TextBlock(text="b")]),
    ],
)
def test_anything_more_than_plain_text_keeps_its_native_json(message: ChatMessage) -> None:
    core = to_core(message)
    assert core.extras[NAMESPACE] == message.model_dump(mode="json")
    assert to_chat(core).model_dump(mode="json") == message.model_dump(mode="json")


def first_text(message: ChatMessage) -> TextBlock:
    block = message.blocks[0]
    assert isinstance(block, TextBlock)
    return block


def test_reading_a_message_again_gives_an_equal_value_that_shares_nothing_with_earlier_reads() -> None:
    stored = to_core(
        ChatMessage(
            role="assistant",
            blocks=[
                TextBlock(text="Calling."),
                ToolCallBlock(tool_call_id="c1", tool_name="f", tool_kwargs={"deep": {"list": [1, {"x": 2}]}}),
            ],
            additional_kwargs={"tags": ["a"], "nested": {"k": [1]}},
        )
    )
    first = to_chat(stored)
    expected = first.model_dump(mode="json")
    first.role = "user"  # type: ignore[assignment]  # no validation on assignment: any mutation a caller may make
    first.additional_kwargs["tags"].append("b")
    first.additional_kwargs["nested"]["k"].append(2)
    first.additional_kwargs["new"] = 1
    first_text(first).text = "changed"
    tool_call = first.blocks[1]
    assert isinstance(tool_call, ToolCallBlock)
    assert isinstance(tool_call.tool_kwargs, dict)
    tool_call.tool_kwargs["deep"]["list"][1]["x"] = 3
    tool_call.tool_kwargs["other"] = True
    first.blocks.append(TextBlock(text="appended"))
    for _ in range(2):
        again = to_chat(stored)
        assert again.model_dump(mode="json") == expected
        assert again is not first
        assert again.blocks[0] is not first.blocks[0]
        assert type(again) is ChatMessage
        assert [type(block) for block in again.blocks] == [TextBlock, ToolCallBlock]
        first_text(again).text = "changed again"
        again.model_fields_set.add("role")


def test_a_read_that_depends_on_a_file_is_not_remembered(tmp_path: Path) -> None:
    picture = tmp_path / "picture.png"
    picture.write_bytes(PNG)
    stored = to_core(ChatMessage(role="user", blocks=[TextBlock(text="look"), ImageBlock(path=picture)]))
    picture.unlink()
    assert [type(block) for block in to_chat(stored).blocks] == [TextBlock]
    picture.write_bytes(PNG)
    assert [type(block) for block in to_chat(stored).blocks] == [TextBlock, ImageBlock]


def test_messages_a_caller_mutates_leave_the_store_unchanged() -> None:
    store = MemwovenChatStore(InMemoryChatMemory())
    store.set_messages("k", [ChatMessage(role="user", content="hi"), ChatMessage(role="assistant", content="yo")])
    expected = dumps(store.get_messages("k"))
    for read in (store.get_messages("k"), asyncio.run(store.aget_messages("k"))):
        first_text(read[0]).text = "mutated"
        read[1].additional_kwargs["k"] = "v"
        read.append(ChatMessage(role="user", content="extra"))
    assert dumps(store.get_messages("k")) == expected
    assert dumps(asyncio.run(store.aget_messages("k"))) == expected


class Point(BaseModel):
    x: int


@pytest.mark.parametrize(
    "value",
    [datetime(2026, 1, 1), (1, 2), b"\x00", uuid.UUID(int=1), {1}, float("nan"), {1: "a"}],
    ids=["datetime", "tuple", "bytes", "uuid", "set", "nan", "int-key"],
)
def test_values_the_json_dump_would_change_are_refused(value: Any) -> None:
    with pytest.raises(InvalidInputError, match="additional_kwargs"):
        to_core(ChatMessage(role="assistant", content="x", additional_kwargs={"v": value}))
    with pytest.raises(InvalidInputError, match="tool_kwargs"):
        to_core(ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_name="f", tool_kwargs={"v": [value]})]))
    stored = [to_core(ChatMessage(role="user", content="x", additional_kwargs={"v": "2026-01-01T00:00:00"}))]
    edited = ChatMessage(role="user", content="x", additional_kwargs={"v": value})
    with pytest.raises(InvalidInputError):  # even where its dump matches a stored message
        to_core_many([edited], stored)


def test_a_self_referencing_value_is_refused() -> None:
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(InvalidInputError, match="nests deeper"):
        to_core(ChatMessage(role="user", content="x", additional_kwargs={"v": cycle}))


def test_pydantic_models_are_kept_as_their_json_as_llama_index_keeps_them() -> None:
    message = ChatMessage(role="assistant", content="x", additional_kwargs={"p": Point(x=1)})
    assert to_chat(to_core(message)).additional_kwargs == {"p": {"x": 1}}


def test_langchain_standard_blocks_become_llama_index_blocks() -> None:
    message = Message(
        role="assistant",
        content=[
            OpaquePart(kind="audio", data={"type": "audio", "base64": "UklGRg==", "mime_type": "audio/wav"}),
            OpaquePart(
                kind="audio",
                data={"type": "audio", "source_type": "base64", "data": "UklGRg==", "mime_type": "audio/mpeg"},
            ),
            OpaquePart(
                kind="file",
                data={
                    "type": "file",
                    "base64": "JVBERi0=",
                    "mime_type": "application/pdf",
                    "extras": {"filename": "r.pdf"},
                },
            ),
            OpaquePart(
                kind="file", data={"type": "file", "url": "https://example.com/r.pdf", "mime_type": "application/pdf"}
            ),
            OpaquePart(kind="reasoning", data={"type": "reasoning", "reasoning": "step by step"}),
            OpaquePart(kind="thinking", data={"type": "thinking", "thinking": "hmm", "signature": "sig"}),
            OpaquePart(
                kind="invalid_tool_call",
                data={"type": "invalid_tool_call", "id": "c1", "name": "rm", "args": "{", "error": "e"},
            ),
            OpaquePart(kind="tool_call", data={"type": "tool_call", "id": "c2", "name": "ls", "args": {}}),
        ],
        tool_calls=[ToolCall(id="c2", name="ls")],
    )
    blocks = to_chat(message).blocks
    assert dumps([ChatMessage(role="assistant", blocks=blocks)])[0]["blocks"] == [
        block.model_dump(mode="json")
        for block in [
            AudioBlock(audio=b"UklGRg==", format="wav"),
            AudioBlock(audio=b"UklGRg==", format="mpeg"),
            DocumentBlock(data=b"JVBERi0=", document_mimetype="application/pdf", title="r.pdf"),
            DocumentBlock(url="https://example.com/r.pdf", document_mimetype="application/pdf"),
            ThinkingBlock(content="step by step"),
            ThinkingBlock(content="hmm", additional_information={"signature": "sig"}),
            ToolCallBlock(tool_call_id="c1", tool_name="rm", tool_kwargs="{"),
            ToolCallBlock(tool_call_id="c2", tool_name="ls", tool_kwargs={}),
        ]
    ]


def test_a_block_with_no_llama_index_form_is_left_out_with_a_warning() -> None:
    message = Message(role="user", content=[OpaquePart(kind="image", data={"type": "image", "file_id": "f1"})])
    with pytest.warns(UserWarning, match="'image' content part has no LlamaIndex block"):
        assert to_chat(message).blocks == []


@pytest.mark.parametrize("arguments", ['{"path": ', "[1, 2]", '"text"'])
def test_tool_call_arguments_that_are_no_json_object_make_an_invalid_call(arguments: str) -> None:
    call = ToolCallBlock(tool_call_id="c1", tool_name="rm", tool_kwargs=arguments)
    openai_call = {"id": "c2", "type": "function", "function": {"name": "rm", "arguments": arguments}}
    message = ChatMessage(role="assistant", blocks=[call], additional_kwargs={"tool_calls": [openai_call]})
    core = to_core(message)
    assert core.tool_calls == []
    assert [(part.kind, part.data["id"], part.data["args"]) for part in core.content] == [  # type: ignore[union-attr]
        ("invalid_tool_call", "c1", arguments),
        ("invalid_tool_call", "c2", arguments),
    ]
    assert dumps([to_chat(core)]) == dumps([message])  # LlamaIndex's own round trip stays exact


def test_empty_tool_call_arguments_are_no_arguments() -> None:
    core = to_core(
        ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_call_id="c1", tool_name="ls", tool_kwargs="")])
    )
    assert core.tool_calls == [ToolCall(id="c1", name="ls", arguments={})]
