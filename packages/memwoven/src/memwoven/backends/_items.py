"""What the item backends share: the namespace encoding and the value codec (of those that store namespaces as
text), how a ttl becomes milliseconds, and the check of a stored item's version, ttl and expiry.

A namespace is stored as one string: each label, escaped, followed by ``\\x01``::

    encode_namespace(("a", "b")) == "a\\x01b\\x01"      escapes: "\\x02" -> "\\x02\\x03", "\\x01" -> "\\x02\\x02"

Labels never hold NUL (`check_id`), so after escaping every label character is ``\\x02`` or above and the
separator sorts below all of them. Hence (1) the namespaces *starting with* a prefix, label by label, are exactly
the strings starting with the prefix's encoding: ``("a",)`` is ``"a\\x01"``, which ``"ab\\x01"`` does not start
with (a prefix is a label boundary); (2) those strings form one range, `prefix_range`, which an index scans;
(3) the strings sort as the tuples do (a shorter label, followed by the separator, sorts first), in code point
order, which is also the byte order of their UTF-8.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from collections.abc import Sequence
from typing import Any

from memwoven.contracts import Namespace
from memwoven.errors import CorruptMemoryError
from memwoven.models import MAX_JSON_DEPTH, FrozenDict, freeze_json

__all__ = [
    "check_stored_item",
    "decode_namespace",
    "decode_object",
    "decode_value",
    "encode_namespace",
    "encode_value",
    "prefix_range",
    "ttl_milliseconds",
]

_SEPARATOR = "\x01"
_ESCAPE = "\x02"
_ESCAPED = re.compile("\x02(.)", re.DOTALL)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")  # JSON's escape of a code point D800-DFFF
_ENCODED = re.compile("(?:(?:[^\x01\x02]|\x02[\x02\x03])+\x01)+")  # non-empty labels, each escaped, then the separator


def encode_namespace(namespace: Sequence[str]) -> str:
    """The stored form of a namespace (or a prefix): each label escaped, then followed by the separator."""
    return "".join(
        label.replace(_ESCAPE, "\x02\x03").replace(_SEPARATOR, "\x02\x02") + _SEPARATOR for label in namespace
    )


def decode_namespace(encoded: str) -> Namespace:
    """The namespace `encode_namespace` encoded (`ValueError` if `encoded` is no encoding)."""
    if not isinstance(encoded, str) or not _ENCODED.fullmatch(encoded):
        raise ValueError(f"{encoded!r:.200} is no encoded namespace")
    return tuple(
        _ESCAPED.sub(lambda m: _SEPARATOR if m[1] == "\x02" else _ESCAPE, label)
        for label in encoded[:-1].split(_SEPARATOR)
    )


def prefix_range(prefix: Namespace) -> tuple[str, str]:
    """``(low, high)``: the encodings of the namespaces starting with the non-empty `prefix` are exactly the
    strings ``s`` with ``low <= s < high``, and so is anything that starts with one of them."""
    low = encode_namespace(prefix)
    return low, low[:-1] + chr(ord(_SEPARATOR) + 1)


_VALUE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
# json's C encoder built once: `json.dumps` with options builds an encoder per call, and an encoder builds its C
# encoder per call too, together 70% of encoding a small value. Without cycle detection: a validated value
# (`coerce_item_value`) is a tree of fresh frozen containers of bounded depth.
_MAKE_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # None without json's C accelerator
_C_VALUE_ENCODER: Any = (
    None
    if _MAKE_C_ENCODER is None
    else _MAKE_C_ENCODER(
        None, _VALUE_ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def encode_value(value: FrozenDict) -> str:
    """An item's value as stored: compact JSON text (non-ASCII characters kept as they are)."""
    if _C_VALUE_ENCODER is None:
        return _VALUE_ENCODER.encode(value)
    return "".join(_C_VALUE_ENCODER(value, 0))


def decode_object(text: str | bytes) -> dict[str, Any]:
    """The value `encode_value` stored, as a plain dict of the caller's own; `CorruptMemoryError` if `text` is no
    JSON object within the limits `decode_value` holds it to (`freeze_json`'s: no NaN or infinity, at most
    `MAX_JSON_DEPTH` levels, integers of at most `MAX_INT_DIGITS` digits), so that `list_plain` refuses what `list`
    does."""
    try:
        value = _decoded(text, _PLAIN_DECODER)  # its floats checked finite as they are parsed (1e400 is inf)
        # A value nesting deeper than the limit has more opening brackets than the limit, and twice as many
        # brackets as that: the nesting is walked only where the text holds that many (a few counts otherwise).
        if len(text) > 2 * MAX_JSON_DEPTH and _opening(text) > MAX_JSON_DEPTH:
            _check_nesting(value, 1)
    except (ValueError, RecursionError) as error:
        raise CorruptMemoryError(f"a stored item's value is unreadable ({error})") from None
    return value


def decode_value(text: str | bytes) -> FrozenDict:
    """The value `encode_value` stored, frozen; `CorruptMemoryError` if `text` is no JSON object within the limits."""
    try:
        frozen: FrozenDict = freeze_json(_decoded(text, _DECODER))  # freeze_json checks the limits
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CorruptMemoryError(f"a stored item's value is unreadable ({error})") from None
    return frozen


def _decoded(text: str | bytes, decoder: json.JSONDecoder) -> dict[str, Any]:
    """The JSON object `text` holds (`ValueError` if none, or if it holds a lone surrogate, which no write stores;
    Python's own limit refuses integers of more than `MAX_INT_DIGITS` digits)."""
    text = text if isinstance(text, str) else text.decode("utf-8")
    # `decode` first and last matches the whitespace around the value, which took twice as long as decoding a
    # store item's value: the text encode_value wrote has none, anything else is judged by `decode`.
    try:
        value, end = decoder.raw_decode(text)
    except ValueError:
        end = -1
    if end != len(text):
        value = decoder.decode(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    # json reads an escaped lone surrogate ("\ud800"): only text escaping a surrogate can hold one (a backslash
    # first: one memchr, where a regex or a substring search scans each character)
    if "\\" in text and _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("a string holds a lone surrogate (not valid Unicode)") from None
    return value


def _opening(text: str | bytes) -> int:
    """How many opening brackets `text` holds (inside strings too: at least as many as the value nests)."""
    if isinstance(text, str):
        return text.count("{") + text.count("[")
    return text.count(b"{") + text.count(b"[")


def _check_nesting(value: dict[str, Any] | list[Any], depth: int) -> None:
    """`ValueError` if `value`, at `depth` (1: the top), nests deeper than `MAX_JSON_DEPTH`, as `freeze_json`."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"JSON objects and arrays may nest at most {MAX_JSON_DEPTH} levels deep")
    for item in value.values() if isinstance(value, dict) else value:
        if isinstance(item, (dict, list)):
            _check_nesting(item, depth + 1)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):  # a literal beyond float's range (1e400) reads as infinity
        raise ValueError("NaN and infinity are not JSON values")
    return number


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
# Each float literal goes through Python (~0.1 us) rather than json's C parse: only where the value is not frozen
# after (`decode_object`), since `freeze_json` checks its floats anyway.
_PLAIN_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def check_stored_item(version: int, expires_ms: int | None, ttl: float | None) -> None:
    """`ValueError` unless a stored item's version, expiry (epoch ms) and ttl (seconds) are what a write leaves:
    a version of 1 or more, the ttl and the expiry both set or both unset, and the ttl finite and positive. The
    backends raise `CorruptMemoryError` naming the item for it, as for a time beyond `datetime`'s range
    (`OverflowError` from `memwoven._clock.utc`). A few comparisons: it runs on every row a listing reads."""
    if version < 1 or (ttl is None) != (expires_ms is None) or not (ttl is None or 0.0 < ttl < math.inf):
        raise ValueError(f"version {version!r}, ttl {ttl!r} or expiry {expires_ms!r} out of range")


def ttl_milliseconds(ttl: float) -> int:
    """A ttl in seconds (positive, `check_ttl`) as the whole milliseconds an item lives, at least 1: an item expires
    once ``now >= expires``, so a ttl rounded to 0 would be gone as it is written."""
    return max(1, round(ttl * 1000))
