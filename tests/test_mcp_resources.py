"""Issue 39 item 6 (last part): a client server's resources and prompts are listed with the
server, a resource can be read (to attach to a chat) and a prompt fetched (a slash command's
text) through REST; another user gets 404, bad input a 400 that says what to do."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.mcp_support import logged_in, post_json, wait_state
from tools_app.models import MCPServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_mcp")]


def _connected(owner_client, url) -> dict:
    created = post_json(owner_client, "/mcp/servers", {"name": "demo", "transport": "http", "url": url}).json()
    wait_state(MCPServer.objects.get(pk=created["id"]))
    return owner_client.get(f"/mcp/servers/{created['id']}").json()


def test_resources_and_prompts_are_listed_read_and_fetched(owner_client, test_server):
    server = _connected(owner_client, test_server.url)
    assert server["state"] == "connected"
    assert {"uri": "notes://today", "name": "today", "description": "Today's notes.", "mime_type": "text/plain"} in \
        server["resources"]
    review = next(p for p in server["prompts"] if p["name"] == "review")
    assert review["arguments"] == [{"name": "topic", "required": True, "description": ""}]
    read = owner_client.get(f"/mcp/servers/{server['id']}/resource", {"uri": "notes://today"})
    assert read.status_code == 200 and read.json()["contents"][0]["text"] == "Buy milk. Call Ada."
    assert read.json()["untrusted"] is True
    prompt = post_json(owner_client, f"/mcp/servers/{server['id']}/prompt",
                       {"name": "review", "arguments": {"topic": "the budget"}})
    assert prompt.status_code == 200, prompt.content
    assert prompt.json()["messages"] == [{"role": "user", "text": "Please review the budget carefully."}]


def test_bad_input_and_other_users_are_refused(owner_client, other_user, test_server):
    server = _connected(owner_client, test_server.url)
    base = f"/mcp/servers/{server['id']}"
    assert owner_client.get(f"{base}/resource").status_code == 400
    missing = owner_client.get(f"{base}/resource", {"uri": "notes://nope"})
    assert missing.status_code == 400 and "answered with an error" in missing.json()["error"]
    for body in ({}, {"name": ""}, {"name": "review", "arguments": {"topic": 5}}, {"name": "review", "arguments": []}):
        answer = post_json(owner_client, f"{base}/prompt", body)
        assert answer.status_code == 400, body
    mallory = logged_in(other_user)
    assert mallory.get(f"{base}/resource", {"uri": "notes://today"}).status_code == 404
    assert post_json(mallory, f"{base}/prompt", {"name": "review", "arguments": {"topic": "x"}}).status_code == 404
    assert Client().get(f"{base}/resource", {"uri": "notes://today"}).status_code in (401, 403)
