"""A filter's SQL pre-selection: a condition on the stored JSON that every matching value satisfies.

`memwoven.filters` is the one definition of what a filter means, and Python applies it to every row the
database returns, so results are exact on every database. What this module adds is speed: it translates the
parts of a filter that the database can test on its own JSON functions (SQLite JSON1, PostgreSQL ``jsonb``
operators, MariaDB/MySQL ``JSON_EXTRACT``) into a WHERE condition that keeps every matching row and drops most
others, so a search that matches a few items of many reads a few rows.

The condition must never drop a match (it may keep non-matches). So it is built only from tests whose SQL
meaning is at least as wide as the filter's, and everything else becomes "no condition":

* equality and ``$in`` with strings, numbers and booleans;
* ``$gt``/``$gte``/``$lt``/``$lte`` with numbers (integers within 2**53, compared with the bound widened to
  include it, so a float rounding cannot drop a match) and, on SQLite and PostgreSQL, with strings (code point
  order: SQLite's BINARY, PostgreSQL ``COLLATE "C"``);
* ``$exists: true``; ``$and`` (any part that translates), ``$or`` (only if every branch translates);
* not ``$ne``, ``$nin``, ``$exists: false``, ``$not``, ``$contains``, null, objects or lists, nor anything
  holding NUL (PostgreSQL text and jsonb cannot): they select nothing.

Damaged storage: text that is not JSON is never passed over (SQLite's JSON functions raise on it, and the
caller then reads without the pre-selection; SQLite 3.42+, which reads JSON5 too, and MariaDB/MySQL, which read
damaged text as NULL, select it by ``json_valid``), so reading it raises `CorruptMemoryError`. But for a field
SQLite keeps an index of (`SQLItemMemory(indexed_fields=...)`): like any index, it passes over the rows it does
not select (text that is not JSON at all cannot be stored beside it: SQLite refuses to index it). A value that is
valid JSON but no object is never returned, but a filter it cannot match may pass over it, as an index would; a
read without a filter raises on it.

Only one JSON function runs per tested field where the database allows (SQLite: ``json_extract``, whose result
compares as the filter needs, numbers below text): Python's bundled SQLite parses the value again for every call.

PostgreSQL tests each value as ``jsonb`` (`memwoven.backends.sql._schema.value_jsonb`, the expression the table's
GIN index holds; the ``json`` text stays what is read back), not the text that every ``json`` function parses
again. Equality with a string or a boolean (``$eq``, each option of ``$in``) is a containment test,
``value_jsonb @> '{"field": "x"}'``, which the table's GIN index answers: a filtered search over many items reads
the matching rows only. ``jsonb`` refuses strings holding NUL, so a value whose text holds ``\\u0000`` is NULL as
``jsonb``: such rows are all selected (``has_nul``), and Python decides. Every match's text holds the JSON of each
string the filter needs (``strpos``; the text was written by `memwoven.backends._items.encode_value` with the same
encoding), which is tested too: PostgreSQL, ordering a row's tests by their cost, runs it before parsing the text
into ``jsonb``, so most rows read through the namespace index are never parsed. The condition is ``<substring
tests> AND (<jsonb test> OR has_nul)`` (without the substring tests where the filter needs no string), two index
scans.

A dotted field matches the literal key or the nested path (`memwoven.filters`: the literal key wins), so its
condition is the OR of both. Field names are put into (quoted) JSON paths only if made of letters, digits, ``_``,
``-``, ``.`` and spaces (SQLite and MariaDB take the path as text); PostgreSQL passes each name as a bound
parameter. The rows are still ordered and, where there is a filter, paged in Python, reading only until the
page is full (MariaDB/MySQL: all the selected rows, which are sorted in Python).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from memwoven.errors import InvalidInputError

__all__ = ["check_indexed_fields", "field_expression", "prefilter"]

_SIMPLE_NAME = re.compile(r"[A-Za-z0-9_\-. ]+")
_EXACT_FLOAT_INT = 2**53
_COMPARISONS = {"$gt": "__ge__", "$gte": "__ge__", "$lt": "__le__", "$lte": "__le__"}  # widened: never drops a match

_FLOAT_MAX = sa.literal(Decimal(sys.float_info.max), sa.Numeric)
Condition = sa.ColumnElement[bool]


def check_indexed_fields(fields: object) -> tuple[str, ...]:
    """Validate `SQLItemMemory(indexed_fields=...)`: filter field names (dotted for nested ones) made of letters,
    digits, ``_``, ``-``, ``.`` and spaces, which SQLite's JSON paths take as they are; duplicates dropped."""
    if isinstance(fields, str) or not isinstance(fields, (list, tuple, set, frozenset)):
        raise InvalidInputError(f"indexed_fields must be a list of field names, got {type(fields).__name__}")
    checked: dict[str, None] = {}
    for field in fields:
        if not isinstance(field, str) or not _SIMPLE_NAME.fullmatch(field) or field.startswith("$"):
            raise InvalidInputError(
                f"an indexed field must be a filter field name of letters, digits, '_', '-', '.' and spaces, "
                f"got {field!r}"
            )
        checked[field] = None
    return tuple(checked)


def field_expression(field: str, value: str = "value") -> str:
    """SQLite: the SQL of the value the filter field `field` tests in the JSON text column `value`, resolved as
    `memwoven.filters` resolves it (a dotted field: the literal key where the object has it, else the nested path).

    The expression an index of `SQLItemMemory(indexed_fields=...)` holds; the pre-selection tests this very text,
    since SQLite uses an expression index only for the same expression."""
    literal = _text_path([field])
    extracted = f"json_extract({value}, '{literal}')"
    if "." not in field:
        return extracted
    nested = _text_path(field.split("."))
    present = f"json_type({value}, '{literal}') IS NOT NULL"
    return f"CASE WHEN {present} THEN {extracted} ELSE json_extract({value}, '{nested}') END"


def prefilter(
    spec: Mapping[str, Any],
    value: sa.ColumnElement[Any],
    dialect: str,
    binary: sa.ColumnElement[Any] | None = None,
    has_nul: sa.ColumnElement[bool] | None = None,
    *,
    json5: bool = False,
    indexed: Sequence[str] = (),
) -> Condition | None:
    """A condition on the stored JSON kept by every value matching the (validated) filter `spec`, or None when
    nothing of it translates on `dialect` ("sqlite", "postgresql", "mysql" or "mariadb").

    `value` is the JSON text; on PostgreSQL `binary` and `has_nul` are required: the value as ``jsonb``, NULL
    exactly where the text holds an escaped NUL, and the test of that (`memwoven.backends.sql._schema.value_jsonb`,
    `memwoven.backends.sql._schema.has_nul`). `json5`: SQLite 3.42 or later, whose JSON functions read JSON5 too.
    `indexed` (SQLite): fields whose `field_expression` the table has an index of; their tests are written on
    that expression, so that SQLite can read the matching rows off the index.
    """
    if dialect == "postgresql":
        if binary is None or has_nul is None:
            raise ValueError("PostgreSQL's pre-selection reads the values as jsonb: pass `binary` and `has_nul`")
        translator = _Translator(binary, dialect)
        condition = translator.filter(spec)
        if condition is None:
            return None
        # A value holding an escaped NUL is NULL as jsonb (so `condition` is not true for it): it is selected by
        # `has_nul` (SQL text, no parameter, so that even a generic plan sees the predicate of the index of such
        # rows), and Python decides. Every match's text holds the JSON of each string the filter needs (the text
        # was written by `encode_value`, the same encoding): testing that first spares most rows read through the
        # namespace index the parsing of their text into jsonb; the GIN index still answers the containment.
        selected = sa.or_(condition, has_nul)
        required = translator.required_text(spec, sa.cast(value, sa.Text))
        return selected if required is None else sa.and_(required, selected)
    translator = _Translator(value, dialect, indexed if dialect == "sqlite" else ())
    condition = translator.filter(spec)
    if condition is None or (translator.dialect == "sqlite" and not json5):
        return condition
    if translator.dialect == "sqlite":
        # SQLite 3.42+ reads JSON5 (unquoted keys, single quotes, trailing commas) without an error: damaged text
        # that happens to be JSON5 is selected by the strict `json_valid` (tested only where the condition is not
        # true, and since 3.45 on the value the condition already parsed: ~7% of a scan of 100,000 values).
        # Tests on indexed fields stay outside the CASE, where SQLite can use their index: like any index, it then
        # passes over the rows it does not select.
        lenient = sa.case((condition, sa.true()), (sa.func.json_valid(value) == 1, sa.false()), else_=sa.true())
        on_index = translator.indexed_part(spec)
        return lenient if on_index is None else sa.and_(on_index, lenient)
    # MariaDB/MySQL's JSON functions read damaged text as NULL: select it, so that reading it raises
    # CorruptMemoryError. (SQLite's raise on it, and the caller then reads without the pre-selection;
    # PostgreSQL's json column holds valid JSON only.)
    return sa.case((sa.func.json_valid(value) != 1, sa.true()), else_=condition)


class _Translator:
    def __init__(self, value: sa.ColumnElement[Any], dialect: str, indexed: Sequence[str] = ()) -> None:
        self.value = value  # PostgreSQL: the value as jsonb; elsewhere the JSON text
        self.dialect = "mysql" if dialect == "mariadb" else dialect
        self.indexed = frozenset(indexed)  # SQLite: fields tested on their indexed `field_expression`

    def indexed_part(self, spec: Mapping[str, Any]) -> Condition | None:
        """The tests of `filter(spec)` on indexed fields that every match passes (those not under ``$or``)."""
        parts = []
        for key, condition in spec.items():
            if key == "$and":
                parts.append(_all([self.indexed_part(clause) for clause in condition]))
            elif key in self.indexed:
                parts.append(self.on_index(key, condition))
        return _all(parts)

    def filter(self, spec: Mapping[str, Any]) -> Condition | None:
        parts = []
        for key, condition in spec.items():
            if key == "$and":
                part = _all([self.filter(clause) for clause in condition])
            elif key == "$or":
                branches = [self.filter(clause) for clause in condition]
                part = None if any(branch is None for branch in branches) else sa.or_(*branches)  # type: ignore[arg-type]
            elif key.startswith("$"):  # $not: its negation could drop matches
                part = None
            else:
                part = self.field(key, condition)
            parts.append(part)
        return _all(parts)

    def required_text(self, spec: Mapping[str, Any], text: sa.ColumnElement[str]) -> Condition | None:
        """A substring test on the stored text `text` that every match passes: where a field must equal a string,
        the text holds that string's JSON (the value was written by `encode_value`: the same encoding)."""
        parts = []
        for key, condition in spec.items():
            if key == "$and":
                parts.append(_all([self.required_text(clause, text) for clause in condition]))
            elif not key.startswith("$"):
                strings = _required_strings(condition)
                if strings:
                    needles = [sa.func.strpos(text, json.dumps(string, ensure_ascii=False)) > 0 for string in strings]
                    parts.append(needles[0] if len(needles) == 1 else sa.or_(*needles))
        return _all(parts)

    def field(self, name: str, condition: Any) -> Condition | None:
        if name in self.indexed:
            on_index = self.on_index(name, condition)
            if on_index is not None:
                return on_index
        tests = _tests(condition)
        paths = [[name]] + ([name.split(".")] if "." in name else [])
        alternatives = [_all([self.test(path, op, operand) for op, operand in tests]) for path in paths]
        if any(alternative is None for alternative in alternatives):
            return None
        return alternatives[0] if len(alternatives) == 1 else sa.or_(*alternatives)  # type: ignore[arg-type]

    def on_index(self, name: str, condition: Any) -> Condition | None:
        """SQLite: the tests of the field `name` on its indexed `field_expression`, or None if one of them cannot be
        (``$exists`` and the tests that translate to nothing)."""
        expression: sa.ColumnElement[Any] = sa.literal_column(field_expression(name))
        parts = [self.indexed_test(expression, op, operand) for op, operand in _tests(condition)]
        return None if any(part is None for part in parts) else _all(parts)

    def indexed_test(self, expression: sa.ColumnElement[Any], op: str, operand: Any) -> Condition | None:
        if _holds_nul(operand):
            return None
        if op == "$in":
            options = [self.indexed_test(expression, "$eq", option) for option in operand]
            return None if not options or any(o is None for o in options) else sa.or_(*options)  # type: ignore[arg-type]
        if op == "$eq" and isinstance(operand, bool):
            return expression == int(operand)  # json_extract's true is 1 (a number 1 too: wider is allowed)
        if op == "$eq" and isinstance(operand, str):
            return expression == operand
        method, also = (_COMPARISONS.get(op), None) if op != "$eq" else ("__ge__", "__le__")
        if method is None or isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
            return None
        if not isinstance(operand, str) and not _exact_number(operand):
            return None
        # SQLite orders numbers below text: a bound of either type keeps every match (and maybe values of the other)
        condition: Condition = getattr(expression, method)(operand)
        return condition if also is None else sa.and_(condition, getattr(expression, also)(operand))

    def test(self, path: Sequence[str], op: str, operand: Any) -> Condition | None:
        if self.dialect != "postgresql" and not all(_SIMPLE_NAME.fullmatch(name) for name in path):
            return None
        if _holds_nul(operand) or any("\x00" in name for name in path):  # PostgreSQL text cannot hold NUL
            return None
        if op == "$eq":
            return self.equals(path, operand)
        if op == "$in":
            options = [self.equals(path, option) for option in operand]
            return None if not options or any(o is None for o in options) else sa.or_(*options)  # type: ignore[arg-type]
        if op == "$exists" and operand is True:
            return self.json_type(path).is_not(None)
        if op in _COMPARISONS:
            return self.compare(path, _COMPARISONS[op], operand)
        return None

    # The SQL of each database ------------------------------------------------------------------------------

    def json_type(self, path: Sequence[str]) -> sa.ColumnElement[str]:
        """The JSON type name of the value at `path` (NULL where absent)."""
        if self.dialect == "postgresql":
            return sa.func.jsonb_typeof(sa.func.jsonb_extract_path(self.value, *path))
        if self.dialect == "sqlite":
            return sa.func.json_type(self.value, _text_path(path))
        return sa.func.json_type(sa.func.json_extract(self.value, _text_path(path)))

    def scalar(self, path: Sequence[str]) -> sa.ColumnElement[Any]:
        """The value at `path` as an SQL scalar (text for strings)."""
        if self.dialect == "postgresql":
            return sa.func.jsonb_extract_path_text(self.value, *path)
        if self.dialect == "sqlite":
            return sa.func.json_extract(self.value, _text_path(path))
        return sa.func.json_unquote(sa.func.json_extract(self.value, _text_path(path)))

    def equals(self, path: Sequence[str], operand: Any) -> Condition | None:
        if self.dialect == "postgresql" and isinstance(operand, (str, bool)):  # containment: a GIN index answers it
            from sqlalchemy.dialects.postgresql import JSONB

            document: Any = operand
            for name in reversed(path):
                document = {name: document}
            return self.value.op("@>")(sa.cast(sa.literal(json.dumps(document, ensure_ascii=False), sa.Text), JSONB))
        kind = self.json_type(path)
        if isinstance(operand, bool):
            word = "true" if operand else "false"
            if self.dialect == "sqlite":
                return kind == word
            if self.dialect == "postgresql":
                return sa.and_(kind == "boolean", self.scalar(path) == word)
            return kind == "BOOLEAN"  # true or false: wider is allowed
        if isinstance(operand, str):  # no type test: a number or `true` written alike is a wider selection
            return self.scalar(path) == operand
        if isinstance(operand, (int, float)) and _exact_number(operand):
            return self.compare(path, "__ge__", operand, also="__le__")
        return None

    def compare(self, path: Sequence[str], method: str, operand: Any, also: str | None = None) -> Condition | None:
        kind = self.json_type(path)
        if isinstance(operand, str):
            if self.dialect == "mysql":  # its text comparison follows the column's collation, not code points
                return None
            text = self.scalar(path)  # no type test: other values compared as text only widen the selection
            if self.dialect == "postgresql":
                text = text.collate("C")
            return getattr(text, method)(operand)  # type: ignore[no-any-return]
        if isinstance(operand, bool) or not isinstance(operand, (int, float)) or not _exact_number(operand):
            return None
        numbers = {
            "postgresql": ("number",),
            "sqlite": ("integer", "real"),
            "mysql": ("INTEGER", "UNSIGNED INTEGER", "DOUBLE", "DECIMAL"),
        }
        number = self._number(path, kind, numbers[self.dialect])
        condition = getattr(number, method)(operand)
        if also is not None:
            condition = sa.and_(condition, getattr(number, also)(operand))
        return condition  # type: ignore[no-any-return]

    def _number(self, path: Sequence[str], kind: sa.ColumnElement[str], names: tuple[str, ...]) -> Any:
        """The value at `path` as an SQL number where it is a JSON number, else NULL (never a failed cast)."""
        as_number: sa.ColumnElement[Any]
        if self.dialect == "sqlite":  # numbers compare as numbers, text above every number: no type test needed
            return self.scalar(path)
        if self.dialect == "postgresql":
            # clamped into float8's range: compared with a float operand, a huge integer would overflow
            as_number = sa.func.least(sa.func.greatest(sa.cast(self.scalar(path), sa.Numeric), -_FLOAT_MAX), _FLOAT_MAX)
        else:
            as_number = sa.cast(sa.func.json_extract(self.value, _text_path(path)), sa.Double)
        return sa.case((kind.in_(names), as_number), else_=None)


def _tests(condition: Any) -> list[tuple[str, Any]]:
    """A field's condition as (operator, operand) pairs: a plain value is ``$eq``."""
    if isinstance(condition, Mapping) and condition and all(key.startswith("$") for key in condition):
        return list(condition.items())
    return [("$eq", condition)]


def _all(parts: list[Condition | None]) -> Condition | None:
    known = [part for part in parts if part is not None]
    return None if not known else known[0] if len(known) == 1 else sa.and_(*known)


def _required_strings(condition: Any) -> list[str] | None:
    """The strings one of which a field under `condition` must equal (`$eq` or `$in` of strings), or None."""
    if isinstance(condition, Mapping) and condition and all(key.startswith("$") for key in condition):
        if isinstance(condition.get("$eq"), str):
            condition = condition["$eq"]
        else:
            options = condition.get("$in")
            if isinstance(options, list) and options and all(isinstance(option, str) for option in options):
                return None if any("\x00" in option for option in options) else options
            return None
    return [condition] if isinstance(condition, str) and "\x00" not in condition else None


def _holds_nul(operand: Any) -> bool:
    if isinstance(operand, list):
        return any(_holds_nul(item) for item in operand)
    return isinstance(operand, str) and "\x00" in operand


def _text_path(path: Sequence[str]) -> str:
    """A JSON path as SQLite and MariaDB/MySQL write it (names already checked to need no escaping)."""
    return "$" + "".join(f'."{name}"' for name in path)


def _exact_number(value: float) -> bool:
    """Whether `value` compares the same in SQL and in Python (no integer beyond float precision)."""
    return -_EXACT_FLOAT_INT <= value <= _EXACT_FLOAT_INT if isinstance(value, int) else True
