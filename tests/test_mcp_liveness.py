"""Issue 39 item 2 (DESIGN §10): a server's state follows the server. One that dies while idle
shows `failed` within 30 s with the reason (a stdio program's exit, an HTTP server that stops
answering pings), comes back by itself, and another process's write cannot overwrite the state
this process sees."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from asgiref.sync import async_to_sync

from tests.mcp_support import SERVER_SCRIPT, SDKServer, mcp_tools, pids_running, poll_server
from tools_app.mcp import client as mcp_client
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT_S = 30  # DESIGN §10


@pytest.fixture(autouse=True)
def _setup(loopback_mcp, settings):
    settings.MCP_CONNECT_TIMEOUT_S = 20


def api_state(client, server_id: int, wanted: str, timeout: float = LIMIT_S) -> dict:
    """GET /mcp/servers/<id> until its state is `wanted` (what the page and scripts read)."""
    return poll_server(client, server_id, lambda body: body["state"] == wanted, timeout)


def test_an_http_server_killed_while_idle_shows_failed_and_comes_back(owner, owner_client, tmp_path):
    server = SDKServer(tmp_path / "marker.txt")
    try:
        row = MCPServer.objects.create(owner=owner, name="demo", transport="http", url=server.url)
        assert async_to_sync(mcp_tools)(owner), "the server did not connect"
        assert api_state(owner_client, row.pk, "connected")["state"] == "connected"
        conn = mcp_client.get_hub().connections[row.pk]
        states: list[str] = []
        saved = conn.on_change
        conn.on_change = lambda c: (states.append(c.state), saved(c))
        server.stop()  # killed while nobody calls it
        body = api_state(owner_client, row.pk, "failed")
        # The ping fails ("stopped answering"), then the retries ("cannot reach"): either says why.
        assert body["state"] == "failed", body
        assert "stopped answering" in body["last_error"] or "cannot reach" in body["last_error"], body
        health = owner_client.get("/health").json()["mcp"]
        assert health["status"] == "failing" and health["failing"][0]["name"] == "demo"
        deadline = time.monotonic() + LIMIT_S
        while conn.failures < 3 and time.monotonic() < deadline:  # Navi's own retries, still down
            time.sleep(0.05)
        assert conn.failures >= 3 and api_state(owner_client, row.pk, "failed")["state"] == "failed"
        server = SDKServer(tmp_path / "marker2.txt", port=server.port)  # back on the same port
        assert api_state(owner_client, row.pk, "connected", 90)["state"] == "connected"
        # While it was down, Navi's retries never showed it as `connecting`: whoever looked saw why.
        assert states[-1] == "connected" and "connecting" not in states, states
    finally:
        server.stop()


def test_a_stdio_server_that_dies_while_idle_shows_failed_with_its_exit(owner, owner_client, settings, tmp_path):
    settings.CODE_EXEC_SANDBOX = "none"  # the watch is the transport's, sandboxed or not
    marker = str(tmp_path / "stdio-marker.txt")
    row = MCPServer.objects.create(owner=owner, name="local", transport="stdio", command=sys.executable,
                                   args=[str(SERVER_SCRIPT), "--stdio", "--marker", marker])
    assert async_to_sync(mcp_tools)(owner), "the server did not connect"
    assert api_state(owner_client, row.pk, "connected")["state"] == "connected"
    pids = pids_running(marker)
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    body = api_state(owner_client, row.pk, "failed")
    assert body["state"] == "failed" and "the program exited (killed by signal 9)" in body["last_error"], body
    # Nobody uses it: it stays failed (Navi starts it again by itself only after a minute) ...
    assert mcp_client.RESTART_AFTER_EXIT_S >= 2 * LIMIT_S
    assert owner_client.get("/health").json()["mcp"]["failing"][0]["name"] == "local"
    # ... and the next use starts it again (after the short backoff).
    deadline = time.monotonic() + LIMIT_S
    while not async_to_sync(mcp_tools)(owner) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert api_state(owner_client, row.pk, "connected")["state"] == "connected"
    assert len(pids_running(marker)) == 1 and pids_running(marker) != pids


def test_another_process_writing_the_row_does_not_change_this_process_state(owner, owner_client, tmp_path):
    server = SDKServer(tmp_path / "marker.txt")
    try:
        row = MCPServer.objects.create(owner=owner, name="demo", transport="http", url=server.url)
        assert async_to_sync(mcp_tools)(owner)
        assert api_state(owner_client, row.pk, "connected")["state"] == "connected"
        # What a `navi_mcp serve` with other settings (its servers unreachable) writes:
        MCPServer.objects.filter(pk=row.pk).update(state="failed", last_error="cannot reach it from here")
        body = owner_client.get(f"/mcp/servers/{row.pk}").json()
        assert body["state"] == "connected" and body["last_error"] == ""
        assert owner_client.get("/health").json()["mcp"]["status"] == "ok"
    finally:
        server.stop()
