"""A real, throw-away `redis-server` for the multi-worker tests.

    with RedisServer() as redis:
        redis.url            # redis://127.0.0.1:<port>/0

It runs on a free port in its own temp dir with persistence off, so nothing outlives the test.
When `redis-server` is not installed, `available()` is False and the tests skip with a hint
(CI installs it: `.ci/run` does `apt-get install redis-server`).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.live_server import free_port


def redis_binary() -> str | None:
    return shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


def available() -> bool:
    return redis_binary() is not None


def _ping(port: int) -> bool:
    """One raw RESP PING; True on +PONG (no client library needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="navi-redis-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> "RedisServer":
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("redis-server is not installed; `apt-get install redis-server` (CI does this)")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.proc.returncode} on port {self.port}")
            if _ping(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer PING on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
