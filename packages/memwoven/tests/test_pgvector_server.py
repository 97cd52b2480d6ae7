"""The test-support PostgreSQL with pgvector starts, has the extension and answers a distance query."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.service


def test_pgvector_server_answers_a_cosine_query(pgvector_url: str) -> None:
    with psycopg.connect(pgvector_url, autocommit=True) as connection:
        version = connection.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert version is not None
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        connection.execute("CREATE TEMPORARY TABLE points (id text PRIMARY KEY, embedding vector(3))")
        connection.execute(
            "INSERT INTO points VALUES ('x', '[1,0,0]'), ('y', '[0,1,0]'), ('xy', '[1,1,0]'), ('neg', '[-1,0,0]')"
        )
        rows = connection.execute(
            "SELECT id, embedding <=> '[1,0.1,0]' AS distance FROM points ORDER BY distance LIMIT 3"
        ).fetchall()
    assert [row[0] for row in rows] == ["x", "xy", "y"]
    assert rows[0][1] == pytest.approx(1 - 1 / (1.01**0.5), abs=1e-6)
