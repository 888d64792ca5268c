"""`manage.py navi_mcp list | test NAME | tools NAME | serve --user NAME`: MCP servers from the
terminal, and Navi itself as an MCP server over stdio (for a desktop client on this machine)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agent.web.mcp_server import serve_stdio
from tools_app.mcp import client as mcp_client
from tools_app.mcp import service
from tools_app.models import MCPServer


class Command(BaseCommand):
    help = "MCP servers: list them, test one, show its tools; or serve Navi over stdio (serve --user NAME)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["list", "test", "tools", "serve"])
        parser.add_argument("name", nargs="?", help="the server's name (test, tools)")
        parser.add_argument("--user", help="the user: whose server NAME is (test, tools), or who Navi acts as (serve)")

    def handle(self, *args, **opts):
        action = opts["action"]
        if action == "serve":
            return self._serve(opts)
        if action == "list":
            return self._list()
        server = self._server(opts["name"], opts.get("user"))
        if action == "test":
            server = service.test_connection(server)
            self._line(server)
            if server.stderr_tail:
                self.stdout.write("stderr (last lines):\n" + server.stderr_tail.rstrip())
            if service.state_of(server) != "connected":
                raise CommandError(f"{server.name}: {server.last_error or service.state_of(server)}")
            return None
        server = service.test_connection(server) if server.state != "connected" else server
        for tool in server.tools or []:
            note = f"  (not offered: {tool['problem']})" if tool.get("problem") else ""
            self.stdout.write(f"{tool['name']}: {tool.get('description', '')}{note}")
        if not server.tools:
            self.stdout.write(f"no tools ({service.state_of(server)}: {server.last_error or 'nothing listed'})")
        return None

    def _list(self) -> None:
        rows = MCPServer.objects.select_related("owner").order_by("name")
        if not rows:
            self.stdout.write("no MCP servers; add one in the admin or with POST /mcp/servers")
        for server in rows:
            self._line(server)

    def _line(self, server: MCPServer) -> None:
        owner = server.owner.get_username() if server.owner_id else "(global)"
        tools = len([t for t in server.tools or [] if not t.get("problem")])
        where = server.url if server.transport == "http" else server.command
        error = f" — {server.last_error}" if server.last_error else ""
        self.stdout.write(f"{server.name} [{server.transport}] {owner} {service.state_of(server)}, {tools} tool(s), {where}{error}")

    def _server(self, name: str | None, username: str | None) -> MCPServer:
        if not name:
            raise CommandError("give the server's name: manage.py navi_mcp test NAME (see navi_mcp list)")
        rows = MCPServer.objects.filter(name=name)
        if username:
            rows = rows.filter(owner__username=username)
        found = list(rows[:3])
        if not found:
            raise CommandError(f"no MCP server named {name!r}; see `manage.py navi_mcp list`")
        if len(found) > 1:
            globals_ = [s for s in found if s.owner_id is None]
            if len(globals_) != 1:
                raise CommandError(f"several servers are named {name!r}; add --user OWNER")
            return globals_[0]
        return found[0]

    def _serve(self, opts) -> None:
        username = opts.get("user")
        if not username:
            raise CommandError("serve acts as one user: manage.py navi_mcp serve --user NAME")
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user {username!r}")
        mcp_client.keep_state_here()  # maybe other settings than the web server's: its rows stay its
        serve_stdio(user.pk)
