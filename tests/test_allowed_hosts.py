"""Hosts on the owner's network (issue #38): the owner allows one in Settings, stored in the
database, and Navi's guarded fetches reach it at once; everyone else is refused, and the SSRF
rules stay for every host not listed."""

from __future__ import annotations

import pytest
from django.test import Client

from navi_project import netguard
from sessions_app.models import AllowedHost

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_cache(settings):
    settings.HTTP_ALLOWED_HOSTS = []
    netguard.forget_allowed_hosts()
    yield
    netguard.forget_allowed_hosts()


def _post(client, host):
    return client.post("/settings/allowed-hosts", {"host": host}, content_type="application/json")


async def test_an_allowed_host_is_reached_at_once_and_refused_again_when_removed(owner, llm):
    from asgiref.sync import sync_to_async

    client = Client()
    await sync_to_async(client.force_login)(owner)
    target = f"127.0.0.1:{llm.port}"  # a service on this machine: loopback, refused by default
    with pytest.raises(netguard.URLRefused, match="loopback"):
        await netguard.fetch(f"{llm.url}/")
    created = await sync_to_async(_post)(client, target)
    assert created.status_code == 201
    assert "Allow only devices you trust" in created.json()["warning"]
    fetched = await netguard.fetch(f"{llm.url}/")  # no restart, no environment variable
    assert fetched.status == 200 and fetched.body == b"Ollama is running"
    # Only that port: another service on the same address is still refused.
    with pytest.raises(netguard.URLRefused):
        await netguard.fetch(f"http://127.0.0.1:{llm.port + 1 if llm.port < 65535 else 1}/")
    deleted = await sync_to_async(client.delete)(f"/settings/allowed-hosts/{target}")
    assert deleted.status_code == 200
    with pytest.raises(netguard.URLRefused):
        await netguard.fetch(f"{llm.url}/")


def test_the_sync_check_sees_it_too(owner_client, llm):
    with pytest.raises(netguard.URLRefused):
        netguard.resolve_checked_sync("127.0.0.1", llm.port)
    assert _post(owner_client, f"127.0.0.1:{llm.port}").status_code == 201
    assert netguard.resolve_checked_sync("127.0.0.1", llm.port) == ["127.0.0.1"]


def test_the_list_shows_who_added_what_and_the_environments(owner_client, settings):
    settings.HTTP_ALLOWED_HOSTS = ["printer.lan"]
    _post(owner_client, "NAS.lan:8123")
    body = owner_client.get("/settings/allowed-hosts").json()
    assert [h["entry"] for h in body["hosts"]] == ["nas.lan:8123"]
    assert body["hosts"][0]["added_by"] == "owner"
    assert body["from_environment"] == ["printer.lan"] and body["can_edit"] is True
    assert _post(owner_client, "nas.lan:8123").status_code == 200  # already there: kept once
    assert AllowedHost.objects.count() == 1


def test_a_plain_user_can_neither_add_nor_remove(owner_client, other_user):
    _post(owner_client, "nas.lan")
    client = Client()
    client.force_login(other_user)
    assert client.get("/settings/allowed-hosts").json()["can_edit"] is False
    refused = _post(client, "router.lan")
    assert refused.status_code == 403 and "owner" in refused.json()["error"]
    assert client.delete("/settings/allowed-hosts/nas.lan").status_code == 403
    assert list(AllowedHost.objects.values_list("entry", flat=True)) == ["nas.lan"]


def test_it_needs_a_login(anon_client):
    assert anon_client.get("/settings/allowed-hosts").status_code in (302, 401)
    assert _post(anon_client, "nas.lan").status_code in (302, 401, 403)
    assert not AllowedHost.objects.exists()


@pytest.mark.parametrize(
    "bad", ["", "http://nas.lan", "*.lan", "nas.lan/admin", "a b", "nas.lan:0", "nas.lan:70000", "x" * 300, 5, None,
            ["nas.lan"], "[fd00::5]x", "nas.lan:8123\n evil"],
)
def test_malformed_hosts_are_refused(owner_client, bad):
    response = _post(owner_client, bad)
    assert response.status_code == 400 and response.json()["error"]
    assert not AllowedHost.objects.exists()


def test_removing_a_host_that_is_not_there_is_a_404(owner_client):
    assert owner_client.delete("/settings/allowed-hosts/nas.lan").status_code == 404
