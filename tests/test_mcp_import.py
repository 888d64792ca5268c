"""Issue 39 item 5: `POST /mcp/servers/import` takes Claude Desktop's `mcpServers` JSON (DESIGN
§10); each entry is checked like `POST /mcp/servers`, a bad one is reported by name and the
others are made. Also what a stranger, a plain user and malformed bodies get."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync

from tests.mcp_support import logged_in, mcp_tool, patch_json, post_json, wait_state
from tools_app.models import MCPServer

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FILES_SCRIPT = Path(__file__).resolve().parent / "mcp_files_server.py"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_mcp")]


def _import(client, body) -> object:
    return post_json(client, "/mcp/servers/import", body)


def test_a_pasted_claude_desktop_config_makes_the_good_servers_and_names_the_bad(owner, owner_client, test_server):
    config = {
        "globalShortcut": "Ctrl+Space",  # the rest of claude_desktop_config.json is ignored
        "mcpServers": {
            "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {"TZ_TOKEN": "t0ps3cr3t-value"}},
            "web": {"url": test_server.url, "headers": {"Authorization": "Bearer very-secret-token-123", "X-Team": "blue"}},
            "bad name!": {"command": "mcp-server-time"},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
            "lan": {"url": "http://10.1.2.3/mcp"},
            "both": {"command": "x", "url": "http://127.0.0.1:9/mcp"},
            "odd": {"command": "mcp-server-time", "cwd": "/"},
            "typed": {"command": "mcp-server-time", "args": "--local-timezone UTC"},
            "ghost": {"command": "no-such-program-anywhere"},
            # A launcher downloads its server: it gets the network (left disabled: no download here).
            "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"],
                           "disabled": True},
        },
    }
    answer = _import(owner_client, config)
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert sorted(s["name"] for s in body["servers"]) == ["everything", "ghost", "time", "web"]
    made = {s["name"]: s for s in body["servers"]}
    assert made["everything"]["network"] and not made["everything"]["enabled"] and not made["time"]["network"]
    assert set(body["errors"]) == {"bad name!", "legacy", "lan", "both", "odd", "typed"}
    assert "letters, digits" in body["errors"]["bad name!"]
    assert "streamable-HTTP URL" in body["errors"]["legacy"]
    assert "HTTP_ALLOWED_HOSTS" in body["errors"]["lan"] or "private" in body["errors"]["lan"]
    assert "not both" in body["errors"]["both"] and "cwd" in body["errors"]["odd"]
    assert "list of strings" in body["errors"]["typed"]
    text = answer.content.decode()
    assert "very-secret-token-123" not in text and "t0ps3cr3t-value" not in text
    web = MCPServer.objects.get(name="web")
    assert web.owner == owner and web.transport == "http" and web.headers["Authorization"].endswith("123")
    time_server = MCPServer.objects.get(name="time")
    assert time_server.transport == "stdio" and time_server.args == ["--local-timezone", "UTC"]
    assert wait_state(web).state == "connected"
    # A program that does not exist is made like a manual add, and fails with what to do.
    ghost = wait_state(MCPServer.objects.get(name="ghost"))
    assert ghost.state == "failed" and "command not found" in ghost.last_error
    # Importing again reports the names taken; nothing is doubled.
    again = _import(owner_client, {"mcpServers": {"web": {"url": test_server.url}}}).json()
    assert again["servers"] == [] and "already have a server called 'web'" in again["errors"]["web"]
    assert MCPServer.objects.filter(name="web").count() == 1


def test_a_pasted_stdio_server_sees_the_files_its_arguments_name_once_confirmed(owner, owner_client, settings, tmp_path):
    # Claude Desktop runs servers unsandboxed: what their arguments name must be there in Navi's
    # sandbox — npm packages at once, the owner's folders once confirmed on the card (issue 50).
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.MCP_CONNECT_TIMEOUT_S = 30
    settings.MCP_DATA_DIR = tmp_path / "mcp_data"
    scripts = tmp_path / "servers"
    scripts.mkdir()
    script = scripts / FILES_SCRIPT.name
    shutil.copy(FILES_SCRIPT, script)
    shared = tmp_path / "shared"
    shared.mkdir()
    if os.geteuid() == 0:  # the owner's folder, of a user other than root: the server writes as that user
        os.chown(shared, 4242, 4242)
    config = {"mcpServers": {
        "everything": {"command": shutil.which("node") or "node", "args": [str(EVERYTHING), "stdio"]},
        "files": {"command": sys.executable, "args": [str(script), f"--root={shared}"]},
    }}
    answer = _import(owner_client, config)
    assert answer.status_code == 201 and answer.json()["errors"] == {}, answer.content
    made = {s["name"]: s for s in answer.json()["servers"]}
    assert made["everything"]["paths"] == [str(NODE_MODULES)] and made["everything"]["pending_paths"] == []
    assert made["files"]["paths"] == [] and made["files"]["writable_paths"] == []
    assert made["files"]["pending_paths"] == [str(scripts), str(shared)]
    assert wait_state(MCPServer.objects.get(name="everything"), timeout=60).state == "connected"
    waiting = wait_state(MCPServer.objects.get(name="files"), timeout=30)
    assert waiting.state == "failed" and "confirm the folders" in waiting.last_error, waiting.last_error
    confirmed = patch_json(owner_client, f"/mcp/servers/{made['files']['id']}",
                           {"paths": [str(scripts)], "writable_paths": [str(shared)]})
    assert confirmed.status_code == 200 and confirmed.json()["pending_paths"] == [], confirmed.content
    server = wait_state(MCPServer.objects.get(name="files"), timeout=60)
    assert server.state == "connected", (server.last_error, server.stderr_tail)
    write = async_to_sync(mcp_tool)(owner, "files__write")
    assert async_to_sync(write.execute)({"path": str(shared / "a.txt"), "text": "kept"}).output.startswith("wrote")
    assert (shared / "a.txt").read_text() == "kept"
    if os.geteuid() == 0:
        assert (shared / "a.txt").stat().st_uid == 4242 and shared.stat().st_uid == 4242
        assert scripts.stat().st_uid == 0 and script.stat().st_uid == 0  # shown, never re-owned
    # Navi's own places are refused like in a manual add, even when an argument names them.
    refused = _import(owner_client, {"mcpServers": {
        "nosy": {"command": sys.executable, "args": [str(FILES_SCRIPT), str(ROOT)]}}}).json()
    assert refused["servers"] == [] and "checkout" in refused["errors"]["nosy"], refused


def test_a_plain_user_may_import_http_servers_but_not_stdio_ones(owner, other_user, test_server):
    mallory = logged_in(other_user)
    answer = _import(mallory, {"mcpServers": {
        "shell": {"command": "/bin/sh", "args": ["-c", "id"]},
        "web": {"url": test_server.url},
    }})
    assert answer.status_code == 201
    body = answer.json()
    assert [s["name"] for s in body["servers"]] == ["web"]
    assert "run host tools" in body["errors"]["shell"]
    assert not MCPServer.objects.filter(transport="stdio").exists()
    # The owner does not see mallory's server.
    owner_client = logged_in(owner)
    assert owner_client.get(f"/mcp/servers/{body['servers'][0]['id']}").status_code == 404


@pytest.mark.parametrize("body", [
    "", "not json", "[]", {"servers": {}}, {"mcpServers": []}, {"mcpServers": {}}, {"mcpServers": "x"},
    {"mcpServers": {f"s{n}": {"url": "http://127.0.0.1:9/mcp"} for n in range(51)}},
])
def test_a_malformed_body_is_a_400_and_nothing_is_saved(owner_client, body):
    answer = _import(owner_client, body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]
    assert not MCPServer.objects.exists()


def test_a_stranger_is_refused(client):
    answer = _import(client, {"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp"}}})
    assert answer.status_code in (401, 403)
    assert not MCPServer.objects.exists()
