"""Issue 39 item 6 (part): tool annotations shown and used by the policy (every tool asks until
allowed, DESIGN §9; with MCP_READ_ONLY_ALLOW a read-only one runs without asking, a destructive
one still asks), tools that need task augmentation hidden with the reason, and Navi's
serverInfo carries a version; item 7's plain headers, /agents/tools and stderr files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from tests.mcp_support import FLOOD_SCRIPT, logged_in, mcp_tools, patch_json, post_json, reset_hub, wait_state
from tests.test_mcp_limits import _setup  # noqa: F401 - the fixture (autouse)
from tools_app.mcp import client as mcp_client
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db(transaction=True)


async def test_annotations_are_shown_and_read_only_tools_run_without_asking_when_trusted(owner, owner_client, flood,
                                                                                          settings):
    settings.MCP_READ_ONLY_ALLOW = True
    server = flood()
    row = await MCPServer.objects.acreate(owner=owner, name="hints", transport="http", url=server.url)
    tools = {t.name: t for t in await mcp_tools(owner)}
    assert tools["hints__peek"].default_policy == "allow"
    assert tools["hints__wipe"].default_policy == "ask" and tools["hints__small"].default_policy == "ask"
    assert "hints__tasky" not in tools
    await sync_to_async(wait_state)(row)
    listed = {t["name"]: t for t in (await sync_to_async(owner_client.get)(f"/mcp/servers/{row.pk}")).json()["tools"]}
    assert listed["hints__peek"]["read_only"] is True and listed["hints__wipe"]["destructive"] is True
    assert "taskSupport: required" in listed["tasky"]["problem"]


async def test_by_default_read_only_tools_ask_like_the_others(owner, flood):
    server = flood()
    await MCPServer.objects.acreate(owner=owner, name="hints", transport="http", url=server.url)
    tools = {t.name: t for t in await mcp_tools(owner)}
    assert tools["hints__peek"].default_policy == "ask"


async def test_navis_server_info_has_a_version():
    from mcp import Client

    from agent.web.mcp_server import build_server

    async with Client(build_server()) as client:
        info = client.server_info
    assert info.name == "navi" and info.version


def test_secrets_are_masked_but_plain_headers_and_variables_are_shown(owner_client):
    body = {"name": "web", "transport": "http", "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer very-secret-token-123", "X-Team": "blue", "X-Api-Key": "k3y-value-99"}}
    created = post_json(owner_client, "/mcp/servers", body).json()
    assert created["headers"]["X-Team"] == "blue"
    assert "very-secret-token-123" not in json.dumps(created) and "k3y-value-99" not in json.dumps(created)
    # Sent back as shown, nothing changes.
    answer = patch_json(owner_client, f"/mcp/servers/{created['id']}", {"headers": created["headers"]})
    assert answer.status_code == 200
    stored = MCPServer.objects.get(pk=created["id"]).headers
    assert stored == body["headers"]


async def test_mcp_tools_are_listed_under_agents_tools_with_their_policy(owner, owner_client, other_user, flood):
    server = flood()
    row = await MCPServer.objects.acreate(owner=owner, name="hints", transport="http", url=server.url,
                                          auto_approve_tools=["small"])
    assert await mcp_tools(owner)
    await sync_to_async(wait_state)(row)
    listed = {t["name"]: t for t in (await sync_to_async(owner_client.get)("/agents/tools")).json()["tools"]}
    assert listed["hints__small"]["mcp_server"] == "hints" and listed["hints__small"]["allowed"] is True
    assert listed["hints__wipe"]["allowed"] is False and listed["hints__peek"]["allowed"] is False
    assert listed["hints__peek"]["read_only"] is True
    assert listed["hints__small"]["parameters"] == {"type": "object", "properties": {}}
    # Another user sees none of them.
    mallory = await sync_to_async(logged_in)(other_user)
    theirs = (await sync_to_async(mallory.get)("/agents/tools")).json()["tools"]
    assert not [t for t in theirs if t["name"].startswith("hints__")]


async def test_a_stdio_servers_stderr_file_is_removed_when_its_connection_ends(owner, settings):
    settings.CODE_EXEC_SANDBOX = "none"
    row = await MCPServer.objects.acreate(owner=owner, name="local", transport="stdio", command=sys.executable,
                                          args=[str(FLOOD_SCRIPT), "--stdio"])
    assert await mcp_tools(owner)
    path = Path(mcp_client._hub.connections[row.pk].stderr_path)
    assert path.exists()
    await sync_to_async(reset_hub)()
    assert not path.exists()
