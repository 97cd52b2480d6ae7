"""A private PostgreSQL instance (initdb + pg_ctl, run as the `postgres` user) on a free loopback port.

For tests that stop and restart the database; the shared server on 5432 is never touched.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memwoven_test_support.redis_servers import free_port
from memwoven_test_support.services import require_services


def _unavailable(message: str) -> None:
    if require_services():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _bin_dir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    found = candidates[-1] if candidates else shutil.which("pg_ctl")
    if not found:
        _unavailable("PostgreSQL server binaries (pg_ctl, initdb) are not installed")
    return Path(str(found)).parent


class PostgresServer:
    """One private PostgreSQL cluster: `start()`, `stop()` (immediate, like a crash) and `url`."""

    def __init__(self, data_dir: Path, port: int, bin_dir: Path | None = None) -> None:
        self.bin = bin_dir if bin_dir is not None else _bin_dir()
        self.data_dir = data_dir
        self.port = port

    @property
    def url(self) -> str:
        """A SQLAlchemy URL of the `postgres` database as the `postgres` user."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        prefix: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            prefix = ["runuser", "-u", "postgres", "--"]
        subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        """Create the cluster (trust auth, no fsync: it is thrown away)."""
        self._run(str(self.bin / "initdb"), "-D", str(self.data_dir), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.data_dir} -c fsync=off"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data_dir),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "-l",
            str(self.data_dir / "log"),
            "start",
        )

    def stop(self) -> None:
        """Stop the server at once (mode immediate: no clean shutdown, like a crash)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL on a free loopback port, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="mw-pg-") as directory:
        os.chmod(directory, 0o777)
        data_dir = Path(directory) / "data"
        server = PostgresServer(data_dir, free_port())
        try:
            server.init()
            server.start()
        except (subprocess.CalledProcessError, FileNotFoundError) as error:
            _unavailable(f"could not start a private PostgreSQL: {error}")
        try:
            yield server
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):  # already stopped by the test
                server.stop()
