"""The memweave error hierarchy: every error a backend raises on purpose is a `MemweaveError`."""

from __future__ import annotations


class MemweaveError(Exception):
    """Base class of every error memweave raises on purpose."""


class InvalidInputError(MemweaveError, ValueError):
    """The caller passed something memweave cannot store; nothing was written."""


class DimensionMismatchError(InvalidInputError):
    """An embedding's length differs from the collection's fixed dimension."""


class CorruptMemoryError(MemweaveError):
    """Stored data could not be decoded; memweave refuses to guess or return an empty result."""


class ConcurrentModificationError(MemweaveError):
    """Another writer changed the session since it was read (optimistic version mismatch)."""


class BackendUnavailableError(MemweaveError, ConnectionError):
    """The storage backend could not be reached; the operation may be retried."""


class EmbeddingError(MemweaveError):
    """An embedding function failed or returned something that is not a usable vector."""
