"""Every value the write path accepts is read back equal by a fresh object (CM4, VM8), on every backend.

Hypothesis draws JSON values up to the documented limits (integers of up to `MAX_INT_DIGITS` digits, floats at
the edges of the double range, any Unicode text without lone surrogates, NUL included) and puts them everywhere a
message or a document holds JSON: metadata, tool-call arguments, extras, opaque content parts. Whatever a backend
accepts, a new object over the same storage must give back with the same JSON text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_stores import CHAT_KINDS, VECTOR_KINDS, Store, fresh_store

from memwoven import Message, VectorDocument
from memwoven.errors import InvalidInputError
from memwoven.models import MAX_INT_DIGITS, MAX_JSON_DEPTH
from memwoven_test_support import unique_name

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BIGGEST = 10**MAX_INT_DIGITS - 1

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([BIGGEST, -BIGGEST, 2**63, -(2**63) - 1, 2**53 + 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, 1.7976931348623157e308, -0.0]),
    text,
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=12,
)
json_objects = st.dictionaries(text, json_values, max_size=4)


# nested inside the metadata object, this reaches exactly the depth limit
AT_THE_LIMIT: Any = 1
for _ in range(MAX_JSON_DEPTH - 1):
    AT_THE_LIMIT = {"a": AT_THE_LIMIT}


@pytest.fixture(params=CHAT_KINDS)
def chat_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with fresh_store(request.param, tmp_path, "mwt") as store:
        yield store


@pytest.fixture(params=VECTOR_KINDS)
def vector_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with fresh_store(request.param, tmp_path, "mwt") as store:
        yield store


@SETTINGS
@given(metadata=json_objects, arguments=json_objects, extra=json_objects, content=text)
def test_every_accepted_message_reads_back_equal(
    chat_store: Store, metadata: dict[str, Any], arguments: dict[str, Any], extra: dict[str, Any], content: str
) -> None:
    message = Message(
        role="assistant",
        content=[{"type": "text", "text": content}, {"type": "opaque", "kind": "k", "data": extra}],
        tool_calls=[{"id": "c", "name": "f", "arguments": arguments}],
        metadata={**metadata, "deep": AT_THE_LIMIT},
        extras={"framework": extra},
    )
    session_id = unique_name("rt")
    with chat_store.chat() as writer:
        try:
            writer.save(session_id, [message])
        except InvalidInputError:  # refused, typed: then nothing was written
            assert writer.load(session_id) == []
            return
    with chat_store.chat() as reader:
        [read] = reader.load(session_id)
        reader.clear(session_id)
    assert read.model_dump_json() == message.model_dump_json()


@SETTINGS
@given(metadata=json_objects, content=text)
def test_every_accepted_document_reads_back_equal(vector_store: Store, metadata: dict[str, Any], content: str) -> None:
    document = VectorDocument(
        id=unique_name("rt"),
        content=content,
        embedding=[1.0, 0.5, -0.25, 2.0],
        metadata={**metadata, "deep": AT_THE_LIMIT},
    )
    private = vector_store.kind == "qdrant"  # Qdrant's local mode: each object has its own private client
    with vector_store.vector("rt", dimension=4) as writer:
        try:
            writer.store([document])
        except InvalidInputError:  # refused, typed (PostgreSQL text holds no NUL): then nothing was written
            assert writer.get([document.id]) == []
            return
        with writer if private else vector_store.vector("rt", dimension=4) as reader:
            [read] = reader.get([document.id])
            reader.delete([document.id])
    assert read.model_dump_json(exclude={"embedding"}) == document.model_dump_json(exclude={"embedding"})
