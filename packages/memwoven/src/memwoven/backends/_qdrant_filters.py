"""memwoven filters as Qdrant filters: exact where Qdrant's semantics match, else a superset checked client-side."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from qdrant_client.http import models

__all__ = ["SAFE_KEY", "as_filter", "translate_filter"]

SAFE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A metadata key usable in a Qdrant key path without quoting."""
_EXACT_FLOAT_INT = 2**53  # larger ints do not survive Qdrant's float comparisons


_Translated = models.Condition | bool  # True: no constraint; False: matches nothing


def translate_filter(spec: Mapping[str, Any]) -> _Translated:
    """A Qdrant condition every document matching the memwoven filter `spec` satisfies (it may admit more).

    `spec` must be valid (`compile_filter` accepts it). Returns True when nothing useful can be said, False when
    no document can match. Conditions apply to the payload's ``metadata`` object.
    """
    return _translate(spec, superset=True)


def _translate(spec: Mapping[str, Any], superset: bool) -> _Translated:
    """With `superset`, a condition implied by `spec`; without, a condition that implies `spec`."""
    parts: list[_Translated] = []
    for key, condition in spec.items():
        if key == "$and":
            parts += [_translate(clause, superset) for clause in condition]
        elif key == "$or":
            parts.append(_any([_translate(clause, superset) for clause in condition]))
        elif key == "$not":
            parts.append(_negate(_translate(condition, not superset)))
        elif isinstance(condition, Mapping) and condition and all(str(op).startswith("$") for op in condition):
            parts += [_field(key, op, operand, superset) for op, operand in condition.items()]
        else:
            parts.append(_field(key, "$eq", condition, superset))
    return _all(parts)


def _field(key: str, op: str, operand: Any, superset: bool) -> _Translated:
    """One field operator, as a condition implied by it (`superset`) or implying it."""
    if not SAFE_KEY.fullmatch(key):
        return superset
    path = f"metadata.{key}"
    if superset:
        if op in ("$eq", "$contains"):  # Qdrant also matches arrays holding the value: a superset either way
            return _equal(path, operand) or True
        if op == "$in":
            return _any([_equal(path, value) or True for value in operand])
        if op in ("$gt", "$gte", "$lt", "$lte") and _number(operand):
            return models.FieldCondition(key=path, range=models.Range(**{op[1:]: operand}))
        if op == "$exists" and operand is False:  # missing, null or []: a superset of missing
            return models.IsEmptyCondition(is_empty=models.PayloadField(key=path))
        return True
    if op == "$ne":  # no value (nor array element) equals the operand: then the field is missing or differs
        return _negate(_equal(path, operand) or True)
    if op == "$nin":
        return _all([_negate(_equal(path, value) or True) for value in operand])
    if op == "$exists" and operand is True:  # a non-null, non-empty value exists
        return _negate(models.IsEmptyCondition(is_empty=models.PayloadField(key=path)))
    return False


def _equal(path: str, value: Any) -> models.Condition | None:
    """A condition true whenever the field equals `value` (memwoven equality), or None if Qdrant cannot say."""
    if isinstance(value, (str, bool)):
        return models.FieldCondition(key=path, match=models.MatchValue(value=value))
    if _number(value):  # a range, not a match: 1 and 1.0 are equal, and Qdrant never matches floats
        return models.FieldCondition(key=path, range=models.Range(gte=value, lte=value))
    if value is None:
        return models.IsNullCondition(is_null=models.PayloadField(key=path))
    return None


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and abs(value) <= _EXACT_FLOAT_INT


def _all(parts: list[_Translated]) -> _Translated:
    return _join(parts, absorbing=False)


def _any(parts: list[_Translated]) -> _Translated:
    return _join(parts, absorbing=True)


def _join(parts: list[_Translated], absorbing: bool) -> _Translated:
    """The conjunction (False absorbs, ``must``) or disjunction (True absorbs, ``should``) of `parts`."""
    if any(part is absorbing for part in parts):
        return absorbing
    conditions = [part for part in parts if not isinstance(part, bool)]
    if len(conditions) <= 1:
        return conditions[0] if conditions else not absorbing
    return models.Filter(should=conditions) if absorbing else models.Filter(must=conditions)


def _negate(part: _Translated) -> _Translated:
    return (not part) if isinstance(part, bool) else models.Filter(must_not=[part])


def as_filter(condition: models.Condition) -> models.Filter:
    """A translated condition as the `Filter` a query takes."""
    return condition if isinstance(condition, models.Filter) else models.Filter(must=[condition])
