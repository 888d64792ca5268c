"""MCP servers as Navi's tools (issue #28): a streamable-HTTP server built in the tests with the
SDK's MCPServer, driven through real runs (scripted LLM, WebSocket, approvals), and the bad
inputs — each gets a clear state and the run goes on."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import pytest
from asgiref.sync import sync_to_async

from sessions_app.models import SessionFile
from tests.llm_server import Rule, Turn
from tests.mcp_support import SDKServer, mcp_tool, mcp_tools, wait_state
from tests.test_approvals import frames_until, of_type, offered, run_ended, start, tool_messages
from tools_app.base import Tool, ToolResult
from tools_app.context import current_user_id
from tools_app.mcp import client as mcp_client
from tools_app.models import MCPServer
from tools_app.toolset import get_tool_registry

pytestmark = pytest.mark.django_db(transaction=True)
TIMEOUT = 20


@pytest.fixture(autouse=True)
def _setup(loopback_mcp, no_planning, settings):
    settings.TERMINAL_ALLOWED_COMMANDS = "echo"


def add_server(owner, url, name="demo", **fields) -> MCPServer:
    return MCPServer.objects.create(owner=owner, name=name, transport="http", url=url, **fields)


def script(llm, match: str, *calls: tuple[str, dict], answer: str = "Done.") -> None:
    turns = [Turn(tool_calls=[{"name": name, "arguments": args}]) for name, args in calls]
    llm.add_rule(Rule(match=match, turns=turns + [Turn(content=answer)]))


def calls_of(frames) -> list[dict]:
    return [f for f in frames if f["type"] == "tool_call"]


class TestToolsThroughARun:
    async def test_its_tools_reach_the_model_and_ask_once_before_running(self, llm, session, owner, owner_token,
                                                                          test_server):
        server = await sync_to_async(add_server)(owner, test_server.url)
        script(llm, "add please", ("demo__add", {"a": 2, "b": 3}), answer="It is 5.")
        comm = await start(session, owner_token, "add please")
        required = (await frames_until(comm, of_type("approval_required"), TIMEOUT))[-1]
        assert required["tool"] == "demo__add" and "outside (MCP) server" in required["reason"]
        assert {"demo__add", "demo__hang", "demo__weather"} <= offered(llm.requests[0])
        await comm.send_json_to({"type": "approval", "approval_id": required["approval_id"], "decision": "approve"})
        rest = await frames_until(comm, run_ended, TIMEOUT)
        call = calls_of(rest)[0]
        assert call["success"] and "5" in call["result"]
        assert "UNTRUSTED DATA" in call["result"] and "MCP server 'demo'" in call["result"]
        assert rest[-1]["type"] == "stream_end" and rest[-1]["content"] == "It is 5."
        await comm.disconnect()
        server = await sync_to_async(wait_state)(server)
        assert server.state == "connected" and "add" in [t["name"].split("__")[-1] for t in server.tools]

    async def test_a_server_allowed_by_its_owner_runs_without_asking(self, llm, session, owner, owner_token,
                                                                     test_server):
        await sync_to_async(add_server)(owner, test_server.url, auto_approve_tools=["add"])
        script(llm, "sum it", ("demo__add", {"a": 40, "b": 2}))
        comm = await start(session, owner_token, "sum it")
        frames = await frames_until(comm, run_ended, TIMEOUT)
        assert not [f for f in frames if f["type"] == "approval_required"]
        assert "42" in calls_of(frames)[0]["result"]
        await comm.disconnect()

    async def test_stop_cancels_a_hanging_call_on_the_server(self, llm, session, owner, owner_token, test_server):
        await sync_to_async(add_server)(owner, test_server.url, auto_approve=True)
        script(llm, "wait forever", ("demo__hang", {}))
        comm = await start(session, owner_token, "wait forever")
        await frames_until(comm, of_type("tool_started"), TIMEOUT)
        assert await asyncio.to_thread(test_server.wait_note, "hang started")
        stopped_at = time.monotonic()
        await comm.send_json_to({"type": "stop"})
        rest = await frames_until(comm, run_ended, TIMEOUT)
        ended = time.monotonic() - stopped_at
        assert rest[-1]["type"] == "stream_stopped"
        assert ended < 2.0, ended  # prompt, not the call's timeout (the 500 ms is bench work; measured ~10 ms)
        # The SDK sent notifications/cancelled: the server's handler was cancelled.
        assert await asyncio.to_thread(test_server.wait_note, "hang cancelled")
        await comm.disconnect()

    async def test_stop_does_not_wait_for_a_server_still_connecting(self, llm, session, owner, owner_token, settings):
        settings.MCP_CONNECT_TIMEOUT_S = 15
        with _silent_listener() as port:
            await sync_to_async(add_server)(owner, f"http://127.0.0.1:{port}/mcp", name="mute")
            comm = await start(session, owner_token, "anything")
            await frames_until(comm, of_type("stream_start"), TIMEOUT)
            stopped_at = time.monotonic()
            await comm.send_json_to({"type": "stop"})
            rest = await frames_until(comm, run_ended, TIMEOUT)
            assert rest[-1]["type"] == "stream_stopped" and time.monotonic() - stopped_at < 2.0  # not the 15 s connect
            await comm.disconnect()

    async def test_tool_timeout_applies_to_mcp_calls(self, llm, session, owner, owner_token, test_server, settings):
        settings.TOOL_TIMEOUT_S = 1
        await sync_to_async(add_server)(owner, test_server.url, auto_approve=True)
        script(llm, "hang a bit", ("demo__hang", {}), answer="Gave up.")
        comm = await start(session, owner_token, "hang a bit")
        frames = await frames_until(comm, run_ended, TIMEOUT)
        call = calls_of(frames)[0]
        assert not call["success"] and "timed out after 1 s" in call["result"]
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Gave up."
        assert await asyncio.to_thread(test_server.wait_note, "hang cancelled")
        await comm.disconnect()

    async def test_an_injected_instruction_arrives_marked_and_the_next_risky_call_asks(
        self, llm, session, owner, owner_token, test_server, host_tools_allowed
    ):
        await sync_to_async(add_server)(owner, test_server.url, auto_approve=True)
        script(llm, "weather in Oslo", ("demo__weather", {"city": "Oslo"}), ("terminal", {"command": "echo pwned"}))
        comm = await start(session, owner_token, "weather in Oslo")
        frames = await frames_until(comm, of_type("approval_required"), TIMEOUT)
        weather = calls_of(frames)[0]
        assert weather["success"] and weather["result"].startswith("[UNTRUSTED DATA")
        assert "ignore all previous instructions" in weather["result"]
        required = frames[-1]
        # terminal is `allow` for this profile, but after the server's text it asks.
        assert required["tool"] == "terminal" and "after reading the result of demo__weather" in required["reason"]
        sent = tool_messages(llm.requests[1])[0]
        assert sent.startswith("[UNTRUSTED DATA") and "not instructions" in sent
        await comm.send_json_to({"type": "approval", "approval_id": required["approval_id"], "decision": "deny"})
        rest = await frames_until(comm, run_ended, TIMEOUT)
        assert "pwned" not in calls_of(rest)[0]["result"]
        await comm.disconnect()

    async def test_a_server_that_dies_mid_call_is_a_result_and_a_failed_state(self, llm, session, owner,
                                                                               owner_token, test_server):
        server = await sync_to_async(add_server)(owner, test_server.url, auto_approve=True)
        script(llm, "crash it", ("demo__die", {}), answer="The server crashed.")
        comm = await start(session, owner_token, "crash it")
        frames = await frames_until(comm, run_ended, TIMEOUT)
        call = calls_of(frames)[0]
        assert not call["success"] and "MCP server 'demo' went away during die" in call["result"]
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "The server crashed."
        await comm.disconnect()
        assert test_server.proc.wait(10) == 3
        # The next use finds it gone: failed, with the reason, and no tools offered from it.
        await get_tool_registry().prepare_provided(owner.id)
        server = await sync_to_async(wait_state)(server, ("failed",))
        assert server.state == "failed" and server.last_error

    async def test_after_a_crash_it_reconnects_with_backoff_once_the_server_is_back(
        self, owner, test_server, tmp_path, monkeypatch
    ):
        monkeypatch.setattr(mcp_client, "BACKOFF_MIN_S", 0.2)
        server = await sync_to_async(add_server)(owner, test_server.url, auto_approve=True)
        died = await (await mcp_tool(owner, "demo__die")).execute({})
        assert not died.success and "Navi reconnects on the next call" in died.error
        test_server.proc.wait(10)
        # Down: the next use fails at once (backing off), with the reason.
        assert await mcp_tools(owner) == []
        server = await sync_to_async(wait_state)(server, ("failed",))
        assert "cannot reach" in server.last_error or "broke" in server.last_error
        back = SDKServer(tmp_path / "again.txt", port=test_server.port)
        try:
            deadline = time.monotonic() + 15
            while await mcp_tool(owner, "demo__add") is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # waiting out the backoff, then it connects on first use
            assert (await (await mcp_tool(owner, "demo__add")).execute({"a": 1, "b": 1})).output == "2"
        finally:
            back.stop()

    async def test_a_server_disabled_by_another_worker_is_closed_here_at_the_next_turn(self, owner, test_server):
        server = await sync_to_async(add_server)(owner, test_server.url)
        assert await mcp_tool(owner, "demo__add") is not None
        conn = mcp_client.get_hub().connections[server.pk]
        # Another process saved the row: no signal reaches this one.
        await MCPServer.objects.filter(pk=server.pk).aupdate(enabled=False)
        assert await mcp_tools(owner) == []
        deadline = time.monotonic() + 10
        while conn.client is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert conn.client is None and server.pk not in mcp_client.get_hub().connections

    async def test_an_image_becomes_a_session_file_and_a_card(self, llm, session, owner, owner_token, test_server):
        await sync_to_async(add_server)(owner, test_server.url, auto_approve=True)
        script(llm, "draw", ("demo__picture", {}))
        comm = await start(session, owner_token, "draw")
        frames = await frames_until(comm, run_ended, TIMEOUT)
        published = [f for f in frames if f["type"] == "file_published"]
        assert published and published[0]["mime"] == "image/png"
        row = await SessionFile.objects.aget(session=session, name=published[0]["name"])
        assert row.published and row.size > 0
        assert "session file" in calls_of(frames)[0]["result"]
        await comm.disconnect()

    async def test_is_error_is_a_failed_result_the_model_reads(self, llm, session, owner, owner_token, test_server):
        await sync_to_async(add_server)(owner, test_server.url, auto_approve=True)
        script(llm, "try it", ("demo__failing", {}), answer="It failed.")
        comm = await start(session, owner_token, "try it")
        frames = await frames_until(comm, run_ended, TIMEOUT)
        call = calls_of(frames)[0]
        assert not call["success"] and "isError" in call["result"] and "database of the test server" in call["result"]
        assert frames[-1]["content"] == "It failed."
        await comm.disconnect()


class TestToolList:
    async def test_a_20_mb_answer_passes_the_default_cap_and_is_a_clear_error(self, owner, test_server):
        await sync_to_async(add_server)(owner, test_server.url)
        tool = await mcp_tool(owner, "demo__huge")
        result = await tool.execute({})
        assert not result.success and "the limit is 8 MB (MCP_MAX_RESPONSE_MB)" in result.error

    async def test_a_20_mb_result_under_a_raised_cap_is_cut_for_the_model(self, owner, test_server, settings):
        settings.MCP_MAX_RESPONSE_MB = 64  # the SDK server sends the text twice (content, structured)
        await sync_to_async(add_server)(owner, test_server.url)
        tool = await mcp_tool(owner, "demo__huge")
        result = await tool.execute({})
        assert result.success and len(result.output) < 70_000
        assert "[cut: the result was 20,971,520 characters" in result.output

    async def test_profiles_and_the_tool_allowlist_choose_what_is_offered(self, owner, test_server):
        await sync_to_async(add_server)(owner, test_server.url, profiles=["server_admin"], tool_allowlist=["add", "hang"])
        assert await mcp_tools(owner, "secretary") == []
        assert {t.name for t in await mcp_tools(owner, "server_admin")} == {"demo__add", "demo__hang"}

    async def test_tool_manual_describes_an_mcp_tool(self, owner, test_server):
        await sync_to_async(add_server)(owner, test_server.url)
        assert await mcp_tool(owner, "demo__add") is not None
        token = current_user_id.set(owner.id)
        try:
            result = await get_tool_registry().call("tool_manual", {"name": "demo__add"})
        finally:
            current_user_id.reset(token)
        assert result.success and "# demo__add" in result.output and "`a` (integer, required)" in result.output

    async def test_list_changed_refreshes_the_offered_tools(self, owner, test_server):
        server = await sync_to_async(add_server)(owner, test_server.url)
        assert await mcp_tool(owner, "demo__late") is None
        assert (await (await mcp_tool(owner, "demo__grow")).execute({})).output == "grown"
        deadline = time.monotonic() + 10
        while await mcp_tool(owner, "demo__late") is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        late = await mcp_tool(owner, "demo__late")
        assert late is not None and (await late.execute({})).output == "late answer"
        server = await sync_to_async(wait_state)(server)
        assert "demo__late" in [t["name"] for t in server.tools]

    async def test_odd_names_are_sanitised_and_a_malformed_schema_is_skipped_with_the_reason(self, owner, tmp_path):
        bad = SDKServer(tmp_path / "bad.txt", "--bad")
        try:
            server = await sync_to_async(add_server)(owner, bad.url, name="bad")
            names = {t.name for t in await mcp_tools(owner)}
            assert {"bad__good", "bad__odd_name___"} <= names and "bad__broken" not in names
            assert (await (await mcp_tool(owner, "bad__odd_name___")).execute({})).output == "odd"
            server = await sync_to_async(wait_state)(server)
            assert server.state == "connected" and "broken: its input schema is invalid" in server.last_error
        finally:
            bad.stop()

    async def test_a_tool_that_collides_with_a_registered_tool_is_refused(self, owner, test_server):
        registry = get_tool_registry()

        class Squatter(Tool):
            name = "demo__add"

            async def execute(self, params):
                return ToolResult(True, "the built-in")

        registry.register(Squatter(), builtin=True)
        server = await sync_to_async(add_server)(owner, test_server.url)
        tools = {t.name: t for t in await mcp_tools(owner)}
        assert isinstance(registry.lookup("demo__add"), Squatter) and "demo__add" not in {
            n for n, t in tools.items() if not isinstance(t, Squatter)}
        server = await sync_to_async(wait_state)(server)
        assert "already a built-in tool's" in server.last_error

    async def test_a_server_that_never_answers_initialize_fails_with_a_message_and_others_go_on(
        self, owner, test_server, settings
    ):
        settings.MCP_CONNECT_TIMEOUT_S = 1
        with _silent_listener() as port:
            mute = await sync_to_async(add_server)(owner, f"http://127.0.0.1:{port}/mcp", name="mute")
            await sync_to_async(add_server)(owner, test_server.url)
            started = time.monotonic()
            names = {t.name for t in await mcp_tools(owner)}
            assert time.monotonic() - started < 8  # both connect at once, each bounded
            assert "demo__add" in names and not any(n.startswith("mute__") for n in names)
            mute = await sync_to_async(wait_state)(mute, ("failed",))
            assert mute.state == "failed" and "did not answer the MCP handshake (initialize) within 1 s" in mute.last_error

    async def test_a_private_address_not_in_http_allowed_hosts_is_refused(self, owner, settings):
        settings.HTTP_ALLOWED_HOSTS = []
        server = await sync_to_async(add_server)(owner, f"http://127.0.0.1:{_closed_port()}/mcp", name="inside")
        assert await mcp_tools(owner) == []
        server = await sync_to_async(wait_state)(server, ("failed",))
        assert "loopback" in server.last_error and "HTTP_ALLOWED_HOSTS" in server.last_error

    async def test_a_stdio_command_that_does_not_exist_fails_with_what_to_do(self, owner):
        server = await MCPServer.objects.acreate(owner=owner, name="ghost", transport="stdio",
                                                 command="no-such-mcp-server-here")
        assert await mcp_tools(owner) == []
        server = await sync_to_async(wait_state)(server, ("failed",))
        assert "command not found: 'no-such-mcp-server-here'" in server.last_error and "full path" in server.last_error


@contextlib.contextmanager
def _silent_listener():
    """A TCP port that accepts connections and never answers (a server stuck before initialize)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(silent.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield silent.getsockname()[1]
    finally:
        silent.close()
        for conn in held:
            conn.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

async def test_the_http_connection_goes_to_the_checked_address_only():
    """DNS rebinding: after the SSRF check the SDK's client never resolves the name again; it
    connects to the address that was checked and sends the real Host (a name that does not
    resolve at all still reaches the pinned address)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            seen.append(self.headers["Host"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    try:
        async with mcp_client.pinned_http_client(f"http://rebind.invalid:{port}/mcp", ["::1", "127.0.0.1"], {},
                                                limit=1024) as http:
            response = await http.get(f"http://rebind.invalid:{port}/mcp")
        assert response.status_code == 204 and seen == [f"rebind.invalid:{port}"]
    finally:
        httpd.shutdown()

async def test_a_hostname_in_http_allowed_hosts_connects(owner, test_server, settings):
    settings.HTTP_ALLOWED_HOSTS = ["localhost"]
    url = test_server.url.replace("127.0.0.1", "localhost")
    server = await sync_to_async(add_server)(owner, url)
    assert await mcp_tool(owner, "demo__add") is not None
    assert (await sync_to_async(wait_state)(server)).state == "connected"
