from __future__ import annotations

from typing import Any

import pytest

from memwoven.errors import InvalidInputError
from memwoven.filters import compile_filter


@pytest.mark.parametrize(
    ("spec", "metadata", "expected"),
    [
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"a": True}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": {"$ne": 1}}, {}, True),
        ({"a": {"$nin": [1]}}, {}, True),
        ({"a": {"$in": [1]}}, {}, False),
        ({"a": {"$gt": 1}}, {"a": "2"}, False),  # no ordering across types
        ({"a": {"$gt": "a"}}, {"a": "b"}, True),
        ({"a": {"$gt": 1, "$lt": 3}}, {"a": 2}, True),
        ({"a": {"$gt": 1, "$lt": 3}}, {"a": 3}, False),
        ({"a": [1, 2]}, {"a": [1, 2]}, True),
        ({"a": {"b": 1}}, {"a": {"b": 1}}, True),
        ({"a": {"$contains": 2}}, {"a": [1, 2]}, True),
        ({"a": {"$contains": 2}}, {"a": "2"}, False),
        ({"$or": [{"a": 1}, {"b": 1}]}, {"b": 1}, True),
        ({"$not": {"$or": [{"a": 1}, {"b": 1}]}}, {"b": 1}, False),
    ],
)
def test_filter_semantics(spec: dict[str, Any], metadata: dict[str, Any], expected: bool) -> None:
    assert compile_filter(spec)(metadata) is expected


@pytest.mark.parametrize(
    "spec",
    [
        {"a": {"$regex": "x"}},
        {"$where": "1"},
        {"a": {"$in": "x"}},
        {"a": {"$exists": "yes"}},
        {"a": {"$gt": None}},
        {"a": {"$gt": 1, "plain": 2}},
        {"$or": []},
        {"$and": {"a": 1}},
        {"a": {"$eq": 1}, "b": {"$bogus": 2}},
        {"a'; DROP TABLE x; --": {"$where": 1}},
        ["not", "a", "dict"],
    ],
)
def test_bad_filters_raise_before_any_search(spec: Any) -> None:
    with pytest.raises(InvalidInputError):
        compile_filter(spec)


@pytest.mark.parametrize(
    ("spec", "metadata", "expected"),
    [
        ({"user.level": 3}, {"user": {"level": 3}}, True),
        ({"user.level": 3}, {"user": {"level": 4}}, False),
        ({"a.b.c": "x"}, {"a": {"b": {"c": "x"}}}, True),
        ({"user.access-level": "nested"}, {"user": {"access-level": "nested"}}, True),
        ({"user.level": {"$gte": 2}}, {"user": {"level": 3}}, True),
        ({"user.level": {"$exists": True}}, {"user": {"level": None}}, True),
        ({"user.level": {"$exists": False}}, {"user": {}}, True),
        ({"user.level": {"$exists": False}}, {"user": "flat"}, True),  # not an object: no nested field
        ({"user.level": {"$ne": 3}}, {}, True),  # missing, as for a plain field
        ({"user.level": {"$in": [3]}}, {"user": [{"level": 3}]}, False),  # arrays are not walked
        ({"tags.0": "a"}, {"tags": ["a"]}, False),  # nor indexed
        ({"user.level": 3}, {"user.level": 3, "user": {"level": 4}}, True),  # the literal key wins
        ({"user.level": 4}, {"user.level": 3, "user": {"level": 4}}, False),
        ({"user.level": 3}, {"user.level": 3}, True),  # a dotted key alone, as before
        ({"$or": [{"a.b": 1}, {"a.c": 2}]}, {"a": {"c": 2}}, True),
        ({"$not": {"a.b": 1}}, {"a": {"b": 1}}, False),
        ({"a.": 1}, {"a": {"": 1}}, True),  # empty names are names
        ({".a": 1}, {"": {"a": 1}}, True),
    ],
)
def test_dotted_fields_reach_into_nested_objects(
    spec: dict[str, Any], metadata: dict[str, Any], expected: bool
) -> None:
    assert compile_filter(spec)(metadata) is expected


def test_a_remembered_filter_ignores_later_changes_to_the_callers_copy() -> None:
    spec: dict[str, Any] = {"a": {"$in": [1, 2]}}
    first = compile_filter(spec)
    spec["a"]["$in"].append(3)
    assert first({"a": 3}) is False
    assert compile_filter(spec)({"a": 3}) is True
    assert compile_filter({"a": {"$in": [1, 2]}})({"a": 3}) is False


@pytest.mark.parametrize(
    ("remembered", "given"),
    [
        ({"a": {"$in": [1, 2]}}, {"a": {"$in": (1, 2)}}),  # the same JSON text, but a tuple is no JSON list
        ({"1": "x"}, {1: "x"}),
    ],
)
def test_a_filter_json_text_cannot_tell_apart_is_still_refused(remembered: Any, given: Any) -> None:
    compile_filter(remembered)
    with pytest.raises(InvalidInputError):
        compile_filter(given)


def test_remembered_filters_keep_json_types_apart() -> None:
    assert compile_filter({"a": True})({"a": True}) is True
    assert compile_filter({"a": 1})({"a": True}) is False
    assert compile_filter({"a": True})({"a": 1}) is False
