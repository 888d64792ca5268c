"""Shared pieces of the MCP tests: the SDK-built test server in its own process, waiting for a
server's state, and a clean hub between tests."""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.live_server import free_port
from tools_app.mcp import client as mcp_client

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = HERE / "mcp_test_server.py"


class SDKServer:
    """tests/mcp_test_server.py over streamable HTTP, in a process a test may kill."""

    def __init__(self, marker: Path, *extra: str, port: int | None = None) -> None:
        self.marker = marker
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "--port", str(self.port), "--marker", str(marker), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError("the MCP test server did not start")

    def notes(self) -> list[str]:
        return self.marker.read_text().splitlines() if self.marker.exists() else []

    def wait_note(self, note: str, timeout: float = 10) -> bool:
        """The server process wrote `note` (it writes each event to its marker file)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if note in self.notes():
                return True
            time.sleep(0.02)
        return note in self.notes()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(10)


def reset_hub() -> None:
    """Close every connection of the process-wide hub (each test starts with none)."""
    mcp_client.shutdown()
    hub = mcp_client._hub
    if hub is not None:
        hub.connections.clear()
    mcp_client.flush_state_writes()


def wait_state(server, states: tuple[str, ...] = ("connected", "failed"), timeout: float = 20):
    """Reload the MCPServer row until its state is one of `states` (written by the hub)."""
    deadline = time.monotonic() + timeout
    while True:
        mcp_client.flush_state_writes()
        server.refresh_from_db()
        if server.state in states or time.monotonic() > deadline:
            return server
        time.sleep(0.02)
