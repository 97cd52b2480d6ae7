"""Private `redis-server` processes on free loopback ports: a standalone server and a 3-master cluster.

For tests that restart a server or need a cluster; the shared Redis on 6379 is never touched.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memwoven_test_support.services import require_services


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (needed to start a private Redis)"
        if require_services():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def _wait_for_ping(port: int, process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"redis-server on port {port} did not answer (exit code {process.poll()})")


class RedisServer:
    """One `redis-server` process on 127.0.0.1:`port`, with its data in `directory`; can be stopped and restarted."""

    def __init__(self, directory: Path, port: int | None = None, *extra: str) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self.restartable = False  # once started, a restart must reuse the port (clients know it)
        self.crashed = False  # killed since its last start: its append-only file may end in a half-written write
        self.aof_repairs = 0  # restarts whose append-only file `redis-check-aof --fix` had to cut
        if "--appendonly" in extra and extra[extra.index("--appendonly") + 1 :][:1] == ("yes",):
            _binary("redis-check-aof")  # needed to restart it after a crash: checked before any test work

    @property
    def url(self) -> str:
        """redis://127.0.0.1:<port>/0"""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers PING (on a fresh free port if the chosen one was taken).

        After a crash (`stop(kill=True)`), its append-only file is first repaired as Redis documents for one."""
        if self.crashed:
            self._repair_aof()
            self.crashed = False
        for attempt in range(5):
            command = [
                _binary("redis-server"),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
            ]
            # A cut append-only file is repaired by `_repair_aof` only; Redis's own repair cuts it wrongly.
            command += ["--save", "", "--protected-mode", "no", "--aof-load-truncated", "no"]
            command += ["--logfile", "redis.log", *self.extra]
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                _wait_for_ping(self.port, self.process)
            except RuntimeError:
                self.stop(kill=True)
                self.crashed = False  # it never served: nothing of it to repair
                if attempt == 4 or self.restartable:
                    log = self.directory / "redis.log"
                    tail = log.read_text()[-2000:] if log.exists() else ""
                    raise RuntimeError(f"redis-server did not start: {tail}") from None
                self.port = free_port()
            else:
                self.restartable = True
                return

    def stop(self, kill: bool = False) -> None:
        """Stop the server (SIGKILL with `kill`, like a crash)."""
        if self.process is None:
            return
        if kill:
            self.process.kill()
            self.crashed = True
        else:
            self.process.terminate()
        self.process.wait(timeout=10)
        self.process = None

    def _repair_aof(self) -> None:
        """`redis-check-aof --fix`: cut a write the kill left half-written in the append-only file, if any.

        The server's own repair on load (aof-load-truncated) is not enough on Redis 7.0 (seen here; fixed in valkey
        by valkey-io/valkey#4342): it cuts a half-written MULTI block after its last whole command instead of before
        MULTI, so the next restart applies that half of a transaction (half a Lua script's effects) together with
        the next transaction in the file."""
        manifest = self.directory / "appendonlydir" / "appendonly.aof.manifest"
        if not manifest.exists():
            return
        result = subprocess.run(
            [_binary("redis-check-aof"), "--fix", str(manifest)],
            input="y\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise RuntimeError(f"redis-check-aof could not repair {manifest}: {result.stdout}{result.stderr}")
        self.aof_repairs += "Successfully truncated" in result.stdout


@contextmanager
def redis_server(*extra: str) -> Iterator[RedisServer]:
    """A private standalone Redis (extra arguments go to redis-server), stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="mw-redis-") as directory:
        server = RedisServer(Path(directory), None, *extra)
        server.start()
        try:
            yield server
        finally:
            server.stop(kill=True)


@contextmanager
def redis_cluster(masters: int = 3) -> Iterator[str]:
    """A private Redis Cluster of `masters` masters (no replicas); yields a `redis+cluster://` URL."""
    cli = _binary("redis-cli")
    with tempfile.TemporaryDirectory(prefix="mw-cluster-") as directory:
        servers = []
        try:
            for index in range(masters):
                node_dir = Path(directory) / f"node{index}"
                node_dir.mkdir()
                server = RedisServer(
                    node_dir, None, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000", "--appendonly", "no"
                )
                server.start()
                servers.append(server)
            addresses = [f"127.0.0.1:{s.port}" for s in servers]
            subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                states = [
                    subprocess.run(
                        [cli, "-p", str(s.port), "cluster", "info"], capture_output=True, text=True, timeout=10
                    ).stdout
                    for s in servers
                ]
                if all("cluster_state:ok" in state for state in states):
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError("the private Redis Cluster did not reach cluster_state:ok")
            yield f"redis+cluster://127.0.0.1:{servers[0].port}/0"
        finally:
            for server in servers:
                server.stop(kill=True)
