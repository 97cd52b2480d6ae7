"""Embedded file backends: one crash-safe file per chat session, one `.npz` file per vector collection, one file
per item namespace (`FileItemMemory`, layout and format in `memwoven.backends.file.items`).

Every write goes to a temporary file in the target's directory, is flushed and fsynced, atomically renamed over
the target, and the directory is fsynced: a reader (or the next process after a crash) sees the old or the new
file, never a mix. Writers serialize on a per-file lock (a thread lock in this process, then a `filelock` lock
across processes), which makes `append` atomic and `save(..., expected_version=v)` a true compare-and-swap.
Readers take no lock. Anything that fails to decode raises `CorruptMemoryError`; nothing is guessed.

Chat session file (``<sha256 of the UTF-8 id>.session.jsonl``): a JSON header line
``{"format": 1, "session_id": ..., "version": ..., "count": N, "sha256": ...}`` followed by N lines, one `Message`
JSON each. The digest is the SHA-256 of ``{"format":1,"session_id":...,"version":...,"count":N}`` (compact UTF-8
JSON, fields in that order), a newline, then the N lines: it covers the header as well as the messages.

Vector collection file: an uncompressed `.npz` (loadable with ``numpy.load(path, allow_pickle=False)``) holding a
JSON ``header`` (format, dimension, metric, count), the float32 ``embeddings`` matrix and the ``documents`` JSON
(``[{"id", "content", "metadata"}, ...]`` in row order), the JSON blobs stored as uint8 arrays. The zip CRC-32 of
every member is verified on read.
"""

from memwoven.backends.file.chat import FileChatMemory
from memwoven.backends.file.items import FileItemMemory
from memwoven.backends.file.vector import FileVectorMemory, list_collections

__all__ = ["FileChatMemory", "FileItemMemory", "FileVectorMemory", "list_collections"]
