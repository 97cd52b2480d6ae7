"""The core data model: chat messages, vector documents and keyed items.

Every model is an immutable, JSON-serializable pydantic value. Immutability goes all the way down (metadata
dicts and lists are frozen too), which is what lets backends hand out cached snapshots without copying. Message
equality is exact (the same fields and the same JSON), so a backend computing an O(change) save can find the
unchanged messages with one C-level sequence comparison (`same_prefix`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TypeVar, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticSerializationError, TzInfo

from memwoven.errors import InvalidInputError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "ContentPart",
    "FrozenDict",
    "FrozenList",
    "ImagePart",
    "Item",
    "JsonObject",
    "Message",
    "OpaquePart",
    "Real",
    "Role",
    "ScoredDocument",
    "TextPart",
    "ToolCall",
    "VectorDocument",
    "check_json",
    "coerce_documents",
    "coerce_item_value",
    "coerce_message",
    "coerce_messages",
    "coerce_messages_after",
    "coerce_metadata",
    "freeze_json",
    "known_then_rest",
    "same_prefix",
    "thaw",
]


def _readonly(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable; build a new value instead (e.g. model_copy(update=...))")


class FrozenDict(dict[str, Any]):
    """A `dict` that refuses mutation; equal to, and serialized as, a plain dict."""

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _readonly

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (type(self), (dict(self),))


class FrozenList(list[Any]):
    """A `list` that refuses mutation; equal to, and serialized as, a plain list."""

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = _readonly
    sort = reverse = __iadd__ = __imul__ = _readonly

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return (type(self), (list(self),))


MAX_JSON_DEPTH = 64
"""How deep objects and arrays may nest in one JSON value (metadata, tool-call arguments, extras, opaque data)."""
MAX_INT_DIGITS = 4300
"""How many decimal digits a JSON integer may have: what a Python process decodes by default
(`sys.get_int_max_str_digits()`), so that every reader can read back what was stored."""
_INT_BOUND = 10**MAX_INT_DIGITS


def thaw(value: Any) -> Any:
    """A deep, mutable copy of a (frozen) JSON value: plain dicts and lists, for code that edits or serializes it."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value


def freeze_json(value: Any, _depth: int = 1) -> Any:
    """Deep-freeze a JSON value, refusing (`ValueError`) what cannot be stored and read back everywhere: NaN and
    ±inf, integers of more than `MAX_INT_DIGITS` digits, nesting deeper than `MAX_JSON_DEPTH`."""
    if isinstance(value, dict):
        _check_depth(_depth)
        return FrozenDict({key: freeze_json(item, _depth + 1) for key, item in value.items()})
    if isinstance(value, list):
        _check_depth(_depth)
        return FrozenList(freeze_json(item, _depth + 1) for item in value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and infinity are not JSON values")
    if isinstance(value, int) and not -_INT_BOUND < value < _INT_BOUND:
        raise ValueError(f"a JSON integer may have at most {MAX_INT_DIGITS} digits")
    return value


def check_json(value: Any, where: str, accept: tuple[type, ...] = (), _depth: int = 0) -> None:
    """Raise `InvalidInputError` naming `where` unless `value` is plain JSON as given (dicts with string keys,
    lists, strings, numbers, booleans, None; no NaN or ±inf; at most `MAX_JSON_DEPTH` levels), or an instance of
    `accept` (which the caller serializes itself). For adapters, whose frameworks' own serializers would otherwise
    silently turn a tuple, bytes, a datetime or an object into other JSON."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{where} is {value}, which JSON cannot hold")
        return
    if isinstance(value, (dict, list)) and _depth >= MAX_JSON_DEPTH:  # also ends a cycle
        raise InvalidInputError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels (or refers to itself)")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInputError(f"{where} has the non-string key {key!r}; JSON object keys are strings")
            check_json(item, f"{where}[{key!r}]", accept, _depth + 1)
        return
    if isinstance(value, list):
        for position, item in enumerate(value):
            check_json(item, f"{where}[{position}]", accept, _depth + 1)
        return
    if accept and isinstance(value, accept):
        return
    raise InvalidInputError(
        f"{where} is a {type(value).__name__}, which JSON cannot hold; convert it to JSON values first "
        "(e.g. a list for a tuple, base64 text for bytes, an ISO string for a datetime)"
    )


def _check_depth(depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"JSON objects and arrays may nest at most {MAX_JSON_DEPTH} levels deep")


def _to_utc(value: datetime) -> datetime:
    """`value` in UTC, refusing (`ValueError`) a time that falls outside the date range there (year 1 or 9999)."""
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("the time is out of range once converted to UTC") from None


def _minute_offset(value: datetime | None) -> datetime | None:
    """`value` with a fixed offset, as it reads back from JSON: in UTC if its offset is not a whole number of
    minutes (a historical local mean time, say), as JSON keeps offsets to the minute; else at its offset."""
    offset = None if value is None else value.utcoffset()
    if value is None or offset is None:
        return value
    if offset.seconds % 60 or offset.microseconds:
        return _to_utc(value)
    # Python never equates a time in a DST fold or gap with one in another zone: a zone's time would not equal
    # itself read back
    return value if isinstance(value.tzinfo, (timezone, TzInfo)) else value.replace(tzinfo=timezone(offset))


_Text = Annotated[str, Strict()]
"""A string field: a `str` (or subclass) only, where pydantic's lax mode would decode `bytes` into one (a document
id that `get` and `delete`, which take only strings, could never name)."""


Real = Annotated[float, Strict()]
"""An embedding value: an `int` or `float` (numpy's too), never a string or a bool, which lax validation turns into
a number."""


def _str_keys(value: Any, info: ValidationInfo) -> Any:
    """`value`, refusing (`ValueError`) an object key that is not a string at any depth: lax validation decodes a
    `bytes` key into a string. Only Python input is walked: a JSON document's keys are strings."""
    if info.mode == "python":
        _check_keys(value, 0)
    return value


def _check_keys(value: Any, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        return  # too deep (or a cycle): validation then refuses it
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"object keys must be strings, got the {type(key).__name__} {key!r:.80}")
            _check_keys(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_keys(item, depth + 1)


JsonObject = Annotated[dict[str, JsonValue], BeforeValidator(_str_keys), AfterValidator(freeze_json)]
"""A JSON object (string keys, JSON values), deep-frozen after validation."""


def _utf8_keys(value: Any) -> Any:
    """`value`, refusing (`ValueError`) an object key with no UTF-8 form (a lone surrogate) at any depth: message
    encoders replace it in a key, silently (two such keys became one), where a value makes them raise."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not key.isascii():
                key.encode("utf-8")  # UnicodeEncodeError is a ValueError
            _utf8_keys(item)
    elif isinstance(value, list):
        for item in value:
            _utf8_keys(item)
    return value


_MessageJson = Annotated[JsonObject, AfterValidator(_utf8_keys)]  # a JSON object of a message

Role = Literal["system", "developer", "user", "assistant", "tool"]


class _Model(BaseModel):
    # defer_build: a model's validator and serializer are built at its first use, not at import (this module's own
    # import time halves; a worker that only reads search results built by model_construct may never build them)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with `update`, a new value validated like any other (pydantic's own copy skips validation)."""
        if not update:
            return super().model_copy(deep=deep)
        source = super().model_copy(deep=True) if deep else self
        fields = {name: source.__dict__[name] for name in source.model_fields_set}
        return self.model_validate({**fields, **update})


class TextPart(_Model):
    """A piece of text inside a multimodal message."""

    type: Literal["text"] = "text"
    text: _Text


class ImagePart(_Model):
    """An image given either by URL or inline as base64 `data` with its `mime_type`."""

    type: Literal["image"] = "image"
    url: _Text | None = None
    data: _Text | None = None
    mime_type: _Text | None = None
    detail: _Text | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        if (self.url is None) == (self.data is None):
            raise ValueError("an image needs exactly one of `url` or `data`")
        if self.data is not None and not self.mime_type:
            raise ValueError("inline image `data` needs a `mime_type`")
        return self


class OpaquePart(_Model):
    """Any other content block (audio, documents, reasoning, ...), kept as a JSON object under a `kind` name."""

    type: Literal["opaque"] = "opaque"
    kind: _Text
    data: _MessageJson = Field(default_factory=FrozenDict)


ContentPart = Annotated[Union[TextPart, ImagePart, OpaquePart], Field(discriminator="type")]


class ToolCall(_Model):
    """A tool invocation requested by an assistant message."""

    id: _Text
    name: _Text
    arguments: _MessageJson = Field(default_factory=FrozenDict)


class Message(_Model):
    """One chat message. Immutable; equal to another message when every backend would store the two alike.

    `extras` is namespaced (``{"langchain": {...}}``): an adapter keeps its framework's native serialization
    there so its own round trip is exact, while the standard fields stay readable by every other framework.
    """

    role: Role
    content: _Text | Annotated[list[ContentPart], AfterValidator(FrozenList)] = ""
    tool_calls: Annotated[list[ToolCall], AfterValidator(FrozenList)] = Field(default_factory=FrozenList)
    tool_call_id: _Text | None = None
    name: _Text | None = None
    id: _Text | None = None
    created_at: Annotated[datetime | None, AfterValidator(_minute_offset)] = None
    metadata: _MessageJson = Field(default_factory=FrozenDict)
    extras: Annotated[dict[_Text, _MessageJson], AfterValidator(FrozenDict)] = Field(default_factory=FrozenDict)

    @property
    def text(self) -> str:
        """The message's text: `content` itself, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def __eq__(self, other: object) -> bool:
        """Equal fields and the same JSON: ``1``, ``1.0`` and ``True`` are equal in Python but not once stored."""
        if self is other:
            return True
        equal = super().__eq__(other)
        if equal is not True or not isinstance(other, Message):
            return equal
        try:
            return self.model_dump_json() == other.model_dump_json()
        except PydanticSerializationError:  # a lone surrogate: no JSON form (unstorable), so nothing tells them apart
            return True


def _embedding_list(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy arrays and similar
    return tolist() if callable(tolist) else value


class VectorDocument(_Model):
    """A stored document: a non-empty `id`, its text, its embedding and a JSON metadata object."""

    id: _Text = Field(min_length=1)
    content: _Text = ""
    embedding: Annotated[list[Real], BeforeValidator(_embedding_list), AfterValidator(FrozenList)]
    metadata: JsonObject = Field(default_factory=FrozenDict)

    @field_validator("embedding")
    @classmethod
    def _finite(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("an embedding cannot be empty")
        # a finite sum proves every value finite (NaN and ±inf propagate) in a quarter of the time; if the sum
        # overflowed, look at each value
        if not math.isfinite(sum(value)) and not all(map(math.isfinite, value)):
            raise ValueError("an embedding cannot contain NaN or infinity")
        return value


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("an item's times must be timezone-aware")
    return _to_utc(value)


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


class Item(_Model):
    """One stored item of an `ItemMemory`: a JSON object `value` under (`namespace`, `key`).

    `version` grows on every write (0 never names a stored item); `created_at` is the first write since the item
    last did not exist, `updated_at` the latest; both timezone-aware UTC, in milliseconds. `expires_at` is when the
    item stops being readable (None: never) and `ttl` the seconds a write (or a read asking to refresh) sets it to
    from that moment; `ttl` is kept so that a refresh, an export and a migration keep the sliding window.
    """

    namespace: Annotated[tuple[_Text, ...], Field(min_length=1)]
    key: _Text = Field(min_length=1)
    value: JsonObject
    version: int = Field(gt=0)
    created_at: UtcDatetime
    updated_at: UtcDatetime
    expires_at: UtcDatetime | None = None
    ttl: float | None = Field(default=None, gt=0, allow_inf_nan=False)


_JSON_OBJECT: TypeAdapter[dict[str, Any]] = TypeAdapter(JsonObject)


def coerce_item_value(value: object) -> FrozenDict:
    """Validate an item's value into a frozen JSON object, raising `InvalidInputError`: a JSON object of string
    keys and JSON values within the limits (`MAX_JSON_DEPTH`, `MAX_INT_DIGITS`, no NaN or ±inf) whose strings are
    valid Unicode (no lone surrogate), so that every backend can store it and read it back equal."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"an item's value must be a JSON object, got {type(value).__name__}")
    if type(value) in (dict, FrozenDict):
        try:
            plain: FrozenDict = _plain_frozen(value, 1)
        except (_NotPlain, ValueError, RecursionError):  # the validation below says what is wrong, or accepts it
            pass
        else:
            return plain
    try:
        frozen = _JSON_OBJECT.validate_python(dict(value))  # validated like message metadata
    except ValidationError as error:
        raise _invalid(error, "item value") from None
    try:
        json.dumps(frozen, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("invalid item value: a string holds a lone surrogate (not valid Unicode)") from None
    return frozen  # type: ignore[return-value]


class _NotPlain(Exception):
    """A value holds something other than dict, list, str, int, float, bool or None (exactly those types)."""


def _plain_frozen(value: Any, depth: int) -> Any:
    """`freeze_json` of a value made only of plain JSON types, with the checks `coerce_item_value` makes (a lone
    surrogate raises `UnicodeEncodeError`, a `ValueError`). The fast path for the common value: the same result as
    pydantic's validation followed by `freeze_json`, in one walk and without serializing; anything unusual raises
    `_NotPlain` and is left to pydantic."""
    kind = type(value)
    if kind is str:
        if not value.isascii():
            value.encode("utf-8")
        return value
    if kind is dict or kind is FrozenDict:
        _check_depth(depth)
        frozen = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            if not key.isascii():
                key.encode("utf-8")
            frozen[key] = _plain_frozen(item, depth + 1)
        return FrozenDict(frozen)
    if kind is list or kind is FrozenList:
        _check_depth(depth)
        return FrozenList([_plain_frozen(item, depth + 1) for item in value])
    if kind is int or kind is float or kind is bool or value is None:
        return freeze_json(value)
    raise _NotPlain


class ScoredDocument(_Model):
    """A search hit: the document and its similarity score (higher is closer)."""

    document: VectorDocument
    score: float


def _invalid(error: ValidationError, what: str) -> InvalidInputError:
    details = "; ".join(f"{'.'.join(map(str, e['loc'])) or what}: {e['msg']}" for e in error.errors())
    return InvalidInputError(f"invalid {what}: {details}")


_M = TypeVar("_M", Message, VectorDocument)
_T = TypeVar("_T")


def _coerce(items: Iterable[_M | Mapping[str, Any]], model: type[_M], what: str, start: int = 0) -> list[_M]:
    if isinstance(items, (str, bytes, Mapping, BaseModel)):
        raise InvalidInputError(f"expected a list of {what}s, got a single value")
    result: list[_M] = []
    for position, item in enumerate(items, start):
        if type(item) is model:
            result.append(item)
        elif isinstance(item, (model, Mapping)):  # a subclass's extra fields, which no backend keeps, are refused
            try:
                result.append(model.model_validate(dict(item)))
            except ValidationError as error:
                raise _invalid(error, f"{what} {position}") from None
        else:
            raise InvalidInputError(f"{what} {position} is a {type(item).__name__}, not a {model.__name__}")
    return result


def coerce_message(fields: Mapping[str, Any]) -> Message:
    """Validate one message given as plain fields into a `Message`, raising `InvalidInputError`."""
    try:
        return Message.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "message") from None


def coerce_messages(messages: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
    """Validate `messages` (models or plain dicts) into a list of `Message`, raising `InvalidInputError`."""
    return _coerce(messages, Message, "message")


def coerce_messages_after(
    messages: Iterable[Message | Mapping[str, Any]], known: Sequence[Message]
) -> tuple[list[Message], int]:
    """`coerce_messages` (always a new list), plus how many leading items equal the messages `known` holds at the
    same positions (`same_prefix`): those are not checked again (immutable, checked when stored), and the list holds
    the known messages for them (an object claiming equality in its own `__eq__` is no message)."""
    if isinstance(messages, (str, bytes, Mapping, BaseModel)):
        raise InvalidInputError("expected a list of messages, got a single value")
    items = messages if isinstance(messages, (list, tuple)) else list(messages)
    joined = known_then_rest(items, known) if isinstance(items, list) else None
    if joined is not None:  # the common save, the known messages then new ones: one list built
        same = len(known)
        joined[same:] = _coerce(items[same:], Message, "message", same)
        return joined, same
    same = same_prefix(items, known)
    checked = known[:same] if isinstance(known, list) else list(known[:same])
    if same < len(items):
        checked += _coerce(items[same:], Message, "message", same)
    return checked, same


_RUN = 1024  # messages per comparison while locating the first difference


def same_prefix(items: Sequence[object], known: Sequence[Message]) -> int:
    """How many leading `items` equal the `known` messages at the same positions.

    Equality is exact (`Message.__eq__`), so such items are stored exactly like the known ones: they need neither
    checking nor writing again. List equality passes over the very same objects without calling `__eq__`, so the
    common case (a list of the known messages, then new ones) costs about one pointer copy per message; a
    difference is then located run by run.
    """
    size = min(len(items), len(known))
    head, known_head = _first(items, size), _first(known, size)
    if _equal(known_head, head):
        return size
    start = 0
    while start < size and _equal(known_head[start : start + _RUN], head[start : start + _RUN]):
        start += _RUN
    return next((i for i in range(start, size) if not _equal(known_head[i : i + 1], head[i : i + 1])), size)


def known_then_rest(items: list[Any], known: Sequence[Message]) -> list[Any] | None:
    """`known` followed by the items past its length, if the leading items equal all of `known` (`same_prefix`);
    else None. The common save (what is stored, then new messages) then builds one list, compared whole, where
    comparing the prefix first and joining after built two; the known messages stand in for the items equal to
    them."""
    size = len(known)
    if len(items) < size:
        return None
    joined: list[Any] = [*known, *items[size:]]
    return joined if _equal(joined, items) else None


def _first(items: Sequence[_T], size: int) -> list[_T]:
    """The first `size` items as a list: `items` itself, not a copy, when it is a list of that length."""
    if isinstance(items, list):
        return items if len(items) == size else items[:size]
    return list(items[:size])


def _equal(known: list[Message], items: list[object]) -> bool:
    """List equality, each known message's `__eq__` asked first; an item whose comparison raises is unequal."""
    try:
        return known == items
    except Exception:  # noqa: BLE001 - a foreign object's comparison may raise (a numpy array's truth value)
        return False


def coerce_metadata(values: Iterable[object]) -> list[FrozenDict]:
    """Validate metadata objects as a `VectorDocument`'s `metadata` is validated, raising `InvalidInputError` that
    names the position of the first bad one."""
    if isinstance(values, (str, bytes, Mapping)):
        raise InvalidInputError("expected a list of metadata objects, got a single value")
    frozen: list[FrozenDict] = []
    for position, value in enumerate(values):
        try:
            frozen.append(_JSON_OBJECT.validate_python(value))  # type: ignore[arg-type]
        except ValidationError as error:
            raise _invalid(error, f"metadata {position}") from None
    return frozen


def coerce_documents(documents: Iterable[VectorDocument | Mapping[str, Any]], start: int = 0) -> list[VectorDocument]:
    """Validate `documents` (models or plain dicts) into `VectorDocument`s, raising `InvalidInputError`; errors
    name a document by its position counted from `start` (for a slice of a longer input)."""
    return _coerce(documents, VectorDocument, "document", start)
