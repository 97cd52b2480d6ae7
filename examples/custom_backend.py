"""Your own backend: a `ChatMemory` over the standard library's sqlite3, checked by memwoven's conformance suite.

    uv run python examples/custom_backend.py

`JSONRowChatMemory` keeps each session in one row (its id, a version and the messages as one JSON array) and
implements the four abstract methods of `ChatMemory`: `load_versioned`, `save`, `append` and `sessions`. Everything
else (`load`, `clear`, `update` with retries, `session(id)` views, the async twins) comes from the base class.
Running this file uses the backend a little, then runs `memwoven.testing.ChatMemoryContract` against it with
pytest: every invariant CM1-CM10, through the sync API and the async twins. Offline; needs `memwoven[testing]`.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from pydantic import ValidationError

from memwoven import ChatMemory, ConcurrentModificationError, CorruptMemoryError, History, Message
from memwoven.contracts import MessagesIn, check_id, next_version
from memwoven.history import encode_message, message_ids, not_stored
from memwoven.models import coerce_messages
from memwoven.testing import ChatMemoryContract


class JSONRowChatMemory(ChatMemory):
    """Chat histories in an SQLite file, one row per session: (id, version, the messages as a JSON array)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with self._transaction() as db:
            db.execute("CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, version INTEGER, body TEXT)")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE makes concurrent writers queue (CM9), COMMIT is atomic (CM4)."""
        with closing(sqlite3.connect(self.path, timeout=30, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            db.execute("PRAGMA synchronous=NORMAL")  # atomic and crash-safe for the process; fewer fsyncs
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _read(self, db: sqlite3.Connection, session_id: str) -> History:
        row = db.execute("SELECT version, body FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return History([], 0)  # CM5
        try:
            return History([Message.model_validate(item) for item in json.loads(row[1])], row[0])
        except (ValueError, TypeError, ValidationError) as error:  # CM7: never a silent []
            raise CorruptMemoryError(f"session {session_id!r} cannot be decoded: {error}") from None

    def _write(self, db: sqlite3.Connection, session_id: str, messages: list[Message], current: int) -> int:
        if not messages:  # CM2: saving [] removes the session
            db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            return 0
        version = next_version(current)  # grows even across a clear (CM9)
        body = "[" + ",".join(encode_message(message) for message in messages) + "]"  # InvalidInputError: no UTF-8
        db.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?, ?)", (session_id, version, body))
        return version

    def load_versioned(self, session_id: str) -> History:
        """The session's messages and the version they were read at."""
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            return self._read(db, check_id(session_id))

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Replace the session's history, refusing a stale `expected_version`."""
        check_id(session_id)
        new = coerce_messages(messages)  # validate everything before writing anything (CM4)
        message_ids(new)  # ids are unique within a session (CM10)
        with self._transaction() as db:
            current = db.execute("SELECT version FROM sessions WHERE id = ?", (session_id,)).fetchone()
            version = 0 if current is None else current[0]
            if expected_version is not None and expected_version != version:
                raise ConcurrentModificationError(f"session {session_id!r} is at version {version}")
            return self._write(db, session_id, new, version)

    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Add messages at the end of the session, atomically."""
        check_id(session_id)
        batch = coerce_messages(messages)
        message_ids(batch)
        with self._transaction() as db:
            old, version = self._read(db, session_id)
            added = not_stored(batch, {message.id for message in old})  # idempotent by id (CM10)
            return self._write(db, session_id, old + added, version) if added else version

    def sessions(self) -> list[str]:
        """The stored session ids, sorted."""
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            return sorted(row[0] for row in db.execute("SELECT id FROM sessions"))


class TestJSONRowChatMemory(ChatMemoryContract):
    """The conformance suite, run against `JSONRowChatMemory` (pytest collects this class)."""

    @pytest.fixture
    def chat_memory(self, tmp_path: Path) -> ChatMemory:
        """A fresh, empty memory for each test."""
        return JSONRowChatMemory(tmp_path / "chat.db")

    def reopen(self, memory: ChatMemory) -> ChatMemory:
        """A second object over the same file (enables the cross-object test)."""
        assert isinstance(memory, JSONRowChatMemory)
        return JSONRowChatMemory(memory.path)

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        """Damage one session's row (enables the CM7 test)."""
        assert isinstance(memory, JSONRowChatMemory)
        with memory._transaction() as db:
            db.execute("UPDATE sessions SET body = '[{\"role\": 42' WHERE id = ?", (session_id,))


def main() -> int:
    """Use the backend a little, then run the conformance suite against it; returns pytest's exit code."""
    with tempfile.TemporaryDirectory() as directory, JSONRowChatMemory(Path(directory) / "chat.db") as memory:
        session = memory.session("user-1")
        session.append([Message(role="user", content="Hello!")])
        session.update(lambda messages: [*messages, Message(role="assistant", content="Hi, how can I help?")])
        print(f"{memory.sessions()} -> {[(m.role, m.text) for m in session.load()]}")
    print("Running memwoven.testing.ChatMemoryContract against JSONRowChatMemory:")
    return int(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]))


if __name__ == "__main__":
    sys.exit(main())
