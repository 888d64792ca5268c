"""A chat's own model (issue #38): `GET /models` lists what the profiles' servers have,
`PATCH /sessions/<id> {"model"}` picks one of them, every call of the chat then uses it, and
the owner can pull a model into Ollama with progress."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient, Client

from sessions_app.models import Session
from tests.llm_server import Turn
from tests.test_chat_sessions import _socket
from tests.test_consumer import receive_until


class _bearer:
    """An AsyncClient whose every request carries the token."""

    def __init__(self, token):
        self.client, self.headers = AsyncClient(), {"Authorization": f"Bearer {token}"}

    async def get(self, path):
        return await self.client.get(path, headers=self.headers)

    async def post(self, path, body, **kw):
        return await self.client.post(path, body, headers=self.headers, **kw)

    async def patch(self, path, body, **kw):
        return await self.client.patch(path, body, headers=self.headers, **kw)


def _patch(client, sid, body):
    return client.patch(f"/sessions/{sid}", body, content_type="application/json")


@pytest.mark.django_db
class TestModelsListing:
    def test_it_lists_the_servers_models_and_the_default(self, owner_client, llm, settings):
        llm.models = ["qwen2.5:0.5b", "llama3.2:1b"]
        settings.OLLAMA_DEFAULT_MODEL = "gemma4:e2b-it-q8_0"
        body = owner_client.get("/models").json()
        ollama = [m for m in body["models"] if m["backend"] == "ollama"]
        assert [m["name"] for m in ollama] == ["llama3.2:1b", "qwen2.5:0.5b"]
        assert all(m["size"] == 1 << 30 for m in ollama)
        assert body["default"] == "gemma4:e2b-it-q8_0"  # what a new chat would ask for (missing here)
        assert body["can_pull"] is True

    def test_embedding_models_are_marked(self, owner_client, llm, settings):
        """A first run must not choose one to chat with (Navi's own nomic-embed-text is often pulled first)."""
        settings.EMBEDDING_MODEL = "house-vectors"
        llm.models = ["embeddinggemma:latest", "house-vectors:latest", "nomic-embed-text:latest", "qwen2.5:0.5b"]
        listed = {m["name"]: m.get("embedding", False) for m in owner_client.get("/models").json()["models"]}
        assert listed == {"embeddinggemma:latest": True, "house-vectors:latest": True,
                          "nomic-embed-text:latest": True, "qwen2.5:0.5b": False}

    def test_an_unreachable_server_is_named_not_a_crash(self, owner_client, llm, settings):
        llm.stop()
        body = owner_client.get("/models").json()
        assert body["models"] == []
        assert "cannot reach" in body["errors"]["ollama"]

    def test_it_needs_a_login(self, anon_client, llm):
        assert anon_client.get("/models").status_code in (302, 401)

    def test_a_plain_user_may_not_pull(self, django_user_model, llm, profiles):
        user = django_user_model.objects.create_user("plain", password="pw-123456789")
        client = Client()
        client.force_login(user)
        assert client.get("/models").json()["can_pull"] is False
        response = client.post("/models/pull", {"name": "qwen2.5:0.5b"}, content_type="application/json")
        assert response.status_code == 403
        assert llm.pulls == []


@pytest.mark.django_db
class TestChatModel:
    def test_a_listed_model_is_kept_and_shown(self, owner_client, llm, session):
        llm.models = ["qwen2.5:0.5b"]
        response = _patch(owner_client, session.id, {"model": "qwen2.5:0.5b"})
        assert response.status_code == 200 and response.json()["model"] == "qwen2.5:0.5b"
        assert owner_client.get(f"/sessions/{session.id}").json()["model"] == "qwen2.5:0.5b"
        assert _patch(owner_client, session.id, {"model": ""}).json()["model"] == ""  # back to the profile's

    def test_a_model_the_server_lacks_is_refused_with_what_it_has(self, owner_client, llm, session):
        llm.models = ["qwen2.5:0.5b"]
        response = _patch(owner_client, session.id, {"model": "gpt-17"})
        assert response.status_code == 400
        assert "qwen2.5:0.5b" in response.json()["error"] and "pull" in response.json()["error"]
        assert Session.objects.get(pk=session.pk).model == ""

    @pytest.mark.parametrize("bad", [17, None, ["a"], {"x": 1}, "m" * 201])
    def test_malformed_models_are_refused(self, owner_client, llm, session, bad):
        assert _patch(owner_client, session.id, {"model": bad}).status_code == 400
        assert Session.objects.get(pk=session.pk).model == ""

    def test_another_users_chat_is_not_found(self, llm, session, other_user):
        client = Client()
        client.force_login(other_user)
        assert _patch(client, session.id, {"model": "fake-llm"}).status_code == 404
        assert Session.objects.get(pk=session.pk).model == ""


@pytest.mark.django_db(transaction=True)
class TestEveryCallUsesTheChatsModel:
    async def test_a_fresh_install_whose_default_is_missing_chats_after_picking_one(
        self, llm, session, owner_token, no_planning, settings
    ):
        """The shipped default is not on the server; picking an installed model makes the chat work,
        and the answer and the title call both ask for it."""
        settings.CHAT_TITLES = "model"
        llm.models = ["qwen2.5:0.5b"]
        client = _bearer(owner_token)
        response = await client.patch(f"/sessions/{session.id}", {"model": "qwen2.5:0.5b"}, content_type="application/json")
        assert response.status_code == 200
        llm.script(Turn(content="Hello there."), Turn(content="Greeting"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "hello"})
        frames = await receive_until(comm)
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Hello there."
        titled = json.loads(await comm.receive_from(timeout=10))
        assert titled["type"] == "session_titled"
        assert {r["model"] for r in llm.requests} == {"qwen2.5:0.5b"}
        await comm.disconnect()


    async def test_the_tool_steps_ask_for_it_too(self, llm, session, owner_token, no_planning):
        """A turn with tool calls: each step and the answer after the results use the chat's model."""
        from tests.llm_server import Rule

        llm.models = ["qwen2.5:0.5b"]
        client = _bearer(owner_token)
        await client.patch(f"/sessions/{session.id}", {"model": "qwen2.5:0.5b"}, content_type="application/json")
        llm.add_rule(Rule(match="make my list", turns=[
            Turn(tool_calls=[{"name": "todo", "arguments": {"action": "set", "tasks": ["gym", "mail"]}}]),
            Turn(tool_calls=[{"name": "todo", "arguments": {"action": "read"}}]),
            Turn(content="Your list: gym, mail."),
        ]))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "make my list"})
        frames = await receive_until(comm)
        assert [f["type"] for f in frames].count("tool_call") == 2
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Your list: gym, mail."
        assert len(llm.requests) >= 3 and {r["model"] for r in llm.requests} == {"qwen2.5:0.5b"}
        await comm.disconnect()

    async def test_the_planning_call_asks_for_it_too(self, llm, session, owner_token, profiles):
        """Profiles plan here (the `profiles` fixture): the plan call and the answer use the chat's model."""
        from tests.live_ws import planning_rule

        llm.models = ["qwen2.5:0.5b"]
        client = _bearer(owner_token)
        await client.patch(f"/sessions/{session.id}", {"model": "qwen2.5:0.5b"}, content_type="application/json")
        llm.add_rule(planning_rule())
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "first list the files and then summarise them please"})
        frames = await receive_until(comm)
        assert frames[-1]["type"] == "stream_end"
        planned = [r for r in llm.requests if any("planning step" in str(m.get("content")) for m in r["messages"])]
        assert planned and len(llm.requests) > len(planned)  # the plan call, then the answer
        assert {r["model"] for r in llm.requests} == {"qwen2.5:0.5b"}
        await comm.disconnect()


@pytest.mark.django_db(transaction=True)
class TestPull:
    async def test_the_owner_pulls_a_model_with_progress_and_it_is_listed(self, llm, owner_token):
        llm.models = ["qwen2.5:0.5b"]
        client = _bearer(owner_token)
        response = await client.post("/models/pull", {"name": "llama3.2:1b"}, content_type="application/json")
        assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
        lines = [json.loads(x) for x in b"".join([c async for c in response.streaming_content]).splitlines()]
        progress = [x["completed"] / x["total"] for x in lines if "total" in x]
        assert progress == sorted(progress) and progress[-1] == 1.0
        assert lines[-1] == {"status": "success"}
        listed = (await client.get("/models")).json()["models"]
        assert "llama3.2:1b" in [m["name"] for m in listed]

    async def test_a_failed_pull_ends_with_an_error_line(self, llm, owner_token):
        llm.unpullable.add("nope:1b")
        client = _bearer(owner_token)
        response = await client.post("/models/pull", {"name": "nope:1b"}, content_type="application/json")
        lines = [json.loads(x) for x in b"".join([c async for c in response.streaming_content]).splitlines()]
        assert "file does not exist" in lines[-1]["error"] and lines[-1]["cause"] == "unknown_name"
        assert "ollama.com/library" in lines[-1]["error"]

    @pytest.mark.parametrize("status", [404, 405])
    async def test_a_server_that_cannot_pull_is_named_not_the_model(self, llm, owner_token, status):
        """An OpenAI-compatible server or a proxy has no /api/pull: the error blames the server."""
        llm.pull_status = status
        client = _bearer(owner_token)
        response = await client.post("/models/pull", {"name": "qwen2.5:0.5b"}, content_type="application/json")
        lines = [json.loads(x) for x in b"".join([c async for c in response.streaming_content]).splitlines()]
        assert lines == [{"error": lines[0]["error"], "cause": "cannot_pull"}]
        assert f"HTTP {status}" in lines[0]["error"] and "cannot pull models" in lines[0]["error"]
        assert "ollama.com/library" not in lines[0]["error"]

    async def test_a_full_disk_is_named(self, llm, owner_token):
        llm.pull_fails_with = "write /root/.ollama/models/blobs/sha256-6a07: no space left on device"
        client = _bearer(owner_token)
        response = await client.post("/models/pull", {"name": "qwen2.5:3b"}, content_type="application/json")
        lines = [json.loads(x) for x in b"".join([c async for c in response.streaming_content]).splitlines()]
        assert lines[-1]["cause"] == "no_space" and "disk is full" in lines[-1]["error"]
        assert any("total" in x for x in lines)  # progress came before

    @pytest.mark.parametrize("bad", ["", "-rf", "a b", "x" * 300, 5, "../../etc", "a/../../b", None])
    async def test_malformed_names_are_refused_before_ollama_hears_of_them(self, llm, owner_token, bad):
        client = _bearer(owner_token)
        response = await client.post("/models/pull", {"name": bad}, content_type="application/json")
        assert response.status_code == 400
        assert llm.pulls == []
