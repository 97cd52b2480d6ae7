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

Encoding rule: a message's field values must be JSON all the way down as given (`memwoven.models.check_json`).
Anything else (bytes, tuples, datetimes, objects, non-string keys) raises `InvalidInputError` naming where it is,
rather than being silently changed, with one exception: LangChain `Document`s in `artifact`, `additional_kwargs` or
`response_metadata` (a retriever tool's artifact) are kept in LangChain's own serialization (`dumpd`) and revived by
`load` (that class only), so they come back as `Document`s.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.load import dumpd, load
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
from memwoven.models import check_json, coerce_messages, thaw

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
    "chatbot": "assistant",  # Cohere's name for the assistant
    "model": "assistant",  # Gemini's name for the assistant
}
_REVIVABLE_FIELDS = ("artifact", "additional_kwargs", "response_metadata")
_REVIVABLE_CLASSES = (Document,)
REVIVED_KEY = "revived"
"""The key, next to `type` and `data` in `extras["langchain"]`, listing the fields kept as `dumpd(value)`."""
_logger = logging.getLogger(__name__)
_DATA_URL = re.compile(r"^data:(?P<mime>[^;,]+)(?:;[^,;]*)*;base64,(?P<data>.*)$", re.DOTALL)


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
        role = _CHAT_ROLES.get(message.role.lower())
        if role is None:
            warnings.warn(
                f"ChatMessage role {message.role!r} has no memwoven role; other frameworks read it as 'user'",
                stacklevel=2,
            )
        return role or "user"
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


def _serialized(value: Any) -> Any:
    """`dumpd(value)` if that is JSON and `load` revives it equal from `_REVIVABLE_CLASSES` alone, else None."""
    try:
        dumped = dumpd(value)
        check_json(dumped, "dumpd")
        return dumped if _revived(dumped) == value else None
    except (InvalidInputError, ValueError, TypeError, NotImplementedError, RecursionError):  # RecursionError: a cycle
        return None


def _revived(dumped: Any) -> Any:
    return load(dumped, allowed_objects=_REVIVABLE_CLASSES)


def _native(message: BaseMessage, where: str) -> dict[str, Any]:
    """`message_to_dict(message)`, with each field value checked as the message holds it (the dump has already
    turned models and dataclasses into dicts), revivable fields holding `Document`s kept as `dumpd` of them."""
    native = message_to_dict(message)
    revived = []
    for name in native["data"]:
        value = getattr(message, name)
        try:
            check_json(value, f"{where}[{name!r}]")
        except InvalidInputError:
            serialized = _serialized(value) if name in _REVIVABLE_FIELDS else None
            if serialized is None:
                raise
            native["data"][name] = serialized
            revived.append(name)
    if revived:
        native[REVIVED_KEY] = revived
    return native


def to_core_many(messages: Iterable[BaseMessage], *, standard_if_not_json: bool = False) -> list[Message]:
    """Convert LangChain messages to core `Message`s (raises `InvalidInputError` for what JSON cannot hold).

    `standard_if_not_json` (for read-only views): a message whose LangChain fields JSON cannot hold is kept with
    its standard fields alone, with a logged warning, instead of raising.
    """
    records = []
    for position, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            raise InvalidInputError(f"message {position} is a {type(message).__name__}, not a LangChain BaseMessage")
        try:
            extras = {"extras": {EXTRAS_KEY: _native(message, f"message {position} ({type(message).__name__})")}}
        except InvalidInputError as error:
            if not standard_if_not_json:
                raise
            _logger.warning("%s; that message is shown with its standard fields only", error)
            extras = {}
        records.append({**_standard(message), **extras})
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
    data: dict[str, Any] = thaw(part.data)
    if "type" in data:
        return data
    return _from_llama_index(data) or {"type": "non_standard", "value": data}


def _from_llama_index(block: dict[str, Any]) -> dict[str, Any] | None:
    """The v1 standard block for a LlamaIndex block's JSON, where one holds the same thing; else None."""
    kind = block.get("block_type")
    if kind == "audio" and block.get("audio") and block.get("format"):
        return {"type": "audio", "base64": block["audio"], "mime_type": f"audio/{block['format']}"}
    if kind == "audio" and block.get("url"):
        return {"type": "audio", "url": block["url"]}
    if kind == "document" and (block.get("data") or block.get("url")):
        source = {"base64": block["data"]} if block.get("data") else {"url": block["url"]}
        mime = {"mime_type": block["document_mimetype"]} if block.get("document_mimetype") else {}
        title = {"extras": {"filename": block["title"]}} if block.get("title") else {}
        return {"type": "file", **source, **mime, **title}
    if kind == "thinking" and isinstance(block.get("content"), str):
        extras = {"extras": block["additional_information"]} if block.get("additional_information") else {}
        return {"type": "reasoning", "reasoning": block["content"], **extras}
    return None


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
        if isinstance(content, str):
            return AIMessage(**common, tool_calls=calls)
        # a call whose arguments are not a JSON object, as another framework wrote it (LangChain's own are extras)
        invalid = [block for block in content if block.get("type") == "invalid_tool_call"]
        common["content"] = [block for block in content if block.get("type") != "invalid_tool_call"] or ""
        return AIMessage(**common, tool_calls=calls, invalid_tool_calls=invalid)
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
        thawed = thaw(native)
        for name in thawed.pop(REVIVED_KEY, ()):
            if name in _REVIVABLE_FIELDS and name in thawed["data"]:
                thawed["data"][name] = _revived(thawed["data"][name])
        return messages_from_dict([thawed])[0]
    except (ValueError, TypeError, KeyError, NotImplementedError):  # includes pydantic's ValidationError
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
