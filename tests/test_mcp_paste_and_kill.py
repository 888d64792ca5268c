"""Issue 39 end to end, as a Claude Desktop user meets it: paste a config with a stdio server
(mcp-server-time from PyPI, or server-everything from npm) and an HTTP server (the SDK-built
test server, or server-everything) into a running Navi, kill each while idle, and
read `failed` with the reason within 30 s (DESIGN §10) from the API, /health and
`manage.py navi_mcp list` (a process of its own, reading what the server wrote)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.live_server import ROOT, LiveNavi, free_port
from tests.llm_server import Rule, Turn
from tests.mcp_support import SDKServer, poll_server

LIMIT_S = 30  # DESIGN §10
TIME_SERVER = f"{sys.prefix}/bin/mcp-server-time"  # requirements-test.txt
EVERYTHING = ROOT / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"  # npm ci
NODE = shutil.which("node") or "node"


@pytest.fixture(scope="module")
def navi(llm_live):
    env = {"OLLAMA_HOST": llm_live.url, "HTTP_ALLOWED_HOSTS": "127.0.0.1", "MCP_CONNECT_TIMEOUT_S": "30"}
    with LiveNavi(env=env) as server:
        yield server


def children(pid: int) -> dict[int, list[int]]:
    """Every process's children, by parent pid."""
    found: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            found.setdefault(parent, []).append(int(entry))
    return found


def server_program(root: int, marker: str) -> list[int]:
    """The innermost processes under `root` whose command line holds `marker`: the server program
    itself, not the sandbox around it."""
    tree = children(root)

    def below(pid: int) -> list[int]:
        out, todo = [], list(tree.get(pid, []))
        while todo:
            out.append(todo.pop())
            todo.extend(tree.get(out[-1], []))
        return out

    def holds(pid: int) -> bool:
        with contextlib.suppress(OSError):
            return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        return False

    hits = {pid for pid in below(root) if holds(pid)}
    return [pid for pid in hits if not hits & set(below(pid))]


class EverythingHTTP:
    """@modelcontextprotocol/server-everything over streamable HTTP, in a process a test may kill."""

    def __init__(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.proc = subprocess.Popen([NODE, str(EVERYTHING), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server-everything did not start listening")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(10)


def pypi_and_sdk(tmp_path):
    """mcp-server-time (PyPI) over stdio, the SDK-built test server over HTTP."""
    web = SDKServer(tmp_path / "marker.txt")
    return {"command": TIME_SERVER, "args": ["--local-timezone", "UTC"]}, "mcp-server-time", web


def npm_everything(tmp_path):
    """server-everything (npm) over stdio, as pasted with node and its script, and over HTTP."""
    return {"command": NODE, "args": [str(EVERYTHING), "stdio"]}, str(EVERYTHING), EverythingHTTP()


@pytest.mark.parametrize("servers", [pypi_and_sdk, npm_everything])
def test_a_pasted_configs_servers_killed_while_idle_show_failed_with_the_reason_everywhere(navi, tmp_path, servers):
    stdio_entry, marker, web = servers(tmp_path)
    try:
        config = {"mcpServers": {"local": stdio_entry, "web": {"url": web.url, "headers": {"X-Team": "blue"}}}}
        with navi.api() as api:
            for old in api.get("/mcp/servers").json():  # the module's Navi: another case's servers go
                api.delete(f"/mcp/servers/{old['id']}")
            answer = api.post("/mcp/servers/import", json=config)
            assert answer.status_code == 201, answer.text
            assert answer.json()["errors"] == {}
            ids = {s["name"]: s["id"] for s in answer.json()["servers"]}
            assert set(ids) == {"local", "web"}
            for name, server_id in ids.items():
                body = poll_server(api, server_id, lambda b: b["state"] != "connecting", 90)
                assert body["state"] == "connected" and body["tools"], (name, body)

            # Killed while nobody calls them: the stdio program, and the HTTP server's process.
            program = server_program(navi.proc.pid, marker)
            assert program, "the stdio server's process was not found under Navi's"
            for pid in program:
                os.kill(pid, signal.SIGKILL)
            web.stop()

            failed = {name: poll_server(api, server_id, lambda b: b["state"] == "failed", LIMIT_S)
                      for name, server_id in ids.items()}
            assert failed["local"]["state"] == "failed", failed["local"]
            assert "the program exited" in failed["local"]["last_error"], failed["local"]
            assert failed["web"]["state"] == "failed", failed["web"]
            assert ("stopped answering" in failed["web"]["last_error"]
                    or "cannot reach" in failed["web"]["last_error"]), failed["web"]

            # The page lists them failed too, and /health names both with their reasons.
            listed = {s["name"]: s for s in api.get("/mcp/servers").json()}
            assert listed["local"]["state"] == listed["web"]["state"] == "failed", listed
            health = api.get("/health").json()["mcp"]
            assert health["status"] == "failing", health
            reasons = {entry["name"]: entry["last_error"] for entry in health["failing"]}
            assert set(reasons) == {"local", "web"} and all(reasons.values()), health

        # Another process reads the state the server wrote.
        lines = {line.split(" ", 1)[0]: line for line in navi._manage("navi_mcp", "list").splitlines()}
        assert " failed, " in lines["local"] and "the program exited" in lines["local"], lines
        assert " failed, " in lines["web"], lines
    finally:
        web.stop()


async def test_a_navi_mcp_serve_with_other_settings_does_not_overwrite_the_web_servers_state(navi, live_llm,
                                                                                            tmp_path):
    from mcp import Client, StdioServerParameters

    web = SDKServer(tmp_path / "marker.txt")
    try:
        with navi.api() as api:
            answer = api.post("/mcp/servers/import", json={"mcpServers": {"team": {"url": web.url}}})
            server_id = answer.json()["servers"][0]["id"]
            assert poll_server(api, server_id, lambda b: b["state"] != "connecting", 60)["state"] == "connected"
        # Beside the web server, a desktop client's `navi_mcp serve` that may not reach loopback:
        # its turn tries the user's servers and fails to reach this one.
        live_llm.add_rule(Rule(match="say hello", turns=[Turn(content="Hello.")]))
        env = {k: v for k, v in navi.env.items() if isinstance(v, str)}
        params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                       args=["manage.py", "navi_mcp", "serve", "--user", navi.username],
                                       env={**env, "HTTP_ALLOWED_HOSTS": ""})
        async with Client(params, cache=None) as client:
            result = await client.call_tool("ask_navi", {"question": "say hello"})
            assert not result.is_error and "Hello." in result.content[0].text, result.content
        with navi.api() as api:
            assert api.get(f"/mcp/servers/{server_id}").json()["state"] == "connected"
            assert "team" not in {entry["name"] for entry in api.get("/health").json()["mcp"]["failing"]}
        line = [row for row in navi._manage("navi_mcp", "list").splitlines() if row.startswith("team ")][0]
        assert " connected, " in line and "HTTP_ALLOWED_HOSTS" not in line, line
    finally:
        web.stop()


def test_after_a_restart_each_state_follows_its_server_without_any_use(navi, tmp_path):
    web = SDKServer(tmp_path / "marker.txt")
    try:
        config = {"mcpServers": {"local": {"command": TIME_SERVER}, "web": {"url": web.url}}}
        with navi.api() as api:
            for old in api.get("/mcp/servers").json():
                api.delete(f"/mcp/servers/{old['id']}")
            ids = {s["name"]: s["id"] for s in api.post("/mcp/servers/import", json=config).json()["servers"]}
            for server_id in ids.values():
                assert poll_server(api, server_id, lambda b: b["state"] != "connecting", 90)["state"] == "connected"
        navi.stop()
        web.stop()  # gone while Navi was down; the rows still say `connected`
        navi.start()
        with navi.api() as api:
            body = poll_server(api, ids["web"], lambda b: b["state"] == "failed", LIMIT_S)
            assert body["state"] == "failed" and "cannot reach" in body["last_error"], body
            # The stdio server was started again with Navi: it runs and shows so.
            body = poll_server(api, ids["local"], lambda b: b["state"] == "connected", 90)
            assert body["state"] == "connected", body
        assert server_program(navi.proc.pid, "mcp-server-time")
    finally:
        web.stop()
