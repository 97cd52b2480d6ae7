"""Keys, tokens, hashed ids and the wrapping of an inner memory: what the encrypted chat and vector memories share."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Sequence
from typing import Generic, TypeVar, Union

from memwoven._steps import Call, Runner, Steps, twins
from memwoven.errors import InvalidInputError

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError(
        'memwoven.encryption needs the cryptography package: pip install "memwoven[encryption]"'
    ) from error

__all__ = [
    "HASHED_ID",
    "MARKER",
    "IdHasher",
    "KeyLike",
    "Keyring",
    "Keys",
    "Wrapper",
    "b64",
    "generate_key",
    "keyring",
    "unb64",
    "utf8",
]

KeyLike = Union[bytes, str]
"""A key: 16, 24 or 32 raw bytes, or the same bytes in URL-safe base64 (what `generate_key` returns)."""
MARKER = "memwoven_encrypted"
"""The metadata key under which an encrypted message keeps its token."""
_VERSION = "mwe2"
_NONCE_BYTES = 12
_KEY_SIZES = (16, 24, 32)
HASHED_ID = re.compile(r"[0-9a-f]{64}")


def generate_key(size: int = 32) -> str:
    """A new random AES key of `size` bytes (32: AES-256), as URL-safe base64 text."""
    if size not in _KEY_SIZES:
        raise InvalidInputError(f"an AES key is 16, 24 or 32 bytes, not {size!r}")
    return base64.urlsafe_b64encode(os.urandom(size)).decode("ascii")


_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _key_bytes(key: object, what: str = "key") -> bytes:
    if isinstance(key, str):
        try:
            # either alphabet, padded or not; any other character is refused
            text = key.strip().encode("ascii").translate(_URLSAFE).rstrip(b"=")
            key = base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise InvalidInputError(f"a text {what} must be URL-safe base64 (see generate_key())") from None
    if not isinstance(key, bytes):
        raise InvalidInputError(f"a {what} must be bytes or base64 text, got {type(key).__name__}")
    if len(key) not in _KEY_SIZES:
        raise InvalidInputError(f"a {what} must be 16, 24 or 32 bytes long, got {len(key)}")
    return key


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))


class Keyring:
    """AES-GCM keys by id: `seal` encrypts with the newest key, `open` decrypts with the one a token names."""

    def __init__(self, keys: KeyLike | Sequence[KeyLike]) -> None:
        """`keys`: one key, or several oldest first (the last one encrypts)."""
        listed = list(keys) if isinstance(keys, Sequence) and not isinstance(keys, (bytes, str)) else [keys]
        if not listed:
            raise InvalidInputError("a keyring needs at least one key")
        self._ciphers: dict[str, AESGCM] = {}
        for raw in map(_key_bytes, listed):
            key_id = b64(hmac.new(raw, b"memwoven key id", hashlib.sha256).digest()[:6])
            self._ciphers[key_id] = AESGCM(raw)
            self.current = key_id
        if len(self._ciphers) != len(listed):
            raise InvalidInputError("the same key is given twice")

    @property
    def key_ids(self) -> list[str]:
        """The ids of the keys, oldest first (safe to show: a key id is a keyed hash of its key)."""
        return list(self._ciphers)

    def __repr__(self) -> str:
        return f"Keyring(key_ids={self.key_ids})"

    def seal(self, plaintext: bytes, context: bytes) -> str:
        """Encrypt `plaintext` with the newest key, bound to `context`, as a token."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._ciphers[self.current].encrypt(nonce, plaintext, self._associated(self.current, context))
        return f"{_VERSION}:{self.current}:{b64(nonce + sealed)}"

    def open(self, token: object, context: bytes) -> bytes:
        """Decrypt a token made by `seal` with the same `context`; raise `ValueError` saying why it cannot."""
        if not isinstance(token, str):
            raise ValueError("is not encrypted (no memwoven token)")
        version, _, rest = token.partition(":")
        key_id, _, body = rest.partition(":")
        if version != _VERSION or not body:
            raise ValueError("is not a memwoven token")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise ValueError(f"was encrypted with key {key_id!r}, which is not in the keyring {self.key_ids}")
        try:
            data = unb64(body)
            return cipher.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], self._associated(key_id, context))
        except (InvalidTag, ValueError, UnicodeEncodeError):
            raise ValueError(
                "fails authentication: altered, or moved from another session, document or collection"
            ) from None

    @staticmethod
    def key_id(token: str) -> str:
        """The id of the key a token was sealed with."""
        return token.split(":", 2)[1] if token.count(":") >= 2 else ""

    @staticmethod
    def _associated(key_id: str, context: bytes) -> bytes:
        return f"memwoven:{_VERSION}:{key_id}:".encode("ascii") + context


Keys = Union[KeyLike, Sequence[KeyLike], Keyring]
"""What a wrapper's `key` takes: one key, several oldest first (the last one encrypts), or a `Keyring`."""


def keyring(key: Keys) -> Keyring:
    return key if isinstance(key, Keyring) else Keyring(key)


class IdHasher:
    """Stored ids as HMAC-SHA256 hex digests of the original ids."""

    def __init__(self, id_key: KeyLike) -> None:
        self._key = _key_bytes(id_key, "id_key")

    def __call__(self, value: str) -> str:
        return hmac.new(self._key, value.encode("utf-8"), hashlib.sha256).hexdigest()


def utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} is not valid Unicode (it contains a lone surrogate)") from None


_Inner = TypeVar("_Inner")


class Wrapper(Runner, Generic[_Inner]):
    """A memory that keeps its data in another one, `inner` (set by the subclass): closing it closes `inner`."""

    inner: _Inner
    keyring: Keyring
    _hash: IdHasher | None = None

    @property
    def hashed_ids(self) -> bool:
        """True when ids (session and document ids, item namespaces and keys) are stored as their keyed hashes."""
        return self._hash is not None

    def __repr__(self) -> str:
        hashed = ", hashed ids" if self._hash else ""
        return f"{type(self).__name__}({self.inner!r}, key_ids={self.keyring.key_ids}{hashed})"

    def _close(self) -> Steps[None]:
        """Close the inner memory."""
        yield Call(self.inner, "close")

    close, aclose = twins(_close)
