"""The memwoven error hierarchy: every error a backend raises on purpose is a `MemwovenError`."""

from __future__ import annotations


class MemwovenError(Exception):
    """Base class of every error memwoven raises on purpose."""


class InvalidInputError(MemwovenError, ValueError):
    """The caller passed something memwoven cannot store; nothing was written."""


class DimensionMismatchError(InvalidInputError):
    """An embedding's length differs from the collection's fixed dimension."""


class CorruptMemoryError(MemwovenError):
    """Stored data could not be decoded; memwoven refuses to guess or return an empty result."""


class ConcurrentModificationError(MemwovenError):
    """Another writer changed the session since it was read (optimistic version mismatch)."""


class BackendUnavailableError(MemwovenError, ConnectionError):
    """The storage backend could not be reached; the operation may be retried."""


class EmbeddingError(MemwovenError):
    """An embedding function failed or returned something that is not a usable vector."""
