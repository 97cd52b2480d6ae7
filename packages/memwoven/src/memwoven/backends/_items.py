"""What the item backends share: the namespace encoding and the value codec (of those that store namespaces as
text), and how a ttl becomes milliseconds.

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
import re
from collections.abc import Sequence
from typing import Any

from memwoven.contracts import Namespace
from memwoven.errors import CorruptMemoryError
from memwoven.models import FrozenDict, freeze_json

__all__ = [
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
    JSON object (or holds NaN or infinity, which `encode_value` never writes)."""
    try:
        text = text if isinstance(text, str) else text.decode("utf-8")
        # `decode` first and last matches the whitespace around the value, which took twice as long as decoding a
        # store item's value: the text encode_value wrote has none, anything else is judged by `decode`.
        try:
            value, end = _DECODER.raw_decode(text)
        except ValueError:
            end = -1
        if end != len(text):
            value = _DECODER.decode(text)
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CorruptMemoryError(f"a stored item's value is unreadable ({error})") from None
    return value


def decode_value(text: str | bytes) -> FrozenDict:
    """The value `encode_value` stored, frozen; `CorruptMemoryError` if `text` is no JSON object within the limits."""
    value = decode_object(text)
    try:
        frozen: FrozenDict = freeze_json(value)
    except (ValueError, RecursionError) as error:
        raise CorruptMemoryError(f"a stored item's value is unreadable ({error})") from None
    return frozen


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def ttl_milliseconds(ttl: float) -> int:
    """A ttl in seconds (positive, `check_ttl`) as the whole milliseconds an item lives, at least 1: an item expires
    once ``now >= expires``, so a ttl rounded to 0 would be gone as it is written."""
    return max(1, round(ttl * 1000))
