"""Per-chat profile, generated titles, the history after a reload, empty-chat reuse and
image-only messages (REST and WebSocket)."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.test import AsyncClient

from agent.models import Profile
from agent.turn import titles
from sessions_app.models import Message, Session, SessionFile, UserSettings
from tests.llm_server import Turn, talk
from tests.test_consumer import TIMEOUT, TokenClient, connect, receive_until

IMAGE = "aGVsbG8="


def _json(response):
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return json.loads(response.content)


async def _socket(session, token):
    comm = connect(session.id, token=token)
    assert (await comm.connect(timeout=TIMEOUT))[0]
    return comm


async def _released(session) -> None:
    for _ in range(250):
        if (await Session.objects.aget(pk=session.pk)).active_run_id == "":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the run did not finish")


async def _detail(token, session) -> dict:
    response = await AsyncClient().get(f"/sessions/{session.id}", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    return response.json()


@pytest.mark.django_db
class TestProfilePerChat:
    def test_list_and_detail_carry_the_profile_name_and_model(self, owner_client, session, settings):
        settings.OLLAMA_DEFAULT_MODEL = "default-model"
        detail = _json(owner_client.get(f"/sessions/{session.id}"))
        assert detail["profile_id"] == "secretary" and detail["profile_name"] == "Personal Secretary"
        assert detail["profile_model"] == "default-model"
        listed = _json(owner_client.get("/sessions"))["sessions"][0]
        assert (listed["profile_id"], listed["profile_name"]) == ("secretary", "Personal Secretary")

    def test_patch_switches_the_profile(self, owner_client, session):
        Profile.objects.filter(pk="server_admin").update(model="admin-model")
        response = owner_client.patch(
            f"/sessions/{session.id}", {"profile_id": "server_admin"}, content_type="application/json"
        )
        assert response.status_code == 200
        body = _json(response)
        assert body["profile_id"] == "server_admin" and body["profile_model"] == "admin-model"
        assert Session.objects.get(pk=session.pk).profile_id == "server_admin"

    @pytest.mark.parametrize(
        "body", [{"profile_id": "pirate"}, {"profile_id": 5}, {"profile_id": ""}, {"colour": "red"}]
    )
    def test_bad_patches_are_400(self, owner_client, session, body):
        response = owner_client.patch(f"/sessions/{session.id}", body, content_type="application/json")
        assert response.status_code == 400 and "error" in _json(response)
        assert Session.objects.get(pk=session.pk).profile_id == "secretary"

    def test_another_users_session_is_404(self, client, other_user, session):
        client.force_login(other_user)
        response = client.patch(
            f"/sessions/{session.id}", {"profile_id": "server_admin"}, content_type="application/json"
        )
        assert response.status_code == 404

    def test_renaming_locks_the_title_and_clearing_unlocks_it(self, owner_client, session):
        owner_client.patch(f"/sessions/{session.id}", {"title": "Mine"}, content_type="application/json")
        assert Session.objects.get(pk=session.pk).title_source == "user"
        owner_client.patch(f"/sessions/{session.id}", {"title": ""}, content_type="application/json")
        assert Session.objects.get(pk=session.pk).title_source == ""


@pytest.mark.django_db(transaction=True)
class TestProfileSwitchDuringARun:
    async def test_it_is_allowed_and_takes_effect_next_turn(self, llm, session, owner, owner_token, no_planning):
        await Profile.objects.filter(pk="server_admin").aupdate(model="admin-model")
        llm.script(Turn(content="slow " * 30, chunk_size=5, delay=0.03), Turn(content="second"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "first"})
        await comm.receive_from(timeout=TIMEOUT)
        client = AsyncClient()
        response = await client.patch(
            f"/sessions/{session.id}",
            {"profile_id": "server_admin"},
            content_type="application/json",
            headers={"Authorization": f"Bearer {owner_token}"},
        )
        assert response.status_code == 200
        frames = await receive_until(comm)
        assert frames[-1]["type"] == "stream_end"
        await comm.send_json_to({"type": "message", "content": "next"})
        await receive_until(comm)
        assert llm.requests[-1]["model"] == "admin-model"
        await comm.disconnect()


@pytest.mark.django_db(transaction=True)
class TestGeneratedTitle:
    @pytest.fixture(autouse=True)
    def _titles_on(self, settings):
        settings.CHAT_TITLES = "model"

    async def test_a_title_follows_the_first_answer(self, llm, session, owner_token, no_planning):
        llm.script(
            Turn(content="Rome is lovely in May."), Turn(content='"Trip to Rome."\nextra'), Turn(content="again")
        )
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "plan a trip to rome in may please"})
        frames = await receive_until(comm)
        titled = json.loads(await comm.receive_from(timeout=TIMEOUT))
        assert titled["type"] == "session_titled" and titled["title"] == "Trip to Rome"
        assert titled["run_id"] == frames[-1]["run_id"] and titled["seq"] == frames[-1]["seq"] + 1
        title_request = llm.requests[1]
        assert title_request["think"] is False and "title" in title_request["messages"][0]["content"]
        # capped, so a rambling model stops by itself
        assert title_request["options"]["num_predict"] == titles.MAX_TITLE_TOKENS
        await _released(session)
        stored = await Session.objects.aget(pk=session.pk)
        assert (stored.title, stored.title_source) == ("Trip to Rome", "model")
        await comm.send_json_to({"type": "message", "content": "more"})
        await receive_until(comm)
        await _released(session)
        assert len(llm.requests) == 3  # titled once
        await comm.disconnect()

    async def test_a_title_the_user_set_is_kept(self, llm, session, owner_token, no_planning):
        await Session.objects.filter(pk=session.pk).aupdate(title="My own", title_source="user")
        llm.script(Turn(content="answer"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "hello"})
        await receive_until(comm)
        await _released(session)
        assert len(llm.requests) == 1
        assert (await Session.objects.aget(pk=session.pk)).title == "My own"
        await comm.disconnect()

    async def test_a_rename_during_the_answer_wins_over_the_model(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="a slow answer", chunk_size=2, delay=0.05), Turn(content="Model title"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "hello"})
        while json.loads(await comm.receive_from(timeout=TIMEOUT))["type"] != "stream_delta":
            pass
        await Session.objects.filter(pk=session.pk).aupdate(title="Mine", title_source="user")
        frames = await receive_until(comm)
        await _released(session)
        assert not any(f["type"] == "session_titled" for f in frames)
        assert await comm.receive_nothing(timeout=0.3)
        stored = await Session.objects.aget(pk=session.pk)
        assert (stored.title, stored.title_source) == ("Mine", "user")
        await comm.disconnect()

    async def test_the_first_words_stay_when_the_title_call_fails(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="answer"), Turn(status=500, error="no"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "first words of the chat\nsecond line"})
        await receive_until(comm)
        await _released(session)
        stored = await Session.objects.aget(pk=session.pk)
        assert (stored.title, stored.title_source) == ("first words of the chat", "")
        await comm.disconnect()


@pytest.mark.django_db(transaction=True)
class TestHistoryAfterReload:
    async def test_files_memory_and_subagent_calls_are_kept_on_tool_rows(
        self, llm, session, owner_token, no_planning, settings
    ):
        folder = settings.SESSION_FILES_DIR / str(session.id)
        folder.mkdir(parents=True)
        (folder / "report.txt").write_text("hello")
        await SessionFile.objects.acreate(session=session, name="report.txt", path=str(folder / "report.txt"), size=5)
        # One call a step, as the default step writes them.
        llm.script(
            Turn(tool_calls=[{"name": "memory_save",
                              "arguments": {"category": "preferences", "key": "editor", "value": "neovim"}}]),
            Turn(tool_calls=[{"name": "content_publish", "arguments": {"name": "report.txt"}}]),
            Turn(tool_calls=[{"name": "spawn_agent", "arguments": {"task": "list my todos"}}]),
            Turn(tool_calls=[{"name": "todo", "arguments": {"action": "list"}}]),  # the sub-agent
            Turn(content="sub-agent done"),
            Turn(content="All done."),
        )
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "do three things"})
        frames = await receive_until(comm)
        assert frames[-1]["type"] == "stream_end"
        live = {f["type"] for f in frames}
        assert {"memory_saved", "file_published"} <= live
        assert any(f["type"] == "tool_call" and f.get("is_subagent") for f in frames)
        history = (await _detail(owner_token, session))["messages"]
        tools = {m["name"]: m for m in history if m["role"] == "tool"}
        assert tools["memory_save"]["meta"]["memory"] == [
            {"category": "preferences", "key": "editor", "value": "neovim"}
        ]
        published = tools["content_publish"]["meta"]["files"]
        assert published[0]["name"] == "report.txt" and published[0]["url"].endswith("/report.txt")
        sub = tools["spawn_agent"]["meta"]["subagent"]
        assert [c["tool"] for c in sub] == ["todo"] and set(sub[0]) == {"tool", "args", "result", "success"}
        assert history[-1]["content"] == "All done." and history[-1]["meta"] == {}
        await comm.disconnect()

    async def test_an_llm_error_stays_in_the_history(self, llm, session, owner_token, no_planning):
        # Every call fails: the default step's and the plain call it falls back to.
        llm.script(Turn(status=500, error="the model exploded"), Turn(status=500, error="the model exploded"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "hi"})
        frames = await receive_until(comm)
        assert frames[-1]["type"] == "error"
        await _released(session)
        history = (await _detail(owner_token, session))["messages"]
        assert [m["role"] for m in history] == ["user", "system"]
        assert history[1]["meta"] == {"kind": "error"} and history[1]["content"] == frames[-1]["message"]
        context = await Message.objects.filter(session=session, in_context=True).acount()
        assert context == 1  # the model never sees the error row
        await comm.disconnect()

    async def test_a_stopped_answer_is_interrupted_with_one_stopped_row(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content=talk(300), chunk_size=5, delay=0.02))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "talk"})
        while json.loads(await comm.receive_from(timeout=TIMEOUT))["type"] != "stream_delta":
            pass
        await comm.send_json_to({"type": "stop"})
        await receive_until(comm, last_type="stream_stopped")
        await _released(session)
        history = (await _detail(owner_token, session))["messages"]
        assert [(m["role"], m["status"]) for m in history] == [
            ("user", "complete"),
            ("assistant", "interrupted"),
            ("system", "interrupted"),
        ]
        assert history[2]["meta"] == {"kind": "stopped"} and history[2]["content"] == "Stopped."
        await comm.disconnect()


@pytest.mark.django_db
class TestEmptyChatReuse:
    REUSE = {"reuse_empty": True}

    def test_a_plain_post_always_creates_a_session(self, owner_client, owner):
        """A script creating 20 sessions to run 20 tasks in parallel gets 20 sessions."""
        ids = set()
        for _ in range(20):
            response = owner_client.post("/sessions", {}, content_type="application/json")
            assert response.status_code == 201
            ids.add(_json(response)["session_id"])
        assert len(ids) == 20 and Session.objects.filter(owner=owner).count() == 20

    def test_reuse_empty_returns_the_newest_empty_chat(self, owner_client, owner):
        first = owner_client.post("/sessions", self.REUSE, content_type="application/json")
        assert first.status_code == 201
        again = owner_client.post("/sessions", self.REUSE, content_type="application/json")
        assert again.status_code == 200
        assert _json(again) == _json(first)
        Message.objects.create(session_id=_json(first)["session_id"], seq=1, role="user", content="hi")
        third = owner_client.post("/sessions", self.REUSE, content_type="application/json")
        assert third.status_code == 201 and _json(third)["session_id"] != _json(first)["session_id"]
        assert Session.objects.filter(owner=owner).count() == 2

    def test_bad_flags_are_refused(self, owner_client, owner):
        assert owner_client.post("/sessions", {"reuse_empty": "yes"}, content_type="application/json").status_code == 400
        assert owner_client.post("/sessions", {"new": "yes"}, content_type="application/json").status_code == 400
        assert not Session.objects.filter(owner=owner).exists()

    def test_reuse_takes_the_requested_profile(self, owner_client):
        owner_client.post("/sessions", self.REUSE, content_type="application/json")
        response = owner_client.post("/sessions", {**self.REUSE, "profile_id": "server_admin"}, content_type="application/json")
        assert response.status_code == 200 and _json(response)["profile_id"] == "server_admin"

    def test_another_users_empty_chat_is_never_reused(self, owner_client, other_user):
        theirs = Session.objects.create(owner=other_user, profile_id="secretary")
        response = owner_client.post("/sessions", self.REUSE, content_type="application/json")
        assert response.status_code == 201 and _json(response)["session_id"] != str(theirs.id)

    def test_the_default_profile_setting_applies(self, owner_client, owner):
        UserSettings.objects.create(user=owner, default_profile_id="smart_home")
        assert _json(owner_client.post("/sessions", {}, content_type="application/json"))["profile_id"] == "smart_home"


@pytest.mark.django_db(transaction=True)
class TestImageOnlyMessages:
    async def test_over_websocket(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="a nice picture"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "images": [f"data:image/png;base64,{IMAGE}"]})
        frames = await receive_until(comm)
        assert frames[-1]["type"] == "stream_end" and frames[0]["user_message"] == ""
        assert llm.requests[-1]["messages"][-1]["images"] == [IMAGE]
        row = await Message.objects.aget(session=session, role="user")
        assert (row.content, row.images) == ("", [IMAGE])
        await comm.disconnect()

    async def test_over_rest(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="seen"))
        http = TokenClient(owner_token)
        response = await http.post(f"/sessions/{session.id}/messages", {"content": "", "images": [IMAGE]})
        assert response.status_code == 200 and response.json()["content"] == "seen"

    @pytest.mark.parametrize(
        "body",
        [{"images": []}, {"content": "  "}, {"content": None}, {"images": "x"}, {"content": 5, "images": [IMAGE]}],
    )
    async def test_nothing_at_all_is_still_refused(self, session, owner_token, body):
        http = TokenClient(owner_token)
        response = await http.post(f"/sessions/{session.id}/messages", body)
        assert response.status_code == 400
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", **body})
        frame = await comm.receive_json_from(timeout=TIMEOUT)
        assert frame["type"] == "error"
        await comm.disconnect()
