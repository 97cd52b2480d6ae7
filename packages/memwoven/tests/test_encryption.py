"""Encryption at rest: the conformance suites through the encrypted wrappers, and what the store gets to see."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from clock_support import Clock

from memwoven import (
    CorruptMemoryError,
    FileChatMemory,
    FileVectorMemory,
    InMemoryChatMemory,
    InMemoryVectorMemory,
    InvalidInputError,
    Message,
    SQLChatMemory,
    SQLVectorMemory,
    TextPart,
    ToolCall,
    VectorDocument,
    vector_index,
)
from memwoven.backends.sql._schema import Tables
from memwoven.contracts import ChatMemory, VectorMemory
from memwoven.encryption import MARKER, EncryptedChatMemory, EncryptedVectorMemory, Keyring, generate_key
from memwoven.testing import ChatMemoryContract, VectorMemoryContract, sample_conversation, turn
from memwoven_test_support import postgres_url, unique_name

KEY = generate_key()
ID_KEY = generate_key()
SECRET = "zebra-octopus-4711"  # a marker that must never reach the store in the clear


def _flip(token: str) -> str:
    """The token with one character of its ciphertext changed (a one-bit flip in base64)."""
    middle = len(token) - 10
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]


def _tamper_session(memory: ChatMemory, session_id: str) -> None:
    """Flip a byte of the first message's ciphertext, through the inner memory's own API."""
    assert isinstance(memory, EncryptedChatMemory)
    stored_id = memory.stored_id(session_id)
    stored = memory.inner.load(stored_id)
    first = stored[0].model_copy(update={"metadata": {MARKER: _flip(stored[0].metadata[MARKER])}})
    memory.inner.save(stored_id, [first, *stored[1:]])


def _all_bytes(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file())


def _untokened_bytes(directory: Path) -> bytes:
    """`_all_bytes` without the tokens: random base64, which holds a short word like "bob" now and then."""
    return re.sub(rb"mwe2:[A-Za-z0-9_-]+:[A-Za-z0-9_-]+", b"", _all_bytes(directory))


# The conformance suites through the wrappers -------------------------------------------------------------------

ID_MODES = ("plain-ids", "hashed-ids")


def _chat(inner: ChatMemory, ids: str) -> EncryptedChatMemory:
    return EncryptedChatMemory(inner, key=KEY, id_key=ID_KEY if ids == "hashed-ids" else None)


class TestEncryptedInMemoryChat(ChatMemoryContract):
    @pytest.fixture(params=ID_MODES)
    def chat_memory(self, request: pytest.FixtureRequest) -> ChatMemory:
        return _chat(InMemoryChatMemory(), request.param)

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        _tamper_session(memory, session_id)


class TestEncryptedSQLiteChat(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self, tmp_path: Path) -> ChatMemory:
        return _chat(SQLChatMemory(f"sqlite:///{tmp_path}/chat.db"), "hashed-ids")

    def reopen(self, memory: ChatMemory) -> ChatMemory:
        assert isinstance(memory, EncryptedChatMemory)
        assert isinstance(memory.inner, SQLChatMemory)
        return EncryptedChatMemory(
            SQLChatMemory(memory.inner.engine.url), key=KEY, id_key=ID_KEY if memory.hashed_ids else None
        )

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        _tamper_session(memory, session_id)


@pytest.mark.service
class TestEncryptedPostgresChat(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self) -> Iterator[ChatMemory]:
        prefix = unique_name("mwenc") + "_"
        inner = SQLChatMemory(postgres_url(), table_prefix=prefix)
        yield _chat(inner, "hashed-ids")
        inner.drop_tables()
        inner.close()

    def reopen(self, memory: ChatMemory) -> ChatMemory:
        assert isinstance(memory, EncryptedChatMemory)
        assert isinstance(memory.inner, SQLChatMemory)
        inner = SQLChatMemory(memory.inner.engine.url, table_prefix=memory.inner.table_prefix)
        return EncryptedChatMemory(inner, key=KEY, id_key=ID_KEY)

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        _tamper_session(memory, session_id)


VECTOR_MODES = ("plain", "hashed-ids+encrypted-embeddings", "hashed-ids")


def _vector(inner: VectorMemory, mode: str) -> EncryptedVectorMemory:
    return EncryptedVectorMemory(
        inner,
        key=KEY,
        id_key=ID_KEY if "hashed-ids" in mode else None,
        encrypt_embeddings="encrypted-embeddings" in mode,
    )


class TestEncryptedInMemoryVector(VectorMemoryContract):
    @pytest.fixture(params=VECTOR_MODES)
    def vector_memory_factory(self, request: pytest.FixtureRequest) -> Callable[..., VectorMemory]:
        return lambda dimension, metric: _vector(
            InMemoryVectorMemory(dimension=dimension, metric=metric), request.param
        )


class TestEncryptedSQLiteVector(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self, tmp_path: Path) -> Callable[..., VectorMemory]:
        url = f"sqlite:///{tmp_path}/vectors.db"
        return lambda dimension, metric: _vector(
            SQLVectorMemory(url, collection=unique_name("c"), dimension=dimension, metric=metric), "hashed-ids"
        )

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        assert isinstance(memory, EncryptedVectorMemory)
        assert isinstance(memory.inner, SQLVectorMemory)
        inner = SQLVectorMemory(memory.inner.engine.url, collection=memory.inner.collection, metric=memory.metric)
        return EncryptedVectorMemory(
            inner, key=KEY, id_key=ID_KEY if memory.hashed_ids else None, encrypt_embeddings=memory.encrypt_embeddings
        )


@pytest.fixture(scope="module")
def postgres_vector_prefix() -> Iterator[str]:
    """One table prefix for this module's PostgreSQL vector tests (each test uses its own collections)."""
    prefix = unique_name("mwenc") + "_"
    yield prefix
    with suppress(Exception):  # nothing to drop if PostgreSQL was unreachable
        owner = SQLVectorMemory(postgres_url(), table_prefix=prefix)
        owner.drop_tables()
        owner.close()


@pytest.mark.service
class TestEncryptedPostgresVector(VectorMemoryContract):
    @pytest.fixture
    def vector_memory_factory(self, postgres_vector_prefix: str) -> Callable[..., VectorMemory]:
        url = postgres_url()
        return lambda dimension, metric: _vector(
            SQLVectorMemory(
                url,
                table_prefix=postgres_vector_prefix,
                collection=unique_name("c"),
                dimension=dimension,
                metric=metric,
            ),
            "hashed-ids",
        )

    def reopen(self, memory: VectorMemory) -> VectorMemory:
        assert isinstance(memory, EncryptedVectorMemory)
        assert isinstance(memory.inner, SQLVectorMemory)
        inner = SQLVectorMemory(
            memory.inner.engine.url,
            table_prefix=memory.inner.table_prefix,
            collection=memory.inner.collection,
            metric=memory.metric,
        )
        return EncryptedVectorMemory(inner, key=KEY, id_key=ID_KEY)


# What the store sees ---------------------------------------------------------------------------------------------


def _secret_conversation() -> list[Message]:
    return [
        Message(role="system", content=f"system {SECRET}"),
        Message(
            role="user",
            name=f"name-{SECRET}",
            id=f"id-{SECRET}",
            content=[TextPart(text=f"part {SECRET}")],
            metadata={f"key-{SECRET}": f"value-{SECRET}"},
            extras={"langchain": {"raw": SECRET}},
        ),
        Message(
            role="assistant", tool_calls=[ToolCall(id=f"c-{SECRET}", name=f"tool_{SECRET}", arguments={"q": SECRET})]
        ),
        Message(role="tool", tool_call_id=f"c-{SECRET}", content=f"result {SECRET}"),
    ]


def _secret_documents() -> list[VectorDocument]:
    return [
        VectorDocument(
            id=f"doc-{i}-{SECRET}",
            content=f"content {SECRET}",
            embedding=[1.0, float(i), 0.5],
            metadata={"who": SECRET, f"k-{SECRET}": [SECRET]},
        )
        for i in range(3)
    ]


def test_sqlite_at_rest_holds_no_plaintext_and_no_ids(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/db/store.db"
    chat = EncryptedChatMemory(SQLChatMemory(url), key=KEY, id_key=ID_KEY)
    vectors = EncryptedVectorMemory(SQLVectorMemory(url, collection="notes"), key=KEY, id_key=ID_KEY)
    chat.save(f"session-{SECRET}", _secret_conversation())
    chat.append(f"session-{SECRET}", [Message(role="user", content=f"appended {SECRET}")])
    vectors.store(_secret_documents())
    assert chat.load(f"session-{SECRET}")[:4] == _secret_conversation()
    assert vectors.get([f"doc-1-{SECRET}"])[0].content == f"content {SECRET}"
    chat.close()
    vectors.close()
    raw = _all_bytes(tmp_path / "db")  # the database, its WAL and shared memory
    assert b"zebra" not in raw
    assert SECRET.encode() not in raw
    with sqlite3.connect(tmp_path / "db" / "store.db") as connection:  # and row by row, decoded
        rows = [
            row
            for table in ("memwoven_messages", "memwoven_sessions", "memwoven_vectors")
            for row in connection.execute(f"SELECT * FROM {table}")
        ]
    assert len(rows) == 5 + 1 + 3
    assert not any("zebra" in str(value) for row in rows for value in row)


def test_files_at_rest_hold_no_plaintext_and_no_ids(tmp_path: Path) -> None:
    chat = EncryptedChatMemory(FileChatMemory(tmp_path / "chat"), key=KEY, id_key=ID_KEY)
    chat.save(f"session-{SECRET}", _secret_conversation())
    vectors = EncryptedVectorMemory(
        FileVectorMemory(tmp_path / "vectors" / "notes.npz"), key=KEY, id_key=ID_KEY, encrypt_embeddings=True
    )
    vectors.store(_secret_documents())
    assert chat.sessions() == [f"session-{SECRET}"]
    assert vectors.ids() == sorted(d.id for d in _secret_documents())
    raw = _all_bytes(tmp_path)
    assert raw
    assert b"zebra" not in raw
    for embedding in ([1.0, 1.0, 0.5], [1.0, 2.0, 0.5]):  # encrypted embeddings: the store keeps a stand-in
        assert vectors.inner.search(embedding, top_k=3)[0].document.embedding == [1.0, 0.0, 0.0]
    assert vectors.search([1.0, 2.0, 0.5], top_k=1)[0].document.id == f"doc-2-{SECRET}"


def test_the_wrapped_message_keeps_only_its_role_and_id_in_the_clear() -> None:
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY)
    chat.save("s", sample_conversation())
    stored = chat.inner.load("s")
    assert [m.role for m in stored] == [m.role for m in sample_conversation()]
    assert [m.id for m in stored] == [m.id for m in sample_conversation()]  # CM10: the inner memory keeps them unique
    for message, original in zip(stored, sample_conversation()):
        clear = {"role", "metadata"} | ({"id"} if original.id is not None else set())
        assert message.model_dump(exclude_defaults=True).keys() == clear
        assert list(message.metadata) == [MARKER]
        assert message.metadata[MARKER].startswith("mwe2:")
    assert len({m.metadata[MARKER] for m in stored}) == len(stored)  # equal messages, different ciphertexts


def test_an_unchanged_prefix_keeps_its_ciphertext() -> None:
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY)
    chat.save("s", [turn(i) for i in range(5)])
    before = chat.inner.load("s")
    chat.save("s", [*chat.load("s"), turn(5)])
    chat.save("s", [turn(i) for i in range(7)])  # equal copies, not the loaded objects
    after = chat.inner.load("s")
    assert after[:5] == before
    fresh = EncryptedChatMemory(chat.inner, key=KEY)  # another object has no cache: new ciphertext, same text
    fresh.save("s", [turn(i) for i in range(7)])
    assert fresh.inner.load("s")[0] != before[0]
    assert chat.load("s") == [turn(i) for i in range(7)]


def test_the_keys_never_show() -> None:
    key = generate_key()
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=key, id_key=ID_KEY)
    vectors = EncryptedVectorMemory(InMemoryVectorMemory(), key=[KEY, key])
    for text in (repr(chat), repr(vectors), repr(chat.keyring), str(chat.keyring.key_ids)):
        assert key not in text
        assert ID_KEY not in text
        assert KEY not in text
    assert len(vectors.keyring.key_ids) == 2
    assert vectors.keyring.current == chat.keyring.current


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "not base64 !!",
        generate_key()[:-8],
        b"short",
        b"x" * 31,
        32,
        [],
        [KEY, KEY],
        KEY + "!!",  # stray characters were dropped: the same key as KEY
        f'"{KEY}"',
        f"{KEY[:10]} {KEY[10:]}",
    ],
)
def test_unusable_keys_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidInputError):
        EncryptedChatMemory(InMemoryChatMemory(), key=bad)


def test_a_text_key_may_use_either_base64_alphabet_and_surrounding_whitespace() -> None:
    raw = bytes([0xFB, 0xFF]) * 16  # encodes with "-" and "_" in one alphabet, "+" and "/" in the other
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=raw)
    chat.save("s", [turn(1)])
    for text in (base64.urlsafe_b64encode(raw).decode(), base64.b64encode(raw).decode()):
        assert EncryptedChatMemory(chat.inner, key=f" {text}\n").load("s") == [turn(1)]
        assert EncryptedChatMemory(chat.inner, key=text.rstrip("=") + "==").load("s") == [turn(1)]  # any padding


def test_keys_can_be_raw_bytes_of_every_aes_size() -> None:
    for size in (16, 24, 32):
        raw = bytes(range(size))
        chat = EncryptedChatMemory(InMemoryChatMemory(), key=raw)
        chat.save("s", [turn(1)])
        assert EncryptedChatMemory(chat.inner, key=[generate_key(size), raw]).load("s") == [turn(1)]
    with pytest.raises(InvalidInputError):
        generate_key(20)


# Keys: rotation and the wrong key -------------------------------------------------------------------------------


def test_rotation_reads_with_old_keys_writes_with_the_new_and_reencrypts(tmp_path: Path) -> None:
    old, new = generate_key(), generate_key()
    url = f"sqlite:///{tmp_path}/rotate.db"
    before = EncryptedChatMemory(SQLChatMemory(url), key=old)
    before.save("s", [turn(0), turn(1)])
    before.save("t", [turn(9)])
    rotated = EncryptedChatMemory(SQLChatMemory(url), key=[old, new])
    assert rotated.load("s") == [turn(0), turn(1)]
    rotated.append("s", [turn(2)])
    key_ids = [Keyring.key_id(m.metadata[MARKER]) for m in rotated.inner.load("s")]
    assert key_ids == [Keyring(old).current] * 2 + [Keyring(new).current]
    only_new = EncryptedChatMemory(SQLChatMemory(url), key=new)
    with pytest.raises(CorruptMemoryError, match=r"'s'.*not in the keyring"):
        only_new.load("s")
    version = rotated.reencrypt("s")
    assert version == rotated.load_versioned("s").version
    assert only_new.load("s") == [turn(0), turn(1), turn(2)]
    assert asyncio.run(rotated.areencrypt("t")) > 0
    assert only_new.load("t") == [turn(9)]
    assert rotated.reencrypt("never-saved") == 0


def test_vector_rotation_and_reencrypt() -> None:
    old, new = generate_key(), generate_key()
    inner = InMemoryVectorMemory(dimension=3)
    EncryptedVectorMemory(inner, key=old).store(_secret_documents())
    rotated = EncryptedVectorMemory(inner, key=[old, new], id_key=None)
    rotated.store([VectorDocument(id="fresh", embedding=[0.0, 0.0, 1.0])])
    assert rotated.reencrypt() == 3
    assert rotated.reencrypt() == 0
    only_new = EncryptedVectorMemory(inner, key=new)
    assert [d.id for d in only_new.get(rotated.ids())] == sorted(["fresh", *(d.id for d in _secret_documents())])
    with pytest.raises(CorruptMemoryError, match="not in the keyring"):
        EncryptedVectorMemory(inner, key=old).get(["fresh"])


def test_another_key_cannot_read_anything() -> None:
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY)
    chat.save("s", [turn(1)])
    with pytest.raises(CorruptMemoryError, match="'s'"):
        EncryptedChatMemory(chat.inner, key=generate_key()).load("s")


# Tampering ---------------------------------------------------------------------------------------------------


def test_a_flipped_byte_in_the_sqlite_file_is_detected(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/tamper.db"
    chat = EncryptedChatMemory(SQLChatMemory(url), key=KEY)
    chat.save("victim", [turn(0), turn(1)])
    chat.save("bystander", [turn(2)])
    chat.close()
    messages = Tables.build("memwoven_", None).messages
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # change one character inside the stored ciphertext, as an attacker would
        body = connection.execute(sa.select(messages.c.body).where(messages.c.seq == 1).limit(1)).scalar_one()
        stored = json.loads(body)
        stored["metadata"][MARKER] = _flip(stored["metadata"][MARKER])
        connection.execute(sa.update(messages).where(messages.c.body == body).values(body=json.dumps(stored)))
    engine.dispose()
    reader = EncryptedChatMemory(SQLChatMemory(url), key=KEY)
    # Caught by AES-GCM, or before it by the backend's own digest (which SQL may check on read).
    with pytest.raises(
        CorruptMemoryError, match=r"session 'victim': stored message 1 fails (authentication|its digest)"
    ):
        reader.load("victim")
    assert reader.load("bystander") == [turn(2)]


@pytest.mark.parametrize("hashed", [False, True])
def test_ciphertext_moved_to_another_session_is_detected(hashed: bool) -> None:
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY, id_key=ID_KEY if hashed else None)
    chat.save("alice", [Message(role="user", content="alice's secret")])
    chat.save("mallory", [Message(role="user", content="hello")])
    stolen = chat.inner.load(chat.stored_id("alice"))
    chat.inner.save(chat.stored_id("mallory"), stolen)  # the attacker copies alice's ciphertext into mallory
    with pytest.raises(CorruptMemoryError, match=r"'mallory'.*fails authentication"):
        EncryptedChatMemory(chat.inner, key=KEY, id_key=ID_KEY if hashed else None).load("mallory")


def test_a_changed_role_or_a_plaintext_message_is_detected() -> None:
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY)
    chat.save("s", [Message(role="user", content="hi")])
    stored = chat.inner.load("s")
    chat.inner.save("s", [stored[0].model_copy(update={"role": "system"})])
    with pytest.raises(CorruptMemoryError, match="role changed"):
        EncryptedChatMemory(chat.inner, key=KEY).load("s")
    chat.inner.save("s", [Message(role="system", content="injected in the clear")])
    with pytest.raises(CorruptMemoryError, match="not encrypted"):
        chat.load("s")


@pytest.mark.parametrize("hashed", [False, True])
def test_vector_tampering_and_swaps_are_detected(hashed: bool) -> None:
    vectors = EncryptedVectorMemory(InMemoryVectorMemory(dimension=3), key=KEY, id_key=ID_KEY if hashed else None)
    vectors.store(
        [VectorDocument(id="a", content="A", embedding=[1, 0, 0]), VectorDocument(id="b", embedding=[0, 1, 0])]
    )
    [a, b] = vectors.inner.get([vectors.stored_id("a"), vectors.stored_id("b")])
    vectors.inner.store([b.model_copy(update={"content": a.content})])  # a's ciphertext under b's id
    with pytest.raises(CorruptMemoryError, match=r"document 'b' fails authentication"):
        vectors.get(["b"])
    with pytest.raises(CorruptMemoryError):
        vectors.search([0.0, 1.0, 0.0], top_k=1)
    vectors.inner.store([a.model_copy(update={"content": _flip(a.content)})])
    with pytest.raises(CorruptMemoryError, match="document 'a'"):
        vectors.get(["a"])


def test_tokens_are_bound_to_the_collection_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/vectors.db"
    file_notes = EncryptedVectorMemory(FileVectorMemory(tmp_path / "notes.npz"), key=KEY)
    sql_notes = EncryptedVectorMemory(SQLVectorMemory(url, collection="notes"), key=KEY)
    sql_other = EncryptedVectorMemory(SQLVectorMemory(url, collection="other"), key=KEY)
    assert file_notes.collection == sql_notes.collection == "notes"
    assert sql_other.collection == "other"
    file_notes.store([VectorDocument(id="d", content="secret", embedding=[1.0, 0.0])])
    raw = file_notes.inner.get(["d"])
    sql_notes.inner.store(raw)  # copied under its own collection name, as `memwoven migrate` does: still readable
    assert sql_notes.get(["d"])[0].content == "secret"
    sql_other.inner.store(raw)
    with pytest.raises(CorruptMemoryError, match="document 'd' fails authentication"):
        sql_other.get(["d"])
    assert EncryptedVectorMemory(sql_other.inner, key=KEY, collection="notes").get(["d"])[0].content == "secret"
    unnamed = EncryptedVectorMemory(InMemoryVectorMemory(dimension=2), key=KEY)
    unnamed.inner.store(raw)  # the file's token, bound to "notes"
    with pytest.raises(CorruptMemoryError, match="document 'd'"):
        unnamed.get(["d"])
    assert unnamed.collection is None
    assert "collection=None" in repr(unnamed)
    for bad in ("", "a\x00b"):
        with pytest.raises(InvalidInputError, match="collection name"):
            EncryptedVectorMemory(InMemoryVectorMemory(dimension=2), key=KEY, collection=bad)


# Hashed ids ------------------------------------------------------------------------------------------------------


def test_hashed_ids_hide_the_ids_and_still_list_them(tmp_path: Path) -> None:
    chat = EncryptedChatMemory(FileChatMemory(tmp_path), key=KEY, id_key=ID_KEY)
    for name in ("alice/work", "bob", "caf\u00e9"):
        chat.save(name, [turn(1, name)])
    stored = chat.inner.sessions()
    assert len(stored) == 3
    assert not {"alice/work", "bob", "caf\u00e9"} & set(stored)
    assert all(len(s) == 64 for s in stored)
    assert b"alice" not in _untokened_bytes(tmp_path)
    assert b"bob" not in _untokened_bytes(tmp_path)
    chat.inner.save("plain-session-of-someone-else", [turn(0)])  # not a hashed id: not ours, not listed
    assert chat.sessions() == ["alice/work", "bob", "caf\u00e9"]
    assert asyncio.run(chat.asessions()) == ["alice/work", "bob", "caf\u00e9"]
    other = EncryptedChatMemory(chat.inner, key=KEY, id_key=generate_key())  # another id key finds nothing
    assert other.load("bob") == []
    assert other.sessions() == []
    unlisted = other.unlisted_sessions()
    assert sorted(unlisted) == sorted(stored)
    assert all("holds another session's id" in why for why in unlisted.values())


def test_sessions_lists_what_it_can_and_names_what_it_cannot(caplog: pytest.LogCaptureFixture) -> None:
    chat = EncryptedChatMemory(InMemoryChatMemory(), key=KEY, id_key=ID_KEY)
    for name in ("alice", "bob", "carol"):
        chat.save(name, [turn(1, name)])
    plain, unhashed, bob = "ab" * 32, "cd" * 32, chat.stored_id("bob")
    chat.inner.save(plain, [turn(0)])  # a plain session named like a hash
    EncryptedChatMemory(chat.inner, key=KEY).save(unhashed, [turn(0)])  # encrypted, but its id is not hashed
    _tamper_session(chat, "bob")
    with caplog.at_level("WARNING", logger="memwoven.encryption"):
        assert chat.sessions() == ["alice", "carol"]
    assert all(stored_id in caplog.text for stored_id in (plain, unhashed, bob))
    unlisted = chat.unlisted_sessions()
    assert sorted(unlisted) == sorted([plain, unhashed, bob])
    assert "is not encrypted" in unlisted[plain]
    assert "holds another session's id" in unlisted[unhashed]
    assert "fails authentication" in unlisted[bob]
    assert asyncio.run(chat.asessions()) == ["alice", "carol"]
    assert asyncio.run(chat.aunlisted_sessions()) == unlisted
    assert EncryptedChatMemory(chat.inner, key=KEY).unlisted_sessions() == {}  # without id_key, nothing is decrypted


def test_corruption_under_a_hashed_id_names_the_session(tmp_path: Path) -> None:
    chat = EncryptedChatMemory(FileChatMemory(tmp_path), key=KEY, id_key=ID_KEY)
    chat.save("victim", [turn(0)])
    [path] = tmp_path.rglob("*.session.jsonl")
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x01
    path.write_bytes(bytes(data))
    reader = EncryptedChatMemory(FileChatMemory(tmp_path), key=KEY, id_key=ID_KEY)
    with pytest.raises(CorruptMemoryError, match="session 'victim'"):
        reader.load("victim")
    with pytest.raises(CorruptMemoryError, match="session 'victim'"):
        reader._update_locked("victim", lambda messages: [*messages, turn(1)])
    assert reader.sessions() == []
    assert list(reader.unlisted_sessions()) == [reader.stored_id("victim")]


# Updates under the inner memory's write lock -----------------------------------------------------------------


def _locked_inner(backend: str, directory: Path) -> ChatMemory:
    """A chat memory with a per-session write lock, over `directory`."""
    return FileChatMemory(directory / "chat") if backend == "file" else SQLChatMemory(f"sqlite:///{directory}/c.db")


@pytest.mark.parametrize("backend", ["file", "sqlite"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_update_falls_back_to_the_inner_write_lock(
    tmp_path: Path, backend: str, asynchronous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = _locked_inner(backend, tmp_path)
    chat = EncryptedChatMemory(inner, key=KEY, id_key=ID_KEY)
    rival = EncryptedChatMemory(_locked_inner(backend, tmp_path), key=KEY, id_key=ID_KEY)
    assert chat._has_update_lock()
    assert not EncryptedChatMemory(InMemoryChatMemory(), key=KEY)._has_update_lock()
    locked: list[str] = []
    hook = "_aupdate_locked" if asynchronous else "_update_locked"
    original = getattr(inner, hook)

    def spy(stored_id: str, change: Callable[[list[Message]], Any]) -> Any:
        locked.append(stored_id)
        return original(stored_id, change)

    monkeypatch.setattr(inner, hook, spy)
    mine = Message(role="user", content="mine")

    def change(messages: list[Message]) -> list[Message]:
        if not locked:  # an optimistic try: another writer gets in first, every time
            rival.append("s", [turn(9)])
        return [*messages, mine]

    async def achange(messages: list[Message]) -> list[Message]:
        if not locked:
            await rival.aappend("s", [turn(9)])
        return [*messages, mine]

    version = asyncio.run(chat.aupdate("s", achange)) if asynchronous else chat.update("s", change)
    assert locked == [chat.stored_id("s")]
    assert version == rival.load_versioned("s").version
    assert rival.load("s") == chat.load("s") == [turn(9), turn(9), mine]  # two optimistic tries lost, then locked
    assert all(list(m.metadata) == [MARKER] for m in inner.load(chat.stored_id("s")))


def test_a_locked_update_of_a_tampered_session_names_it_once(tmp_path: Path) -> None:
    chat = EncryptedChatMemory(FileChatMemory(tmp_path), key=KEY, id_key=ID_KEY)
    chat.save("victim", [turn(0)])
    _tamper_session(chat, "victim")
    with pytest.raises(CorruptMemoryError) as caught:
        chat._update_locked("victim", lambda messages: [*messages, turn(1)])
    assert str(caught.value).startswith("session 'victim': stored message 0 fails authentication")
    assert str(caught.value).count("victim") == 1


# Search with filters after decryption -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", VECTOR_MODES)
def test_filtered_search_pages_until_top_k_match(mode: str) -> None:
    documents = [
        VectorDocument(
            id=f"d{i:03d}",
            embedding=[1.0, (i % 17) / 17, (i % 5) / 5],  # many exact ties
            metadata={"rare": i % 50 == 7, "group": i % 3},
        )
        for i in range(400)
    ]
    reference = InMemoryVectorMemory(dimension=3)
    reference.store(documents)
    encrypted = _vector(InMemoryVectorMemory(dimension=3), mode)
    encrypted.store(documents)
    query = [0.2, 1.0, 0.1]
    for spec, top_k in [({"rare": True}, 5), ({"rare": True}, 50), ({"group": 1}, 30), (None, 40), ({"group": 9}, 3)]:
        expected = reference.search(query, top_k=top_k, filter=spec)
        found = encrypted.search(query, top_k=top_k, filter=spec)
        assert [(h.document.id, h.score) for h in found] == [(h.document.id, h.score) for h in expected]
        assert [h.document for h in found] == [h.document for h in expected]


def test_embeddings_opened_with_the_other_setting_are_refused() -> None:
    inner = InMemoryVectorMemory(dimension=3)
    EncryptedVectorMemory(inner, key=KEY, encrypt_embeddings=True).store(_secret_documents())
    with pytest.raises(CorruptMemoryError, match="encrypt_embeddings=True"):
        EncryptedVectorMemory(inner, key=KEY).get([_secret_documents()[0].id])
    inner.clear()
    EncryptedVectorMemory(inner, key=KEY).store(_secret_documents())
    with pytest.raises(CorruptMemoryError, match="encrypt_embeddings=False"):
        EncryptedVectorMemory(inner, key=KEY, encrypt_embeddings=True).search([1.0, 0.0, 0.0])


@pytest.mark.parametrize("id_key", [None, ID_KEY], ids=["plain-ids", "hashed-ids"])
def test_message_ids_reach_the_inner_memory_so_appends_stay_idempotent(id_key: str | None) -> None:
    inner = InMemoryChatMemory()
    memory = EncryptedChatMemory(inner, key=KEY, id_key=id_key)
    first = [turn(0).model_copy(update={"id": "m0"}), turn(1).model_copy(update={"id": "m1"})]
    version = memory.append("s", first)
    assert memory.append("s", first) == version  # a retry stores nothing
    assert memory.load("s") == first
    [stored_id] = inner.sessions()
    stored = inner.load(stored_id)
    if id_key is None:
        assert [m.id for m in stored] == ["m0", "m1"]
    else:  # keyed hashes within the session: unique, and nothing about the ids shows
        assert all(m.id is not None and len(m.id) == 64 and "m0" not in m.id for m in stored)
        assert len({m.id for m in stored}) == 2
    inner.save(stored_id, [stored[0].model_copy(update={"id": stored[1].id}), stored[1].model_copy(update={"id": "x"})])
    with pytest.raises(CorruptMemoryError, match="id changed"):
        EncryptedChatMemory(inner, key=KEY, id_key=id_key).load("s")


@pytest.mark.parametrize("mode", VECTOR_MODES)
def test_what_an_earlier_release_sealed_with_a_lone_surrogate_still_reads(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier releases sealed content and metadata holding a lone surrogate (the plaintext is ASCII JSON), over any
    backend. Only new writes refuse one (VM2): such documents still read back, a search over decrypted embeddings
    too, and delete removes them."""
    legacy = VectorDocument(id="old", content="pasted \ud83d", embedding=[1.0, 0.0], metadata={"k\udc00": ["\udfff"]})
    new = VectorDocument(id="new", embedding=[0.0, 1.0])
    url = f"sqlite:///{tmp_path}/vectors.db"

    opened: list[EncryptedVectorMemory] = []

    def memory() -> EncryptedVectorMemory:  # a fresh object each time: decodes what was stored
        opened.append(_vector(SQLVectorMemory(url, collection="c"), mode))
        return opened[-1]

    with monkeypatch.context() as patch:
        patch.setattr(vector_index, "require_utf8", lambda batch: None)  # the check earlier releases did not make
        memory().store([legacy, new])
    assert memory().get(["old"]) == [legacy]
    assert [hit.document for hit in memory().search([1.0, 0.0], top_k=1)] == [legacy]
    assert [hit.document for hit in memory().search([1.0, 0.0], top_k=1, filter={"k\udc00": ["\udfff"]})] == [legacy]
    assert memory().documents() == [new, legacy]
    with pytest.raises(InvalidInputError):
        memory().store([legacy])  # writing it again is refused, and writes nothing
    memory().delete(["old"])
    assert memory().ids() == ["new"]
    for each in opened:
        each.close()


def test_cleanup_expired_reaches_the_encrypted_memorys_inner_one(tmp_path: Path, clock: Clock) -> None:
    """It had none: `cleanup_expired` of the wrapper (and of a policy around it) deleted nothing, and the expired
    sessions' ciphertext stayed stored for good."""
    inner = SQLChatMemory(f"sqlite:///{tmp_path}/chat.db", ttl=60)
    memory = EncryptedChatMemory(inner, key=KEY)
    memory.append("a", [turn(0)])
    clock.advance(120)
    memory.append("b", [turn(1)])
    assert memory.load("a") == []
    assert memory.cleanup_expired() == 1
    clock.advance(120)
    assert asyncio.run(memory.acleanup_expired()) == 1
    assert inner.sessions() == []
    with sqlite3.connect(tmp_path / "chat.db") as raw:
        assert raw.execute("SELECT count(*) FROM memwoven_messages").fetchone() == (0,)
    assert EncryptedChatMemory(InMemoryChatMemory(), key=KEY).cleanup_expired() == 0  # no TTL: nothing to do
    inner.close()


def test_a_policy_inside_the_encrypted_memory_is_refused_and_works_around_it() -> None:
    """Inside, a summarizer was given empty ciphertext stubs and stored a plaintext summary (every later load
    raised CorruptMemoryError), and a trimmed session's archive was sealed for the session, unreadable."""
    from memwoven.policies import SummarizingChatMemory, TrimmingChatMemory

    backend = InMemoryChatMemory()
    for policy in (
        TrimmingChatMemory(backend, max_messages=2),
        SummarizingChatMemory(backend, summarizer=lambda m: "S", trigger=50),
    ):
        with pytest.raises(TypeError, match="wrap it around the EncryptedChatMemory"):
            EncryptedChatMemory(policy, key=KEY)
    trimmed = TrimmingChatMemory(EncryptedChatMemory(backend, key=KEY), max_messages=2)
    trimmed.save("s", [turn(i) for i in range(4)])
    assert trimmed.load("s") == [turn(2), turn(3)]
    assert trimmed.archived("s") == [turn(0), turn(1)]
    assert MARKER in json.dumps([m.model_dump(mode="json") for m in backend.load("s:archive")])


def test_a_clear_embedding_changed_in_the_store_raises_corrupt_memory_error() -> None:
    """The token did not cover the clear embedding: `get` returned the altered one and `search` ranked by it."""
    inner = InMemoryVectorMemory()
    notes = EncryptedVectorMemory(inner, key=KEY, collection="notes")
    notes.store([{"id": "a", "embedding": [1.0, 0.0, 0.01]}, {"id": "b", "embedding": [0.0, 1.0, 0.0]}])
    assert [hit.document.id for hit in notes.search([0.0, 1.0, 0.0], top_k=2)] == ["b", "a"]
    token = inner.get(["a"])[0].content
    inner.store([{"id": "a", "content": token, "embedding": [0.0, 1.0, 0.01]}])  # moved next to the query
    with pytest.raises(CorruptMemoryError, match="'a' has an embedding other than the one it was stored with"):
        notes.get(["a"])
    with pytest.raises(CorruptMemoryError, match="'a'"):
        notes.search([0.0, 1.0, 0.0], top_k=2)
    inner.store([{"id": "a", "content": token, "embedding": [1.0, 0.0, 0.01 * (1 + 1e-6)]}])  # rounding: still it
    assert notes.get(["a"])[0].embedding == [1.0, 0.0, pytest.approx(0.01, rel=1e-5)]


def test_cleanup_expired_reaches_an_inner_memory_with_a_sync_one_only() -> None:
    class SyncOnly(InMemoryChatMemory):
        acleanup_expired = None  # no async twin: run in a worker thread from async code
        calls = 0

        def cleanup_expired(self) -> int:
            SyncOnly.calls += 1
            return 3

    memory = EncryptedChatMemory(SyncOnly(), key=KEY)
    assert (memory.cleanup_expired(), asyncio.run(memory.acleanup_expired()), SyncOnly.calls) == (3, 3, 2)
