"""Navi as an MCP server, driven by the SDK's own client against a real Navi process: the
streamable-HTTP endpoint at /mcp (Bearer API token), and `manage.py navi_mcp serve` over stdio.
Token required, memory round trip (per user), `ask_navi` answers through a real run."""

from __future__ import annotations

import json
import sys

import httpx
import pytest

from tests.live_server import ROOT, LiveNavi
from tests.llm_server import Rule, Turn

TIMEOUT = 30


@pytest.fixture(scope="module")
def navi(llm_live):
    with LiveNavi(env={"OLLAMA_HOST": llm_live.url}) as server:
        yield server


def _http_client(navi, token: str | None):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = create_mcp_http_client(headers=headers)
    return http, Client(streamable_http_client(f"{navi.url}/mcp", http_client=http), cache=None)


async def _call(client, tool: str, args: dict) -> str:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    return "\n".join(block.text for block in result.content)


def test_the_endpoint_needs_an_api_token(navi):
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        response = httpx.post(f"{navi.url}/mcp", headers={**headers, "Content-Type": "application/json"},
                              content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        assert response.status_code == 401 and "Bearer" in response.json()["error"]
    # /mcp/servers is still the REST API, not the MCP endpoint.
    assert httpx.get(f"{navi.url}/mcp/servers", headers={"Authorization": f"Bearer {navi.token}"}).status_code == 200


async def test_the_sdk_client_without_a_token_is_refused(navi):
    http, client = _http_client(navi, None)
    async with http:
        try:
            async with client:
                raise AssertionError("connected without a token")
        except BaseException as exc:  # noqa: BLE001 - the SDK wraps the HTTP error in task-group exceptions
            refused = exc
    from mcp.shared.exceptions import MCPError

    while isinstance(refused, BaseExceptionGroup):
        refused = refused.exceptions[0]
    # The SDK reports the 401 (checked on the wire above) as an error response to initialize.
    assert isinstance(refused, MCPError) and "error response" in str(refused)


async def test_memory_round_trip_belongs_to_the_tokens_user(navi):
    http, client = _http_client(navi, navi.token)
    async with http, client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"memory_search", "memory_save", "list_sessions", "ask_navi"}
        saved = await _call(client, "memory_save", {"category": "preferences", "key": "editor", "value": "helix"})
        assert "editor = helix" in saved
        found = await _call(client, "memory_search", {"query": "editor"})
        assert "preferences: editor = helix" in found
    owner_id = navi.sql("SELECT id FROM auth_user WHERE username = %s", (navi.username,))[0][0]
    assert navi.sql("SELECT owner_id, value FROM memory_app_memoryfact WHERE key = %s", ("editor",)) == [
        (owner_id, "helix")]
    # Another user's token reads another user's memory: nothing of the owner's.
    other = navi.add_user("mallory")
    http, client = _http_client(navi, other)
    async with http, client:
        assert "helix" not in await _call(client, "memory_search", {"query": "editor"})


async def test_ask_navi_runs_a_turn_and_answers(navi, live_llm):
    live_llm.add_rule(Rule(match="capital of France", turns=[Turn(content="Paris, of course.")]))
    http, client = _http_client(navi, navi.token)
    async with http, client:
        answer = json.loads(await _call(client, "ask_navi", {"question": "What is the capital of France?"}))
        assert answer["answer"] == "Paris, of course."
        sessions = json.loads(await _call(client, "list_sessions", {}))
        assert answer["session_id"] in [s["id"] for s in sessions]
        result = await client.call_tool("ask_navi", {"question": "again?", "session_id": "not-a-session"})
        assert result.is_error and "no session" in result.content[0].text


async def test_navi_mcp_serve_over_stdio(navi):
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["manage.py", "navi_mcp", "serve", "--user", navi.username],
        env={k: v for k, v in navi.env.items() if isinstance(v, str)}, cwd=str(ROOT),
    )
    async with Client(params, cache=None) as client:
        await _call(client, "memory_save", {"category": "work", "key": "desk", "value": "standing"})
        assert "work: desk = standing" in await _call(client, "memory_search", {"query": "desk"})


def _active_runs(navi) -> list:
    return navi.sql("SELECT id FROM sessions_app_session WHERE active_run_id IS NOT NULL AND active_run_id <> ''")


async def test_a_long_ask_navi_sends_progress_and_cancelling_it_stops_the_run(navi, live_llm):
    """Issue 39 item 6: progress notifications keep a client from timing out during a long turn;
    notifications/cancelled (the SDK sends it when the call is cancelled) stops the run."""
    import asyncio

    live_llm.add_rule(Rule(match="count forever", turns=[Turn(content="tick ", endless=True, delay=0.2)]))
    http, client = _http_client(navi, navi.token)
    messages: list[str] = []
    heard = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        heard.set()

    async with http, client:
        call = asyncio.ensure_future(client.call_tool("ask_navi", {"question": "count forever"},
                                                      progress_callback=on_progress))
        await asyncio.wait_for(heard.wait(), 60)
        assert "still working" in messages[0]
        assert _active_runs(navi), "the turn is not running"
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            pass
        for _ in range(300):
            if not _active_runs(navi):
                break
            await asyncio.sleep(0.1)
        assert not _active_runs(navi), "the run went on after the call was cancelled"
