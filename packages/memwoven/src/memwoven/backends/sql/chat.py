"""`SQLChatMemory`: chat histories in SQLite, PostgreSQL or MariaDB/MySQL, with O(change) saves.

One row per message (``seq`` 0..n-1, the exact JSON text, the key of its `id` and the session's rolling digest
through it) and one row per session (its id, version, message count and rolling digest). Every write locks the
session row first, so writers of one session queue while other sessions proceed.

Message ids are unique within a session (CM10): an append skips the messages whose id is stored (looked up under
the session's lock, with a unique index on (session, message id) as the safety net), so a retried append is
stored once.

What is read is verified. The rolling digest starts from the session's key and takes in each body in turn
(`_chain`); a load recomputes it while decoding and compares it with every row's and the session row's, so a
body altered, replaced by another valid message, moved or copied from another session, or a row removed, raises
`CorruptMemoryError`, as do message rows left without their session row.

Saves cost what changed, not the history's length. Messages are deeply immutable, so each object remembers the
last snapshot it read (verified) or wrote of recent sessions (an LRU of `cache_size` sessions). When the stored
version still equals the remembered one, the unchanged prefix of a save is found by identity against the
snapshot (without encoding those messages), and only the changed suffix is deleted and re-inserted. Otherwise
(another object wrote meanwhile) a stored row is kept only if it equals, body and digest, what the save would
write: a stored prefix is never trusted unverified. Loads likewise return the remembered snapshot when the
stored version still matches, without fetching the rows.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.util import await_only

import memwoven._clock as _clock
from memwoven._steps import Steps, twins
from memwoven.backends._cancel import awaited, current
from memwoven.backends._items import ttl_milliseconds
from memwoven.backends.sql import _driver
from memwoven.backends.sql._base import SQLBackend, SQLOptions
from memwoven.backends.sql._driver import OnDriver
from memwoven.backends.sql._engine import Work
from memwoven.backends.sql._packet import check_rows
from memwoven.backends.sql._schema import dialect_insert, insert_ignoring, key_of
from memwoven.contracts import ChatMemory, History, MessagesIn, check_id, check_ttl, next_version
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.history import (
    EMPTY,
    Edit,
    Snapshot,
    SnapshotCache,
    decode_message,
    encode_message,
    message_ids,
    not_stored,
    prepare_edit,
)
from memwoven.models import Message, coerce_messages, same_prefix

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine
    from typing_extensions import Unpack

__all__ = ["SQLChatMemory"]

logger = logging.getLogger("memwoven.sql")

_MESSAGE_COLUMNS = ("session_key", "seq", "message_key", "chain", "body")
_MESSAGE_FIXED = 256  # a message row's values but its body, escaped (`_packet.check_rows`)
_IN_CHUNK = 500  # ids per IN (...) lookup: far below every driver's parameter limit


class SQLChatMemory(SQLBackend, ChatMemory):
    """Chat histories in an SQL database, one row per message; saves and loads cost O(change).

    `url_or_engine` is a URL (``sqlite:///memwoven.db``, ``postgresql://user:pw@host/db``,
    ``mysql://user@host/db``, ``mariadb://...``), an `Engine` (async calls then run in a thread unless
    `async_engine` is given too) or an `AsyncEngine`. From a URL both a sync and an async engine are built
    (pysqlite/aiosqlite, psycopg 3, PyMySQL/aiomysql). Tables are created on first use. `cache_size` bounds
    the snapshots kept for O(change) saves and loads (sessions; 0 turns the cache off). With `ttl` (seconds)
    a session expires when it has not been written for that long (every write resets it): it then reads as
    absent, and `cleanup_expired()` deletes its rows.

    The async API works from any event loop, one after another and at once (each loop gets connections of its
    own); close with `aclose()` from a loop still running, else `close()`.
    """

    _table_names = ("sessions", "messages")

    def __init__(
        self,
        url_or_engine: str | URL | Engine | AsyncEngine,
        *,
        cache_size: int = 256,
        ttl: float | None = None,
        **options: Unpack[SQLOptions],
    ) -> None:
        super().__init__(url_or_engine, **options)
        self._cache = SnapshotCache(cache_size)
        self.ttl = check_ttl(ttl)
        self._session_table = self._tables.sessions
        self._messages = self._tables.messages
        self._insert_statements: dict[sa.Dialect, tuple[str, bool]] = {}  # one per engine's dialect
        self._statements = _Statements(self._session_table, self._messages)

    def __repr__(self) -> str:
        return f"SQLChatMemory({self._options_repr()})"

    # The API: each operation validates, then yields one `Work` (a transaction) for the sync or the async engine --

    def _setup_steps(self) -> Steps[None]:
        yield self._create_tables()

    def _load_versioned(self, session_id: str) -> Steps[History]:
        """Return the session's messages and the version they were read at."""
        session_id = check_id(session_id)
        key = key_of(session_id)

        def body(connection: Connection) -> Snapshot:
            row = connection.execute(self._statements.probe, {"key": key}).one()
            if row.session_id is None:
                if row.has_rows:  # one statement: a writer cannot have created the session in between
                    raise _damaged(session_id, "its message rows remain but its session row is missing")
                return EMPTY
            if _expired(row.expires_at_ms):
                return EMPTY
            self._check_owner(row.session_id, session_id)
            cached = self._cache.get(session_id)
            if cached is not None and cached.version == row.version:
                return cached
            # One statement, so the version and the rows come from the same consistent read.
            rows = connection.execute(self._rows_query(key)).all()
            return self._decode(session_id, key, rows)

        snapshot: Snapshot = yield Work(body, single=True)  # statements each a snapshot (see body)
        if snapshot.version:
            self._cache.put(session_id, snapshot)
        return History(list(snapshot.messages), snapshot.version)

    load_versioned, aload_versioned = twins(_load_versioned)

    def _save(self, session_id: str, messages: MessagesIn, *, expected_version: int | None = None) -> Steps[int]:
        """Replace the session's history (writing only what changed) and return its new version."""
        session_id = check_id(session_id)
        edit = prepare_edit(messages, self._cache.get(session_id))  # validated before anything is written
        new = edit.messages
        key = key_of(session_id)

        def body(connection: Connection) -> int:
            locked = self._lock_session(connection, session_id, key)
            if expected_version is not None and expected_version != locked.version:
                raise ConcurrentModificationError(
                    f"session {session_id!r} is at version {locked.version}, not {expected_version}; reload and retry"
                )
            if not new:
                self._delete_session(connection, key)
                return 0
            if locked.version == 0:
                self._drop_orphans(connection, session_id, key)
            kept, stored_rows, bodies, chain = self._unchanged(connection, session_id, key, locked, edit)
            rest = new[kept:]
            message_ids(rest, self._stored_ids(connection, key, rest, below=kept))  # unique in the whole history
            if kept < stored_rows:
                self._delete_from(connection, key, kept)
            bodies = bodies if bodies is not None else [encode_message(m) for m in rest]
            chain = self._insert(connection, session_id, key, kept, chain, rest, bodies)
            return self._set_version(connection, key, next_version(locked.version), len(new), chain)

        version: int = yield Work(body, write=True)
        return self._remember(session_id, version, new)

    save, asave = twins(_save)

    def _append(self, session_id: str, messages: MessagesIn) -> Steps[int]:
        """Atomically add messages at the end of the session and return its new version."""
        session_id = check_id(session_id)
        added = coerce_messages(messages)
        key = key_of(session_id)
        if not added:
            version: int = yield Work(lambda connection: self._stored_version(connection, key), single=True)
            return version
        carry_ids = bool(message_ids(added))  # refuses two messages with one id before anything is written
        bodies = [encode_message(m) for m in added]

        def body(connection: Connection) -> tuple[int, int, list[Message]]:
            locked = self._lock_session(connection, session_id, key)
            if locked.version == 0:
                self._refuse_orphans(connection, session_id, key)
            written, written_bodies = added, bodies
            if carry_ids and locked.version:
                stored = self._stored_ids(connection, key, added, below=locked.message_count)
                if stored:  # a retry, or another writer's copy: only what is not stored yet
                    written = not_stored(added, stored)
                    if not written:
                        return locked.version, locked.version, written
                    body_of = {id(message): body for message, body in zip(added, bodies)}
                    written_bodies = [body_of[id(message)] for message in written]
            chain = self._insert(
                connection, session_id, key, locked.message_count, locked.chain, written, written_bodies
            )
            new_version = next_version(locked.version)
            self._set_version(connection, key, new_version, locked.message_count + len(written), chain)
            return locked.version, new_version, written

        result: tuple[int, int, list[Message]] = yield Work(body, write=True)
        old, new, written = result
        cached = self._cache.get(session_id)
        if new != old and cached is not None and cached.version == old:
            self._cache.put(session_id, Snapshot(new, cached.messages + written))
        return new

    append, aappend = twins(_append)

    def _sessions(self) -> Steps[list[str]]:
        """The ids of the stored sessions, sorted."""

        def body(connection: Connection) -> list[str]:
            sessions = self._session_table
            query = sa.select(sessions.c.session_id).where(sessions.c.message_count > 0, _alive(sessions))
            return sorted(connection.execute(query).scalars())

        session_ids: list[str] = yield Work(body, single=True)
        return session_ids

    sessions, asessions = twins(_sessions)

    def _update_locked(self, session_id: str, change: Callable[[list[Message]], MessagesIn]) -> int:
        """Run `change` and write its result in one transaction holding the session's row lock (an awaitable
        `change` returns is refused: `_aupdate_locked` awaits it)."""
        return self._run(self._locked_update_steps(session_id, change, _refuse_awaitable))

    async def _aupdate_locked(
        self, session_id: str, change: Callable[[list[Message]], MessagesIn | Awaitable[MessagesIn]]
    ) -> int:
        """`_update_locked` from async code, where `change` may also be a coroutine function: its result is awaited
        on this loop from inside the transaction (in SQLAlchemy's greenlet, or from the worker thread when the sync
        API serves this loop), so the session's row stays locked while it runs. Cancelling the caller cancels it,
        and the transaction rolls back (`Database.atransact`)."""
        loop = asyncio.get_running_loop()

        def awaiter(result: Awaitable[Any]) -> Any:
            cancellation = current()
            try:
                asyncio.get_running_loop()  # the work runs in SQLAlchemy's greenlet on this loop: await here
            except RuntimeError:  # it runs the sync API in a worker thread: await on this loop
                if cancellation is not None:
                    return cancellation.await_from_thread(result)
                return asyncio.run_coroutine_threadsafe(awaited(result), loop).result()
            task = asyncio.ensure_future(result)
            if cancellation is None:
                return await_only(task)
            with cancellation.watching(task):
                return await_only(task)

        return await self._arun(self._locked_update_steps(session_id, change, awaiter))

    def _locked_update_steps(
        self, session_id: str, change: Callable[[list[Message]], Any], awaiter: Callable[[Awaitable[Any]], Any]
    ) -> Steps[int]:
        """Lock the session's row, read it, apply `change` (its awaitable result through `awaiter`) and write what
        changed, in one transaction."""
        session_id = check_id(session_id)
        key = key_of(session_id)

        def body(connection: Connection) -> tuple[int, list[Message]]:
            locked = self._lock_session(connection, session_id, key)
            cached = self._cache.get(session_id)
            current = EMPTY
            if locked.version == 0:
                self._refuse_orphans(connection, session_id, key)
            elif cached is not None and cached.version == locked.version:
                current = cached
            else:
                current = self._decode(session_id, key, connection.execute(self._rows_query(key)).all())
            result = change(list(current.messages))
            edit = prepare_edit(awaiter(result) if isinstance(result, Awaitable) else result, current)
            new = edit.messages
            if not new:
                self._delete_session(connection, key)
                return 0, new
            message_ids(new)  # the whole history is in hand: check it all
            kept = edit.same
            chain = self._chain_at(connection, session_id, key, kept, locked)
            if kept < locked.message_count:
                self._delete_from(connection, key, kept)
            chain = self._insert(
                connection, session_id, key, kept, chain, new[kept:], [encode_message(m) for m in new[kept:]]
            )
            return self._set_version(connection, key, next_version(locked.version), len(new), chain), new

        version, new = yield Work(body, write=True)
        return self._remember(session_id, version, new)

    def _cleanup_expired(self) -> Steps[int]:
        """Delete the sessions whose TTL ran out (they already read as absent); return how many."""

        def body(connection: Connection) -> int:
            sessions, messages = self._session_table, self._messages
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

        deleted: int = yield Work(body, write=True)
        return deleted

    cleanup_expired, acleanup_expired = twins(_cleanup_expired)

    def _remember(self, session_id: str, version: int, messages: list[Message]) -> int:
        """After a committed write of the session's whole history, remember it (forget a removed session); return
        `version`."""
        if version:
            self._cache.put(session_id, Snapshot(version, messages))
        else:
            self._cache.drop(session_id)
        return version

    # Helpers run inside a transaction -----------------------------------------------------------------------

    def _lock_session(self, connection: Connection, session_id: str, key: str) -> _Locked:
        """Create the session's row if missing (version 0, no messages) and lock it; return what it holds."""
        sessions = self._session_table
        seed = _seed(key)
        new_row = {"session_key": key, "session_id": session_id, "version": 0, "message_count": 0, "chain": seed}
        for _ in range(3):  # the row can vanish between the two statements if another writer clears it
            if connection.dialect.name == "sqlite":
                # SQLite locks the whole database for a transaction's writes (memwoven begins them IMMEDIATE), so
                # no row lock is needed: a no-op upsert returning the row creates or reads it in one statement.
                found = self._statements.sqlite_lock.execute(connection, {"key": key, "id": session_id, "seed": seed})
            else:
                connection.execute(insert_ignoring(connection, sessions, new_row))
                found = list(connection.execute(self._statements.locked_row, {"key": key}))
            if not found:
                continue
            stored_id, version, message_count, chain, expires_at_ms = found[0]
            if _expired(expires_at_ms):  # an expired session is absent: purge it first
                self._delete_session(connection, key)
                continue
            self._check_owner(stored_id, session_id)
            return _Locked(int(version), int(message_count), bytes(chain))
        raise ConcurrentModificationError(f"session {session_id!r} kept being cleared while writing; retry")

    def _stored_version(self, connection: Connection, key: str) -> int:
        """The session's version; 0 if it is absent or expired (as `load_versioned` reads it)."""
        sessions = self._session_table
        found = connection.execute(
            sa.select(sessions.c.version, sessions.c.expires_at_ms).where(sessions.c.session_key == key)
        ).first()
        return 0 if found is None or _expired(found.expires_at_ms) else int(found.version)

    def _delete_session(self, connection: Connection, key: str) -> None:
        connection.execute(sa.delete(self._messages).where(self._messages.c.session_key == key))
        connection.execute(sa.delete(self._session_table).where(self._session_table.c.session_key == key))

    def _delete_from(self, connection: Connection, key: str, seq: int) -> None:
        messages = self._messages
        connection.execute(sa.delete(messages).where(messages.c.session_key == key, messages.c.seq >= seq))

    def _refuse_orphans(self, connection: Connection, session_id: str, key: str) -> None:
        """Raise if message rows remain for a session whose row was missing (appending would build on them)."""
        if connection.execute(sa.select(sa.exists().where(self._messages.c.session_key == key))).scalar():
            raise _damaged(session_id, "its message rows remain but its session row is missing")

    def _drop_orphans(self, connection: Connection, session_id: str, key: str) -> None:
        """Delete message rows left without their session row: a save replaces the whole history anyway."""
        deleted = connection.execute(sa.delete(self._messages).where(self._messages.c.session_key == key)).rowcount
        if deleted:
            logger.warning(
                "session %r: a save replaced %d message rows left without their session row", session_id, deleted
            )

    def _rows_query(self, key: str) -> sa.Select[Any]:
        """The session row joined with its message rows, in order."""
        sessions, messages = self._session_table, self._messages
        return (
            sa.select(
                sessions.c.version,
                sessions.c.message_count,
                sessions.c.chain.label("head"),
                messages.c.seq,
                messages.c.chain,
                messages.c.body,
            )
            .select_from(sessions.outerjoin(messages, messages.c.session_key == sessions.c.session_key))
            .where(sessions.c.session_key == key)
            .order_by(messages.c.seq)
        )

    def _unchanged(
        self, connection: Connection, session_id: str, key: str, locked: _Locked, edit: Edit
    ) -> tuple[int, int, list[str] | None, bytes]:
        """What a save can leave in place: (kept, stored rows, bodies of new[kept:] if already encoded, the rolling
        digest through new[kept - 1])."""
        new, cached = edit.messages, self._cache.get(session_id)
        if locked.version == 0:  # `_lock_session` just created the session's row (committed rows have a version > 0)
            return 0, 0, None, _seed(key)
        if cached is not None and cached.version == locked.version:  # our own verified snapshot is current
            kept = edit.same if cached is edit.base else same_prefix(new, cached.messages)
            return kept, locked.message_count, None, self._chain_at(connection, session_id, key, kept, locked)
        # Another object wrote meanwhile: keep only the rows equal, body and digest, to what this save would write.
        messages = self._messages
        stored = connection.execute(
            sa.select(messages.c.seq, messages.c.chain, messages.c.body)
            .where(messages.c.session_key == key)
            .order_by(messages.c.seq)
        ).all()
        bodies = [encode_message(m) for m in new]
        chains = _chains(_seed(key), bodies)
        kept = 0
        for row, body, chain in zip(stored, bodies, chains):
            if row.seq != kept or row.body != body or bytes(row.chain) != chain:
                break
            kept += 1
        return kept, len(stored), bodies[kept:], chains[kept - 1] if kept else _seed(key)

    def _chain_at(self, connection: Connection, session_id: str, key: str, kept: int, locked: _Locked) -> bytes:
        """The stored rolling digest through message `kept - 1` (the session's, after all its messages)."""
        if kept == locked.message_count:
            return locked.chain
        if kept == 0:
            return _seed(key)
        messages = self._messages
        chain = connection.execute(
            sa.select(messages.c.chain).where(messages.c.session_key == key, messages.c.seq == kept - 1)
        ).scalar()
        if chain is None:
            raise _damaged(session_id, f"stored message {kept - 1} is missing")
        return bytes(chain)

    def _stored_ids(self, connection: Connection, key: str, messages: Sequence[Message], below: int) -> set[str]:
        """Which ids of `messages` the session's first `below` rows hold."""
        try:
            by_key = {key_of(m.id): m.id for m in messages if m.id is not None}
        except UnicodeEncodeError:  # as encoding the message would say, before anything is written
            raise InvalidInputError("a message id cannot be encoded as UTF-8 (a lone surrogate)") from None
        if not by_key or below == 0:
            return set()
        keys, found = list(by_key), set[str]()
        for start in range(0, len(keys), _IN_CHUNK):
            rows = connection.execute(self._statements.stored_ids, {"key": key, "ids": keys[start : start + _IN_CHUNK]})
            found.update(by_key[k] for k, seq in rows if seq < below)
        return found

    def _insert(
        self,
        connection: Connection,
        session_id: str,
        key: str,
        first_seq: int,
        chain: bytes,
        messages: Sequence[Message],
        bodies: Sequence[str],
    ) -> bytes:
        """Insert message rows `first_seq`.. after the rolling digest `chain`: one driver-level executemany.
        Return the rolling digest through the last one.

        The values are already what every driver takes as is (str, int, bytes, None), so the rows skip
        SQLAlchemy's per-row parameter processing, which cost as much as the database's own work.
        """
        if not bodies:
            return chain
        check_rows(
            connection, [bodies], _MESSAGE_FIXED, lambda i: f"message {first_seq + i} of session {session_id!r:.200}"
        )
        rows = []
        for seq, (message, body) in enumerate(zip(messages, bodies), first_seq):
            chain = _chain(chain, body)
            rows.append((key, seq, None if message.id is None else key_of(message.id), chain, body))
        sql, positional = self._insert_sql(connection.dialect)
        try:
            if positional and connection.dialect.name == "sqlite":  # past SQLAlchemy's execution (`_driver`)
                _driver.execute_many(connection, sql, rows)
            elif positional:
                connection.exec_driver_sql(sql, rows)
            else:
                connection.exec_driver_sql(sql, [dict(zip(_MESSAGE_COLUMNS, row)) for row in rows])
        except sa.exc.IntegrityError as error:
            # Writers hold the session's lock and look up what is stored first, so only rows the session row
            # does not account for (a damaged session) can be in the way.
            detail = str(error.orig).strip().splitlines()[0]
            raise _damaged(session_id, f"stored message rows its session row does not account for ({detail})") from None
        return chain

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

    def _set_version(self, connection: Connection, key: str, version: int, message_count: int, chain: bytes) -> int:
        self._statements.set_version.execute(
            connection,
            {
                "key": key,
                "new_version": version,
                "new_count": message_count,
                "new_chain": chain,
                "now": datetime.now(timezone.utc),
                "expires": None if self.ttl is None else _now_ms() + ttl_milliseconds(self.ttl),
            },
        )
        return version

    def _check_owner(self, stored_id: str, session_id: str) -> None:
        if stored_id != session_id:
            raise _damaged(session_id, f"its row holds session id {stored_id[:80]!r} (tampered or a key collision)")

    def _decode(self, session_id: str, key: str, rows: Sequence[Any]) -> Snapshot:
        """Decode and verify the joined (version, message_count, head, seq, chain, body) rows of one session."""
        if not rows:
            return EMPTY  # cleared between the two statements
        version, expected = int(rows[0].version), int(rows[0].message_count)
        seqs = [row.seq for row in rows]
        if expected == 0 and seqs == [None]:
            return EMPTY
        if seqs != list(range(expected)):
            found = "no message rows" if seqs == [None] else f"{len(seqs)} message rows"
            raise _damaged(session_id, f"should have {expected} messages; found {found}")
        chain, messages = _seed(key), []
        for _, _, _, seq, stored, body in rows:  # unpacked: a Row's attributes cost more than the hash
            chain = _chain(chain, body)
            if chain != stored:
                raise _damaged(
                    session_id, f"stored message {seq} fails its digest (altered, replaced, moved or copied)"
                )
            messages.append(decode_message(session_id, seq, body))
        if chain != bytes(rows[0].head):
            raise _damaged(session_id, "its messages fail the session's digest (a message was removed or replaced)")
        return Snapshot(version, messages)


class _Locked(NamedTuple):
    """What a writer reads from the session row it locked."""

    version: int
    message_count: int
    chain: bytes  # the rolling digest through its last message


def _seed(key: str) -> bytes:
    """The rolling digest of a session without messages: derived from its key, so rows copied from another
    session never verify."""
    return bytes.fromhex(key)[:16]


def _chain(previous: bytes, body: str) -> bytes:
    """The rolling digest after one more message: BLAKE2b of the digest before it (16 bytes), then its body."""
    return hashlib.blake2b(previous + body.encode("utf-8"), digest_size=16).digest()


def _chains(previous: bytes, bodies: Sequence[str]) -> list[bytes]:
    """The rolling digests after each of `bodies`."""
    chains = []
    for body in bodies:
        previous = _chain(previous, body)
        chains.append(previous)
    return chains


def _damaged(session_id: str, what: str) -> CorruptMemoryError:
    """The error for damaged storage of one session (logged: the rows need a look, or a save to replace them)."""
    logger.warning("session %r: %s", session_id, what)
    return CorruptMemoryError(f"session {session_id!r}: {what}")


def _locked_columns(sessions: sa.Table) -> tuple[sa.Column[Any], ...]:
    """What a writer reads from the session row it locked."""
    return (
        sessions.c.session_id,
        sessions.c.version,
        sessions.c.message_count,
        sessions.c.chain,
        sessions.c.expires_at_ms,
    )


class _Statements:
    """The statements every write runs, built once with bound parameters (building one costs more than running it
    through SQLAlchemy's compiled cache); on SQLite the lock and the version update run on the driver's cursor."""

    def __init__(self, sessions: sa.Table, messages: sa.Table) -> None:
        key: sa.BindParameter[str] = sa.bindparam("key")
        upsert = dialect_insert(sessions, "sqlite").values(
            session_key=key, session_id=sa.bindparam("id"), version=0, message_count=0, chain=sa.bindparam("seed")
        )
        self.sqlite_lock = OnDriver(
            upsert.on_conflict_do_update(
                index_elements=[sessions.c.session_key], set_={"session_key": upsert.excluded.session_key}
            ).returning(*_locked_columns(sessions))
        )
        self.set_version = OnDriver(
            sa.update(sessions)
            .where(sessions.c.session_key == key)
            .values(
                version=sa.bindparam("new_version"),
                message_count=sa.bindparam("new_count"),
                chain=sa.bindparam("new_chain"),
                updated_at=sa.bindparam("now"),
                expires_at_ms=sa.bindparam("expires"),
            )
        )
        # Elsewhere the row is created if missing, then read with a row lock.
        self.locked_row = sa.select(*_locked_columns(sessions)).where(sessions.c.session_key == key).with_for_update()
        # Without a condition on seq, which would lead the planner to scan the session's rows instead of the index.
        self.stored_ids = sa.select(messages.c.message_key, messages.c.seq).where(
            messages.c.session_key == key, messages.c.message_key.in_(sa.bindparam("ids", expanding=True))
        )
        # A load's first read: one row whether or not the session row exists, saying whether message rows do.
        one_row = sa.select(sa.literal_column("1").label("one")).subquery("one_row")
        self.probe = sa.select(
            sessions.c.session_id,
            sessions.c.version,
            sessions.c.expires_at_ms,
            sa.exists().where(messages.c.session_key == key).label("has_rows"),
        ).select_from(one_row.outerjoin(sessions, sessions.c.session_key == key))


def _refuse_awaitable(result: Awaitable[Any]) -> Any:
    raise InvalidInputError("update's change returned an awaitable; use aupdate for a coroutine function")


def _now_ms() -> int:
    return _clock.wall_ms()


def _expired(expires_at_ms: int | None) -> bool:
    return expires_at_ms is not None and expires_at_ms <= _now_ms()


def _alive(sessions: sa.Table) -> sa.ColumnElement[bool]:
    """SQL: the session has no TTL or it has not run out."""
    return sa.or_(sessions.c.expires_at_ms.is_(None), sessions.c.expires_at_ms > _now_ms())
