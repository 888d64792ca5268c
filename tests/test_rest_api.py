"""The REST contract of DESIGN §4 (foundation part): shapes, statuses, ownership, auth."""

from __future__ import annotations

import json
import uuid

import pytest

from sessions_app.models import Message, Session, SessionFile

pytestmark = pytest.mark.django_db


def _json(response):
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return json.loads(response.content)


class TestHealth:
    def test_it_is_public_but_tells_anonymous_callers_only_the_status(self, anon_client):
        response = anon_client.get("/health")
        assert response.status_code == 200
        assert _json(response) == {"status": "degraded"}  # nothing listens on the test OLLAMA_HOST

    def test_it_reports_dependencies_to_signed_in_users(self, owner_client):
        body = _json(owner_client.get("/health"))
        assert body["status"] == "degraded"
        assert body["db"] == "ok"
        assert body["channel_layer"] == "ok"
        assert "ollama serve" in body["llm"]

    def test_it_reports_a_reachable_llm(self, owner_client, llm):
        assert _json(owner_client.get("/health"))["llm"] == "ok"

    def test_it_checks_the_backends_the_profiles_use(self, owner_client, llm, settings, profiles):
        from agent.models import Profile

        Profile.objects.update(llm_backend="openai")
        settings.OLLAMA_HOST = "http://127.0.0.1:9"  # unused by every profile: not checked
        settings.EMBEDDING_BASE_URL = llm.openai_url  # the embeddings from the same server, not Ollama
        body = _json(owner_client.get("/health"))
        assert body["llm"] == "ok" and body["status"] == "ok"
        settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
        body = _json(owner_client.get("/health"))
        assert body["status"] == "degraded"
        assert "unreachable at http://127.0.0.1:9/v1" in body["llm"] and "OPENAI_BASE_URL" in body["llm"]

    def test_it_names_each_failing_backend_when_several_are_used(self, owner_client, llm, settings, profiles):
        from agent.models import Profile
        from agent.web.health import llm_health

        Profile.objects.filter(pk="secretary").update(llm_backend="openai")
        settings.OPENAI_API_KEY = "wrong"
        llm.api_key = "test-key"
        report = llm_health()
        assert report["backends"]["ollama"]["status"] == "ok"
        assert "refused the credentials" in report["backends"]["openai"]["status"]
        assert report["backends"]["openai"]["profiles"] == ["secretary"]
        assert report["summary"].startswith("openai: ")



class TestAuth:
    @pytest.mark.parametrize(
        "method,path",
        [
            ("get", "/agents/profiles"),
            ("get", "/agents/tools"),
            ("get", "/sessions"),
            ("post", "/sessions"),
            ("get", f"/sessions/{uuid.uuid4()}"),
            ("delete", f"/sessions/{uuid.uuid4()}"),
            ("patch", f"/sessions/{uuid.uuid4()}/pin"),
            ("get", f"/sessions/{uuid.uuid4()}/context"),
            ("post", f"/sessions/{uuid.uuid4()}/messages"),
            ("post", f"/sessions/{uuid.uuid4()}/stop"),
        ],
    )
    def test_anonymous_requests_get_401_json_not_a_redirect(self, anon_client, method, path):
        response = getattr(anon_client, method)(path)
        assert response.status_code == 401
        assert "error" in _json(response)

    def test_a_bearer_token_authenticates(self, anon_client, owner_token):
        response = anon_client.get("/sessions", HTTP_AUTHORIZATION=f"Bearer {owner_token}")
        assert response.status_code == 200

    def test_a_bearer_token_needs_no_csrf_token(self, owner_token):
        from django.test import Client

        client = Client(enforce_csrf_checks=True)
        response = client.post("/sessions", "{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {owner_token}")
        assert response.status_code == 201

    def test_cookie_posts_need_csrf(self, owner):
        from django.test import Client

        client = Client(enforce_csrf_checks=True)
        client.force_login(owner)
        response = client.post("/sessions", "{}", content_type="application/json")
        assert response.status_code == 403
        assert "CSRF" in _json(response)["error"]

    def test_a_wrong_token_is_401(self, anon_client):
        response = anon_client.get("/sessions", HTTP_AUTHORIZATION="Bearer navi_nope")
        assert response.status_code == 401
        assert "navi_token" in _json(response)["error"]

    def test_tokens_are_stored_hashed(self, owner, owner_token):
        from sessions_app.models import ApiToken

        stored = ApiToken.objects.get(user=owner)
        assert owner_token not in stored.token_hash
        assert len(stored.token_hash) == 64

    def test_login_page_logs_in(self, anon_client, owner):
        from tests.conftest import PASSWORD

        assert anon_client.get("/login/").status_code == 200
        response = anon_client.post("/login/", {"username": "owner", "password": PASSWORD})
        assert response.status_code == 302
        assert anon_client.get("/sessions").status_code == 200

    def test_the_chat_page_redirects_anonymous_users_to_login(self, anon_client):
        response = anon_client.get("/")
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


class TestProfilesAndTools:
    def test_profiles_lists_the_seeded_three(self, owner_client):
        body = _json(owner_client.get("/agents/profiles"))
        ids = [p["id"] for p in body["profiles"]]
        assert ids == ["secretary", "server_admin", "smart_home"]
        secretary = body["profiles"][0]
        assert secretary["name"] == "Personal Secretary"
        assert secretary["planning_enabled"] is True
        assert "todo" in secretary["enabled_tools"]

    def test_tools_lists_registered_tools_with_schemas(self, owner_client):
        tools = _json(owner_client.get("/agents/tools"))["tools"]
        by_name = {t["name"]: t for t in tools}
        assert {"todo", "scratchpad"} <= set(by_name)
        assert by_name["todo"]["parameters"]["type"] == "object"
        assert by_name["todo"]["builtin"] is True

    def test_wrong_method_is_405_json(self, owner_client):
        response = owner_client.post("/agents/profiles")
        assert response.status_code == 405
        assert "GET" in _json(response)["error"]


class TestSessions:
    def test_create_returns_201_with_id_profile_and_time(self, owner_client):
        response = owner_client.post("/sessions", {"profile_id": "server_admin"}, content_type="application/json")
        assert response.status_code == 201
        body = _json(response)
        assert set(body) == {"session_id", "profile_id", "created_at"}
        assert body["profile_id"] == "server_admin"
        assert Session.objects.filter(pk=body["session_id"]).exists()

    def test_create_without_body_uses_the_default_profile(self, owner_client):
        response = owner_client.post("/sessions")
        assert response.status_code == 201
        assert _json(response)["profile_id"] == "secretary"

    def test_create_rejects_an_unknown_profile(self, owner_client):
        response = owner_client.post("/sessions", {"profile_id": "pirate"}, content_type="application/json")
        assert response.status_code == 400
        assert "pirate" in _json(response)["error"]
        assert Session.objects.count() == 0

    def test_create_rejects_bad_json(self, owner_client):
        response = owner_client.post("/sessions", "{not json", content_type="application/json")
        assert response.status_code == 400
        assert "JSON" in _json(response)["error"]

    def test_create_rejects_a_json_array(self, owner_client):
        response = owner_client.post("/sessions", "[1]", content_type="application/json")
        assert response.status_code == 400

    def test_list_is_pinned_first_then_most_recent(self, owner, owner_client):
        from datetime import timedelta

        from django.utils import timezone

        now = timezone.now()
        old = Session.objects.create(owner=owner, profile_id="secretary", last_active=now - timedelta(days=2))
        new = Session.objects.create(owner=owner, profile_id="secretary", last_active=now)
        pinned = Session.objects.create(owner=owner, profile_id="secretary", pinned=True, last_active=now - timedelta(days=9))
        ids = [s["session_id"] for s in _json(owner_client.get("/sessions"))["sessions"]]
        assert ids == [str(pinned.id), str(new.id), str(old.id)]

    def test_get_returns_display_messages_only(self, owner_client, session):
        Message.objects.create(session=session, seq=1, role="user", content="hi")
        Message.objects.create(session=session, seq=2, role="user", content="[image]", in_display=False)
        Message.objects.create(session=session, seq=3, role="assistant", content="hello", status="partial")
        body = _json(owner_client.get(f"/sessions/{session.id}"))
        assert body["session_id"] == str(session.id)
        assert [(m["role"], m["content"], m["status"]) for m in body["messages"]] == [
            ("user", "hi", "complete"),
            ("assistant", "hello", "partial"),
        ]

    def test_context_returns_context_rows_only(self, owner_client, session):
        Message.objects.create(session=session, seq=1, role="user", content="old", in_context=False)
        Message.objects.create(session=session, seq=2, role="user", content="summary", is_summary=True, in_display=False)
        body = _json(owner_client.get(f"/sessions/{session.id}/context"))
        assert [m["content"] for m in body["messages"]] == ["summary"]
        assert body["messages"][0]["is_summary"] is True

    def test_pin_and_unpin(self, owner_client, session):
        response = owner_client.patch(f"/sessions/{session.id}/pin", {"pinned": True}, content_type="application/json")
        assert response.status_code == 200 and _json(response)["pinned"] is True
        session.refresh_from_db()
        assert session.pinned
        owner_client.patch(f"/sessions/{session.id}/pin", {"pinned": False}, content_type="application/json")
        session.refresh_from_db()
        assert not session.pinned

    def test_pin_rejects_a_non_boolean(self, owner_client, session):
        response = owner_client.patch(f"/sessions/{session.id}/pin", {"pinned": "yes"}, content_type="application/json")
        assert response.status_code == 400

    def test_rename(self, owner_client, session):
        response = owner_client.patch(f"/sessions/{session.id}", {"title": "Trip plans"}, content_type="application/json")
        assert response.status_code == 200
        session.refresh_from_db()
        assert session.title == "Trip plans"

    def test_delete_removes_messages_and_files(self, owner_client, session, settings):
        folder = settings.SESSION_FILES_DIR / str(session.id)
        folder.mkdir(parents=True)
        (folder / "a.txt").write_text("x")
        SessionFile.objects.create(session=session, name="a.txt", path=str(folder / "a.txt"), size=1)
        Message.objects.create(session=session, seq=1, role="user", content="hi")
        response = owner_client.delete(f"/sessions/{session.id}")
        assert response.status_code == 200
        assert not Session.objects.filter(pk=session.id).exists()
        assert Message.objects.count() == 0 and SessionFile.objects.count() == 0
        assert not folder.exists()

    def test_unknown_id_is_404(self, owner_client):
        response = owner_client.get(f"/sessions/{uuid.uuid4()}")
        assert response.status_code == 404
        assert "error" in _json(response)

    @pytest.mark.parametrize("path", ["/sessions/not-a-uuid", "/sessions/1234/pin", "/sessions/%00/context"])
    def test_a_malformed_uuid_is_a_json_404(self, owner_client, path):
        response = owner_client.patch(path, {"pinned": True}, content_type="application/json") if path.endswith("pin") else owner_client.get(path)
        assert response.status_code == 404
        assert "error" in _json(response)

    def test_another_users_session_is_404_everywhere(self, client, other_user, session):
        client.force_login(other_user)
        assert client.get(f"/sessions/{session.id}").status_code == 404
        assert client.get(f"/sessions/{session.id}/context").status_code == 404
        assert client.patch(f"/sessions/{session.id}/pin", {"pinned": True}, content_type="application/json").status_code == 404
        assert client.delete(f"/sessions/{session.id}").status_code == 404
        assert client.post(f"/sessions/{session.id}/stop").status_code == 404
        assert client.post(f"/sessions/{session.id}/messages", {"content": "hi"}, content_type="application/json").status_code == 404
        assert Session.objects.filter(pk=session.id).exists()
        assert _json(client.get("/sessions"))["sessions"] == []

    def test_wrong_method_on_a_session_is_405(self, owner_client, session):
        response = owner_client.put(f"/sessions/{session.id}")
        assert response.status_code == 405
        assert response["Allow"] == "GET, PATCH, DELETE"

    def test_unknown_paths_are_json_404(self, owner_client):
        response = owner_client.get("/sessions/x/y/z")
        assert response.status_code == 404
