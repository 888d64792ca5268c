"""The memory page's JSON endpoints, and the summary every run sees following the facts:
memory_save / memory_forget (tools) and the endpoints rebuild it, so a forgotten fact leaves it."""

from __future__ import annotations

import json

import pytest

from agent.models import Profile
from memory_app.models import MemoryFact, MemorySummary
from memory_app.services import get_summary, set_summary, upsert_fact
from tests.llm_server import Turn
from tests.test_consumer import TokenClient


def _json(response):
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return json.loads(response.content)


@pytest.mark.django_db
class TestMemoryEndpoints:
    def test_get_lists_my_facts_and_summary_only(self, owner, other_user, owner_client):
        upsert_fact(owner.id, "preferences", "editor", "neovim")
        upsert_fact(other_user.id, "personal", "secret", "mallory's")
        set_summary(owner.id, "The user likes neovim.")
        body = _json(owner_client.get("/memory"))
        assert [(f["category"], f["key"], f["value"]) for f in body["facts"]] == [("preferences", "editor", "neovim")]
        assert set(body["facts"][0]) == {"id", "category", "key", "value", "source_session", "untrusted", "untrusted_source", "created_at", "updated_at"}
        assert body["summary"] == "The user likes neovim."

    def test_patch_value_or_labels_refreshes_the_summary(self, owner, owner_client):
        fact = upsert_fact(owner.id, "preferences", "editor", "neovim").fact
        set_summary(owner.id, "The user loves neovim.")
        response = owner_client.patch(f"/memory/facts/{fact.id}", {"value": "helix"}, content_type="application/json")
        assert response.status_code == 200
        body = _json(response)
        assert body["fact"]["value"] == "helix" and "neovim" not in body["summary"] and "helix" in body["summary"]
        assert get_summary(owner.id) == body["summary"]
        response = owner_client.patch(
            f"/memory/facts/{fact.id}",
            {"category": "Tools", "key": "Text  Editor", "value": "helix"},
            content_type="application/json",
        )
        assert _json(response)["fact"]["category"] == "tools" and _json(response)["fact"]["key"] == "text editor"

    def test_delete_refreshes_the_summary(self, owner, owner_client):
        fact = upsert_fact(owner.id, "people", "dog", "Rex").fact
        upsert_fact(owner.id, "preferences", "tea", "green")
        set_summary(owner.id, "The user has a dog called Rex and drinks green tea.")
        response = owner_client.delete(f"/memory/facts/{fact.id}")
        assert response.status_code == 200
        assert "Rex" not in _json(response)["summary"] and "Rex" not in get_summary(owner.id)
        assert "green" in get_summary(owner.id)
        assert not MemoryFact.objects.filter(pk=fact.pk).exists()

    @pytest.mark.parametrize(
        "body,status",
        [
            ({"value": ""}, 400),
            ({"value": 5}, 400),
            ({"value": "x" * 2001}, 400),
            ({"key": "   "}, 400),
            ({"colour": "red"}, 400),
            ("[]", 400),
            ({"key": "tea"}, 409),  # preferences: tea exists already
        ],
    )
    def test_bad_patches(self, owner, owner_client, body, status):
        fact = upsert_fact(owner.id, "preferences", "editor", "neovim").fact
        upsert_fact(owner.id, "preferences", "tea", "green")
        payload = body if isinstance(body, str) else json.dumps(body)
        response = owner_client.patch(f"/memory/facts/{fact.id}", payload, content_type="application/json")
        assert response.status_code == status and "error" in _json(response)
        assert MemoryFact.objects.get(pk=fact.pk).value == "neovim"

    def test_another_users_fact_and_malformed_ids_are_404(self, other_user, owner_client):
        theirs = upsert_fact(other_user.id, "personal", "secret", "x").fact
        assert (
            owner_client.patch(
                f"/memory/facts/{theirs.id}", {"value": "y"}, content_type="application/json"
            ).status_code
            == 404
        )
        assert owner_client.delete(f"/memory/facts/{theirs.id}").status_code == 404
        assert owner_client.delete("/memory/facts/abc").status_code == 404
        assert owner_client.delete("/memory/facts/99999").status_code == 404
        assert MemoryFact.objects.get(pk=theirs.pk).value == "x"

    def test_auth_methods_and_csrf(self, anon_client, owner, owner_client):
        from django.test import Client

        assert anon_client.get("/memory").status_code == 401
        assert anon_client.delete("/memory/facts/1").status_code == 401
        fact = upsert_fact(owner.id, "a", "b", "c").fact
        csrf = Client(enforce_csrf_checks=True)
        csrf.force_login(owner)
        assert csrf.delete(f"/memory/facts/{fact.id}").status_code == 403
        assert csrf.post("/memory", {"category": "a", "key": "x", "value": "y"}, content_type="application/json").status_code == 403
        assert anon_client.post("/memory", {"category": "a", "key": "x", "value": "y"}, content_type="application/json").status_code == 401
        assert owner_client.put("/memory").status_code == 405

    def test_post_adds_a_fact_and_the_summary_follows(self, owner, other_user, owner_client):
        set_summary(owner.id, "old words")
        before = MemorySummary.objects.get(owner=owner).updated_at
        response = owner_client.post("/memory", {"category": "Preferences", "key": "Tea", "value": "green,  no sugar"}, content_type="application/json")
        assert response.status_code == 201
        body = _json(response)
        assert (body["fact"]["category"], body["fact"]["key"], body["fact"]["value"]) == ("preferences", "tea", "green, no sugar")
        assert "green, no sugar" in body["summary"] and body["summary"] == get_summary(owner.id)
        assert body["summary_updated_at"] > before.isoformat()
        assert not MemoryFact.objects.filter(owner=other_user).exists()

    @pytest.mark.parametrize(
        "body,status",
        [
            ({"category": "preferences", "key": "tea", "value": "black"}, 409),  # exists: edit it instead
            ({"category": "", "key": "x", "value": "y"}, 400),
            ({"category": "a", "key": "x"}, 400),
            ({"category": "a", "key": "x", "value": "y", "owner": 1}, 400),
            ({"category": "a", "key": "x", "value": "y" * 2001}, 400),
            ({"category": "a", "key": ["x"], "value": "y"}, 400),
            ("[]", 400),
        ],
    )
    def test_bad_additions_save_nothing(self, owner, owner_client, body, status):
        upsert_fact(owner.id, "preferences", "tea", "green")
        payload = body if isinstance(body, str) else json.dumps(body)
        response = owner_client.post("/memory", payload, content_type="application/json")
        assert response.status_code == status and "error" in _json(response)
        assert list(MemoryFact.objects.values_list("key", "value")) == [("tea", "green")]

    def test_patch_and_delete_say_when_the_summary_changed(self, owner, owner_client):
        fact = upsert_fact(owner.id, "people", "dog", "Rex").fact
        set_summary(owner.id, "x")
        before = MemorySummary.objects.get(owner=owner).updated_at.isoformat()
        patched = _json(owner_client.patch(f"/memory/facts/{fact.id}", {"value": "Max"}, content_type="application/json"))
        assert patched["summary_updated_at"] > before
        deleted = _json(owner_client.delete(f"/memory/facts/{fact.id}"))
        assert deleted["summary_updated_at"] >= patched["summary_updated_at"]


@pytest.mark.django_db(transaction=True)
class TestToolsRefreshTheSummary:
    async def test_a_forgotten_fact_leaves_the_summary_the_next_run_sees(
        self, llm, session, owner, owner_token, profiles
    ):
        from asgiref.sync import sync_to_async

        await Profile.objects.aupdate(planning_enabled=False)
        await sync_to_async(upsert_fact)(owner.id, "people", "dog", "Rex")
        await sync_to_async(upsert_fact)(owner.id, "preferences", "tea", "green")
        await sync_to_async(set_summary)(owner.id, "The user has a dog called Rex and likes green tea.")
        llm.script(
            Turn(tool_calls=[{"name": "memory_forget", "arguments": {"key": "dog"}}]),
            Turn(content="Forgotten."),
            Turn(content="Hello again."),
        )
        http = TokenClient(owner_token)
        response = await http.post(f"/sessions/{session.id}/messages", {"content": "forget my dog"})
        assert response.status_code == 200 and response.json()["content"] == "Forgotten."
        summary = await sync_to_async(get_summary)(owner.id)
        assert "Rex" not in summary and "green" in summary
        await http.post(f"/sessions/{session.id}/messages", {"content": "hi"})
        system = "\n".join(m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "system")
        assert "green" in system and "Rex" not in system

    async def test_memory_save_puts_the_fact_in_the_summary(self, llm, session, owner, owner_token, profiles):
        from asgiref.sync import sync_to_async

        await Profile.objects.aupdate(planning_enabled=False)
        llm.script(
            Turn(
                tool_calls=[{"name": "memory_save", "arguments": {"category": "people", "key": "cat", "value": "Tom"}}]
            ),
            Turn(content="Saved."),
        )
        await TokenClient(owner_token).post(f"/sessions/{session.id}/messages", {"content": "my cat is Tom"})
        assert "cat = Tom" in await sync_to_async(get_summary)(owner.id)
        assert await MemorySummary.objects.filter(owner=owner).acount() == 1
