"""Which MCP servers a run's user is given at every turn's start (MCPProvider.load, one prepared
statement): their own and the global ones, enabled, by name; never another user's."""

from __future__ import annotations

import pytest

from tools_app.mcp.tools import MCPProvider, visible_servers
from tools_app.models import MCPServer
from tools_app.toolset import get_tool_registry

pytestmark = pytest.mark.django_db


def test_own_and_global_enabled_servers_by_name_never_another_users(owner, other_user):
    def make(name, who, **fields):
        return MCPServer.objects.create(owner=who, name=name, transport="http", url=f"http://127.0.0.1:9/{name}", **fields)

    make("zeta", owner)
    make("alpha", None)
    make("mine-off", owner, enabled=False)
    make("theirs", other_user)
    provider = MCPProvider(get_tool_registry())
    provider.load(owner.pk)
    assert [c.name for c in provider._visible[owner.pk]] == ["alpha", "zeta"]
    assert [c.name for c in provider._visible[owner.pk]] == [r.name for r in visible_servers(owner.pk)]
    provider.load(other_user.pk)
    assert [c.name for c in provider._visible[other_user.pk]] == ["alpha", "theirs"]
    provider.load(None)  # no user: the global ones only
    assert [c.name for c in provider._visible[None]] == ["alpha"]
