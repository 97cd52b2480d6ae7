"""Metadata filters: one small query language, evaluated identically by every backend.

A filter is a JSON object. Each key names a metadata field and holds either a plain value (equality) or an
object of operators, all of which must hold::

    {"topic": "billing", "year": {"$gte": 2020, "$lt": 2025}, "$or": [{"lang": "en"}, {"lang": {"$exists": False}}]}

Operators: `$eq`, `$ne`, `$in`, `$nin`, `$gt`, `$gte`, `$lt`, `$lte`, `$exists`, `$contains` (the field is a
list holding the value); combinators `$and`, `$or` (lists of filters) and `$not` (a filter). Comparisons follow
JSON types: `true` never equals `1`, and ordering applies only between two numbers or two strings. `$ne`/`$nin`
match a missing field. A field name with dots reaches into nested objects (``{"user.level": 3}`` tests
``{"user": {"level": 3}}``; arrays are not walked) unless the object has that very name as a key, which wins.
An unknown operator, an operand that is no finite JSON value (NaN, a set, bytes) and combinators nested deeper
than `MAX_FILTER_DEPTH` raise `InvalidInputError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from memwoven._cache import LRUCache
from memwoven.errors import InvalidInputError

__all__ = ["MAX_FILTER_DEPTH", "Predicate", "compile_filter", "json_equal"]

MAX_FILTER_DEPTH = 32
"""How deep `$and`, `$or` and `$not` may nest in one filter."""

Predicate = Callable[[Mapping[str, Any]], bool]
_MISSING = object()
_COMPILED: LRUCache[str, tuple[Any, Predicate]] = LRUCache(256)  # JSON text -> (its own copy, compiled from it)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: like ==, but booleans only equal booleans, inside arrays and objects too (in
    Python ``True == 1 == 1.0``); numbers equal by value (``1`` equals ``1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    return bool(a == b)


def _ordered(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    return (isinstance(a, numbers) and isinstance(b, numbers)) or (isinstance(a, str) and isinstance(b, str))


def _list_operand(op: str, operand: Any) -> list[Any]:
    if not isinstance(operand, list):
        raise InvalidInputError(f"filter operator {op} needs a list, got {type(operand).__name__}")
    return operand


def _json_operand(op: str, operand: Any) -> Any:
    """`operand` itself if it is a finite JSON value (what metadata can hold), else `InvalidInputError`."""
    pending = [operand]
    while pending:
        value = pending.pop()
        if isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, Mapping):
            if not all(isinstance(key, str) for key in value):
                raise InvalidInputError(f"filter operator {op}: object keys must be strings")
            pending.extend(value.values())
        elif isinstance(value, float) and not math.isfinite(value):
            raise InvalidInputError(f"filter operator {op}: NaN and infinity are not JSON values")
        elif value is not None and not isinstance(value, (str, int, float)):  # bool is an int
            raise InvalidInputError(f"filter operator {op}: {type(value).__name__} is not a JSON value")
    return operand


def _field_test(op: str, operand: Any) -> Callable[[Any], bool]:
    """A test of one field's value (or _MISSING) for one operator."""
    operand = _json_operand(op, operand)
    if op == "$eq":
        return lambda v: v is not _MISSING and json_equal(v, operand)
    if op == "$ne":
        return lambda v: v is _MISSING or not json_equal(v, operand)
    if op == "$in":
        options = _list_operand(op, operand)
        return lambda v: v is not _MISSING and any(json_equal(v, o) for o in options)
    if op == "$nin":
        options = _list_operand(op, operand)
        return lambda v: v is _MISSING or not any(json_equal(v, o) for o in options)
    if op == "$exists":
        if not isinstance(operand, bool):
            raise InvalidInputError("filter operator $exists needs true or false")
        return lambda v: (v is not _MISSING) == operand
    if op == "$contains":
        return lambda v: isinstance(v, list) and any(json_equal(item, operand) for item in v)
    comparisons: dict[str, Callable[[Any, Any], bool]] = {
        "$gt": lambda a, b: a > b,
        "$gte": lambda a, b: a >= b,
        "$lt": lambda a, b: a < b,
        "$lte": lambda a, b: a <= b,
    }
    if op in comparisons:
        if not _ordered(operand, operand):
            raise InvalidInputError(f"filter operator {op} needs a number or a string")
        compare = comparisons[op]
        return lambda v: v is not _MISSING and _ordered(v, operand) and compare(v, operand)
    raise InvalidInputError(f"unknown filter operator {op!r}")


def _field_predicate(field: str, condition: Any) -> Predicate:
    if isinstance(condition, Mapping) and condition and all(str(k).startswith("$") for k in condition):
        tests = [_field_test(op, operand) for op, operand in condition.items()]
    elif isinstance(condition, Mapping) and any(str(k).startswith("$") for k in condition):
        raise InvalidInputError(f"filter on {field!r} mixes operators and plain keys")
    else:
        tests = [_field_test("$eq", condition)]

    path = field.split(".") if "." in field else None

    def predicate(metadata: Mapping[str, Any]) -> bool:
        value = metadata.get(field, _MISSING)
        if value is _MISSING and path is not None:
            value = _nested(metadata, path)
        return all(test(value) for test in tests)

    return predicate


def _nested(metadata: Mapping[str, Any], path: list[str]) -> Any:
    """The value at a dotted field's `path` (its names split at every dot), or _MISSING: each name but the last
    must hold an object."""
    value: Any = metadata
    for name in path:
        if not isinstance(value, Mapping):
            return _MISSING
        value = value.get(name, _MISSING)
        if value is _MISSING:
            return _MISSING
    return value


def _filter_list(op: str, operand: Any, depth: int) -> list[Predicate]:
    clauses = _list_operand(op, operand)
    if not clauses:
        raise InvalidInputError(f"filter operator {op} needs a non-empty list")
    return [_compile(clause, depth) for clause in clauses]


def _every(predicates: list[Predicate]) -> Predicate:
    return lambda metadata: all(p(metadata) for p in predicates)


def _some(predicates: list[Predicate]) -> Predicate:
    return lambda metadata: any(p(metadata) for p in predicates)


def _negation(predicate: Predicate) -> Predicate:
    return lambda metadata: not predicate(metadata)


_FILTER_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def filter_text(spec: Mapping[str, Any]) -> str:
    """`spec` as compact JSON text, the key filters are remembered by (TypeError/ValueError if it has none)."""
    return _FILTER_ENCODER.encode(spec)


def compile_filter(spec: Mapping[str, Any]) -> Predicate:
    """Validate `spec` and turn it into a predicate over a metadata object.

    The last 256 filters are remembered by their JSON text: callers repeat filters (a store search's filter is
    validated by the store, then compiled by the item memory). A predicate holds its operands, so it is compiled
    from a copy of the filter's own (the caller may change theirs later), and reused only for a filter equal to
    that copy: one holding a type JSON text does not keep (a tuple for a list, a key that is no string, NaN) is
    compiled as given, where it is refused."""
    try:
        text = filter_text(spec)
    except (TypeError, ValueError, RecursionError):
        return _compile(spec, 1)
    found = _COMPILED.get(text)
    if found is not None and found[0] == spec:
        return found[1]
    own = json.loads(text)
    if own != spec:
        return _compile(spec, 1)
    predicate = _compile(own, 1)
    _COMPILED.put(text, (own, predicate))
    return predicate


def _compile(spec: Mapping[str, Any], depth: int) -> Predicate:
    if depth > MAX_FILTER_DEPTH:
        raise InvalidInputError(f"a filter may nest $and, $or and $not at most {MAX_FILTER_DEPTH} levels deep")
    if not isinstance(spec, Mapping):
        raise InvalidInputError(f"a filter must be a JSON object, got {type(spec).__name__}")
    predicates: list[Predicate] = []
    for key, condition in spec.items():
        if not isinstance(key, str):
            raise InvalidInputError("filter keys must be strings")
        if key == "$and":
            predicates.append(_every(_filter_list(key, condition, depth + 1)))
        elif key == "$or":
            predicates.append(_some(_filter_list(key, condition, depth + 1)))
        elif key == "$not":
            predicates.append(_negation(_compile(condition, depth + 1)))
        elif key.startswith("$"):
            raise InvalidInputError(f"unknown filter operator {key!r}")
        else:
            predicates.append(_field_predicate(key, condition))
    return predicates[0] if len(predicates) == 1 else _every(predicates)
