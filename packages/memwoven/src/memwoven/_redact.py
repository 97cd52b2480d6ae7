"""Secrets out of what memwoven prints: URLs and driver messages with passwords and tokens replaced by ***."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import unquote

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["redact_text", "redact_url"]

_SECRET_NAME = re.compile(
    r"password|passwd|pwd|pass|sslpassword|secret|token|auth|api[_-]?key|access[_-]?key", re.IGNORECASE
)
# A value runs to the next '&' or ';', through any '#': SQLAlchemy sends `?password=ab#cd` as "ab#cd".
_QUERY_PARAMETER = re.compile(r"(?<=[?&;])([^?&;=#]*)=(?=([^&;]*))")


def _secret_spans(text: str) -> list[tuple[int, int]]:
    """Where a URL holds secrets: the password of its user info, and the values of password-like parameters
    (their names percent-decoded, as the drivers read them).

    The password runs from the first ':' of the user info to an '@'. Parsers disagree on which '@' when the
    password holds an unencoded '@', '/', '?' or '=' (SQLAlchemy takes the first '@', urllib the last one before
    the path), so the span runs to the last of the '@'s either may take: redacting a little too much is harmless,
    printing a password is not.
    """
    spans = [match.span(2) for match in _QUERY_PARAMETER.finditer(text) if _SECRET_NAME.fullmatch(unquote(match[1]))]
    scheme_end = text.find("://")
    if scheme_end < 0:
        return spans
    start = scheme_end + 3
    colon = text.find(":", start)
    first_at = text.find("@", colon)
    if colon < 0 or first_at < 0 or any(c in text[start:colon] for c in "/?#@"):
        return spans
    equals = text.find("=", start)
    last_at = text.rfind("@", start, equals if equals >= 0 else len(text))
    netloc_end = min((found for found in (text.find(c, start) for c in "/?#") if found >= 0), default=len(text))
    urllib_at = text.rfind("@", start, netloc_end)  # where urllib (redis-py, Qdrant) ends the user info
    return [(colon + 1, max(first_at, last_at, urllib_at)), *spans]


def redact_url(url: str | URL) -> str:
    """The URL with any password (in its user info or in a query parameter like ?password=) replaced by ***."""
    text = _text(url)
    merged: list[tuple[int, int]] = []
    for begin, end in sorted(span for span in _secret_spans(text) if span[1] > span[0]):
        if merged and begin <= merged[-1][1]:  # overlapping spans are one secret
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((begin, end))
    for begin, end in reversed(merged):
        text = text[:begin] + "***" + text[end:]
    return text


def redact_text(message: str, url: str | URL) -> str:
    """`message` (e.g. a driver's error about `url`) with the URL's secrets, and any piece of them, replaced by ***."""
    text = _text(url)
    secrets = {text[begin:end] for begin, end in _secret_spans(text)}
    pieces = {piece for secret in secrets for piece in re.split(r"[/?#@:&;=]", secret) if len(piece) >= 3}
    for secret in sorted(secrets | pieces | {unquote(s) for s in secrets | pieces}, key=len, reverse=True):
        if secret:
            message = message.replace(secret, "***")
    return message


def _text(url: str | URL) -> str:
    """A URL as text, password included (a SQLAlchemy `URL` hides it when printed)."""
    render = getattr(url, "render_as_string", None)
    return str(render(hide_password=False)) if callable(render) else str(url)
