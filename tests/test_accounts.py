"""Accounts: login throttling (in the database, so shared by workers), password validators for
the owner account, the generated secret key file, NAVI_HTTPS, and what /health tells whom."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from sessions_app.models import LoginAttempt
from tests.conftest import PASSWORD
from tests.live_server import PYTHON, ROOT

pytestmark = pytest.mark.django_db


def _login(client: Client, username: str, password: str, ip: str = "10.0.0.1", path: str = "/login/"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=ip)


class TestLoginThrottling:
    def test_it_refuses_the_sixth_failed_attempt_with_429_and_retry_after(self, owner):
        client = Client()
        for _ in range(5):
            assert _login(client, "owner", "wrong").status_code == 200  # the form again, with an error
        response = _login(client, "owner", "wrong")
        assert response.status_code == 429
        assert 14 * 60 < int(response["Retry-After"]) <= 15 * 60
        assert b"Too many failed logins" in response.content

    def test_it_refuses_even_the_right_password_while_locked(self, owner):
        client = Client()
        for _ in range(5):
            _login(client, "owner", "wrong")
        assert _login(client, "owner", PASSWORD).status_code == 429
        assert "_auth_user_id" not in client.session

    def test_another_ip_or_another_username_is_not_affected(self, owner, other_user):
        client = Client()
        for _ in range(5):
            _login(client, "owner", "wrong", ip="10.0.0.1")
        assert _login(client, "owner", "wrong", ip="10.0.0.1").status_code == 429
        assert _login(Client(), "mallory", PASSWORD, ip="10.0.0.1").status_code == 302
        assert _login(Client(), "owner", PASSWORD, ip="10.0.0.2").status_code == 302

    def test_the_count_lives_in_the_database_and_ignores_case(self, owner):
        for _ in range(3):
            _login(Client(), "Owner", "wrong")
        assert LoginAttempt.objects.filter(username="owner", ip="10.0.0.1").count() == 3
        LoginAttempt.objects.bulk_create([LoginAttempt(username="owner", ip="10.0.0.1") for _ in range(2)])
        assert _login(Client(), "owner", "wrong").status_code == 429  # rows written by "another worker"

    @pytest.mark.parametrize("alias", ["ｏｗｎｅｒ", "ｏwner", " OWNER ", "Ｏｗｎｅｒ", "owner\u00a0"])
    def test_a_look_alike_spelling_shares_the_lock(self, owner, alias):
        """Six wrong passwords for 'owner', then the right one under a Unicode look-alike that
        Django's login form normalises (NFKC) to the same account: still locked."""
        client = Client()
        for _ in range(5):
            _login(client, "owner", "wrong")
        assert _login(client, "owner", "wrong").status_code == 429
        response = _login(Client(), alias, PASSWORD)
        assert response.status_code == 429
        assert "_auth_user_id" not in client.session

    def test_look_alike_failures_count_towards_the_real_name(self, owner):
        for alias in ["ｏｗｎｅｒ", "OWNER", "ｏwner", " owner", "Owner"]:
            assert _login(Client(), alias, "wrong").status_code == 200
        assert _login(Client(), "owner", PASSWORD).status_code == 429

    def test_a_successful_login_clears_the_failures(self, owner):
        for _ in range(4):
            _login(Client(), "owner", "wrong")
        assert _login(Client(), "owner", PASSWORD).status_code == 302
        assert not LoginAttempt.objects.exists()

    def test_failures_older_than_the_window_do_not_count(self, owner):
        from datetime import timedelta

        from django.utils import timezone

        old = timezone.now() - timedelta(minutes=16)
        LoginAttempt.objects.bulk_create([LoginAttempt(username="owner", ip="10.0.0.1", at=old) for _ in range(5)])
        assert _login(Client(), "owner", "wrong").status_code == 200
        assert LoginAttempt.objects.count() == 1  # the old rows were swept

    def test_the_admin_login_is_throttled_too(self, django_user_model):
        django_user_model.objects.create_superuser("boss", password=PASSWORD)
        for _ in range(5):
            assert _login(Client(), "boss", "wrong", path="/admin/login/").status_code == 200
        assert _login(Client(), "boss", PASSWORD, path="/admin/login/").status_code == 429


class TestOwnerPassword:
    @pytest.mark.parametrize("weak,reason", [("short", "too short"), ("password123", "too common"), ("8675309123", "entirely numeric"), ("navi-owner-navi", "too similar")])
    def test_ensure_owner_refuses_a_weak_password_with_a_clear_message(self, settings, django_user_model, weak, reason):
        settings.NAVI_ADMIN_USER, settings.NAVI_ADMIN_PASSWORD = "navi-owner", weak
        with pytest.raises(CommandError) as info:
            call_command("ensure_owner")
        assert "NAVI_ADMIN_PASSWORD is too weak" in str(info.value) and reason in str(info.value)
        assert not django_user_model.objects.exists()

    def test_ensure_owner_accepts_a_strong_password(self, settings, django_user_model):
        settings.NAVI_ADMIN_USER, settings.NAVI_ADMIN_PASSWORD = "navi", "plum-orbit-kettle-41"
        call_command("ensure_owner")
        assert django_user_model.objects.get(username="navi").check_password("plum-orbit-kettle-41")

    def test_all_four_standard_validators_are_on(self, settings):
        names = [v["NAME"].rsplit(".", 1)[1] for v in settings.AUTH_PASSWORD_VALIDATORS]
        assert set(names) >= {
            "UserAttributeSimilarityValidator", "MinimumLengthValidator", "CommonPasswordValidator", "NumericPasswordValidator"
        }


class TestSecretKeyFile:
    def test_it_is_created_0600_and_never_readable_by_others(self, tmp_path, monkeypatch):
        from navi_project import settings as navi_settings

        seen = []
        real_link = os.link

        def spy(src, dst):  # the moment the key appears under its real name
            seen.append((stat.S_IMODE(os.stat(src).st_mode), open(src).read()))
            return real_link(src, dst)

        monkeypatch.setattr(os, "link", spy)
        old_umask = os.umask(0)  # a permissive umask must not matter
        try:
            navi_settings._create_private_file(tmp_path / ".navi_secret_key", "the-key")
        finally:
            os.umask(old_umask)
        assert seen == [(0o600, "the-key")]
        path = tmp_path / ".navi_secret_key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "the-key"
        assert not list(tmp_path.glob(".navi_secret_key.*"))  # no temp file left

    def test_an_existing_key_is_kept(self, tmp_path):
        from navi_project import settings as navi_settings

        navi_settings._create_private_file(tmp_path / "k", "first")
        navi_settings._create_private_file(tmp_path / "k", "second")
        assert (tmp_path / "k").read_text() == "first"


def _https_settings(tmp_path, **env) -> dict:
    """The HTTPS-related settings as a fresh process computes them from this environment."""
    code = (
        "import json; from django.conf import settings as s; print(json.dumps({n: getattr(s, n) for n in "
        "['SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_HSTS_SECONDS', 'SECURE_PROXY_SSL_HEADER']}))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("NAVI_")}
    base.update(DJANGO_SETTINGS_MODULE="navi_project.settings", NAVI_TESTING="1", SECRET_KEY="k", PYTHONPATH=str(ROOT), **env)
    out = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, env=base, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


class TestHttpsSettings:
    def test_navi_https_switches_on_secure_cookies_hsts_and_the_proxy_header(self, tmp_path):
        s = _https_settings(tmp_path, NAVI_HTTPS="true")
        assert s["SESSION_COOKIE_SECURE"] and s["CSRF_COOKIE_SECURE"]
        assert s["SECURE_HSTS_SECONDS"] >= 31_536_000
        assert s["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]

    def test_plain_http_is_the_default(self, tmp_path):
        s = _https_settings(tmp_path)
        assert not s["SESSION_COOKIE_SECURE"] and not s["CSRF_COOKIE_SECURE"]
        assert not s["SECURE_HSTS_SECONDS"] and s["SECURE_PROXY_SSL_HEADER"] is None


class TestHealth:
    def test_anonymous_callers_get_only_the_status_word(self, anon_client, llm):
        response = anon_client.get("/health")
        assert response.status_code == 200
        assert json.loads(response.content) == {"status": "ok"}

    def test_signed_in_users_get_the_details(self, owner_client, owner_token, llm):
        body = json.loads(owner_client.get("/health").content)
        assert body["status"] == "ok" and body["db"] == "ok" and body["channel_layer"] == "ok" and "llm" in body
        token_body = json.loads(Client().get("/health", HTTP_AUTHORIZATION=f"Bearer {owner_token}").content)
        # mcp: failing MCP servers; vectors: the vector index
        assert {"status", "db", "channel_layer", "llm", "jobs", "mcp", "vectors"} <= set(token_body)
        assert token_body["vectors"] == "ok"

    def test_a_refused_channel_layer_makes_it_degraded_with_the_reason(self, owner_client, anon_client, llm, settings):
        from tests.live_server import free_port

        settings.CHANNEL_LAYERS = {"default": {
            "BACKEND": "navi_project.redis_layer.NaviRedisChannelLayer",
            "CONFIG": {"hosts": [{"address": f"redis://127.0.0.1:{free_port()}/0"}]},  # nothing listens there
        }}
        body = json.loads(owner_client.get("/health").content)
        assert body["status"] == "degraded"
        assert body["channel_layer"].startswith("error: Redis unreachable: ConnectionError")
        assert body["db"] == "ok"
        assert json.loads(anon_client.get("/health").content) == {"status": "degraded"}  # the word only

    def test_the_llm_probe_is_cached_for_a_few_seconds(self, owner_client, anon_client, monkeypatch):
        from agent.web import health as views

        calls = []
        monkeypatch.setattr(views, "_check_llm", lambda: calls.append(1) or "ok")
        views._llm_probe_cache.clear()
        for _ in range(3):
            assert json.loads(owner_client.get("/health").content)["llm"] == "ok"
            anon_client.get("/health")
        assert len(calls) == 1
        monkeypatch.setattr(views, "LLM_PROBE_TTL_S", 0)
        owner_client.get("/health")
        assert len(calls) == 2
