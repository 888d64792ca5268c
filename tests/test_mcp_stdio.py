"""stdio MCP servers: `mcp-server-time` (PyPI, nobody here wrote it) through a scripted run with
an approval, and the sandbox every stdio server runs in — a hostile server tries to read the
secret key, the database and another user's workspace, and to open a socket; all of it fails."""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import threading
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings

from tests.conftest import NO_SANDBOX, sandbox_works
from tests.llm_server import Rule, Turn
from tests.mcp_support import mcp_tool, mcp_tools, pids_running, wait_state
from tests.test_approvals import frames_until, of_type, offered, run_ended, start
from tests.test_tools_trust import assert_no_server_secrets
from tools_app.models import MCPServer
from tools_app.workspace import workspace_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sandbox_works(), reason=NO_SANDBOX),
]
TIMEOUT = 30
PROBE = Path(__file__).resolve().parent / "mcp_probe_server.py"
SECRET = "s3cr3t-mcp-do-not-leak"


@pytest.fixture(autouse=True)
def _setup(mcp_hub, no_planning, settings):
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.MCP_CONNECT_TIMEOUT_S = 20
    settings.TOOL_TIMEOUT_S = 20


@pytest.mark.skipif(shutil.which("mcp-server-time", path=f"{sys.prefix}/bin") is None,
                    reason="mcp-server-time is not installed: pip install -r requirements-test.txt")
async def test_mcp_server_time_answers_what_time_it_is_in_tokyo_after_one_approval(llm, session, owner, owner_token):
    # A global server, as the owner adds it in the admin: offered to every user.
    server = await MCPServer.objects.acreate(owner=None, name="time", transport="stdio", command="mcp-server-time",
                                             args=["--local-timezone", "UTC"])
    llm.add_rule(Rule(match="time is it in Tokyo", turns=[
        Turn(tool_calls=[{"name": "time__get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}]),
        Turn(content="It is late evening in Tokyo."),
    ]))
    comm = await start(session, owner_token, "what time is it in Tokyo?")
    required = (await frames_until(comm, of_type("approval_required"), TIMEOUT))[-1]
    assert required["tool"] == "time__get_current_time"
    assert {"time__get_current_time", "time__convert_time"} <= offered(llm.requests[0])
    await comm.send_json_to({"type": "approval", "approval_id": required["approval_id"], "decision": "approve"})
    rest = await frames_until(comm, run_ended, TIMEOUT)
    call = [f for f in rest if f["type"] == "tool_call"][0]
    assert call["success"] and '"timezone": "Asia/Tokyo"' in call["result"] and "datetime" in call["result"]
    assert rest[-1]["type"] == "stream_end" and rest[-1]["content"] == "It is late evening in Tokyo."
    await comm.disconnect()
    server = await sync_to_async(wait_state)(server)
    assert server.state == "connected" and {"time__get_current_time", "time__convert_time"} <= {
        t["name"] for t in server.tools}


async def test_mcp_server_fetch_reads_a_local_page_under_the_default_memory_cap(owner, local_page):
    # Issue 39 item 1: the PyPI fetch server exited under the old address-space cap.
    server = await MCPServer.objects.acreate(
        owner=owner, name="fetch", transport="stdio", command=f"{sys.prefix}/bin/mcp-server-fetch",
        args=["--allow-private-ips", "--ignore-robots-txt"], network=True, auto_approve=True)
    tool = await mcp_tool(owner, "fetch__fetch")
    assert tool is not None, (await sync_to_async(wait_state)(server)).stderr_tail
    # raw: its HTML simplifier (readabilipy) would `npm install` into its read-only package folder.
    result = await tool.execute({"url": local_page, "raw": True})
    assert result.success and "<p>hello from the local page</p>" in result.output, result
    server = await sync_to_async(wait_state)(server)
    assert server.state == "connected"


def _listener():
    """A TCP listener on the host's loopback that records whether anyone connected."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.settimeout(8)
    accepted: list[bool] = []

    def accept():
        with contextlib.suppress(OSError):
            conn, _ = sock.accept()
            accepted.append(True)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return sock, accepted


async def test_a_stdio_server_that_crashes_at_start_shows_its_stderr(owner):
    server = await MCPServer.objects.acreate(
        owner=owner, name="crashy", transport="stdio", command=sys.executable,
        args=["-c", "import sys; sys.stderr.write('missing config file /etc/crashy.toml\\n'); sys.exit(2)"])
    assert await mcp_tools(owner) == []
    server = await sync_to_async(wait_state)(server, ("failed",))
    assert server.state == "failed" and server.last_error
    assert "missing config file /etc/crashy.toml" in server.stderr_tail


@pytest.fixture(autouse=True)
def probe_outside_the_checkout(tmp_path_factory, monkeypatch):
    """The probe script in a folder of its own: inside Navi's checkout a server is shown nothing."""
    folder = tmp_path_factory.mktemp("probe")
    shutil.copy(PROBE, folder / PROBE.name)
    monkeypatch.setattr(sys.modules[__name__], "PROBE", folder / PROBE.name)


class TestSandbox:
    async def _probe(self, owner, **fields):
        await MCPServer.objects.acreate(owner=owner, name="probe", transport="stdio", command=sys.executable,
                                        args=[str(PROBE)], paths=[str(PROBE)],
                                        env={"PROBE_TOKEN": "its-own-secret"}, **fields)
        tools = {t.name: t for t in await mcp_tools(owner)}
        assert "probe__read" in tools, "the probe server did not start"
        return tools

    async def test_a_stdio_server_cannot_read_secrets_databases_or_other_workspaces(
        self, owner, other_user, tmp_path
    ):
        theirs = workspace_for(other_user.id) / "diary.txt"
        theirs.write_text(SECRET)
        key = Path(django_settings.BASE_DIR) / ".navi_secret_key"
        database = Path(str(django_settings.DATABASES["default"]["NAME"]))
        outside = tmp_path / "private.txt"
        outside.write_text(SECRET)
        tools = await self._probe(owner)
        for path in (key, database, theirs, outside):
            result = await tools["probe__read"].execute({"path": str(path)})
            assert "FAILED" in result.output and SECRET not in result.output, (path, result.output)
        # pid 1 in the sandbox is bwrap: its environment is the tool's, nothing of the server's.
        assert_no_server_secrets((await tools["probe__read"].execute({"path": "/proc/1/environ"})).output)
        listing = (await tools["probe__listing"].execute({"path": str(django_settings.BASE_DIR)})).output
        assert "manage.py" not in listing and ".navi_secret_key" not in listing  # only the bound probe file
        environment = (await tools["probe__environment"].execute({})).output
        assert "PROBE_TOKEN=its-own-secret" in environment  # its own config reaches it
        assert_no_server_secrets(environment.replace("PROBE_TOKEN=its-own-secret", ""))

    async def test_the_hosts_ca_settings_and_files_reach_a_sandboxed_server(self, owner, tmp_path, monkeypatch):
        """Behind a TLS-inspecting proxy the host trusts an extra CA: a sandboxed server (uvx,
        npx) must see the same settings and read the files they name, or its HTTPS fails."""
        bundle = tmp_path / "corporate-ca.pem"
        bundle.write_text("-----BEGIN CERTIFICATE-----\nMIIcorporate\n-----END CERTIFICATE-----\n")
        folder = tmp_path / "certs"
        folder.mkdir()
        (folder / "extra.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIextra\n")
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
            monkeypatch.setenv(name, str(bundle))
        monkeypatch.setenv("SSL_CERT_DIR", str(folder))
        tools = await self._probe(owner)
        environment = (await tools["probe__environment"].execute({})).output
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
            assert f"{name}={bundle}" in environment
        assert f"SSL_CERT_DIR={folder}" in environment
        assert "MIIcorporate" in (await tools["probe__read"].execute({"path": str(bundle)})).output
        assert "MIIextra" in (await tools["probe__read"].execute({"path": str(folder / "extra.pem")})).output
        # Shown, not handed over: the sandbox cannot change what the host trusts.
        assert "FAILED" in (await tools["probe__read"].execute({"path": str(tmp_path / "private.txt")})).output

    async def test_a_stdio_server_cannot_open_a_socket_unless_its_config_allows_the_network(self, owner):
        listener, accepted = _listener()
        try:
            tools = await self._probe(owner)
            port = listener.getsockname()[1]
            result = await tools["probe__connect"].execute({"host": "127.0.0.1", "port": port})
            assert "FAILED" in result.output and not accepted
            outside = await tools["probe__connect"].execute({"host": "1.1.1.1", "port": 443})
            assert "FAILED" in outside.output
        finally:
            listener.close()

    async def test_disabling_a_stdio_server_ends_its_process_group(self, owner):
        from tools_app.mcp import client as mcp_client

        await self._probe(owner)
        assert pids_running(str(PROBE)), "the probe server process is not running"
        server = await MCPServer.objects.aget(name="probe")
        conn = mcp_client.get_hub().connections[server.pk]
        server.enabled = False
        await server.asave()  # the admin, /settings and PATCH all save the row like this
        assert conn.state == "disabled" and conn.client is None
        assert not pids_running(str(PROBE))  # bwrap's child included
        assert await mcp_tools(owner) == []
