"""Issue 35 item 3: a hostile MCP server cannot take the server's memory. Its 500 MB answer is
cut while it streams (HTTP body, SSE event, stdio line) and the call ends with a clear tool
error, the server's RSS grows by less than 64 MB; and calls per server are bounded."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from tests.mcp_support import FLOOD_SCRIPT, mcp_tool, wait_state
from tools_app.mcp import client as mcp_client
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db(transaction=True)
MB = 1024 * 1024


@pytest.fixture(autouse=True)
def _setup(loopback_mcp, settings):
    settings.MCP_CONNECT_TIMEOUT_S = 20


def rss_peak_reset() -> bool:
    """Reset this process's peak RSS (VmHWM) so the next reading is the peak of what follows."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


async def peak_growth(call) -> tuple[object, int]:
    """Run `call` and return its result and how far the RSS rose above where it started (bytes):
    the kernel's peak when it can be reset, else the highest of frequent readings."""
    start = status_kb("VmRSS")
    if rss_peak_reset():
        result = await call()
        return result, (status_kb("VmHWM") - start) * 1024
    highest = start
    task = asyncio.ensure_future(call())
    while not task.done():
        highest = max(highest, status_kb("VmRSS"))
        await asyncio.sleep(0.005)
    return task.result(), (max(highest, status_kb("VmRSS")) - start) * 1024


async def _add(owner, **fields) -> MCPServer:
    server = await MCPServer.objects.acreate(owner=owner, name="evil", auto_approve=True, **fields)
    return server


async def _flood_call(owner):
    small = await mcp_tool(owner, "evil__small")
    assert small is not None, "the hostile server's tools were not offered"
    assert (await small.execute({})).output == "small"  # the connection is warm before measuring
    tool = await mcp_tool(owner, "evil__flood")
    return await peak_growth(lambda: tool.execute({}))


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_a_500_mb_http_answer_is_cut_while_it_streams(owner, flood, mode):
    server = flood("--mb", "500", *(["--sse"] if mode == "sse" else []))
    row = await _add(owner, transport="http", url=server.url)
    result, growth = await _flood_call(owner)
    assert not result.success
    assert "the limit is 8 MB (MCP_MAX_RESPONSE_MB)" in result.error
    assert "Ask the tool for less" in result.error
    assert growth < 64 * MB, f"the server's memory grew by {growth // MB} MB"
    # The server stays usable: the next call works.
    assert (await (await mcp_tool(owner, "evil__small")).execute({})).output == "small"
    row = await sync_to_async(wait_state)(row)
    assert row.state == "connected"


async def test_a_500_mb_stdio_line_is_cut_while_it_streams(owner, settings, tmp_path):
    settings.CODE_EXEC_SANDBOX = "none"  # the cap is the transport's, sandbox or not
    await _add(owner, transport="stdio", command=sys.executable, args=[str(FLOOD_SCRIPT), "--stdio", "--mb", "500"])
    result, growth = await _flood_call(owner)
    assert not result.success and "the limit is 8 MB" in result.error
    assert growth < 64 * MB, f"the server's memory grew by {growth // MB} MB"
    assert (await (await mcp_tool(owner, "evil__small")).execute({})).output == "small"


async def test_the_cap_is_a_setting(owner, flood, settings):
    settings.MCP_MAX_RESPONSE_MB = 1
    server = flood("--mb", "2")
    await _add(owner, transport="http", url=server.url)
    result = await (await mcp_tool(owner, "evil__flood")).execute({})
    assert not result.success and "the limit is 1 MB" in result.error


async def test_calls_per_server_are_bounded(owner, flood, settings, tmp_path):
    settings.MCP_MAX_CONCURRENT_CALLS = 2
    marker = tmp_path / "marker"
    server = flood("--marker", str(marker))
    row = await _add(owner, transport="http", url=server.url)
    tool = await mcp_tool(owner, "evil__slow")
    calls = [asyncio.ensure_future(tool.execute({})) for _ in range(6)]
    try:
        conn = mcp_client._hub.connections[row.pk]
        for _ in range(600):
            waiting = len(conn.slots()._waiters or ())
            if waiting == 4 and "slow active 2" in marker.read_text():
                break
            await asyncio.sleep(0.05)
        # Two are held by the server; the other four wait their turn in Navi, not at the server.
        assert waiting == 4
        assert marker.read_text().splitlines() == ["slow active 1", "slow active 2"]
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
