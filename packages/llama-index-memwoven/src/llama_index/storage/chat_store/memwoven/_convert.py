"""LlamaIndex `ChatMessage` <-> memwoven `Message`, shared by both chat stores.

Writing fills the core's standard fields (role, text, images, tool calls, tool call id, name), which every
framework reads, and keeps LlamaIndex's own JSON (`ChatMessage.model_dump(mode="json")`) under
`extras["llama_index"]` unless the standard fields alone rebuild it exactly (a plain text message: a role and one
text block, nothing else), which halves the cost of writing such messages. Reading rebuilds the `ChatMessage`
from that JSON when it still agrees with the standard fields, so a LlamaIndex round trip is exact; otherwise (a
plain message, or one written or edited by another framework) the `ChatMessage` is built from the standard fields.

`additional_kwargs` and tool-call arguments must be JSON as given (`memwoven.models.check_json`): the JSON dump
would silently turn NaN into null, bytes into base64 text, a datetime into a string, a tuple into a list. Pydantic
models are the exception, kept as their JSON like LlamaIndex's own chat stores keep them: LlamaIndex's OpenAI LLM
puts the SDK's tool-call objects there.

Other frameworks' extras (e.g. `extras["langchain"]`) have no place in a `ChatMessage`: putting them in
`additional_kwargs` would send them to the LLM, since several LlamaIndex LLM integrations merge
`additional_kwargs` into the provider's message. Instead `to_core_many` (used for every replace-all write)
reuses the stored `Message` for each `ChatMessage` that reads back unchanged, so a session written by another
framework, read here and saved back, is stored exactly as it was, extras included.
"""

from __future__ import annotations

import functools
import json
import uuid
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from llama_index.core.base.llms.types import ChatMessage, ContentBlock, MessageRole, TextBlock, ToolCallBlock
from pydantic import BaseModel, TypeAdapter, ValidationError

from memwoven.models import ImagePart, Message, OpaquePart, Role, TextPart, check_json, coerce_message, thaw

__all__ = ["NAMESPACE", "to_chat", "to_chat_many", "to_core", "to_core_many"]

NAMESPACE = "llama_index"
"""The key of `Message.extras` that holds LlamaIndex's native JSON of the message."""

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
    "chatbot": "assistant",  # Cohere's name for the assistant
    "model": "assistant",  # Gemini's name for the assistant
}
_STANDARD_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")
_BLOCK: TypeAdapter[Any] = TypeAdapter(ContentBlock)
_M = TypeVar("_M", bound=BaseModel)


# LlamaIndex -> core -------------------------------------------------------------------------------------------


def to_core(message: ChatMessage) -> Message:
    """The core `Message` for a `ChatMessage`: standard fields filled in, native JSON kept in extras."""
    return _to_core(message, _plain_role_and_text(message))


def _to_core(message: ChatMessage, plain: tuple[Role, str] | None) -> Message:
    # A ChatMessage has no id: a new message gets one, kept in the stored message (ids are unique within a
    # session, CM10), and an unchanged message keeps its stored one (`to_core_many`).
    message_id = f"li-{uuid.uuid4().hex}"
    if plain is not None:
        return Message(role=plain[0], content=plain[1], id=message_id)
    return _from_native(_dump(message), message_id)


def _dump(message: ChatMessage) -> dict[str, Any]:
    """`message.model_dump(mode="json")`, once what the dump would silently change is refused (module docstring)."""
    check_json(message.additional_kwargs, "ChatMessage.additional_kwargs", (BaseModel,))
    for position, block in enumerate(message.blocks):
        if isinstance(block, ToolCallBlock):
            check_json(block.tool_kwargs, f"ChatMessage.blocks[{position}].tool_kwargs")
    return message.model_dump(mode="json")


def to_core_many(messages: Sequence[ChatMessage], stored: Sequence[Message] = ()) -> list[Message]:
    """Convert `messages`, reusing the message of `stored` that each one was read from if it is unchanged.

    Matching is by content (each stored message used at most once), so reordering and deleting keep the
    untouched messages exactly as stored, including what other frameworks keep in `extras`.
    """
    unchanged: dict[str, list[Message]] = {}
    for original in reversed(stored):
        unchanged.setdefault(_reading(original).fingerprint(original), []).append(original)
    result = []
    for message in messages:
        plain = _plain_role_and_text(message)
        if not unchanged:
            result.append(_to_core(message, plain))
            continue
        native = _plain_json(*plain) if plain is not None else _dump(message)
        try:
            same = unchanged.get(_fingerprint(native))
        except ValueError:  # no JSON text (an integer over the limit): nothing stored matches; _to_core refuses it
            same = None
        result.append(same.pop() if same else _to_core(message, plain))
    return result


# Checked once: a plain ChatMessage is then exactly its role and text (no other field can hold anything).
_PLAIN_SHAPE = set(ChatMessage.model_fields) == {"role", "additional_kwargs", "blocks"} and set(
    TextBlock.model_fields
) == {"block_type", "text"}


def _plain_role_and_text(message: ChatMessage) -> tuple[Role, str] | None:
    """The core role and the text of a plain `ChatMessage` (one non-empty text block, nothing else), else None.

    Such a message needs no native JSON in extras: `_from_standard` rebuilds it exactly. Recognising it from the
    object, without `model_dump`, keeps writing long plain conversations cheap.
    """
    if not _PLAIN_SHAPE or message.additional_kwargs or len(message.blocks) != 1:
        return None
    role, block = _ROLES.get(message.role), message.blocks[0]  # MessageRole is a str enum
    if role is None or role != message.role or type(block) is not TextBlock or not block.text:
        return None
    return role, block.text


def _from_native(native: dict[str, Any], message_id: str) -> Message:
    if _is_plain(native):
        return coerce_message({**_standard_fields(native), "id": message_id})
    return coerce_message({**_standard_fields(native), "id": message_id, "extras": {NAMESPACE: native}})


def _is_plain(native: Mapping[str, Any]) -> bool:
    """Whether `native` is exactly the JSON of `ChatMessage(role=<a core role>, content=<non-empty text>)`, which
    `_from_standard` rebuilds from the standard fields: then there is nothing to keep in extras."""
    role, blocks = _ROLES.get(str(native.get("role"))), native.get("blocks")
    if role is None or role != native.get("role"):
        return False
    if not isinstance(blocks, list) or len(blocks) != 1 or not isinstance(blocks[0], dict):
        return False
    text = blocks[0].get("text")
    if not isinstance(text, str) or not text:
        return False
    return native == _plain_json(role, text)


def _plain_json(role: str, text: str) -> dict[str, Any]:
    """The JSON of `ChatMessage(role=role, content=text)`."""
    template = _plain_template(role)
    return {**template, "blocks": [{**template["blocks"][0], "text": text}]}


@functools.cache
def _plain_template(role: str) -> dict[str, Any]:
    """The JSON of a plain text message with this role (its text to be substituted)."""
    return ChatMessage(role=MessageRole(role), content="text").model_dump(mode="json")


def _standard_fields(native: Mapping[str, Any]) -> dict[str, Any]:
    """The core's standard fields, computed from a `ChatMessage`'s JSON."""
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in native.get("blocks", ()):
        kind = block.get("block_type")
        if kind == "text":
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "tool_call":
            calls.append(_call(block.get("tool_call_id"), block.get("tool_name"), block.get("tool_kwargs")))
        else:
            parts.append(_image_part(block) or {"type": "opaque", "kind": str(kind), "data": block})
    kwargs = native.get("additional_kwargs") or {}
    known = {_call_id(call) for call in calls}
    calls += [call for call in _openai_calls(kwargs.get("tool_calls")) if _call_id(call) not in known]
    parts += [call for call in calls if "type" in call]  # invalid calls
    calls = [call for call in calls if "type" not in call]
    if not parts:
        content: str | list[dict[str, Any]] = ""
    elif len(parts) == 1 and parts[0]["type"] == "text":
        content = parts[0]["text"]
    else:
        content = parts
    tool_call_id, name = kwargs.get("tool_call_id"), kwargs.get("name")
    return {
        "role": _ROLES[native.get("role", "user")],
        "content": content,
        "tool_calls": calls,
        "tool_call_id": tool_call_id if isinstance(tool_call_id, str) else None,
        "name": name if isinstance(name, str) else None,
    }


def _image_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """An `ImagePart` for an image block given inline or by URL (an image by local path stays opaque)."""
    if block.get("block_type") != "image":
        return None
    if block.get("image"):
        mime = block.get("image_mimetype") or "application/octet-stream"
        return {"type": "image", "data": block["image"], "mime_type": mime, "detail": block.get("detail")}
    if block.get("url"):
        return {
            "type": "image",
            "url": str(block["url"]),
            "mime_type": block.get("image_mimetype"),
            "detail": block.get("detail"),
        }
    return None


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A core tool call; for arguments that are not a JSON object (a model's malformed output), an opaque part
    holding LangChain's standard `invalid_tool_call` block, so that no framework reads it as a valid call."""
    call_id = call_id if isinstance(call_id, str) else ""
    parsed = arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else None
        except ValueError:
            parsed = arguments
    if parsed is None or isinstance(parsed, dict):
        return {"id": call_id, "name": str(name), "arguments": parsed or {}}
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    error = "the arguments are not a JSON object"
    block = {"type": "invalid_tool_call", "id": call_id, "name": str(name), "args": raw, "error": error}
    return {"type": "opaque", "kind": "invalid_tool_call", "data": block}


def _call_id(call: Mapping[str, Any]) -> Any:
    return call["data"]["id"] if "type" in call else call["id"]


def _openai_calls(value: Any) -> list[dict[str, Any]]:
    """Tool calls kept the OpenAI way in `additional_kwargs["tool_calls"]` (`{id, function: {name, arguments}}`)."""
    calls = []
    for raw in value if isinstance(value, list) else ():
        if not isinstance(raw, Mapping):
            continue
        function = raw["function"] if isinstance(raw.get("function"), Mapping) else raw
        if isinstance(function.get("name"), str):
            calls.append(_call(raw.get("id"), function["name"], function.get("arguments", function.get("input"))))
    return calls


# core -> LlamaIndex -------------------------------------------------------------------------------------------


def to_chat(message: Message) -> ChatMessage:
    """The `ChatMessage` for a core `Message`: its native form if still consistent, else from standard fields.

    Chat engines read the whole history on every turn, so the conversion of each (immutable) message object is
    kept with its reading and handed out as a fresh copy: a caller may mutate what it gets, never the cache.
    """
    reading = _reading(message)
    if reading.chat is not None:
        return _copy(reading.chat)
    native = _native(message)
    if native is not None:
        try:
            chat = ChatMessage.model_validate(native)
        except ValidationError:  # e.g. an image by path whose file is gone: read what the standard fields hold
            return _from_standard(message)  # depends on files: not remembered
    else:
        chat = _from_standard(message)
    if not _copyable(chat):
        return chat
    reading.chat = chat
    return _copy(chat)


def to_chat_many(messages: Iterable[Message]) -> list[ChatMessage]:
    """`to_chat` over a list."""
    return [to_chat(message) for message in messages]


class _Reading:
    """How a stored message reads, worked out once per message object (messages are immutable).

    Checking that the native JSON agrees with the standard fields is half the cost of a read, and chat engines
    read the whole history on every turn, mostly the very objects the backend's snapshot cache holds.
    """

    __slots__ = ("_fingerprint", "chat", "native")

    def __init__(self, message: Message) -> None:
        native = message.extras.get(NAMESPACE)
        self.native: Mapping[str, Any] | None = native if native is not None and _consistent(native, message) else None
        self._fingerprint: str | None = None
        self.chat: ChatMessage | None = None  # what `to_chat` copies, once converted (only if `_copyable`)

    def fingerprint(self, message: Message) -> str:
        """`_fingerprint` of the JSON of the `ChatMessage` that `message` reads as."""
        if self._fingerprint is None:
            chat_json = self.native if self.native is not None else _from_standard(message).model_dump(mode="json")
            self._fingerprint = _fingerprint(chat_json)
        return self._fingerprint


_READINGS: dict[int, tuple[weakref.ref[Message], _Reading]] = {}  # by id() of live messages only


def _reading(message: Message) -> _Reading:
    key = id(message)
    known = _READINGS.get(key)
    if known is not None and known[0]() is message:
        return known[1]
    reading = _Reading(message)
    _READINGS[key] = (weakref.ref(message, functools.partial(_forget, key)), reading)
    return reading


def _forget(key: int, ref: weakref.ref[Message]) -> None:
    """Drop the reading of a message that no longer exists (before its id can be reused)."""
    known = _READINGS.get(key)
    if known is not None and known[0] is ref:
        _READINGS.pop(key, None)


def _native(message: Message) -> dict[str, Any] | None:
    """A mutable copy of the message's LlamaIndex JSON, if it has one that agrees with its standard fields."""
    native = _reading(message).native
    if native is None:
        return None
    thawed: dict[str, Any] = thaw(native)
    return thawed


# Blocks whose every field is immutable (str, None, ...) or a JSON dict/list that `thaw` copies; others (images,
# documents, ...) may hold values `_copy` would share, or resolve files when validated: never remembered.
_COPYABLE_BLOCKS = (TextBlock, ToolCallBlock)


def _copyable(chat: ChatMessage) -> bool:
    """Whether `_copy` makes a copy of `chat` that shares nothing mutable with it."""
    return (
        type(chat) is ChatMessage
        and _plain_model(chat)
        and "images" not in chat.additional_kwargs  # read from image documents on validation
        and all(type(block) in _COPYABLE_BLOCKS and _plain_model(block) for block in chat.blocks)
    )


def _plain_model(model: BaseModel) -> bool:
    """No extra fields and no private attributes: the instance is its field values and the set of those given."""
    return model.__pydantic_extra__ is None and model.__pydantic_private__ is None


def _copy(chat: ChatMessage) -> ChatMessage:
    """A copy of a `_copyable` message sharing nothing mutable with it, at a fraction of a conversion's cost."""
    fields = dict(chat.__dict__)
    kwargs = fields["additional_kwargs"]
    fields["additional_kwargs"] = thaw(kwargs) if kwargs else {}
    fields["blocks"] = [_rebuilt(block, _thawed_fields(block)) for block in fields["blocks"]]
    return _rebuilt(chat, fields)


def _thawed_fields(model: BaseModel) -> dict[str, Any]:
    """A copy of the field values of a `_COPYABLE_BLOCKS` block, its dicts and lists copied too."""
    fields = dict(model.__dict__)
    for name, value in fields.items():
        if isinstance(value, (dict, list)):
            fields[name] = thaw(value)
    return fields


def _rebuilt(model: _M, fields: dict[str, Any]) -> _M:
    """An instance of `model`'s class holding `fields`, built the way pydantic's own `__copy__` and
    `model_construct` do, without validation: half the cost of `__copy__`, which copies through `copy.copy`."""
    rebuilt = object.__new__(type(model))
    object.__setattr__(rebuilt, "__dict__", fields)
    object.__setattr__(rebuilt, "__pydantic_fields_set__", set(model.__pydantic_fields_set__))
    object.__setattr__(rebuilt, "__pydantic_extra__", None)
    object.__setattr__(rebuilt, "__pydantic_private__", None)
    return rebuilt


def _from_standard(message: Message) -> ChatMessage:
    kwargs = {key: value for key in ("tool_call_id", "name") if (value := getattr(message, key)) is not None}
    return ChatMessage(role=MessageRole(message.role), blocks=_blocks(message), additional_kwargs=kwargs)


def _consistent(native: Mapping[str, Any], message: Message) -> bool:
    """Whether `message`'s standard fields are still the ones its native JSON produces (no one edited them)."""
    try:
        expected = Message.model_validate(_standard_fields(native))
    except (ValidationError, KeyError, TypeError, AttributeError):
        return False
    return all(getattr(expected, field) == getattr(message, field) for field in _STANDARD_FIELDS)


def _blocks(message: Message) -> list[Any]:
    """The blocks for the standard fields; a part LlamaIndex cannot represent is left out."""
    blocks: list[dict[str, Any]] = []
    if isinstance(message.content, str):
        if message.content:
            blocks.append({"block_type": "text", "text": message.content})
    else:
        blocks += [block for part in message.content if (block := _block(part)) is not None]
    blocks += [
        {
            "block_type": "tool_call",
            "tool_call_id": call.id,
            "tool_name": call.name,
            "tool_kwargs": thaw(call.arguments),
        }
        for call in message.tool_calls
    ]
    return [block for raw in blocks if (block := _validated(raw)) is not None]


def _validated(block: dict[str, Any]) -> Any:
    try:
        return _BLOCK.validate_python(block)
    except ValidationError:
        return None


def _block(part: TextPart | ImagePart | OpaquePart) -> dict[str, Any] | None:
    """The block for a content part; None, with a warning, for an opaque part with no LlamaIndex form."""
    if isinstance(part, TextPart):
        return {"block_type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        source = {"url": part.url} if part.url is not None else {"image": part.data}
        return {"block_type": "image", **source, "image_mimetype": part.mime_type, "detail": part.detail}
    data: Mapping[str, Any] = part.data
    value = data.get("value")
    if part.kind == "non_standard" and isinstance(value, Mapping):
        data = value  # a LlamaIndex block LangChain read and wrote back
    block: dict[str, Any] | None = thaw(data) if "block_type" in data else _from_langchain(thaw(data))
    if block is None and part.kind not in _CALL_KINDS:
        warnings.warn(f"a {part.kind!r} content part has no LlamaIndex block; it is left out", stacklevel=2)
    return block


# LangChain content blocks that repeat the message's tool calls (its v1 and Anthropic forms): left out silently.
_CALL_KINDS = frozenset({"tool_call", "tool_call_chunk", "tool_use"})


def _from_langchain(block: dict[str, Any]) -> dict[str, Any] | None:
    """The LlamaIndex block for a LangChain standard block (v1, or v0 `source_type` data), where one holds the
    same thing; else None."""
    kind, v0 = block.get("type"), block.get("source_type")
    data = block.get("data") if v0 == "base64" else block.get("base64")
    url = block.get("url") if v0 in (None, "url") else None
    mime = block.get("mime_type")
    if kind == "audio" and data and isinstance(mime, str) and mime.startswith("audio/"):
        return {"block_type": "audio", "audio": data, "format": mime.removeprefix("audio/")}
    if kind == "audio" and url:
        return {"block_type": "audio", "url": url}
    if kind == "file" and (data or url):
        extras = block.get("extras")
        title = block.get("filename") or (extras.get("filename") if isinstance(extras, dict) else None)
        source = {"data": data} if data else {"url": url}
        return {"block_type": "document", **source, "document_mimetype": mime, **({"title": title} if title else {})}
    if kind == "reasoning" and isinstance(block.get("reasoning"), str):
        return {"block_type": "thinking", "content": block["reasoning"]}
    if kind == "thinking" and isinstance(block.get("thinking"), str):  # Anthropic's own block
        extra = {key: value for key, value in block.items() if key not in ("type", "thinking")}
        return {"block_type": "thinking", "content": block["thinking"], "additional_information": extra}
    if kind == "invalid_tool_call" and isinstance(block.get("name"), str):
        arguments = block.get("args") if isinstance(block.get("args"), str) else ""
        return {
            "block_type": "tool_call",
            "tool_call_id": block.get("id"),
            "tool_name": block["name"],
            "tool_kwargs": arguments,
        }
    return None


def _fingerprint(chat_json: Mapping[str, Any]) -> str:
    return json.dumps(chat_json, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
