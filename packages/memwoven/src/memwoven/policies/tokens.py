"""Token counting for context windows and triggers: text tokenizers, and a per-message counter with a cache.

A *tokenizer* counts the tokens of a text. Anything of these shapes is accepted wherever memwoven takes one:

* ``None``: the default `EstimatingTokenizer`, offline and dependency-free (an approximation, see below);
* a model name (``"gpt-4o"``) or a tiktoken encoding name (``"cl100k_base"``): a `TiktokenTokenizer`;
* a `tiktoken.Encoding` you built (for instance from a local BPE file);
* any callable ``text -> int``, or any object with a ``count(text) -> int`` method (a Hugging Face tokenizer
  wrapped in a lambda, a provider's counting endpoint, ...).

tiktoken downloads its BPE files from a blob store the first time an encoding is used and caches them in
``$TIKTOKEN_CACHE_DIR`` (file names are the SHA-1 of the download URL). Offline, pre-fill that directory, or build
a `tiktoken.Encoding` from a local file and pass it; a `TiktokenTokenizer` that cannot load its encoding raises
`TokenizerUnavailableError` at construction (never a silent fallback).

A `MessageTokenCounter` counts whole messages: a fixed overhead per message, the name, the text parts, each tool
call's name and JSON arguments, opaque parts as their JSON, and a fixed estimate per image. Messages are immutable,
so counts are cached per message object (weakly: the cache never keeps a message alive), which makes a window over
a long session cost what the window holds, not the session's length.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol, Union, runtime_checkable

from memwoven.errors import InvalidInputError, MemwovenError
from memwoven.models import ImagePart, Message, OpaquePart, TextPart

__all__ = [
    "EstimatingTokenizer",
    "MessageTokenCounter",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerLike",
    "TokenizerUnavailableError",
    "token_counter",
]


class TokenizerUnavailableError(MemwovenError):
    """A tokenizer could not be loaded (for tiktoken: its encoding file is neither cached nor downloadable)."""


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens of a text."""

    def count(self, text: str) -> int:
        """The number of tokens in `text`."""
        ...


TokenizerLike = Union[Tokenizer, Callable[[str], int], str, Any, None]
"""What a `tokenizer=` argument accepts: see the module docstring."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_PIECES = re.compile(
    rf"(?P<cjk>[{_CJK}])|(?P<word>[^\W\d_{_CJK}]+)|(?P<num> ?\d+)|(?P<ws>[ \t]*\n\s*|[ \t]{{2,}})|(?P<other>[^\w\s]+|_)"
)
_CASE_BREAK = re.compile(r"(?<=[a-z])(?=[A-Z])")


class EstimatingTokenizer:
    """An offline estimate of BPE token counts (tuned on OpenAI's cl100k_base and o200k_base), no files needed.

    Rules: an ASCII word costs 1 token plus 1 per further `chars_per_token` letters (camelCase parts counted
    apart); other alphabetic words 1 token per 2 characters; each CJK character 1; digits 1 per 3; a run of
    punctuation 1 per 2 characters (2 per non-ASCII symbol, such as an emoji); a line break or a run of
    spaces 1. On English prose, code, JSON and mixed scripts it lands within about -10 %/+30 % of tiktoken's
    count and above it more often than below, which is the safe side for a budget. Use a real tokenizer
    when exact counts matter.
    """

    def __init__(self, chars_per_token: int = 6) -> None:
        if isinstance(chars_per_token, bool) or not isinstance(chars_per_token, int) or chars_per_token < 1:
            raise InvalidInputError(f"chars_per_token must be a positive int, got {chars_per_token!r}")
        self.chars_per_token = chars_per_token

    def __repr__(self) -> str:
        return f"EstimatingTokenizer(chars_per_token={self.chars_per_token})"

    def count(self, text: str) -> int:
        """The estimated number of tokens in `text`."""
        per = self.chars_per_token
        total = 0
        for match in _PIECES.finditer(text):
            kind, piece = match.lastgroup, match.group()
            if kind == "word":
                if not piece.isascii():
                    total += (len(piece) + 1) // 2
                elif piece.islower() or piece.isupper() or piece.istitle():
                    total += 1 + (len(piece) - 1) // per
                else:
                    total += sum(1 + (len(part) - 1) // per for part in _CASE_BREAK.split(piece))
            elif kind == "num":
                digits = piece.lstrip(" ")
                total += (len(digits) + 2) // 3 + (len(piece) - len(digits))
            elif kind == "other":
                total += (len(piece) + 1) // 2 if piece.isascii() else 2 * len(piece)
            else:  # a CJK character or a run of whitespace
                total += 1
        return total

    __call__ = count


class TiktokenTokenizer:
    """Exact OpenAI token counts with tiktoken, by model name (``"gpt-4o"``), encoding name or `Encoding`.

    The encoding is loaded at construction; if tiktoken cannot load it (its BPE file is not in
    ``$TIKTOKEN_CACHE_DIR`` and cannot be downloaded), `TokenizerUnavailableError` says how to fix it.
    """

    def __init__(self, model_or_encoding: str | Any) -> None:
        import tiktoken

        if isinstance(model_or_encoding, tiktoken.Encoding):
            self.encoding = model_or_encoding
        elif isinstance(model_or_encoding, str) and model_or_encoding:
            self.encoding = _load_encoding(tiktoken, model_or_encoding)
        else:
            raise InvalidInputError(f"expected a model/encoding name or a tiktoken.Encoding, got {model_or_encoding!r}")
        self.name: str = self.encoding.name

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.name!r})"

    def count(self, text: str) -> int:
        """The number of tokens in `text` (special-token strings count as ordinary text)."""
        return len(self.encoding.encode_ordinary(text))

    __call__ = count


def _load_encoding(tiktoken: Any, name: str) -> Any:
    if name in tiktoken.list_encoding_names():
        encoding_name = name
    else:
        try:
            encoding_name = tiktoken.encoding_name_for_model(name)
        except KeyError:
            raise InvalidInputError(
                f"tiktoken knows no model or encoding {name!r} (encodings: {', '.join(tiktoken.list_encoding_names())})"
            ) from None
    try:
        return tiktoken.get_encoding(encoding_name)
    except Exception as error:  # a network failure, a damaged cache file, ...: whatever tiktoken raised
        raise TokenizerUnavailableError(
            f"tiktoken could not load the {encoding_name!r} encoding ({type(error).__name__}: {error}). tiktoken "
            "downloads its BPE file on first use and caches it in $TIKTOKEN_CACHE_DIR; offline, copy the file there "
            "(named by the SHA-1 of its URL), pass a tiktoken.Encoding built from a local file, or use the default "
            "offline EstimatingTokenizer (tokenizer=None)."
        ) from error


def _as_text_counter(tokenizer: TokenizerLike) -> Callable[[str], int]:
    if tokenizer is None:
        return EstimatingTokenizer().count
    if isinstance(tokenizer, str):
        return TiktokenTokenizer(tokenizer).count
    count = getattr(tokenizer, "count", None)
    if callable(count) and not isinstance(tokenizer, (list, tuple)):
        return count  # type: ignore[no-any-return]
    if type(tokenizer).__module__.startswith("tiktoken"):
        return TiktokenTokenizer(tokenizer).count
    if callable(tokenizer):
        return tokenizer
    raise InvalidInputError(f"a tokenizer is a name, a callable text -> int or has count(text); got {tokenizer!r}")


class MessageTokenCounter:
    """Counts the tokens of messages with a text tokenizer, caching each message's count.

    A message costs `per_message` tokens of framing, plus `per_name` and the name's tokens if it has a name, plus
    its text, plus for each tool call its name, its arguments as compact JSON and `per_tool_call`, plus
    `image_tokens` per image (`low_detail_image_tokens` for ``detail="low"``), plus opaque parts as JSON. The
    defaults follow OpenAI's chat format; 765 tokens is what a 1024x1024 high-detail image costs there.
    """

    def __init__(
        self,
        tokenizer: TokenizerLike = None,
        *,
        per_message: int = 3,
        per_name: int = 1,
        per_tool_call: int = 3,
        image_tokens: int = 765,
        low_detail_image_tokens: int = 85,
        cache_size: int = 200_000,
    ) -> None:
        if isinstance(tokenizer, MessageTokenCounter):
            raise InvalidInputError("this is already a MessageTokenCounter; use it directly")
        self.tokenizer = tokenizer
        self._count_text = _as_text_counter(tokenizer)
        self.per_message, self.per_name, self.per_tool_call = per_message, per_name, per_tool_call
        self.image_tokens, self.low_detail_image_tokens = image_tokens, low_detail_image_tokens
        self._cache_size = cache_size
        self._cache: dict[int, tuple[weakref.ref[Message], int]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MessageTokenCounter({self.tokenizer!r})"

    def count_text(self, text: str) -> int:
        """The tokens of a bare text."""
        return self._count_text(text)

    def count(self, message: Message) -> int:
        """The tokens of one message (computed once per message object, then cached)."""
        entry = self._cache.get(id(message))
        if entry is not None and entry[0]() is message:
            return entry[1]
        tokens = self._measure(message)
        self._remember(message, tokens)
        return tokens

    __call__ = count

    def total(self, messages: Iterable[Message]) -> int:
        """The tokens of several messages."""
        return sum(map(self.count, messages))

    def _measure(self, message: Message) -> int:
        text = self._count_text
        tokens = self.per_message
        if message.name:
            tokens += self.per_name + text(message.name)
        if isinstance(message.content, str):
            tokens += text(message.content) if message.content else 0
        else:
            for part in message.content:
                if isinstance(part, TextPart):
                    tokens += text(part.text)
                elif isinstance(part, ImagePart):
                    tokens += self.low_detail_image_tokens if part.detail == "low" else self.image_tokens
                elif isinstance(part, OpaquePart):
                    tokens += text(part.kind) + text(_compact(part.data))
        for call in message.tool_calls:
            tokens += self.per_tool_call + text(call.name) + text(_compact(call.arguments))
        return tokens

    def _remember(self, message: Message, tokens: int) -> None:
        key = id(message)
        cache = self._cache

        def forget(ref: weakref.ref[Message]) -> None:
            current = cache.get(key)
            if current is not None and current[0] is ref:
                cache.pop(key, None)

        with self._lock:
            cache[key] = (weakref.ref(message, forget), tokens)
            while len(cache) > self._cache_size:  # oldest first: dicts keep insertion order
                cache.pop(next(iter(cache)), None)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_SHARED: dict[Any, MessageTokenCounter] = {}
_SHARED_LOCK = threading.Lock()


def token_counter(tokenizer: TokenizerLike | MessageTokenCounter = None) -> MessageTokenCounter:
    """The `MessageTokenCounter` for a tokenizer (see the module docstring), shared so its cache lives on.

    A counter passed in is returned as is; the same name, callable or tokenizer object gives the same counter.
    """
    if isinstance(tokenizer, MessageTokenCounter):
        return tokenizer
    try:
        key: Any = ("name", tokenizer) if tokenizer is None or isinstance(tokenizer, str) else ("object", tokenizer)
        hash(key)
    except TypeError:  # an unhashable tokenizer object: a counter of its own (cached per call only)
        return MessageTokenCounter(tokenizer)
    with _SHARED_LOCK:
        counter = _SHARED.get(key)
    if counter is None:
        counter = MessageTokenCounter(tokenizer)
        with _SHARED_LOCK:
            counter = _SHARED.setdefault(key, counter)
            while len(_SHARED) > 64:
                _SHARED.pop(next(iter(_SHARED)))
    return counter
