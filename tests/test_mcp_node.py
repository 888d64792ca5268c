"""Issue 39 item 1: a Node MCP server (the official TypeScript SDK) runs in the stdio sandbox
with the default memory cap and its fetch() works — Node's WebAssembly-based HTTP client
failed under the old address-space cap — while the memory cap still holds."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from tests.mcp_support import mcp_tool, outside_the_checkout, wait_state
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve().parent / "mcp_fetch_server.mjs"


@pytest.fixture(autouse=True)
def _setup(mcp_hub, settings, tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "SCRIPT", outside_the_checkout(SCRIPT, tmp_path / "server"))
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.MCP_CONNECT_TIMEOUT_S = 30
    settings.TOOL_TIMEOUT_S = 30


async def _node_server(owner) -> MCPServer:
    return await MCPServer.objects.acreate(
        owner=owner, name="nodefetch", transport="stdio", command=shutil.which("node") or "node",
        args=[str(SCRIPT)], paths=[str(SCRIPT.parent), str(ROOT / "node_modules")], network=True, auto_approve=True)


async def test_a_node_server_fetches_over_loopback_under_the_default_memory_cap(owner, local_page):
    server = await _node_server(owner)
    tool = await mcp_tool(owner, "nodefetch__fetch_url")
    assert tool is not None, (await sync_to_async(wait_state)(server)).stderr_tail
    result = await tool.execute({"url": local_page})
    assert result.success and result.output.startswith("200 "), (result, server.stderr_tail)
    assert "hello from the local page" in result.output
    server = await sync_to_async(wait_state)(server)
    assert server.state == "connected"


async def test_the_memory_cap_still_holds(owner, settings):
    settings.MCP_STDIO_MEMORY_MB = 512
    settings.SANDBOX_MEMORY_MB = 256  # the cap is the larger of the two
    await _node_server(owner)
    tool = await mcp_tool(owner, "nodefetch__eat")
    assert (await tool.execute({"mb": 64})).output.startswith("ate 64 MB")
    result = await tool.execute({"mb": 2048})
    assert not result.success, result.output
