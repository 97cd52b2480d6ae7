"""`SQLChatMemory`: chat histories in SQLite, PostgreSQL or MariaDB/MySQL, with O(change) saves.

One row per message (``seq`` 0..n-1, the exact JSON text and a 16-byte digest of it) and one row per session
(its id, version and message count). Every write locks the session row first, so writers of one session queue
while other sessions proceed.

Saves cost what changed, not the history's length. Messages are deeply immutable, so each object remembers the
last snapshot it read or wrote of recent sessions (an LRU of `cache_size` sessions). When the stored version
still equals the remembered one, the unchanged prefix of a save is found by identity against the snapshot
(without encoding those messages), and only the changed suffix is deleted and re-inserted. Otherwise (another
object wrote meanwhile) the stored digests are compared with the new messages'. Loads likewise return the
remembered snapshot when the stored version still matches, without fetching the rows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_only

from memwoven.backends.sql._base import SQLBackend
from memwoven.backends.sql._engine import Work
from memwoven.backends.sql._schema import create_tables, insert_ignoring, key_of
from memwoven.contracts import ChatMemory, History, MessagesIn, check_id, next_version
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.history import (
    EMPTY,
    Edit,
    Snapshot,
    SnapshotCache,
    decode_message,
    digest,
    encode_message,
    prepare_edit,
    stored_prefix,
)
from memwoven.models import Message, coerce_messages, same_prefix

__all__ = ["SQLChatMemory"]

_MESSAGE_COLUMNS = ("session_key", "seq", "digest", "body")


class SQLChatMemory(SQLBackend, ChatMemory):
    """Chat histories in an SQL database, one row per message; saves and loads cost O(change).

    `url_or_engine` is a URL (``sqlite:///memwoven.db``, ``postgresql://user:pw@host/db``,
    ``mysql://user@host/db``, ``mariadb://...``), an `Engine` (async calls then run in a thread unless
    `async_engine` is given too) or an `AsyncEngine`. From a URL both a sync and an async engine are built
    (pysqlite/aiosqlite, psycopg 3, PyMySQL/aiomysql). Tables are created on first use. `cache_size` bounds
    the snapshots kept for O(change) saves and loads (sessions; 0 turns the cache off). With `ttl` (seconds)
    a session expires when it has not been written for that long (every write resets it): it then reads as
    absent, and `cleanup_expired()` deletes its rows.

    Use the async API from one event loop and close with `aclose()` after using it.
    """

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        table_prefix: str = "memwoven_",
        schema: str | None = None,
        pool_size: int = 5,
        pool_timeout: float = 30.0,
        async_engine: AsyncEngine | None = None,
        cache_size: int = 256,
        ttl: float | None = None,
    ) -> None:
        super().__init__(
            url_or_engine,
            table_prefix=table_prefix,
            schema=schema,
            pool_size=pool_size,
            pool_timeout=pool_timeout,
            async_engine=async_engine,
        )
        self._cache = SnapshotCache(cache_size)
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
            raise InvalidInputError(f"ttl must be a positive number of seconds, got {ttl!r}")
        self.ttl = ttl
        self._sessions = self._tables.sessions
        self._messages = self._tables.messages
        self._insert_statements: dict[sa.Dialect, tuple[str, bool]] = {}  # one per engine's dialect
        self._statements = _Statements(self._sessions)

    def __repr__(self) -> str:
        return f"SQLChatMemory({self._options_repr()})"

    # The API: each method validates, then runs one `Work` through the sync or the async engine -------------

    def load_versioned(self, session_id: str) -> History:
        """Return the session's messages and the version they were read at."""
        return self._execute(self._load_work(session_id))

    def save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Replace the session's history (writing only what changed) and return its new version."""
        return self._execute(self._save_work(session_id, messages, expected_version))

    def append(self, session_id: str, messages: MessagesIn) -> int:
        """Atomically add messages at the end of the session and return its new version."""
        return self._execute(self._append_work(session_id, messages))

    def sessions(self) -> list[str]:
        """The ids of the stored sessions, sorted."""
        return self._execute(self._sessions_work())

    async def aload_versioned(self, session_id: str) -> History:
        """Async twin of `load_versioned`."""
        return await self._aexecute(self._load_work(session_id))

    async def asave(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> int:
        """Async twin of `save`."""
        return await self._aexecute(self._save_work(session_id, messages, expected_version))

    async def aappend(self, session_id: str, messages: MessagesIn) -> int:
        """Async twin of `append`."""
        return await self._aexecute(self._append_work(session_id, messages))

    async def asessions(self) -> list[str]:
        """Async twin of `sessions`."""
        return await self._aexecute(self._sessions_work())

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """Run `change` and write its result in one transaction holding the session's row lock."""
        return self._execute(self._update_work(session_id, change, _refuse_awaitable))

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """Async twin of `_update_locked`; a coroutine `change` is awaited on this loop."""
        loop = asyncio.get_running_loop()

        def from_thread(result: Awaitable[Any]) -> Any:  # the work runs in a thread: await on this loop
            return asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()

        # With an async engine the work runs in SQLAlchemy's greenlet on this loop, which can await directly.
        awaiter = from_thread if self.async_engine is None else await_only
        return await self._aexecute(self._update_work(session_id, change, awaiter))

    def cleanup_expired(self) -> int:
        """Delete the sessions whose TTL ran out (they already read as absent); return how many."""
        return self._execute(self._cleanup_work())

    async def acleanup_expired(self) -> int:
        """Async twin of `cleanup_expired`."""
        return await self._aexecute(self._cleanup_work())

    # Work ---------------------------------------------------------------------------------------------------

    def _setup_work(self) -> list[Work[Any, Any]]:
        tables = [self._sessions, self._messages]
        return [Work(lambda c: create_tables(c, self._tables, tables), _ignore, write=True, ddl=True)]

    def _load_work(self, session_id: str) -> Work[Snapshot, History]:
        session_id = check_id(session_id)
        key = key_of(session_id)

        def run(connection: Connection) -> Snapshot:
            sessions = self._sessions
            row = connection.execute(
                sa.select(sessions.c.session_id, sessions.c.version, sessions.c.expires_at_ms).where(
                    sessions.c.session_key == key
                )
            ).first()
            if row is None or _expired(row.expires_at_ms):
                return EMPTY
            self._check_owner(row.session_id, session_id)
            cached = self._cache.get(session_id)
            if cached is not None and cached.version == row.version:
                return cached
            # One statement, so the version and the rows come from the same consistent read.
            rows = connection.execute(self._rows_query(key)).all()
            return self._decode(session_id, rows)

        def done(snapshot: Snapshot) -> History:
            if snapshot.version:
                self._cache.put(session_id, snapshot)
            return History(list(snapshot.messages), snapshot.version)

        return Work(run, done)

    def _save_work(self, session_id: str, messages: MessagesIn, expected_version: int | None) -> Work[int, int]:
        session_id = check_id(session_id)
        edit = prepare_edit(messages, self._cache.get(session_id))  # validated before anything is written
        new = edit.messages
        key = key_of(session_id)

        def run(connection: Connection) -> int:
            version, stored_count = self._lock_session(connection, session_id, key)
            if expected_version is not None and expected_version != version:
                raise ConcurrentModificationError(
                    f"session {session_id!r} is at version {version}, not {expected_version}; reload and retry"
                )
            if not new:
                connection.execute(sa.delete(self._messages).where(self._messages.c.session_key == key))
                connection.execute(sa.delete(self._sessions).where(self._sessions.c.session_key == key))
                return 0
            kept, stored_rows, bodies = self._unchanged(connection, session_id, key, version, stored_count, edit)
            if kept < stored_rows:
                connection.execute(
                    sa.delete(self._messages).where(self._messages.c.session_key == key, self._messages.c.seq >= kept)
                )
            self._insert(connection, key, kept, bodies or [encode_message(m) for m in new[kept:]])
            return self._set_version(connection, key, next_version(version), len(new))

        def done(version: int) -> int:
            if version:
                self._cache.put(session_id, Snapshot(version, new))
            else:
                self._cache.drop(session_id)
            return version

        return Work(run, done, write=True)

    def _append_work(self, session_id: str, messages: MessagesIn) -> Work[Any, int]:
        session_id = check_id(session_id)
        added = coerce_messages(messages)
        if not added:
            return self._version_work(session_id)
        key = key_of(session_id)
        bodies = [encode_message(m) for m in added]

        def run(connection: Connection) -> tuple[int, int]:
            version, stored_count = self._lock_session(connection, session_id, key)
            self._insert(connection, key, stored_count, bodies)
            return version, self._set_version(connection, key, next_version(version), stored_count + len(added))

        def done(versions: tuple[int, int]) -> int:
            old, new = versions
            cached = self._cache.get(session_id)
            if cached is not None and cached.version == old:
                self._cache.put(session_id, Snapshot(new, cached.messages + added))
            return new

        return Work(run, done, write=True)

    def _update_work(
        self, session_id: str, change: Callable[[list[Message]], Any], awaiter: Callable[[Awaitable[Any]], Any]
    ) -> Work[tuple[int, list[Message]], int]:
        """Lock the session's row, read it, apply `change` and write what changed, in one transaction."""
        session_id = check_id(session_id)
        key = key_of(session_id)

        def run(connection: Connection) -> tuple[int, list[Message]]:
            version, stored_count = self._lock_session(connection, session_id, key)
            cached = self._cache.get(session_id)
            current = EMPTY
            if cached is not None and cached.version == version:
                current = cached
            elif version:
                current = self._decode(session_id, connection.execute(self._rows_query(key)).all())
            result = change(list(current.messages))
            edit = prepare_edit(awaiter(result) if isinstance(result, Awaitable) else result, current)
            new = edit.messages
            if not new:
                connection.execute(sa.delete(self._messages).where(self._messages.c.session_key == key))
                connection.execute(sa.delete(self._sessions).where(self._sessions.c.session_key == key))
                return 0, new
            kept = edit.same
            if kept < stored_count:
                connection.execute(
                    sa.delete(self._messages).where(self._messages.c.session_key == key, self._messages.c.seq >= kept)
                )
            self._insert(connection, key, kept, [encode_message(m) for m in new[kept:]])
            return self._set_version(connection, key, next_version(version), len(new)), new

        def done(written: tuple[int, list[Message]]) -> int:
            version, new = written
            if version:
                self._cache.put(session_id, Snapshot(version, new))
            else:
                self._cache.drop(session_id)
            return version

        return Work(run, done, write=True)

    def _version_work(self, session_id: str) -> Work[int, int]:
        key = key_of(session_id)

        def run(connection: Connection) -> int:
            version = connection.execute(
                sa.select(self._sessions.c.version).where(self._sessions.c.session_key == key)
            ).scalar()
            return int(version or 0)

        return Work(run, _same)

    def _sessions_work(self) -> Work[list[str], list[str]]:
        def run(connection: Connection) -> list[str]:
            sessions = self._sessions
            query = sa.select(sessions.c.session_id).where(sessions.c.message_count > 0, _alive(sessions))
            return sorted(connection.execute(query).scalars())

        return Work(run, _same)

    def _cleanup_work(self) -> Work[int, int]:
        def run(connection: Connection) -> int:
            sessions, messages = self._sessions, self._messages
            expired = [
                row.session_key
                for row in connection.execute(sa.select(sessions.c.session_key).where(sa.not_(_alive(sessions))))
            ]
            for start in range(0, len(expired), 500):
                chunk = expired[start : start + 500]
                connection.execute(sa.delete(messages).where(messages.c.session_key.in_(chunk)))
                connection.execute(
                    sa.delete(sessions).where(sessions.c.session_key.in_(chunk), sa.not_(_alive(sessions)))
                )
            return len(expired)

        return Work(run, _same, write=True)

    # Helpers run inside a transaction -----------------------------------------------------------------------

    def _lock_session(self, connection: Connection, session_id: str, key: str) -> tuple[int, int]:
        """Create the session's row if missing and lock it; return its (version, message count)."""
        sessions = self._sessions
        new_row = {"session_key": key, "session_id": session_id, "version": 0, "message_count": 0}
        for _ in range(3):  # the row can vanish between the two statements if another writer clears it
            if connection.dialect.name == "sqlite":
                # SQLite locks the whole database for a transaction's writes (memwoven begins them IMMEDIATE), so
                # no row lock is needed: a no-op upsert returning the row creates or reads it in one statement.
                row = connection.execute(self._statements.sqlite_lock, {"key": key, "id": session_id}).first()
            else:
                connection.execute(insert_ignoring(connection, sessions, new_row))
                row = connection.execute(
                    sa.select(*_locked_columns(sessions)).where(sessions.c.session_key == key).with_for_update()
                ).first()
            if row is not None and _expired(row.expires_at_ms):  # an expired session is absent: purge it first
                connection.execute(sa.delete(self._messages).where(self._messages.c.session_key == key))
                connection.execute(sa.delete(sessions).where(sessions.c.session_key == key))
                continue
            if row is not None:
                self._check_owner(row.session_id, session_id)
                return int(row.version), int(row.message_count)
        raise ConcurrentModificationError(f"session {session_id!r} kept being cleared while writing; retry")

    def _rows_query(self, key: str) -> sa.Select[Any]:
        """The session row joined with its message rows, in order."""
        sessions, messages = self._sessions, self._messages
        return (
            sa.select(sessions.c.version, sessions.c.message_count, messages.c.seq, messages.c.body)
            .select_from(sessions.outerjoin(messages, messages.c.session_key == sessions.c.session_key))
            .where(sessions.c.session_key == key)
            .order_by(messages.c.seq)
        )

    def _unchanged(
        self,
        connection: Connection,
        session_id: str,
        key: str,
        version: int,
        stored_count: int,
        edit: Edit,
    ) -> tuple[int, int, list[str] | None]:
        """Return (kept, stored rows, bodies of new[kept:] if already encoded): what a save can leave in place."""
        new, cached = edit.messages, self._cache.get(session_id)
        if version == 0:  # `_lock_session` just created the session's row (committed rows have a version > 0)
            return 0, 0, None
        if cached is not None and cached.version == version:
            return edit.same if cached is edit.base else same_prefix(new, cached.messages), stored_count, None
        stored = connection.execute(
            sa.select(self._messages.c.seq, self._messages.c.digest)
            .where(self._messages.c.session_key == key)
            .order_by(self._messages.c.seq)
        ).all()
        if [row.seq for row in stored] != list(range(len(stored))):
            raise CorruptMemoryError(f"session {session_id!r}: its message rows are not numbered 0..{len(stored) - 1}")
        bodies = [encode_message(m) for m in new]
        kept = stored_prefix([bytes(row.digest) for row in stored], bodies)
        return kept, len(stored), bodies[kept:]

    def _insert(self, connection: Connection, key: str, first_seq: int, bodies: list[str]) -> None:
        """Insert message rows `first_seq`.. with these bodies: one driver-level executemany.

        The values are already what every driver takes as is (str, int, bytes), so the rows skip SQLAlchemy's
        per-row parameter processing, which cost as much as the database's own work.
        """
        if not bodies:
            return
        sql, positional = self._insert_sql(connection.dialect)
        rows = [(key, seq, digest(body), body) for seq, body in enumerate(bodies, first_seq)]
        if positional:
            connection.exec_driver_sql(sql, rows)
        else:
            connection.exec_driver_sql(sql, [dict(zip(_MESSAGE_COLUMNS, row)) for row in rows])

    def _insert_sql(self, dialect: sa.Dialect) -> tuple[str, bool]:
        """The message INSERT in `dialect`'s SQL and whether it takes positional parameters (in column order)."""
        known = self._insert_statements.get(dialect)
        if known is None:
            compiled = sa.insert(self._messages).compile(dialect=dialect, column_keys=list(_MESSAGE_COLUMNS))
            positional = bool(compiled.positional)
            if positional and tuple(compiled.positiontup or ()) != _MESSAGE_COLUMNS:
                raise AssertionError(f"unexpected parameter order {compiled.positiontup!r}")
            known = self._insert_statements[dialect] = (str(compiled), positional)
        return known

    def _set_version(self, connection: Connection, key: str, version: int, message_count: int) -> int:
        connection.execute(
            self._statements.set_version,
            {
                "key": key,
                "new_version": version,
                "new_count": message_count,
                "now": datetime.now(timezone.utc),
                "expires": None if self.ttl is None else _now_ms() + int(self.ttl * 1000),
            },
        )
        return version

    def _check_owner(self, stored_id: str, session_id: str) -> None:
        if stored_id != session_id:
            raise CorruptMemoryError(
                f"session {session_id!r}: its row holds session id {stored_id[:80]!r} (tampered or a key collision)"
            )

    def _decode(self, session_id: str, rows: Sequence[Any]) -> Snapshot:
        """Decode the joined (version, message_count, seq, body) rows of one session."""
        if not rows:
            return EMPTY  # cleared between the two statements
        version, expected = int(rows[0].version), int(rows[0].message_count)
        seqs = [row.seq for row in rows]
        if expected == 0 and seqs == [None]:
            return EMPTY
        if seqs != list(range(expected)):
            found = "no message rows" if seqs == [None] else f"{len(seqs)} message rows"
            raise CorruptMemoryError(f"session {session_id!r} should have {expected} messages; found {found}")
        return Snapshot(version, [decode_message(session_id, row.seq, row.body) for row in rows])


def _locked_columns(sessions: sa.Table) -> tuple[sa.Column[Any], ...]:
    """What a writer reads from the session row it locked."""
    return (sessions.c.session_id, sessions.c.version, sessions.c.message_count, sessions.c.expires_at_ms)


class _Statements:
    """The statements every write runs, built once with bound parameters (building one costs more than running it
    through SQLAlchemy's compiled cache)."""

    def __init__(self, sessions: sa.Table) -> None:
        upsert = sqlite_insert(sessions).values(
            session_key=sa.bindparam("key"), session_id=sa.bindparam("id"), version=0, message_count=0
        )
        self.sqlite_lock = upsert.on_conflict_do_update(
            index_elements=[sessions.c.session_key], set_={"session_key": upsert.excluded.session_key}
        ).returning(*_locked_columns(sessions))
        self.set_version = (
            sa.update(sessions)
            .where(sessions.c.session_key == sa.bindparam("key"))
            .values(
                version=sa.bindparam("new_version"),
                message_count=sa.bindparam("new_count"),
                updated_at=sa.bindparam("now"),
                expires_at_ms=sa.bindparam("expires"),
            )
        )


def _refuse_awaitable(result: Awaitable[Any]) -> Any:
    raise InvalidInputError("update's change returned an awaitable; use aupdate for a coroutine function")


async def _awaited(result: Awaitable[Any]) -> Any:
    return await result


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _expired(expires_at_ms: int | None) -> bool:
    return expires_at_ms is not None and expires_at_ms <= _now_ms()


def _alive(sessions: sa.Table) -> sa.ColumnElement[bool]:
    """SQL: the session has no TTL or it has not run out."""
    return sa.or_(sessions.c.expires_at_ms.is_(None), sessions.c.expires_at_ms > _now_ms())


def _ignore(_: object) -> None:
    return None


def _same(value: Any) -> Any:
    return value
