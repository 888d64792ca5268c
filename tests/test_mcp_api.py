"""The MCP servers' REST API (DESIGN §9), who may see and change what, the admin, /health,
the metric and `manage.py navi_mcp`."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client

from navi_project.metrics import exposition
from sessions_app.models import ApiToken
from tests.mcp_support import logged_in, patch_json, post_json, wait_state
from tools_app.context import current_user_id
from tools_app.models import MCPServer
from tools_app.toolset import get_tool_registry

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_mcp")]


def bearer(user) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(user, name='t')[1]}"}


def test_a_user_adds_an_http_server_sees_it_connect_and_its_secrets_stay_hidden(owner, owner_client, test_server):
    created = post_json(owner_client, "/mcp/servers", {
        "name": "demo", "transport": "http", "url": test_server.url,
        "headers": {"Authorization": "Bearer very-secret-token-123"},
    })
    assert created.status_code == 201, created.content
    body = created.json()
    assert {"id", "name", "transport", "enabled", "state", "tools", "last_error"} <= set(body)
    assert body["state"] in ("connecting", "connected") and body["transport"] == "http"
    assert "very-secret-token-123" not in created.content.decode()
    tested = owner_client.post(f"/mcp/servers/{body['id']}/test").json()
    assert tested["state"] == "connected" and "demo__add" in [t["name"] for t in tested["tools"]]
    shown = owner_client.get(f"/mcp/servers/{body['id']}").json()
    assert shown["headers"]["Authorization"] != "Bearer very-secret-token-123" and "••••" in shown["headers"]["Authorization"]
    # Sending the masked value back keeps the secret; a new value replaces it.
    assert patch_json(owner_client, f"/mcp/servers/{body['id']}", {"headers": shown["headers"]}).status_code == 200
    assert MCPServer.objects.get(pk=body["id"]).headers == {"Authorization": "Bearer very-secret-token-123"}
    patch_json(owner_client, f"/mcp/servers/{body['id']}", {"headers": {"Authorization": "Bearer new-one-456789"}})
    assert MCPServer.objects.get(pk=body["id"]).headers == {"Authorization": "Bearer new-one-456789"}
    # Editing closed the old connection; the row never says "disabled" for an enabled server.
    assert wait_state(MCPServer.objects.get(pk=body["id"]), ("connected",)).state == "connected"


def test_another_user_cannot_see_call_or_change_someones_server(owner, owner_client, other_user, test_server):
    server = MCPServer.objects.create(owner=owner, name="demo", transport="http", url=test_server.url)
    mallory = logged_in(other_user)
    assert mallory.get("/mcp/servers").json() == []
    for response in (
        mallory.get(f"/mcp/servers/{server.pk}"),
        patch_json(mallory, f"/mcp/servers/{server.pk}", {"url": "http://127.0.0.1:9/mcp"}),
        mallory.delete(f"/mcp/servers/{server.pk}"),
        mallory.post(f"/mcp/servers/{server.pk}/test"),
    ):
        assert response.status_code == 404 and "error" in response.json()
    server.refresh_from_db()
    assert server.url == test_server.url
    # Not offered to their runs, and a call by name is an unknown tool.
    registry = get_tool_registry()
    registry.load_provided(other_user.id)
    assert not [t for t in registry.tools_for([], other_user.id, "secretary") if t.name.startswith("demo__")]
    token = current_user_id.set(other_user.id)
    try:
        from asgiref.sync import async_to_sync

        result = async_to_sync(registry.call)("demo__add", {"a": 1, "b": 2})
    finally:
        current_user_id.reset(token)
    assert not result.success and "unknown tool" in result.error
    assert not test_server.notes()  # the server never heard of mallory


def test_only_staff_with_run_host_tools_may_add_stdio_servers(owner_client, other_user, django_user_model):
    body = {"name": "local", "transport": "stdio", "command": "mcp-server-time"}
    mallory = logged_in(other_user)
    refused = post_json(mallory, "/mcp/servers", body)
    assert refused.status_code == 403 and "run host tools" in refused.json()["error"]
    staff = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    staff_client = logged_in(staff)
    assert post_json(staff_client, "/mcp/servers", body).status_code == 403
    assert not MCPServer.objects.exists()
    staff.user_permissions.add(Permission.objects.get(codename="run_host_tools"))
    staff_client.force_login(django_user_model.objects.get(pk=staff.pk))
    assert post_json(staff_client, "/mcp/servers", body).status_code == 201
    # A plain user cannot turn their http server into a stdio one either.
    theirs = post_json(mallory, "/mcp/servers", {"name": "web", "transport": "http", "url": "http://127.0.0.1:9/mcp"})
    assert theirs.status_code == 201, theirs.content
    changed = patch_json(mallory, f"/mcp/servers/{theirs.json()['id']}", body | {"name": "web"})
    assert changed.status_code == 403
    assert MCPServer.objects.get(pk=theirs.json()["id"]).transport == "http"


def test_bad_input_is_a_400_and_nothing_is_saved(owner_client, settings):
    settings.HTTP_ALLOWED_HOSTS = []
    cases = [
        ({"name": "x", "transport": "http", "url": "http://127.0.0.1:8123/mcp"}, "HTTP_ALLOWED_HOSTS"),
        ({"name": "x", "transport": "http", "url": "http://10.0.0.8/mcp"}, "private"),
        ({"name": "bad name!", "transport": "http", "url": "https://example.com/mcp"}, "name must be"),
        ({"name": "a__b", "transport": "http", "url": "https://example.com/mcp"}, "'__'"),
        ({"name": "x", "transport": "carrier-pigeon"}, "transport must be"),
        ({"name": "x", "transport": "http"}, "needs a url"),
        ({"name": "x", "transport": "http", "url": "ftp://example.com/"}, "scheme"),
        ({"name": "x", "transport": "http", "url": "https://example.com/mcp", "headers": ["a"]}, "headers must be"),
        ({"name": "x", "transport": "http", "url": "https://example.com/mcp", "profiles": ["nope"]}, "unknown profile"),
        ({"name": "x", "transport": "http", "url": "https://example.com/mcp", "colour": "red"}, "unknown field"),
    ]
    for body, message in cases:
        response = post_json(owner_client, "/mcp/servers", body)
        assert response.status_code == 400 and message in response.json()["error"], (body, response.content)
    assert post_json(owner_client, "/mcp/servers", ["not", "an", "object"]).status_code == 400
    assert not MCPServer.objects.exists()


def test_global_servers_are_offered_to_everyone_without_how_they_run(other_user, test_server):
    MCPServer.objects.create(owner=None, name="shared", transport="http", url=test_server.url,
                             headers={"Authorization": "Bearer admin-secret-999"})
    mallory = logged_in(other_user)
    listed = mallory.get("/mcp/servers")
    assert [s["name"] for s in listed.json()] == ["shared"] and listed.json()[0]["global"] is True
    assert "admin-secret" not in listed.content.decode() and test_server.url not in listed.content.decode()
    server_id = listed.json()[0]["id"]
    assert patch_json(mallory, f"/mcp/servers/{server_id}", {"enabled": False}).status_code == 403
    assert mallory.delete(f"/mcp/servers/{server_id}").status_code == 403
    # A user's own server may not take a global server's name (tools would clash).
    clash = post_json(mallory, "/mcp/servers", {"name": "shared", "transport": "http", "url": test_server.url})
    assert clash.status_code == 400 and "global server" in clash.json()["error"]


def test_cookie_sessions_need_the_csrf_token(owner):
    strict = logged_in(owner, enforce_csrf_checks=True)
    response = post_json(strict, "/mcp/servers", {"name": "x", "transport": "http", "url": "https://example.com/mcp"})
    assert response.status_code == 403
    assert not MCPServer.objects.exists()
    token_client = Client(enforce_csrf_checks=True)  # Bearer requests carry no cookie: no CSRF
    assert token_client.get("/mcp/servers", **bearer(owner)).status_code == 200
    assert Client().get("/mcp/servers").status_code == 401


def test_health_reports_failing_servers_to_signed_in_users(owner, owner_client, anon_client):
    server = MCPServer.objects.create(owner=owner, name="ghost", transport="stdio", command="no-such-program-x")
    with pytest.raises(CommandError, match="command not found"):
        call_command("navi_mcp", "test", "ghost", stdout=io.StringIO())
    server = wait_state(server, ("failed",))
    health = owner_client.get("/health").json()
    assert health["mcp"]["status"] == "failing"
    assert health["mcp"]["failing"][0]["name"] == "ghost" and "command not found" in health["mcp"]["failing"][0]["last_error"]
    assert "mcp" not in anon_client.get("/health").json()


def test_the_command_lists_tests_and_shows_tools_and_calls_are_counted(owner, test_server):
    MCPServer.objects.create(owner=owner, name="demo", transport="http", url=test_server.url)
    out = io.StringIO()
    call_command("navi_mcp", "test", "demo", stdout=out)
    assert "demo [http] owner connected" in out.getvalue()
    out = io.StringIO()
    call_command("navi_mcp", "tools", "demo", stdout=out)
    assert "demo__add: Add two integers." in out.getvalue()
    out = io.StringIO()
    call_command("navi_mcp", "list", stdout=out)
    assert "demo [http]" in out.getvalue()
    with pytest.raises(CommandError, match="no MCP server named 'nope'"):
        call_command("navi_mcp", "tools", "nope")
    registry = get_tool_registry()
    registry.load_provided(owner.id)
    from asgiref.sync import async_to_sync

    async_to_sync(registry.prepare_provided)(owner.id)
    tool = registry.lookup("demo__add") or {t.name: t for t in registry.tools_for([], owner.id, None)}["demo__add"]
    assert async_to_sync(tool.execute)({"a": 1, "b": 1}).output == "2"
    assert b'navi_mcp_calls_total{outcome="ok",server="demo"}' in exposition()


def test_the_admins_test_connection_button_shows_the_state(owner_client, test_server):
    server = MCPServer.objects.create(owner=None, name="shared", transport="http", url=test_server.url)
    response = owner_client.post(f"/admin/tools_app/mcpserver/{server.pk}/test/", follow=True)
    shown = [str(m) for m in response.context["messages"]]
    assert response.status_code == 200 and any(m.startswith("shared: connected") for m in shown), shown
    assert wait_state(server).state == "connected"
    assert owner_client.get(f"/admin/tools_app/mcpserver/{server.pk}/change/").content.count(b"shared__add") >= 1


def test_the_admin_masks_secrets_and_refuses_stdio_to_staff_without_the_permission(owner, owner_client,
                                                                                   django_user_model):
    server = MCPServer.objects.create(owner=None, name="timesrv", transport="stdio", command="mcp-server-time",
                                      env={"API_KEY": "admin-only-secret-42"})
    page = owner_client.get(f"/admin/tools_app/mcpserver/{server.pk}/change/")
    assert page.status_code == 200 and b"admin-only-secret-42" not in page.content
    assert f"/admin/tools_app/mcpserver/{server.pk}/test/".encode() in page.content  # the test connection button
    staff = django_user_model.objects.create_user("staff2", password="x", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["add_mcpserver", "change_mcpserver"]))
    staff_client = logged_in(staff)
    form = {"name": "local2", "transport": "stdio", "command": "mcp-server-time", "args": "[]", "env": "{}",
            "headers": "{}", "paths": "[]", "profiles": "[]", "tool_allowlist": "[]", "auto_approve_tools": "[]",
            "tools": "[]", "enabled": "on", "state": "connecting", "created_at_0": "2026-01-01", "created_at_1": "00:00"}
    response = staff_client.post("/admin/tools_app/mcpserver/add/", form)
    assert response.status_code == 200 and b"run host tools" in response.content
    assert not MCPServer.objects.filter(name="local2").exists()


def test_a_connected_server_is_shown_with_its_tools_while_its_rows_copy_waits(owner, owner_client, test_server, monkeypatch):
    """The row is written by a thread of its own, a moment after the connection changes; a GET in
    between read the live state beside the row's tools: `connected` with no tools (seen on a loaded
    machine, where the write waited behind others)."""
    import threading

    from tests.mcp_support import poll_server
    from tools_app.mcp import client as mcp_client

    held, real = threading.Event(), mcp_client._writer

    class HeldWrites:  # the row's writes wait until the test lets them go
        def submit(self, fn, *args):
            return real.submit(lambda: (held.wait(30), fn(*args))[1])

    monkeypatch.setattr(mcp_client, "_writer", HeldWrites())
    try:
        created = post_json(owner_client, "/mcp/servers", {"name": "demo", "transport": "http", "url": test_server.url})
        server_id = created.json()["id"]
        body = poll_server(owner_client, server_id, lambda b: b["state"] != "connecting", 30)
        assert body["state"] == "connected" and "demo__add" in [t["name"] for t in body["tools"]], body
        assert MCPServer.objects.get(pk=server_id).tools == []  # the row's copy is still waiting
        listed = {s["id"]: s for s in owner_client.get("/mcp/servers").json()}
        assert "demo__add" in [t["name"] for t in listed[server_id]["tools"]]
    finally:
        held.set()
    assert "demo__add" in [t["name"] for t in wait_state(MCPServer.objects.get(pk=server_id), ("connected",)).tools]
