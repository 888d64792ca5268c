"""GET/PATCH /settings and the API token endpoints (/settings/tokens)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client

from sessions_app.models import ApiToken, UserSettings, hash_token

pytestmark = pytest.mark.django_db


def _json(response):
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return json.loads(response.content)


class TestSettings:
    def test_defaults(self, owner_client, settings):
        assert _json(owner_client.get("/settings")) == {
            "theme": "system",
            "default_profile": None,
            "notify_when_done": False,
            "time_zone": settings.TIME_ZONE,
            "telegram": {"linked": False, "username": None},  # messaging_app's part (DESIGN §9)
            # The owner's (DESIGN §11): .env's values until Settings changes them.
            "default_model": settings.OLLAMA_DEFAULT_MODEL, "default_backend": "ollama",
            "embedding_model": settings.EMBEDDING_MODEL,
            "connections": {"ollama_url": settings.OLLAMA_HOST.rstrip("/"), "openai": [], "can_change": True},
        }

    def test_patch(self, owner_client, owner):
        body = {"theme": "dark", "default_profile": "server_admin", "notify_when_done": True, "time_zone": "Europe/Berlin"}
        response = owner_client.patch("/settings", body, content_type="application/json")
        shown = {**body, "telegram": {"linked": False, "username": None}}
        assert response.status_code == 200 and {k: _json(response)[k] for k in shown} == shown
        got = _json(owner_client.get("/settings"))
        assert {k: got[k] for k in shown} == shown
        response = owner_client.patch("/settings", {"default_profile": None}, content_type="application/json")
        assert _json(response)["default_profile"] is None and _json(response)["theme"] == "dark"

    @pytest.mark.parametrize(
        "body",
        [
            {"theme": "blue"},
            {"default_profile": "pirate"},
            {"default_profile": 3},
            {"notify_when_done": "yes"},
            {"time_zone": "Mars/Olympus"},
            {"time_zone": 5},
            {"font": "big"},
        ],
    )
    def test_bad_patches_are_400(self, owner_client, owner, body):
        response = owner_client.patch("/settings", body, content_type="application/json")
        assert response.status_code == 400 and "error" in _json(response)
        assert UserSettings.objects.get(user=owner).theme == "system"

    def test_settings_are_per_user(self, owner_client, client, other_user):
        owner_client.patch("/settings", {"theme": "dark"}, content_type="application/json")
        client.force_login(other_user)
        assert _json(client.get("/settings"))["theme"] == "system"

    def test_auth_and_csrf(self, anon_client, owner, owner_client):
        assert anon_client.get("/settings").status_code == 401
        csrf = Client(enforce_csrf_checks=True)
        csrf.force_login(owner)
        assert csrf.patch("/settings", {"theme": "dark"}, content_type="application/json").status_code == 403
        assert owner_client.post("/settings").status_code == 405


class TestTokens:
    def test_create_list_use_and_revoke(self, owner_client, owner, anon_client):
        response = owner_client.post("/settings/tokens", {"name": "laptop script"}, content_type="application/json")
        assert response.status_code == 201
        created = _json(response)
        raw = created["token"]
        assert raw.startswith("navi_") and created["name"] == "laptop script" and created["prefix"] == raw[:10]
        assert ApiToken.objects.get(pk=created["id"]).token_hash == hash_token(raw)  # stored hashed
        listed = _json(owner_client.get("/settings/tokens"))["tokens"]
        assert [t["id"] for t in listed] == [created["id"]]
        assert "token" not in listed[0]  # shown once, never again
        assert anon_client.get("/sessions", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
        assert _json(owner_client.get("/settings/tokens"))["tokens"][0]["last_used"] is not None
        response = owner_client.delete(f"/settings/tokens/{created['id']}")
        assert response.status_code == 200 and _json(response) == {"ok": True, "id": created["id"]}
        assert anon_client.get("/sessions", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401

    def test_last_used_is_kept_to_the_minute(self, anon_client, owner_token):
        token = ApiToken.objects.get(token_hash=hash_token(owner_token))
        auth = {"HTTP_AUTHORIZATION": f"Bearer {owner_token}"}
        assert anon_client.get("/sessions", **auth).status_code == 200
        first = ApiToken.objects.get(pk=token.pk).last_used
        assert first is not None
        assert anon_client.get("/sessions", **auth).status_code == 200
        assert ApiToken.objects.get(pk=token.pk).last_used == first  # within the minute: no write
        ApiToken.objects.filter(pk=token.pk).update(last_used=first - timedelta(minutes=2))
        assert anon_client.get("/sessions", **auth).status_code == 200
        assert ApiToken.objects.get(pk=token.pk).last_used > first - timedelta(seconds=5)
        # a clock set back (a time in the future) is corrected, not kept
        ApiToken.objects.filter(pk=token.pk).update(last_used=first + timedelta(days=1))
        assert anon_client.get("/sessions", **auth).status_code == 200
        assert ApiToken.objects.get(pk=token.pk).last_used < first + timedelta(minutes=5)

    def test_a_token_can_manage_tokens(self, anon_client, owner_token):
        auth = {"HTTP_AUTHORIZATION": f"Bearer {owner_token}"}
        assert anon_client.post("/settings/tokens", {}, content_type="application/json", **auth).status_code == 201
        assert len(_json(anon_client.get("/settings/tokens", **auth))["tokens"]) == 2

    def test_another_users_token_is_404_and_survives(self, owner_client, other_user):
        theirs, raw = ApiToken.issue(other_user, name="theirs")
        assert owner_client.delete(f"/settings/tokens/{theirs.id}").status_code == 404
        assert ApiToken.objects.filter(pk=theirs.pk).exists()
        assert _json(owner_client.get("/settings/tokens"))["tokens"] == []

    @pytest.mark.parametrize("path,status", [("/settings/tokens/abc", 404), ("/settings/tokens/99999", 404)])
    def test_malformed_and_unknown_ids(self, owner_client, path, status):
        assert owner_client.delete(path).status_code == status

    @pytest.mark.parametrize("body", [{"name": 5}, {"name": "x" * 101}, "[1]"])
    def test_bad_names_are_400(self, owner_client, body):
        payload = body if isinstance(body, str) else json.dumps(body)
        assert owner_client.post("/settings/tokens", payload, content_type="application/json").status_code == 400

    def test_auth(self, anon_client):
        assert anon_client.get("/settings/tokens").status_code == 401
        assert anon_client.post("/settings/tokens").status_code == 401
        assert anon_client.delete("/settings/tokens/1").status_code == 401
