"""Issue 39 item 6 (part): tool annotations shown and used by the policy (a read-only tool runs
without asking unless MCP_READ_ONLY_ALLOW is off; a destructive one asks), tools that need task
augmentation hidden with the reason, and Navi's serverInfo carries a version."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from tests.mcp_support import wait_state
from tests.test_mcp import _tools
from tests.test_mcp_limits import _setup, flood  # noqa: F401 - the fixtures
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db(transaction=True)


async def test_annotations_are_shown_and_read_only_tools_run_without_asking(owner, owner_client, flood):  # noqa: F811
    server = flood()
    row = await MCPServer.objects.acreate(owner=owner, name="hints", transport="http", url=server.url)
    tools = {t.name: t for t in await _tools(owner)}
    assert tools["hints__peek"].default_policy == "allow"
    assert tools["hints__wipe"].default_policy == "ask" and tools["hints__small"].default_policy == "ask"
    assert "hints__tasky" not in tools
    await sync_to_async(wait_state)(row)
    listed = {t["name"]: t for t in (await sync_to_async(owner_client.get)(f"/mcp/servers/{row.pk}")).json()["tools"]}
    assert listed["hints__peek"]["read_only"] is True and listed["hints__wipe"]["destructive"] is True
    assert "taskSupport: required" in listed["tasky"]["problem"]


async def test_the_owner_can_make_read_only_tools_ask_too(owner, flood, settings):  # noqa: F811
    settings.MCP_READ_ONLY_ALLOW = False
    server = flood()
    await MCPServer.objects.acreate(owner=owner, name="hints", transport="http", url=server.url)
    tools = {t.name: t for t in await _tools(owner)}
    assert tools["hints__peek"].default_policy == "ask"


async def test_navis_server_info_has_a_version():
    from mcp import Client

    from agent.mcp_server import build_server

    async with Client(build_server()) as client:
        info = client.server_info
    assert info.name == "navi" and info.version
