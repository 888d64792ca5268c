"""Issue 39 items 3-4: each stdio MCP server has its own persistent, writable data folder (its
HOME in the sandbox, where npm and uv keep their caches) and may be given writable folders; what
it writes survives a restart and "test". Everything else stays read-only or invisible."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from tests.mcp_support import (
    connect_in_background,
    mcp_tool,
    outside_the_checkout,
    poll_server,
    post_json,
    reset_hub,
    wait_state,
)
from tools_app.mcp import service
from tools_app.mcp.config import data_dir
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db(transaction=True)
SCRIPT = Path(__file__).resolve().parent / "mcp_files_server.py"
# What the launcher's Python needs to be seen in the sandbox (the venv and the interpreter under it).
PYTHON = sorted({sys.prefix, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)})


@pytest.fixture(autouse=True)
def _setup(mcp_hub, settings, tmp_path, monkeypatch):
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.MCP_CONNECT_TIMEOUT_S = 30
    settings.MCP_DATA_DIR = tmp_path / "mcp_data"
    monkeypatch.setattr(sys.modules[__name__], "SCRIPT", outside_the_checkout(SCRIPT, tmp_path / "server"))


async def _files(owner, paths: tuple[str, ...] = (), **fields) -> MCPServer:
    return await MCPServer.objects.acreate(owner=owner, name="files", transport="stdio", command=sys.executable,
                                           args=[str(SCRIPT)], paths=[str(SCRIPT), *paths], auto_approve=True,
                                           **fields)


async def _call(owner, tool: str, **args) -> str:
    found = await mcp_tool(owner, f"files__{tool}")
    assert found is not None, "the files server did not start"
    return (await found.execute(args)).output


async def test_its_home_is_its_own_data_folder_and_survives_restart_and_test(owner):
    server = await _files(owner)
    assert (await _call(owner, "write", path="memory.json", text='{"fact": 1}')).startswith("wrote /home/mcp/")
    assert json.loads((data_dir(server.pk) / "memory.json").read_text()) == {"fact": 1}  # on the host
    reset_hub()  # Navi restarts: the process ends
    assert await _call(owner, "read", path="memory.json") == '{"fact": 1}'
    await sync_to_async(service.test_connection)(server)  # "Test connection" starts it afresh
    assert await _call(owner, "read", path="memory.json") == '{"fact": 1}'


async def test_a_writable_path_is_writable_and_the_rest_is_not(owner, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    if os.geteuid() == 0:  # as root a writable folder is written by its own user, never root
        os.chown(shared, 4242, 4242)
    shown = tmp_path / "shown"
    shown.mkdir()
    await _files(owner, writable_paths=[str(shared)], paths=(str(shown),))
    assert (await _call(owner, "write", path=str(shared / "a.txt"), text="kept")).startswith("wrote")
    assert (shared / "a.txt").read_text() == "kept"
    assert "FAILED" in await _call(owner, "write", path=str(shown / "b.txt"), text="no")
    assert not (shown / "b.txt").exists()
    assert "FAILED" in await _call(owner, "write", path="/etc/evil", text="no")


async def test_another_servers_data_folder_is_refused(owner, owner_client, tmp_path):
    first = await _files(owner)
    body = {"name": "thief", "transport": "stdio", "command": sys.executable,
            "writable_paths": [str(data_dir(first.pk))]}
    answer = await sync_to_async(post_json)(owner_client, "/mcp/servers", body)
    assert answer.status_code == 400 and "data folders" in answer.json()["error"]


async def test_a_launchers_first_start_may_take_long_shows_progress_and_its_cache_is_kept(owner, owner_client,
                                                                                        settings, tmp_path):
    # A launcher like npx/uvx: its first start downloads the server into its HOME's cache (here:
    # waits 14 s, then remembers it in ~/.cache), later starts are quick.
    settings.MCP_CONNECT_TIMEOUT_S = 8
    settings.MCP_FIRST_START_TIMEOUT_S = 60
    launcher = tmp_path / "bin" / "uvx"
    launcher.parent.mkdir()
    launcher.write_text(f'#!/bin/sh\nif [ ! -e "$HOME/.cache/pkg" ]; then sleep 14; mkdir -p "$HOME/.cache" && '
                        f'touch "$HOME/.cache/pkg"; fi\nexec {sys.executable} {SCRIPT}\n')
    launcher.chmod(0o755)
    server = await MCPServer.objects.acreate(owner=owner, name="files", transport="stdio", command=str(launcher),
                                             paths=[str(launcher.parent), str(SCRIPT), *PYTHON], auto_approve=True)
    seen = await sync_to_async(_progress)(owner_client, server.pk)
    assert seen["state"] == "connecting" and "first start of" in seen["last_error"], seen
    server = await sync_to_async(wait_state)(server, ("connected", "failed"), 60)
    assert server.state == "connected", server.last_error  # after the long first start
    assert await mcp_tool(owner, "files__read") is not None
    assert (data_dir(server.pk) / ".cache" / "pkg").exists()
    reset_hub()  # the next start is quick and within the ordinary limit
    assert await mcp_tool(owner, "files__read") is not None


def _progress(client, server_id: int) -> dict:
    """Open the connection in the background and read the state until it reports progress."""
    connect_in_background(MCPServer.objects.get(pk=server_id))
    return poll_server(client, server_id, lambda body: "first start of" in body["last_error"]
                       or body["state"] != "connecting", 30)


async def test_a_launcher_without_the_network_says_to_turn_it_on(owner, tmp_path):
    launcher = tmp_path / "bin" / "npx"
    launcher.parent.mkdir()
    launcher.write_text('#!/bin/sh\necho "npm error code EAI_AGAIN: request to registry.npmjs.org failed" >&2\nexit 1\n')
    launcher.chmod(0o755)
    server = await MCPServer.objects.acreate(owner=owner, name="pkg", transport="stdio", command=str(launcher),
                                             args=["-y", "some-mcp-server"], paths=[str(launcher.parent)])
    assert await mcp_tool(owner, "pkg__anything") is None
    server = await sync_to_async(wait_state)(server, ("failed",), 60)
    assert server.state == "failed" and "turn on `network`" in server.last_error, server.last_error
    assert "EAI_AGAIN" in server.stderr_tail
