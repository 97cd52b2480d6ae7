"""Namespaces: independent key spaces in one `ChatMemory`, none of which can reach into another.

A namespace is ``""`` (none) or a string ending with ``:`` (``"tenant1:"``, ``"app:tenant1:"``). Key `k` of
namespace `ns` is the session ``ns + k`` with every ``%`` and ``:`` of `k` written ``%25`` and ``%3A``
(``"tenant1:"`` and ``"user:1"`` give ``"tenant1:user%3A1"``; keys without them are kept as they are).

What follows a namespace therefore never holds a ``:``, so every namespace is a boundary: no (namespace, key)
pair names the session of another pair, even when one namespace is a string prefix of the other (``"a:"`` and
``"a:b:"``), and a namespace lists only its own keys. Namespaces are compared exactly, like session ids: case
twins and Unicode twins (NFC/NFD, fullwidth letters) are distinct namespaces. The empty namespace is no
namespace: its keys are the session ids themselves, and every session is one of its keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from memwoven.contracts import check_id
from memwoven.errors import InvalidInputError

__all__ = ["SEPARATOR", "check_namespace", "key_in_namespace", "keys_in_namespace", "namespaced_id"]

SEPARATOR = ":"
_ESCAPES = {"%": "%25", SEPARATOR: "%3A"}
_UNESCAPES = {escaped: char for char, escaped in _ESCAPES.items()}
_TO_ESCAPE = re.compile("[%:]")
_ESCAPED = re.compile("%25|%3A")


def check_namespace(namespace: object, what: str = "namespace") -> str:
    """Return `namespace` if it is ``""`` or a valid id ending with ``:``; else raise `InvalidInputError`."""
    if namespace == "":
        return ""
    if not isinstance(namespace, str) or not namespace.endswith(SEPARATOR):
        raise InvalidInputError(
            f"{what} must be '' or end with {SEPARATOR!r} (e.g. 'tenant1:'), so that no namespace is the start of "
            f"another's keys; got {namespace!r}"
        )
    return check_id(namespace, what)


def namespaced_id(namespace: str, key: str) -> str:
    """The session id of `key` in `namespace` (itself in the empty namespace)."""
    if not isinstance(key, str):
        raise InvalidInputError(f"a key must be a str, got {type(key).__name__}")
    if not namespace:
        return key
    return namespace + _TO_ESCAPE.sub(lambda match: _ESCAPES[match.group()], key)


def key_in_namespace(namespace: str, session_id: str) -> str | None:
    """The key whose session is `session_id` in `namespace`, or None if the session is not one of its keys."""
    if not session_id.startswith(namespace):
        return None
    rest = session_id[len(namespace) :]
    if not namespace:
        return rest
    key = _ESCAPED.sub(lambda match: _UNESCAPES[match.group()], rest)
    return key if namespaced_id(namespace, key) == session_id else None  # refuses a ':' or a stray '%'


def keys_in_namespace(namespace: str, session_ids: Iterable[str]) -> list[str]:
    """The keys of `namespace` among `session_ids`, sorted."""
    return sorted(key for key in (key_in_namespace(namespace, s) for s in session_ids) if key is not None)
