"""Metadata held column-wise next to a `VectorIndex`'s matrix, so that a filter becomes a numpy mask.

Each top-level metadata key has an int32 column with one code per row: 0 where the key is missing, 1 where its
value is not a hashable scalar (a list, an object, NaN), and from 2 one code per distinct scalar, keyed so that
the codes follow JSON equality (`filters.json_equal`: `true` never equals `1`, `1` equals `1.0`). A filter's
equality, `$in`, `$ne`, `$nin` and `$exists` on plain (dot-free) keys, and `$and`/`$or`/`$not` of those, compile
to an exact mask; anything else is left to the row-by-row predicate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

Mask = npt.NDArray[np.bool_]
_MISSING_CODE, _OTHER_CODE = 0, 1
_COVERED = frozenset({"$eq", "$ne", "$in", "$nin", "$exists"})


def _key(value: Any) -> tuple[str, Any] | None:
    """The dictionary key of a scalar under JSON equality, or None for a value no scalar operand can equal."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and math.isnan(value) else ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("z", None)
    return None


class Columns:
    """Per-key code columns for rows 0..size-1; rows at and past `size` hold 0 (missing) in every column."""

    def __init__(self) -> None:
        self.size = 0
        self._capacity = 0
        self._codes: dict[str, npt.NDArray[np.int32]] = {}
        self._values: dict[str, dict[tuple[str, Any], int]] = {}

    def reserve(self, size: int, capacity: int) -> None:
        """Make room for `capacity` rows and set the live row count to `size`."""
        if capacity > self._capacity:
            for name, column in self._codes.items():
                grown = np.zeros(capacity, dtype=np.int32)
                grown[: self._capacity] = column
                self._codes[name] = grown
            self._capacity = capacity
        self.size = size

    def set(self, row: int, metadata: Mapping[str, Any], previous: Mapping[str, Any] | None = None) -> None:
        """Record `metadata` at `row` (replacing `previous`, the row's old metadata, if any)."""
        if previous:
            for name in previous:
                self._codes[name][row] = _MISSING_CODE
        for name, value in metadata.items():
            column = self._codes.get(name)
            if column is None:
                column = self._codes[name] = np.zeros(self._capacity, dtype=np.int32)
                self._values[name] = {}
            key = _key(value)
            if key is None:
                column[row] = _OTHER_CODE
            else:
                values = self._values[name]
                column[row] = values.setdefault(key, len(values) + 2)

    def move(self, source: int, target: int, metadata: Mapping[str, Any], previous: Mapping[str, Any]) -> None:
        """Move row `source` (holding `metadata`) to `target` (holding `previous`) and empty `source`."""
        for name in previous:
            self._codes[name][target] = _MISSING_CODE
        for name in metadata:
            column = self._codes[name]
            column[target], column[source] = column[source], _MISSING_CODE

    def clear_row(self, row: int, metadata: Mapping[str, Any]) -> None:
        """Empty one row that held `metadata`."""
        for name in metadata:
            self._codes[name][row] = _MISSING_CODE

    def clear(self) -> None:
        """Forget every row and key."""
        self.size = 0
        self._codes, self._values = {}, {}
        self._capacity = 0

    def mask(self, spec: Mapping[str, Any]) -> tuple[Mask | None, bool]:
        """A mask over the live rows selecting every row `spec` (a valid filter) may match, and whether it is
        exact; (None, False) when nothing narrows the rows."""
        masks = [self._clause(key, condition) for key, condition in spec.items()]
        narrowing = [mask for mask, _ in masks if mask is not None]
        exact = all(exact for _, exact in masks)
        if not narrowing:
            return None, False
        result = narrowing[0].copy() if len(narrowing) == 1 else np.logical_and.reduce(narrowing)
        return result, exact

    def _clause(self, key: str, condition: Any) -> tuple[Mask | None, bool]:
        if key == "$and":
            parts = [self.mask(clause) for clause in condition]
            narrowing = [mask for mask, _ in parts if mask is not None]
            if not narrowing:
                return None, False
            return np.logical_and.reduce(narrowing), all(exact for _, exact in parts)
        if key in ("$or", "$not"):
            parts = [self.mask(clause) for clause in (condition if key == "$or" else [condition])]
            if not all(exact for _, exact in parts):
                return None, False
            exact_masks = [mask for mask, _ in parts if mask is not None]
            if key == "$not":
                return ~exact_masks[0], True
            return np.logical_or.reduce(exact_masks), True
        if "." in key:
            return None, False
        if isinstance(condition, Mapping) and condition and all(str(op).startswith("$") for op in condition):
            tests = list(condition.items())
        else:
            tests = [("$eq", condition)]
        if not all(op in _COVERED for op, _ in tests):
            return None, False
        masks: list[Mask] = []
        for op, operand in tests:
            mask = self._test(key, op, operand)
            if mask is None:
                return None, False
            masks.append(mask)
        return np.logical_and.reduce(masks), True

    def _test(self, name: str, op: str, operand: Any) -> Mask | None:
        codes = self._codes.get(name)
        live = codes[: self.size] if codes is not None else np.zeros(self.size, dtype=np.int32)
        if op == "$exists":
            present: Mask = live != _MISSING_CODE
            return present if operand else ~present
        options = operand if op in ("$in", "$nin") else [operand]
        keys = [_key(option) for option in options]
        if any(key is None for key in keys):  # a list or object operand: equality on structures, not covered
            return None
        values = self._values.get(name, {})
        wanted = [values[key] for key in keys if key is not None and key in values]
        matching: Mask = np.isin(live, np.asarray(wanted, dtype=np.int32))
        return matching if op in ("$eq", "$in") else ~matching
