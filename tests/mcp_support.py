"""Shared pieces of the MCP tests: the test servers in their own processes, a clean hub between
tests, the tools a run is offered, signed-in clients and waiting for a server's state. The
fixtures are offered to every test module through tests/conftest.py."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from tests.hostile_page import serve_page
from tests.live_server import LiveNavi, free_port
from tools_app.mcp import client as mcp_client
from tools_app.mcp.config import ServerConfig
from tools_app.toolset import get_tool_registry

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = HERE / "mcp_test_server.py"
FLOOD_SCRIPT = HERE / "mcp_flood_server.py"


class ServerProcess:
    """A test MCP server script over streamable HTTP, in a process a test may kill."""

    script: Path

    def __init__(self, *args: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [sys.executable, str(self.script), "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], 90)  # generous: a loaded machine imports the SDK slowly
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"the MCP test server {self.script.name} did not start")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(10)


class SDKServer(ServerProcess):
    """tests/mcp_test_server.py: tools, resources and prompts built with the SDK's MCPServer."""

    script = SERVER_SCRIPT

    def __init__(self, marker: Path, *extra: str, port: int | None = None) -> None:
        self.marker = marker
        super().__init__("--marker", str(marker), *extra, port=port)

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


class FloodServer(ServerProcess):
    """tests/mcp_flood_server.py: a hostile server whose answers are as large as asked."""

    script = FLOOD_SCRIPT


@pytest.fixture
def mcp_hub(profiles):
    """The seeded profiles, and no MCP connection in this process before the test or after it."""
    reset_hub()
    yield
    reset_hub()


@pytest.fixture
def loopback_mcp(mcp_hub, settings):
    """mcp_hub, and the test servers on 127.0.0.1 may be reached (the SSRF guard refuses loopback)."""
    settings.HTTP_ALLOWED_HOSTS = ["127.0.0.1"]


@pytest.fixture
def test_server(tmp_path):
    """The SDK-built test server, stopped after the test."""
    server = SDKServer(tmp_path / "marker.txt")
    yield server
    server.stop()


@pytest.fixture
def flood():
    """Start hostile flood servers with the given arguments; all are stopped after the test."""
    servers: list[FloodServer] = []

    def start(*extra: str) -> FloodServer:
        servers.append(FloodServer(*extra))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def local_page():
    """The URL of an HTML page on the host's loopback (what a fetching server is asked to read)."""
    with serve_page("hello from the local page") as url:
        yield url


@pytest.fixture(scope="module")
def mcp_navi(live_llm):
    """A live Navi for the browser tests of MCP: it may reach the test servers on loopback and gives
    up connecting after 3 s. A module uses it as its `navi`, the fixture the login asks for."""
    env = {"OLLAMA_HOST": live_llm.url, "CHAT_TITLES": "first_words", "HTTP_ALLOWED_HOSTS": "127.0.0.1",
           "MCP_CONNECT_TIMEOUT_S": "3"}
    with LiveNavi(env=env) as server:
        yield server


def reset_hub() -> None:
    """Close every connection of the process-wide hub (each test starts with none)."""
    mcp_client.shutdown()
    hub = mcp_client._hub
    if hub is not None:
        hub.connections.clear()
    mcp_client.flush_state_writes()


def connect_in_background(server) -> None:
    """Open the hub's connection to the MCPServer row the way POST /mcp/servers does: not waited for."""
    hub = mcp_client.get_hub()
    hub.submit(hub.ensure(ServerConfig.from_row(server), 0))


def wait_state(server, states: tuple[str, ...] = ("connected", "failed"), timeout: float = 20):
    """Reload the MCPServer row until its state is one of `states` (written by the hub)."""
    deadline = time.monotonic() + timeout
    while True:
        mcp_client.flush_state_writes()
        server.refresh_from_db()
        if server.state in states or time.monotonic() > deadline:
            return server
        time.sleep(0.02)


def poll_server(client, server_id: int, done: Callable[[dict], bool], timeout: float) -> dict:
    """GET /mcp/servers/<id> (what the page and scripts read) until `done(body)`; the last body.
    `client` is a Django test Client or an httpx.Client of a live Navi."""
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"/mcp/servers/{server_id}").json()
        if done(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


async def mcp_tools(owner, profile_id: str = "secretary") -> list:
    """The MCP tools a run of `owner` is offered (what the loop does at the start of a turn)."""
    registry = get_tool_registry()
    await sync_to_async(registry.load_provided)(owner.id)
    await registry.prepare_provided(owner.id)
    return [t for t in registry.tools_for([], owner.id, profile_id) if "__" in t.name]


async def mcp_tool(owner, name: str):
    """The offered MCP tool called `name`, or None."""
    return {t.name: t for t in await mcp_tools(owner)}.get(name)


def logged_in(user, **options) -> Client:
    """A test client signed in as `user` (options as Client takes them, e.g. enforce_csrf_checks)."""
    client = Client(**options)
    client.force_login(user)
    return client


def post_json(client: Client, path: str, body, **extra):
    """POST `body` as JSON; a str is sent as it is (to send malformed JSON)."""
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(path, data, content_type="application/json", **extra)


def patch_json(client: Client, path: str, body, **extra):
    return client.patch(path, json.dumps(body), content_type="application/json", **extra)


def pids_running(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (a server script's path or its marker file)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


def outside_the_checkout(script: Path, folder: Path) -> Path:
    """`script` copied into `folder` (a server is shown nothing inside Navi's checkout), with the
    checkout's npm packages beside it for a Node script's imports (shown read-only: code only)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / script.name
    shutil.copy(script, copy)
    modules = Path(__file__).resolve().parent.parent / "node_modules"
    if script.suffix in (".mjs", ".js") and not (folder / "node_modules").exists():
        (folder / "node_modules").symlink_to(modules)
    return copy
