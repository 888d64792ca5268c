"""notify_user against real local services: a Web Push service that checks VAPID and decrypts
the payload as a browser would, and an HTTP receiver behind Apprise's json:// scheme."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from notify_app.delivery import notify_user_sync
from notify_app.models import NotifyTarget
from tests.notify_services import PushService, Receiver

pytestmark = pytest.mark.django_db


def _post(client, body: dict):
    response = client.post("/settings/notify", body, content_type="application/json")
    return response.status_code, json.loads(response.content)


def _new_vapid_key() -> str:
    number = ec.generate_private_key(ec.SECP256R1()).private_numbers().private_value
    return base64.urlsafe_b64encode(number.to_bytes(32, "big")).decode().rstrip("=")


@pytest.fixture
def push(settings):
    with PushService() as service:
        settings.NOTIFY_ALLOW_HTTP_PUSH = True  # the local service speaks plain http
        settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{service.port}"]
        yield service


@pytest.fixture
def subscribed(push, owner_client):
    """A browser subscribed with the server's VAPID key, its subscription POSTed like the page does."""
    key = json.loads(owner_client.get("/settings/notify").content)["vapid_public_key"]
    browser = push.subscribe(key)
    status, target = _post(owner_client, {"kind": "webpush", "subscription": browser.subscription(), "label": "phone"})
    assert status == 201, target
    return browser, target


def _notify(user, **kw):
    return notify_user_sync(user.id, title=kw.get("title", "Answer ready"), body=kw.get("body", "Your report is done"),
                            url=kw.get("url", "/#f00d"), tag=kw.get("tag", "run-1"))


class TestWebPush:
    def test_a_push_arrives_signed_and_decryptable(self, owner, push, subscribed):
        _browser, target = subscribed
        results = _notify(owner, title="Approval needed", body="terminal wants to run ls", url="/#abc", tag="approval-7")
        assert results == [{"target_id": target["id"], "kind": "webpush", "ok": True, "error": ""}]
        assert push.rejected == []
        [got] = push.received
        assert got["payload"] == {"title": "Approval needed", "body": "terminal wants to run ls", "url": "/#abc",
                                  "tag": "approval-7"}
        assert got["headers"]["Topic"] == "approval-7" and got["headers"]["Urgency"] == "high"
        assert NotifyTarget.objects.get(pk=target["id"]).last_ok_at is not None

    def test_an_expired_subscription_is_removed(self, owner, push, subscribed):
        browser, target = subscribed
        push.gone.add(browser.endpoint.removeprefix(push.origin))
        [result] = _notify(owner)
        assert result["ok"] is False and "expired" in result["error"] and "enable push" in result["error"]
        assert not NotifyTarget.objects.filter(pk=target["id"]).exists()
        assert _notify(owner) == []  # nothing left to send to

    def test_a_changed_vapid_key_is_a_readable_error(self, owner, push, subscribed, settings):
        _browser, target = subscribed
        settings.VAPID_PRIVATE_KEY = _new_vapid_key()  # the subscription was made with the old key
        [result] = _notify(owner)
        assert result["ok"] is False and "VAPID" in result["error"] and "HTTP 403" in result["error"]
        assert push.received == [] and push.rejected == ["signed with another key than the subscription's"]
        stored = NotifyTarget.objects.get(pk=target["id"])
        assert stored.last_error == result["error"] and stored.last_error_at and stored.last_ok_at is None

    def test_an_endpoint_on_a_private_address_is_refused_at_delivery(self, owner, push, settings):
        """A target that bypassed the API (the admin, an old row) still may not reach the LAN."""
        browser = push.subscribe("")
        NotifyTarget.objects.create(owner=owner, kind="webpush", subscription=browser.subscription())
        settings.HTTP_ALLOWED_HOSTS = []
        [result] = _notify(owner)
        assert result["ok"] is False and "loopback" in result["error"] and "HTTP_ALLOWED_HOSTS" in result["error"]
        assert push.received == [] and push.rejected == []


@pytest.fixture
def receiver(settings):
    with Receiver() as service:
        settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{service.port}"]
        yield service


class TestApprise:
    def test_the_receiver_gets_the_message(self, owner, owner_client, receiver, settings):
        settings.NAVI_PUBLIC_URL = "https://navi.example.org"
        status, target = _post(owner_client, {"kind": "apprise", "url": f"json://127.0.0.1:{receiver.port}/hook"})
        assert status == 201
        [result] = _notify(owner, title="Answer ready", body="Your report is done", url="/#f00d")
        assert result == {"target_id": target["id"], "kind": "apprise", "ok": True, "error": ""}
        [got] = receiver.received
        assert got["path"] == "/hook" and got["json"]["title"] == "Answer ready"
        assert got["json"]["message"] == "Your report is done\n\nhttps://navi.example.org/#f00d"
        assert NotifyTarget.objects.get(pk=target["id"]).last_ok_at is not None

    def test_a_failing_service_is_recorded_without_secrets(self, owner, settings):
        with Receiver(status=500) as failing:
            settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{failing.port}"]
            url = f"json://robot:s3cretpass@127.0.0.1:{failing.port}/hook-token-123"
            target = NotifyTarget.objects.create(owner=owner, kind="apprise", url=url)
            [result] = _notify(owner)
        assert len(failing.received) == 1
        assert result["ok"] is False and "500" in result["error"] and "Check the URL" in result["error"]
        assert "s3cretpass" not in result["error"] and "hook-token-123" not in result["error"]
        target.refresh_from_db()
        assert target.last_error == result["error"] and target.last_ok_at is None

    def test_a_closed_port_is_a_readable_error(self, owner, settings):
        with Receiver() as gone:
            port = gone.port
        settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{port}"]
        target = NotifyTarget.objects.create(owner=owner, kind="apprise", url=f"json://127.0.0.1:{port}/x")
        [result] = _notify(owner)
        assert result["ok"] is False and "connection" in result["error"].lower()
        target.refresh_from_db()
        assert target.last_error == result["error"] and target.last_error_at

    def test_a_private_address_is_refused_when_sending(self, owner, receiver, settings):
        """Stored without the API's check (admin): Apprise's own connect is still guarded."""
        NotifyTarget.objects.create(owner=owner, kind="apprise", url=f"json://localhost:{receiver.port}/x")
        settings.HTTP_ALLOWED_HOSTS = []
        [result] = _notify(owner)
        assert result["ok"] is False and "loopback" in result["error"] and "HTTP_ALLOWED_HOSTS" in result["error"]
        assert receiver.received == []


class TestNotifyUser:
    def test_every_target_gets_it_and_a_slow_one_is_cut_off(self, owner, push, subscribed, settings):
        release = threading.Event()

        class Slow(Receiver):
            def handle(self, path, headers, body):
                release.wait(10)
                return 200

        settings.NOTIFY_TIMEOUT_S = 1
        with Slow() as slow:
            settings.HTTP_ALLOWED_HOSTS += [f"127.0.0.1:{slow.port}"]
            NotifyTarget.objects.create(owner=owner, kind="apprise", url=f"json://127.0.0.1:{slow.port}/x")
            try:
                results = _notify(owner)
            finally:
                release.set()
        assert [(r["kind"], r["ok"]) for r in results] == [("webpush", True), ("apprise", False)]
        assert "no answer within 1 s" in results[1]["error"]
        assert len(push.received) == 1

    def test_a_user_without_targets_gets_nothing(self, owner, other_user, push, subscribed):
        assert _notify(other_user) == []
        assert push.received == []

    def test_a_kind_without_sender_is_an_error_not_a_crash(self, owner):
        target = NotifyTarget.objects.create(owner=owner, kind="carrier-pigeon")
        [result] = _notify(owner)
        assert result == {"target_id": target.pk, "kind": "carrier-pigeon", "ok": False,
                          "error": "no sender for 'carrier-pigeon' targets is installed; remove this target"}
