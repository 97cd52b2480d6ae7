from __future__ import annotations

import copy
import json
import pickle
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import memwoven
from memwoven import (
    ImagePart,
    InvalidInputError,
    Item,
    Message,
    OpaquePart,
    ScoredDocument,
    TextPart,
    ToolCall,
    VectorDocument,
)
from memwoven.models import (
    _JSON_OBJECT,
    MAX_JSON_DEPTH,
    FrozenDict,
    FrozenList,
    coerce_documents,
    coerce_item_value,
    coerce_messages,
    same_prefix,
)
from memwoven.testing import sample_conversation


def test_public_api_is_exactly_this() -> None:
    expected = """
        BackendUnavailableError ChatMemory ChatSession ConcurrentModificationError ContentPart CorruptMemoryError
        DimensionMismatchError EmbedFn EmbeddingError FileChatMemory FileItemMemory FileVectorMemory HashingEmbedFn
        History ImagePart
        InMemoryChatMemory InMemoryItemMemory InMemoryVectorMemory InvalidInputError Item ItemMemory ItemWrite
        MemwovenError Message Metric OpaquePart Role
        SQLChatMemory SQLItemMemory SQLVectorMemory ScoredDocument TextPart ToolCall VectorDocument VectorMemory
        __version__
        open_chat_memory open_item_memory open_vector_memory
    """
    assert memwoven.__all__ == sorted(memwoven.__all__) == sorted(expected.split())
    for name in memwoven.__all__:
        assert getattr(memwoven, name) is not None


def test_messages_round_trip_through_json_exactly() -> None:
    for message in sample_conversation():
        assert Message.model_validate_json(message.model_dump_json()) == message
        assert Message.model_validate(json.loads(message.model_dump_json())) == message


def test_messages_are_deeply_immutable() -> None:
    message = Message(role="assistant", metadata={"a": {"b": [1, 2]}}, tool_calls=[ToolCall(id="1", name="f")])
    with pytest.raises(ValidationError):
        message.role = "user"  # type: ignore[misc]
    with pytest.raises(TypeError):
        message.metadata["a"]["b"].append(3)
    with pytest.raises(TypeError):
        message.metadata["new"] = 1
    with pytest.raises(TypeError):
        message.tool_calls.append(ToolCall(id="2", name="g"))
    with pytest.raises(TypeError):
        message.tool_calls[0].arguments["x"] = 1
    changed = message.model_copy(update={"content": "new"})
    assert changed.content == "new"
    assert message.content == ""


_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
_DOCUMENT = VectorDocument(id="d", embedding=[1.0])
_MODELS: list[Any] = [
    Message(role="user", content="hi", id="m1"),
    TextPart(text="t"),
    ImagePart(url="http://x/y.png"),
    OpaquePart(kind="k"),
    ToolCall(id="c", name="f"),
    _DOCUMENT,
    ScoredDocument(document=_DOCUMENT, score=0.5),
    Item(namespace=("n",), key="k", value={}, version=1, created_at=_NOW, updated_at=_NOW),
]


@pytest.mark.parametrize(
    ("model", "bad"),
    [
        (_MODELS[0], {"role": "robot"}),
        (_MODELS[0], {"metadata": {"score": float("nan")}}),
        (_MODELS[0], {"content": [{"type": "video"}]}),
        (_MODELS[0], {"not_a_field": 1}),
        (_MODELS[1], {"text": 3}),
        (_MODELS[2], {"data": "AAAA"}),  # now two sources
        (_MODELS[3], {"data": {"x": float("inf")}}),
        (_MODELS[4], {"arguments": {"\ud800": 1}}),
        (_MODELS[5], {"embedding": [float("nan")]}),
        (_MODELS[6], {"document": {"id": ""}}),
        (_MODELS[7], {"version": 0}),
        (_MODELS[7], {"expires_at": datetime(2026, 1, 1)}),  # naive
    ],
)
def test_model_copy_validates_its_update(model: Any, bad: dict[str, Any]) -> None:
    """The immutability error recommends model_copy(update=...): what it builds is checked like a new value."""
    with pytest.raises(ValidationError):
        model.model_copy(update=bad)


def test_model_copy_coerces_its_update_and_keeps_the_fields_set() -> None:
    message = _MODELS[0]
    changed = message.model_copy(update={"content": [{"type": "text", "text": "x"}], "metadata": {"a": [1]}})
    assert changed.content == [TextPart(text="x")]
    assert isinstance(changed.metadata["a"], FrozenList)
    assert Message.model_validate_json(changed.model_dump_json()) == changed
    assert changed.model_fields_set == {"role", "content", "id", "metadata"}
    for model in _MODELS:
        for deep in (False, True):
            assert model.model_copy(deep=deep) == model
            assert model.model_copy(update={}, deep=deep) == model


def test_frozen_containers_equal_plain_ones_and_survive_copies() -> None:
    message = Message(role="user", metadata={"a": [1, {"b": None}]})
    assert message.metadata == {"a": [1, {"b": None}]}
    assert isinstance(message.metadata, FrozenDict)
    assert isinstance(message.metadata["a"], FrozenList)
    assert copy.deepcopy(message) == message
    assert pickle.loads(pickle.dumps(message)) == message


def test_text_joins_text_parts() -> None:
    message = Message(role="user", content=[TextPart(text="a"), ImagePart(url="http://x/y.png"), TextPart(text="b")])
    assert message.text == "ab"
    assert Message(role="user", content="plain").text == "plain"


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "wizard"},
        {"role": "user", "content": 3},
        {"role": "user", "metadata": {"x": float("inf")}},
        {"role": "user", "metadata": {1: "non-string key"}},
        {"role": "user", "unknown_field": 1},
        {"role": "user", "content": [{"type": "image", "data": "AAAA"}]},  # inline data needs a mime type
        {"role": "user", "content": [{"type": "image", "url": "u", "data": "AAAA", "mime_type": "image/png"}]},
        {"role": "user", "content": [{"type": "video"}]},
        {"role": "assistant", "tool_calls": [{"id": "1"}]},
        # a lone surrogate in a key: JSON encoders replace it silently (two such keys became one), not raise
        {"role": "user", "metadata": {"\ud800": "first", "ok": 1}},
        {"role": "user", "extras": {"lc": {"\ud800": 1}}},
    ],
)
def test_bad_messages_raise_invalid_input(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        coerce_messages([bad])


_NOW = datetime(2026, 1, 2, tzinfo=timezone.utc)


def _item(**fields: Any) -> dict[str, Any]:
    return {
        "namespace": ("ns",),
        "key": "k",
        "value": {},
        "version": 1,
        "created_at": _NOW,
        "updated_at": _NOW,
        **fields,
    }


# Each builds a model's fields with one string field, or one object key, set to `s`
_STRING_FIELDS: dict[str, tuple[Any, Any]] = {
    "document id": (VectorDocument, lambda s: {"id": s, "embedding": [1.0]}),
    "document content": (VectorDocument, lambda s: {"id": "a", "content": s, "embedding": [1.0]}),
    "message content": (Message, lambda s: {"role": "user", "content": s}),
    "message name": (Message, lambda s: {"role": "user", "name": s}),
    "message id": (Message, lambda s: {"role": "user", "id": s}),
    "tool_call_id": (Message, lambda s: {"role": "tool", "tool_call_id": s}),
    "text part": (Message, lambda s: {"role": "user", "content": [{"type": "text", "text": s}]}),
    "image url": (Message, lambda s: {"role": "user", "content": [{"type": "image", "url": s}]}),
    "image detail": (Message, lambda s: {"role": "user", "content": [{"type": "image", "url": "u", "detail": s}]}),
    "opaque kind": (Message, lambda s: {"role": "user", "content": [{"type": "opaque", "kind": s}]}),
    "tool call id": (Message, lambda s: {"role": "assistant", "tool_calls": [{"id": s, "name": "n"}]}),
    "tool call name": (Message, lambda s: {"role": "assistant", "tool_calls": [{"id": "i", "name": s}]}),
    "item key": (Item, lambda s: _item(key=s)),
    "item namespace label": (Item, lambda s: _item(namespace=("ns", s))),
}
_KEYS: dict[str, tuple[Any, Any]] = {
    "document metadata": (VectorDocument, lambda k: {"id": "a", "embedding": [1.0], "metadata": {k: 1}}),
    "nested metadata": (VectorDocument, lambda k: {"id": "a", "embedding": [1.0], "metadata": {"a": [{k: 1}]}}),
    "message metadata": (Message, lambda k: {"role": "user", "metadata": {"a": {k: 1}}}),
    "extras namespace": (Message, lambda k: {"role": "user", "extras": {k: {}}}),
    "extras": (Message, lambda k: {"role": "user", "extras": {"lc": {k: 1}}}),
    "opaque data": (Message, lambda k: {"role": "user", "content": [{"type": "opaque", "kind": "x", "data": {k: 1}}]}),
    "tool arguments": (
        Message,
        lambda k: {"role": "assistant", "tool_calls": [{"id": "i", "name": "n", "arguments": {k: 1}}]},
    ),
    "item value": (Item, lambda k: _item(value={"a": {k: 1}})),
}


def _refused(model: Any, fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):  # as for any other bad field of a model built directly
        model.model_validate(fields)
    if model is Item:
        if fields["value"]:  # what an ItemMemory validates of an item (its address is checked with `check_id`)
            with pytest.raises(InvalidInputError):
                coerce_item_value(fields["value"])
        return
    with pytest.raises(InvalidInputError):
        (coerce_documents if model is VectorDocument else coerce_messages)([fields])


@pytest.mark.parametrize(
    "wrong", [b"x", bytearray(b"x"), memoryview(b"x"), 7], ids=["bytes", "bytearray", "memoryview", "int"]
)
@pytest.mark.parametrize("field", list(_STRING_FIELDS))
def test_string_fields_refuse_bytes_and_other_non_strings(field: str, wrong: object) -> None:
    """Lax validation decoded bytes into a string: a document id that `get` and `delete`, which take only str,
    could never name."""
    model, build = _STRING_FIELDS[field]
    assert model.model_validate(build("x"))  # the same fields with a string are valid
    _refused(model, build(wrong))


@pytest.mark.parametrize("wrong", [b"k", 7, None], ids=["bytes", "int", "None"])
@pytest.mark.parametrize("where", list(_KEYS))
def test_json_object_keys_refuse_bytes_and_other_non_strings(where: str, wrong: object) -> None:
    model, build = _KEYS[where]
    assert model.model_validate(build("k"))
    _refused(model, build(wrong))


def test_strings_stay_strings_through_json_and_subclasses() -> None:
    """Strict strings still read JSON (whose strings are str) and take str subclasses, as plain strings."""

    class Label(str):
        pass

    stored = VectorDocument(id=Label("a"), content=Label("c"), embedding=[1.0], metadata={Label("k"): Label("v")})
    assert type(stored.id) is str
    assert VectorDocument.model_validate_json(stored.model_dump_json()) == stored
    assert Message.model_validate_json(Message(role="user", content="hi", name="n").model_dump_json()).name == "n"


def test_coerce_rejects_single_values() -> None:
    with pytest.raises(InvalidInputError):
        coerce_messages(Message(role="user"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        coerce_documents({"id": "a", "embedding": [1.0]})  # type: ignore[arg-type]


def test_vector_documents_accept_numpy_and_reject_non_finite() -> None:
    import numpy as np

    doc = VectorDocument(id="a", embedding=np.array([1.0, 2.0], dtype=np.float32))
    assert doc.embedding == [1.0, 2.0]
    with pytest.raises(ValidationError):
        VectorDocument(id="a", embedding=[float("nan")])
    with pytest.raises(ValidationError):
        VectorDocument(id="", embedding=[1.0])


def test_opaque_parts_and_datetimes_keep_their_values() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    message = Message(role="user", created_at=moment, content=[OpaquePart(kind="thinking", data={"text": "hmm"})])
    again = Message.model_validate_json(message.model_dump_json())
    assert again.created_at == moment
    assert again.content == message.content


def test_a_moment_whose_offset_has_seconds_is_kept_in_utc() -> None:
    """JSON keeps offsets to the minute: Amsterdam's +01:19:32 (1930) was stored as +01:19, moving the moment by
    32 s, and -23:59:59.999999 as -24:00, which no reader takes. Such moments are kept in UTC."""
    for offset in (timedelta(hours=1, minutes=19, seconds=32), -timedelta(hours=24) + timedelta(microseconds=1)):
        moment = datetime(1930, 6, 1, 12, 0, tzinfo=timezone(offset))
        message = Message(role="user", content="hi", created_at=moment)
        assert message.created_at == moment
        assert message.created_at is not None
        assert message.created_at.utcoffset() == timedelta(0)
        assert Message.model_validate_json(message.model_dump_json()) == message
    whole = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert Message(role="user", created_at=whole).created_at.utcoffset() == timedelta(hours=5, minutes=30)  # type: ignore[union-attr]


def test_a_zone_time_in_a_dst_fold_or_gap_reads_back_equal() -> None:
    """Python never equates a time in a repeated or skipped hour with one in another zone; such a time is kept at
    its fixed offset, as it reads back."""
    zone = ZoneInfo("America/New_York")
    fold = datetime(2024, 11, 3, 6, 30, tzinfo=timezone.utc).astimezone(zone)  # datetime.now(zone) then
    gap = datetime(2024, 3, 10, 2, 30, tzinfo=zone)
    for moment in (fold, gap, datetime(2024, 7, 1, 12, tzinfo=zone)):
        message = Message(role="user", content="hi", created_at=moment)
        assert message.created_at is not None
        assert message.created_at.utcoffset() == moment.utcoffset()
        assert Message.model_validate_json(message.model_dump_json()) == message


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(seconds=30))),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(seconds=30))),
    ],
)
def test_a_time_out_of_range_in_utc_is_invalid_input(moment: datetime) -> None:
    with pytest.raises(InvalidInputError, match="created_at"):
        coerce_messages([{"role": "user", "created_at": moment}])
    with pytest.raises(ValidationError):
        Item(namespace=("n",), key="k", value={}, version=1, created_at=moment, updated_at=_NOW)


def test_message_equality_is_exact_json_equality() -> None:
    def with_value(value: object) -> Message:
        return Message(role="user", content="x", metadata={"v": value})

    assert with_value(1) == with_value(1)
    assert with_value(1) is not with_value(1)
    # equal in Python, stored differently: not equal
    assert with_value(1) != with_value(1.0)
    assert with_value(1) != with_value(True)
    assert with_value(1.0) != with_value(True)
    assert Message(role="user", metadata={"a": 1, "b": 2}) != Message(role="user", metadata={"b": 2, "a": 1})
    instant = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    elsewhere = instant.astimezone(timezone(timedelta(hours=2)))
    assert instant == elsewhere
    assert Message(role="user", created_at=instant) != Message(role="user", created_at=elsewhere)
    assert with_value(1) != with_value(2)
    assert with_value(1) != {"role": "user", "content": "x", "metadata": {"v": 1}}
    # no JSON form at all (a lone surrogate): compared by value
    assert Message(role="user", content="\ud800") == Message(role="user", content="\ud800")


def test_same_prefix_counts_leading_equal_messages_wherever_they_differ() -> None:
    known = [Message(role="user", content=f"m{i}") for i in range(3000)]
    assert same_prefix(known, known) == 3000
    assert same_prefix([*known, Message(role="user", content="new")], known) == 3000
    assert same_prefix(known[:10], known) == 10
    assert same_prefix(tuple(known), tuple(known)) == 3000
    assert same_prefix([m.model_copy() for m in known], known) == 3000  # equal copies count as the same
    for position in (0, 1, 1023, 1024, 1025, 2047, 2999):
        changed = list(known)
        changed[position] = Message(role="user", content="other")
        assert same_prefix(changed, known) == position, position
        changed[position] = known[position].model_dump()  # the same message as a dict is not the stored object
        assert same_prefix(changed, known) == position, position
        changed[position] = Message(role="user", content=f"m{position}", metadata={"v": 1})
        assert same_prefix(tuple(changed), known) == position, position


def test_same_prefix_treats_an_item_whose_comparison_raises_as_changed() -> None:
    class Unanswerable:
        def __eq__(self, other: object) -> bool:
            raise ValueError("the truth value is ambiguous")

        __hash__ = None  # type: ignore[assignment]

    known = [Message(role="user", content=f"m{i}") for i in range(5)]
    assert same_prefix([*known[:3], Unanswerable(), known[4]], known) == 3
    with pytest.raises(InvalidInputError, match="message 3"):
        coerce_messages([*known[:3], Unanswerable(), known[4]])


_ODD_TEXT = st.sampled_from(["\ud83d", "x\udc00", "é", "\x00"])  # lone surrogates are refused
_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**4400), max_value=10**4400)
    | st.floats()  # NaN and infinities included: refused
    | st.text(max_size=8)
    | _ODD_TEXT
)
_JSON_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner)  # not a plain type: pydantic decides
        | st.dictionaries(st.text(max_size=4) | _ODD_TEXT, inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=4), _JSON_VALUES, max_size=5))
def test_item_values_fast_path_accepts_and_refuses_as_pydantic(value: dict[str, object]) -> None:
    """coerce_item_value's one-walk path for plain JSON gives what pydantic's validation + freeze_json gives."""

    def slow(candidate: object) -> object:
        try:
            frozen = _JSON_OBJECT.validate_python(dict(candidate))  # type: ignore[call-overload]
            json.dumps(frozen, ensure_ascii=False).encode("utf-8")
        except (ValidationError, UnicodeEncodeError):
            return InvalidInputError
        return frozen

    try:
        fast: object = coerce_item_value(value)
    except InvalidInputError:
        fast = InvalidInputError
    expected = slow(value)
    assert fast == expected
    if fast is not InvalidInputError:
        assert type(fast) is FrozenDict
        assert json.dumps(fast) == json.dumps(expected)  # same types inside (int stays int, float float)


def test_item_values_deeper_than_the_limit_are_refused_on_the_fast_path() -> None:
    value: dict[str, object] = {}
    inner = value
    for _ in range(MAX_JSON_DEPTH):
        inner["x"] = {}
        inner = inner["x"]  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match="nest at most"):
        coerce_item_value(value)
