"""Lossless conversion between LangChain messages and memwoven `Message`s.

A LangChain message is stored as a core `Message` carrying two views of the same data:

* the standard fields every framework reads: `role`, `content` (a string, or parts: text -> `TextPart`, images ->
  `ImagePart`, any other block -> `OpaquePart(kind=<block type>, data=<block>)`), `tool_calls`, `tool_call_id`,
  `name` and `id`;
* LangChain's own serialization, `message_to_dict(message)`, under `extras["langchain"]`.

On the way back, the LangChain serialization is used when it is still consistent with the standard fields (its
standard projection equals the stored one), which makes the round trip exact: every field, chunk classes included.
A message written by another framework, or whose standard fields were changed after LangChain wrote it, is built
from the standard fields instead.

Encoding rule: a message must be JSON all the way down (dicts with string keys, lists, strings, numbers, booleans,
None; no NaN or infinity). Anything else (bytes, tuples, datetimes, objects, non-string keys) raises
`InvalidInputError` naming where it is, rather than being silently changed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from pydantic import ValidationError

from memwoven import ImagePart, InvalidInputError, Message, OpaquePart, TextPart
from memwoven.models import coerce_messages, thaw

__all__ = ["EXTRAS_KEY", "from_core", "from_core_many", "to_core", "to_core_many"]

EXTRAS_KEY = "langchain"
"""The key of `Message.extras` that holds LangChain's serialization of the message."""

DEVELOPER_ROLE_KEY = "__openai_role__"
"""How LangChain marks a `SystemMessage` that is really a developer message (in `additional_kwargs`)."""

_CHAT_ROLES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "developer": "developer",
    "tool": "tool",
    "function": "tool",
}
_DATA_URL = re.compile(r"^data:(?P<mime>[^;,]+)(?:;[^,;]*)*;base64,(?P<data>.*)$", re.DOTALL)


def check_json(value: Any, where: str) -> None:
    """Raise `InvalidInputError` unless `value` is plain JSON (see the module docstring)."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{where} is {value}, which JSON cannot hold")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInputError(f"{where} has the non-string key {key!r}; JSON object keys are strings")
            check_json(item, f"{where}[{key!r}]")
        return
    if isinstance(value, list):
        for position, item in enumerate(value):
            check_json(item, f"{where}[{position}]")
        return
    raise InvalidInputError(
        f"{where} is a {type(value).__name__}, which JSON cannot hold; convert it to JSON values first "
        "(e.g. a list for a tuple, base64 text for bytes, an ISO string for a datetime)"
    )


# --- LangChain -> core -------------------------------------------------------------------------------------------


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "developer" if message.additional_kwargs.get(DEVELOPER_ROLE_KEY) == "developer" else "system"
    if isinstance(message, (ToolMessage, FunctionMessage)):
        return "tool"
    if isinstance(message, ChatMessage):
        return _CHAT_ROLES.get(message.role.lower(), "user")
    raise InvalidInputError(f"a {type(message).__name__} (type {message.type!r}) is not a chat message memwoven stores")


def _image(url: Any = None, data: Any = None, mime_type: Any = None, detail: Any = None) -> ImagePart | None:
    """An `ImagePart`, or None if the values do not make one (the block then stays opaque)."""
    if isinstance(url, str) and (match := _DATA_URL.match(url)):
        url, data, mime_type = None, match["data"], match["mime"]
    try:
        return ImagePart(url=url, data=data, mime_type=mime_type, detail=detail)
    except ValidationError:
        return None


def _image_part(block: Mapping[str, Any]) -> ImagePart | None:
    kind = block.get("type")
    if kind == "image_url":  # OpenAI chat format: {"image_url": "<url>"} or {"image_url": {"url": ..., "detail": ...}}
        source = block.get("image_url")
        if isinstance(source, Mapping):
            return _image(url=source.get("url"), detail=source.get("detail"))
        return _image(url=source)
    if kind == "image":  # v1 standard block (url / base64) or v0 data block (source_type url / base64)
        extras = block.get("extras")
        detail = block.get("detail", extras.get("detail") if isinstance(extras, Mapping) else None)
        source_type = block.get("source_type")
        if source_type == "base64":
            return _image(data=block.get("data"), mime_type=block.get("mime_type"), detail=detail)
        if source_type not in (None, "url"):
            return None
        return _image(url=block.get("url"), data=block.get("base64"), mime_type=block.get("mime_type"), detail=detail)
    return None


def _part(block: str | Mapping[str, Any]) -> TextPart | ImagePart | OpaquePart:
    if isinstance(block, str):
        return TextPart(text=block)
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return TextPart(text=block["text"])
    return _image_part(block) or OpaquePart(kind=kind if isinstance(kind, str) and kind else "unknown", data=block)


def _content(content: str | Sequence[str | Mapping[str, Any]]) -> str | list[TextPart | ImagePart | OpaquePart]:
    return content if isinstance(content, str) else [_part(block) for block in content]


def _standard(message: BaseMessage) -> dict[str, Any]:
    """The standard fields of the core model for `message` (what other frameworks read)."""
    fields: dict[str, Any] = {"role": _role(message), "content": _content(message.content)}
    if isinstance(message, AIMessage):
        fields["tool_calls"] = [
            {"id": call.get("id") or "", "name": call["name"], "arguments": call["args"]} for call in message.tool_calls
        ]
    if isinstance(message, ToolMessage):
        fields["tool_call_id"] = message.tool_call_id
    fields["name"] = message.name
    fields["id"] = message.id
    return fields


def to_core_many(messages: Iterable[BaseMessage]) -> list[Message]:
    """Convert LangChain messages to core `Message`s (raises `InvalidInputError` for what JSON cannot hold)."""
    records = []
    for position, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            raise InvalidInputError(f"message {position} is a {type(message).__name__}, not a LangChain BaseMessage")
        native = message_to_dict(message)
        check_json(native["data"], f"message {position} ({type(message).__name__})")
        records.append({**_standard(message), "extras": {EXTRAS_KEY: native}})
    return coerce_messages(records)


def to_core(message: BaseMessage) -> Message:
    """Convert one LangChain message to a core `Message`."""
    return to_core_many([message])[0]


# --- core -> LangChain -------------------------------------------------------------------------------------------


def _block(part: TextPart | ImagePart | OpaquePart) -> dict[str, Any]:
    """A LangChain content block (v1 standard blocks for text and images) for a core part."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        block: dict[str, Any] = {"type": "image"}
        if part.url is not None:
            block["url"] = part.url
        else:
            block["base64"], block["mime_type"] = part.data, part.mime_type
        if part.detail is not None:
            block["extras"] = {"detail": part.detail}
        return block
    data = thaw(part.data)
    return data if "type" in data else {"type": part.kind, **data}


def _from_standard(message: Message) -> BaseMessage:
    """Build a LangChain message from the standard fields only (a message another framework wrote)."""
    content: Any = message.content if isinstance(message.content, str) else [_block(p) for p in message.content]
    common: dict[str, Any] = {"content": content, "name": message.name, "id": message.id}
    if message.role == "user":
        return HumanMessage(**common)
    if message.role == "assistant":
        calls = [
            {"id": call.id or None, "name": call.name, "args": thaw(call.arguments), "type": "tool_call"}
            for call in message.tool_calls
        ]
        return AIMessage(**common, tool_calls=calls)
    if message.role == "developer":
        return SystemMessage(**common, additional_kwargs={DEVELOPER_ROLE_KEY: "developer"})
    if message.role == "tool":
        if message.tool_call_id is None and message.name:
            return FunctionMessage(**common)
        return ToolMessage(**common, tool_call_id=message.tool_call_id or "")
    return SystemMessage(**common)


def _rebuild(native: Any) -> BaseMessage | None:
    """The LangChain message serialized in `native`, or None if it is not a readable serialization."""
    if not isinstance(native, Mapping) or not isinstance(native.get("data"), Mapping):
        return None
    try:
        return messages_from_dict([thaw(native)])[0]
    except (ValueError, TypeError, KeyError):  # includes pydantic's ValidationError
        return None


def _consistent(rebuilt: BaseMessage, message: Message) -> bool:
    """True if the standard fields derived from `rebuilt` are the ones stored in `message`."""
    try:
        standard = _standard(rebuilt)
    except (ValueError, InvalidInputError):  # includes pydantic's ValidationError
        return False
    calls = [(call["id"], call["name"], call["arguments"]) for call in standard.get("tool_calls", [])]
    return (standard["role"], standard["content"], standard.get("tool_call_id"), standard["name"], standard["id"]) == (
        message.role,
        message.content,
        message.tool_call_id,
        message.name,
        message.id,
    ) and calls == [(call.id, call.name, call.arguments) for call in message.tool_calls]


def from_core(message: Message) -> BaseMessage:
    """Convert a core `Message` to a LangChain message (exactly the original if LangChain wrote it)."""
    rebuilt = _rebuild(message.extras.get(EXTRAS_KEY))
    if rebuilt is not None and _consistent(rebuilt, message):
        return rebuilt
    return _from_standard(message)


def from_core_many(messages: Iterable[Message]) -> list[BaseMessage]:
    """Convert core `Message`s to LangChain messages."""
    return [from_core(message) for message in messages]
