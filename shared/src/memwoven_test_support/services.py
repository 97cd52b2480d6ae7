"""Where the test servers are, and what to do when one is unreachable.

Tests that need a server call `postgres_url()` (etc.). The URL comes from `MEMWOVEN_<KIND>_URL` or the standard
localhost port. When the server does not answer, the test is skipped with the reason, unless
`MEMWOVEN_REQUIRE_SERVICES=1` (set by CI), where it fails instead.
"""

from __future__ import annotations

import os
import socket
import uuid
from functools import cache
from urllib.parse import urlsplit

import pytest

SERVICES = {
    "postgres": ("MEMWOVEN_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    "mysql": ("MEMWOVEN_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    "redis": ("MEMWOVEN_REDIS_URL", "redis://127.0.0.1:6379/0"),
}


def require_services() -> bool:
    """True when unreachable services must fail tests instead of skipping them."""
    return os.environ.get("MEMWOVEN_REQUIRE_SERVICES", "") not in ("", "0", "false", "no")


@cache
def _reachable(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=2):
            return None
    except OSError as error:
        return str(error)


def service_url(kind: str) -> str:
    """The URL of a test server of `kind`; skips (or fails under MEMWOVEN_REQUIRE_SERVICES=1) if unreachable."""
    variable, default = SERVICES[kind]
    url = os.environ.get(variable) or default
    parts = urlsplit(url)
    problem = _reachable(parts.hostname or "127.0.0.1", parts.port or 0)
    if problem is not None:
        message = f"{kind} server at {parts.hostname}:{parts.port} is unreachable ({problem}); set {variable}"
        if require_services():
            pytest.fail(message + " (MEMWOVEN_REQUIRE_SERVICES=1)", pytrace=False)
        pytest.skip(message)
    return url


def postgres_url() -> str:
    """URL of the test PostgreSQL server."""
    return service_url("postgres")


def mysql_url() -> str:
    """URL of the test MariaDB/MySQL server."""
    return service_url("mysql")


def redis_url() -> str:
    """URL of the test Redis server."""
    return service_url("redis")


def unique_name(prefix: str = "mw") -> str:
    """A short name no other test run uses (for schemas, table prefixes and key prefixes)."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"
