"""REST for notification targets (/settings/notify), the redaction of their secrets (API and
admin), ownership, bad input, and the PWA files (/manifest.webmanifest, /sw.js)."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from notify_app.models import NotifyTarget
from tests.notify_services import PushService, Receiver, Subscriber

pytestmark = pytest.mark.django_db
NTFY = "ntfys://navibot7:hunter2pass@ntfy.sh/topic-7f3kq9"


def _json(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return json.loads(response.content)


def _post(client, body, **extra):
    payload = body if isinstance(body, str) else json.dumps(body)
    return client.post("/settings/notify", payload, content_type="application/json", **extra)


@pytest.fixture
def push(settings):
    with PushService() as service:
        settings.NOTIFY_ALLOW_HTTP_PUSH = True
        settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{service.port}"]
        yield service


class TestContract:
    def test_list_starts_with_the_vapid_key_and_no_targets(self, owner_client):
        body = _json(owner_client.get("/settings/notify"))
        assert body["targets"] == [] and len(body["vapid_public_key"]) == 87  # 65 bytes, base64url

    def test_add_list_and_remove_an_apprise_url(self, owner_client, owner):
        response = _post(owner_client, {"kind": "apprise", "url": NTFY, "label": "my phone"})
        assert response.status_code == 201
        created = _json(response)
        assert created["kind"] == "apprise" and created["label"] == "my phone"
        assert created["address"] == "ntfys://…@ntfy.sh/top***"
        assert set(created) == {
            "id",
            "kind",
            "label",
            "address",
            "created_at",
            "last_ok_at",
            "last_error",
            "last_error_at",
        }
        assert NotifyTarget.objects.get(pk=created["id"], owner=owner).url == NTFY  # stored whole
        assert _json(owner_client.get("/settings/notify"))["targets"] == [created]
        response = owner_client.delete(f"/settings/notify/{created['id']}")
        assert response.status_code == 200 and _json(response) == {"ok": True, "id": created["id"]}
        assert _json(owner_client.get("/settings/notify"))["targets"] == []

    def test_a_webpush_subscription_shows_only_the_push_service(self, owner_client, push):
        key = _json(owner_client.get("/settings/notify"))["vapid_public_key"]
        browser = push.subscribe(key)
        response = _post(owner_client, {"kind": "webpush", "subscription": browser.subscription()})
        assert response.status_code == 201
        assert _json(response)["address"] == f"{push.origin}/…"
        # the same browser subscribing again updates its one target
        again = _post(owner_client, {"kind": "webpush", "subscription": browser.subscription(), "label": "laptop"})
        assert again.status_code == 200 and _json(again)["id"] == _json(response)["id"]
        assert NotifyTarget.objects.count() == 1 and NotifyTarget.objects.get().label == "laptop"

    def test_send_a_test_and_see_its_outcome(self, owner_client, push):
        key = _json(owner_client.get("/settings/notify"))["vapid_public_key"]
        browser = push.subscribe(key)
        target = _json(_post(owner_client, {"kind": "webpush", "subscription": browser.subscription()}))
        response = owner_client.post(f"/settings/notify/{target['id']}/test")
        assert response.status_code == 200
        assert _json(response) == {
            "target_id": target["id"],
            "kind": "webpush",
            "ok": True,
            "error": "",
            "removed": False,
        }
        assert push.received[0]["payload"]["title"] == "Navi test notification"
        push.gone.add(browser.endpoint.removeprefix(push.origin))
        outcome = _json(owner_client.post(f"/settings/notify/{target['id']}/test"))
        assert outcome["ok"] is False and outcome["removed"] is True and "expired" in outcome["error"]
        assert _json(owner_client.get("/settings/notify"))["targets"] == []

    def test_a_failed_test_is_recorded_and_listed(self, owner_client, settings):
        with Receiver(status=500) as failing:
            settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{failing.port}"]
            url = f"json://127.0.0.1:{failing.port}/secret-hook-path"
            target = _json(_post(owner_client, {"kind": "apprise", "url": url}))
            outcome = _json(owner_client.post(f"/settings/notify/{target['id']}/test"))
        assert outcome["ok"] is False and "500" in outcome["error"]
        [listed] = _json(owner_client.get("/settings/notify"))["targets"]
        assert listed["last_error"] == outcome["error"] and listed["last_error_at"]
        assert (
            "secret-hook-path" not in json.dumps(listed)
            and listed["address"] == f"json://127.0.0.1:{failing.port}/sec***"
        )


class TestRedaction:
    @pytest.mark.parametrize(
        "url,secrets,shown",
        [
            (NTFY, ["hunter2pass", "navibot7", "topic-7f3kq9"], "ntfys://…@ntfy.sh/top***"),
            (
                "tgram://123456789:AAHsecretBotToken/987654321",
                ["AAHsecretBotToken", "123456789", "987654321"],
                "tgram://1***/987***",
            ),
            ("ntfy://private-topic-name", ["private-topic-name"], "ntfys://p***"),
            (
                "json://hookuser9:pw1234@hooks.example.org/path/tok3n?x=1",
                ["pw1234", "tok3n", "hookuser9"],
                "json://…@hooks.example.org/pat***",
            ),
        ],
    )
    def test_the_url_never_comes_back(self, owner_client, admin_client, url, secrets, shown):
        created = _json(_post(owner_client, {"kind": "apprise", "url": url}))
        assert created["address"] == shown
        outputs = [
            json.dumps(created),
            owner_client.get("/settings/notify").content.decode(),
            admin_client.get(reverse("admin:notify_app_notifytarget_changelist")).content.decode(),
            admin_client.get(reverse("admin:notify_app_notifytarget_change", args=[created["id"]])).content.decode(),
        ]
        for text in outputs:
            assert url not in text
            for secret in secrets:
                assert secret not in text, (secret, text[:300])

    def test_the_admin_keeps_the_url_when_the_field_is_left_empty(self, admin_client, owner):
        target = NotifyTarget.objects.create(owner=owner, kind="apprise", url=NTFY, label="old")
        url = reverse("admin:notify_app_notifytarget_change", args=[target.pk])
        response = admin_client.post(url, {"owner": owner.pk, "kind": "apprise", "label": "new", "url": ""})
        assert response.status_code == 302
        target.refresh_from_db()
        assert target.label == "new" and target.url == NTFY


@pytest.fixture
def admin_client(django_user_model, profiles):
    admin = django_user_model.objects.create_superuser("boss", password="pw-boss-123")
    client = Client()
    client.force_login(admin)
    return client


class TestOwnership:
    def test_another_users_target_is_404_and_survives(self, owner_client, other_user, push):
        theirs = NotifyTarget.objects.create(owner=other_user, kind="apprise", url=NTFY)
        assert owner_client.delete(f"/settings/notify/{theirs.pk}").status_code == 404
        assert owner_client.post(f"/settings/notify/{theirs.pk}/test").status_code == 404
        assert NotifyTarget.objects.filter(pk=theirs.pk).exists()
        assert _json(owner_client.get("/settings/notify"))["targets"] == []

    @pytest.mark.parametrize("path", ["/settings/notify/abc", "/settings/notify/99999"])
    def test_malformed_and_unknown_ids_are_404(self, owner_client, path):
        response = owner_client.delete(path)
        assert response.status_code == 404 and "GET /settings/notify" in _json(response)["error"]

    def test_auth_csrf_and_tokens(self, anon_client, owner, owner_token):
        assert anon_client.get("/settings/notify").status_code == 401
        assert _post(anon_client, {"kind": "apprise", "url": NTFY}).status_code == 401
        csrf = Client(enforce_csrf_checks=True)
        csrf.force_login(owner)
        assert _post(csrf, {"kind": "apprise", "url": NTFY}).status_code == 403
        auth = {"HTTP_AUTHORIZATION": f"Bearer {owner_token}"}
        assert _post(anon_client, {"kind": "apprise", "url": NTFY}, **auth).status_code == 201
        assert len(_json(anon_client.get("/settings/notify", **auth))["targets"]) == 1
        assert NotifyTarget.objects.get().owner == owner


def _sub(**changes) -> dict:
    sub = Subscriber(endpoint="https://push.example.org/send/abc").subscription()
    sub.update(changes)
    return sub


class TestBadInput:
    @pytest.mark.parametrize(
        "body,names",
        [
            ({"kind": "fax", "url": "x"}, "'kind' must be one of apprise, telegram, webpush"),
            ({"url": NTFY}, "'kind' must be one of"),
            ({"kind": "apprise"}, "'url' must be an Apprise URL"),
            (
                {"kind": "apprise", "url": "nosuchservice://abc"},
                "Apprise cannot read this URL (scheme 'nosuchservice')",
            ),
            ({"kind": "apprise", "url": NTFY, "label": 5}, "label must be text"),
            ({"kind": "apprise", "url": NTFY, "extra": 1}, "unknown field(s) extra"),
            ({"kind": "webpush"}, "'subscription' is missing"),
            (
                {"kind": "webpush", "subscription": {"endpoint": "https://push.example.org/x"}},
                "subscription.keys is missing",
            ),
            ({"kind": "webpush", "subscription": _sub(endpoint=None)}, "subscription.endpoint is missing"),
            (
                {"kind": "webpush", "subscription": _sub(endpoint="http://push.example.org/x")},
                "must be an https:// URL",
            ),
            (
                {"kind": "webpush", "subscription": _sub(keys={"p256dh": "AAAA", "auth": "AAAAAAAAAAAAAAAAAAAAAA"})},
                "not a P-256 public key",
            ),
            (
                {"kind": "webpush", "subscription": _sub(keys={"p256dh": _sub()["keys"]["p256dh"], "auth": "AAAA"})},
                "auth must be 16 bytes",
            ),
            ({"kind": "apprise", "url": "syslog://"}, "plugin notifies the server machine itself"),
            ({"kind": "apprise", "url": "rsyslog://10.0.0.7/local0"}, "rsyslog plugin notifies the server machine"),
            ("[1, 2]", "must be a JSON object"),
            ("{nope", "not valid JSON"),
        ],
    )
    def test_it_names_the_problem_and_saves_nothing(self, owner_client, body, names):
        response = _post(owner_client, body)
        assert response.status_code == 400 and names in _json(response)["error"]
        assert not NotifyTarget.objects.exists()

    @pytest.mark.parametrize(
        "body",
        [
            {"kind": "apprise", "url": "json://127.0.0.1:8080/hook"},
            {"kind": "apprise", "url": "json://localhost/hook"},
            {"kind": "apprise", "url": "gotify://169.254.169.254/tokentoken"},
            {"kind": "apprise", "url": "ntfy://user:pass@10.0.0.5/topic"},
            {"kind": "webpush", "subscription": _sub(endpoint="https://127.0.0.1/push/x")},
            {"kind": "webpush", "subscription": _sub(endpoint="https://[::ffff:192.168.1.1]/push/x")},
            {"kind": "webpush", "subscription": _sub(endpoint="https://2130706433/push/x")},
        ],
    )
    def test_private_addresses_are_refused_like_web_tools(self, owner_client, body):
        """SSRF: a target is a URL the server will call; LAN and loopback need HTTP_ALLOWED_HOSTS."""
        response = _post(owner_client, body)
        error = _json(response)["error"]
        assert response.status_code == 400 and not NotifyTarget.objects.exists()
        assert "HTTP_ALLOWED_HOSTS" in error or "canonical" in error
        assert "pass" not in error and "tokentoken" not in error

    def test_wrong_methods_are_405(self, owner_client):
        assert owner_client.put("/settings/notify").status_code == 405
        assert owner_client.get("/settings/notify/1/test").status_code == 405


class TestPwa:
    def test_the_manifest_names_navi_and_its_icons_exist(self, anon_client):
        response = anon_client.get("/manifest.webmanifest")
        assert response.status_code == 200 and response["Content-Type"] == "application/manifest+json"
        manifest = json.loads(response.content)
        assert manifest["name"] == "Navi" and manifest["start_url"] == "/" and manifest["display"] == "standalone"
        for icon in manifest["icons"]:
            got = anon_client.get(icon["src"])
            assert got.status_code == 200, icon
            content = b"".join(got.streaming_content) if got.streaming else got.content
            assert content.startswith(b"\x89PNG" if icon["type"] == "image/png" else b"<svg")
        assert {i["sizes"] for i in manifest["icons"]} >= {"192x192", "512x512"}

    def test_the_service_worker_is_served_from_the_root(self, anon_client):
        response = anon_client.get("/sw.js")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/javascript")
        assert response["Service-Worker-Allowed"] == "/" and response["Cache-Control"] == "no-cache"
        assert b"showNotification" in response.content and b"notificationclick" in response.content

    def test_every_page_links_the_manifest(self, owner_client):
        for path in ["/", "/settings/", "/memory/"]:
            assert b'rel="manifest" href="/manifest.webmanifest"' in owner_client.get(path).content, path
