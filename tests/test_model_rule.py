"""One rule for the model on every path (issue #53, DESIGN §11): a fresh install whose default
model is not on the server answers scripts (REST), runs routines, answers on Telegram and in
sub-agents with the server's first chat model — never an embedding model —, says so in the
answer's meta, and never changes the chat's own pick. The owner's connections and default
models are set over `PATCH /settings` and take effect without a restart."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient, Client

from agent.models import Profile
from jobs_app.worker import drain
from knowledge_app.models import Passage, VectorSpace
from notify_app.models import NotifyTarget
from routines_app import scheduler as sch
from sessions_app.models import ApiToken, Message, ServerSettings, Session
from tests.llm_server import LLMServer, Rule, Turn
from tests.notify_services import Receiver
from tests.test_knowledge import WAIT_S, indexed, results
from tests.test_telegram import OWNER_TG, answer_message, bot, linked, runs_finished, tg  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)
MISSING = "gemma4:e2b-it-q8_0"
STAND_IN = "llama3.2:1b"  # the first chat model by name (nomic-embed-text cannot chat)
INSTALLED = ["nomic-embed-text:latest", "qwen2.5:0.5b", STAND_IN]


@pytest.fixture(autouse=True)
def fresh_install(profiles, settings, llm):
    Profile.objects.update(planning_enabled=False)
    settings.OLLAMA_DEFAULT_MODEL = MISSING
    settings.CHAT_TITLES = "model"
    llm.models = list(INSTALLED)


def _bearer(owner) -> dict:
    return {"Authorization": f"Bearer {ApiToken.issue(owner)[1]}"}


def _models(llm) -> set[str]:
    return {r["model"] for r in llm.requests}


async def _script(client: AsyncClient, headers: dict, text: str) -> tuple[str, dict]:
    """The README's script: a new chat, then a message; (session id, the answer's JSON)."""
    sid = (await client.post("/sessions", {}, content_type="application/json", headers=headers)).json()["session_id"]
    answer = await client.post(f"/sessions/{sid}/messages", {"content": text}, content_type="application/json",
                               headers=headers)
    assert answer.status_code == 200, answer.content
    return sid, answer.json()


class TestTheDefaultIsMissing:
    async def test_a_script_is_answered_by_the_first_chat_model_and_told_why(self, owner, llm):
        client, headers = AsyncClient(), await sync_to_async(_bearer)(owner)
        sid, answer = await _script(client, headers, "hello from a script")
        assert answer["content"] == "echo: hello from a script"
        assert _models(llm) == {STAND_IN}  # answer and title alike
        last = await Message.objects.filter(session_id=sid, role="assistant").alast()
        assert last.meta["model"] == STAND_IN and MISSING in last.meta["model_note"]
        assert (await Session.objects.aget(pk=sid)).model == ""  # the chat's own pick is untouched
        listing = (await client.get("/models", headers=headers)).json()
        assert listing["default"] == MISSING and listing["default_missing"] is True and listing["stand_in"] == STAND_IN

    async def test_a_routine_runs(self, owner, llm):
        client, headers = AsyncClient(), await sync_to_async(_bearer)(owner)
        made = await client.post("/routines", {"name": "Morning", "instruction": "Say good morning.",
                                               "schedule": {"every_s": 86400}}, content_type="application/json",
                                 headers=headers)
        rid = made.json()["id"]
        assert (await client.post(f"/routines/{rid}/run", headers=headers)).status_code == 202
        await sch.get_scheduler().idle()
        runs = (await client.get(f"/routines/{rid}/runs", headers=headers)).json()
        assert runs[0]["status"] == "ok", runs[0]
        assert _models(llm) == {STAND_IN}
        assert (await Session.objects.aget(pk=runs[0]["session_id"])).model == ""

    async def test_telegram_answers(self, tg, linked, bot, llm):  # noqa: F811 - fixtures
        tg.push_text(OWNER_TG, "hello from telegram")
        await tg.until(answer_message(tg, "echo: hello from telegram"))
        await runs_finished()
        assert _models(llm) == {STAND_IN}

    async def test_a_sub_agent_follows_the_same_rule(self, owner, llm):
        llm.add_rule(Rule(match="research cats", turns=[
            Turn(tool_calls=[{"name": "spawn_agent", "arguments": {"task": "sub: find cat facts"}}]),
            Turn(content="Cats sleep a lot."),
        ]))
        llm.add_rule(Rule(match="sub: find cat facts", turns=[Turn(content="Cats sleep 16 hours a day.")]))
        client, headers = AsyncClient(), await sync_to_async(_bearer)(owner)
        await _script(client, headers, "research cats")
        assert len(llm.requests) >= 3 and _models(llm) == {STAND_IN}

    async def test_a_chat_pick_and_a_profile_model_are_asked_for_as_they_are(self, owner, llm):
        client, headers = AsyncClient(), await sync_to_async(_bearer)(owner)
        sid = (await client.post("/sessions", {}, content_type="application/json", headers=headers)).json()["session_id"]
        picked = await client.patch(f"/sessions/{sid}", {"model": "qwen2.5:0.5b"}, content_type="application/json",
                                    headers=headers)
        assert picked.status_code == 200
        await client.post(f"/sessions/{sid}/messages", {"content": "hi"}, content_type="application/json", headers=headers)
        assert _models(llm) == {"qwen2.5:0.5b"}
        await Profile.objects.filter(pk="secretary").aupdate(model="owner-set:7b")
        llm.requests.clear()
        gone = await client.post(f"/sessions/{sid}/messages", {"content": "again"}, content_type="application/json",
                                 headers=headers)
        assert gone.status_code == 200 and _models(llm) == {"qwen2.5:0.5b"}  # the chat's pick comes first


class TestThePicker:
    def test_an_embedding_model_is_refused_for_a_chat(self, owner_client, session, llm):
        response = owner_client.patch(f"/sessions/{session.pk}", json.dumps({"model": "nomic-embed-text"}),
                                      content_type="application/json")
        assert response.status_code == 400
        assert "embedding model" in response.json()["error"] and "cannot answer" in response.json()["error"]
        assert Session.objects.get(pk=session.pk).model == ""


class TestTheOwnersSettings:
    def _patch(self, client: Client, body: dict):
        return client.patch("/settings", json.dumps(body), content_type="application/json")

    def test_the_default_model_takes_effect_without_a_restart(self, owner_client, owner, llm):
        changed = self._patch(owner_client, {"default_model": "qwen2.5:0.5b"})
        assert changed.status_code == 200 and changed.json()["default_model"] == "qwen2.5:0.5b"
        listing = owner_client.get("/models").json()
        assert listing["default"] == "qwen2.5:0.5b" and "default_missing" not in listing
        sid = owner_client.post("/sessions", "{}", content_type="application/json").json()["session_id"]
        answer = owner_client.post(f"/sessions/{sid}/messages", json.dumps({"content": "hi"}),
                                   content_type="application/json")
        assert answer.status_code == 200 and _models(llm) == {"qwen2.5:0.5b"}
        last = Message.objects.filter(session_id=sid, role="assistant").last()
        assert "model_note" not in last.meta

    def test_only_staff_change_them(self, django_user_model, profiles, llm):
        plain = django_user_model.objects.create_user("plain", password="pw-123456789")
        client = Client()
        client.force_login(plain)
        assert client.get("/settings").json()["connections"]["can_change"] is False
        for body in ({"default_model": "qwen2.5:0.5b"}, {"connections": {"ollama_url": "http://other:11434"}}):
            assert self._patch(client, body).status_code == 403
        assert not ServerSettings.objects.filter(default_model="qwen2.5:0.5b").exists()

    def test_bad_values_are_refused_and_nothing_is_saved(self, owner_client, llm):
        before = owner_client.get("/settings").json()
        for body in ({"connections": {"ollama_url": "ftp://x"}}, {"default_model": "no spaces allowed"},
                     {"connections": {"openai": [{"name": "Bad Name", "base_url": "http://x/v1"}]}},
                     {"connections": {"openai": [{"name": "a", "base_url": "http://x/v1"}, {"name": "a", "base_url": "http://y/v1"}]}},
                     {"default_model": "m", "default_backend": "nowhere"}):
            response = self._patch(owner_client, body)
            assert response.status_code == 400, body
        assert owner_client.get("/settings").json() == before

    def test_a_new_ollama_url_is_used_by_the_next_message(self, owner_client, llm):
        with LLMServer(models=["phi3:mini"]) as other:
            assert self._patch(owner_client, {"connections": {"ollama_url": other.url}}).status_code == 200
            sid = owner_client.post("/sessions", "{}", content_type="application/json").json()["session_id"]
            answer = owner_client.post(f"/sessions/{sid}/messages", json.dumps({"content": "where"}),
                                       content_type="application/json")
            assert answer.status_code == 200
            assert {r["model"] for r in other.requests} == {"phi3:mini"} and llm.requests == []

    def test_an_openai_compatible_server_with_a_write_only_key(self, owner_client, llm):
        llm.api_key = "sk-lab-secret"
        body = {"connections": {"openai": [{"name": "lab", "base_url": llm.openai_url, "key": "sk-lab-secret"}]},
                "default_model": "qwen2.5:0.5b", "default_backend": "lab"}
        changed = self._patch(owner_client, body)
        assert changed.status_code == 200, changed.content
        assert changed.json()["connections"]["openai"] == [{"name": "lab", "base_url": llm.openai_url.rstrip("/"),
                                                           "has_key": True}]
        assert "sk-lab-secret" not in changed.content.decode() + owner_client.get("/settings").content.decode()
        stored = ServerSettings.objects.get().openai_servers[0]["key"]
        assert stored and "sk-lab-secret" not in stored  # encrypted at rest
        # The list saved again without a key keeps the stored one.
        again = self._patch(owner_client, {"connections": {"openai": [{"name": "lab", "base_url": llm.openai_url}]}})
        assert again.json()["connections"]["openai"][0]["has_key"] is True
        sid = owner_client.post("/sessions", "{}", content_type="application/json").json()["session_id"]
        answer = owner_client.post(f"/sessions/{sid}/messages", json.dumps({"content": "via lab"}),
                                   content_type="application/json")
        assert answer.status_code == 200, answer.content
        assert answer.json()["content"] == "echo: via lab"
        assert [r["path"] for r in llm.requests] and all(r["path"].startswith("/v1/") for r in llm.requests)
        assert Session.objects.get(pk=sid).as_dict()["profile_backend"] == "lab"


class TestAFailingRoutineTellsTheOwner:
    async def test_once_per_streak_with_a_link_that_fixes_it(self, owner, llm, settings):
        """A routine whose chat picked a model the server lost fails; the owner is told at the first
        failure (with the link to pick a model), not at the next; a run that works ends the streak."""
        client, headers = AsyncClient(), await sync_to_async(_bearer)(owner)
        with Receiver() as hook:
            settings.HTTP_ALLOWED_HOSTS = [f"127.0.0.1:{hook.port}"]
            settings.NAVI_PUBLIC_URL = "https://navi.example"
            await NotifyTarget.objects.acreate(owner=owner, kind="apprise", url=f"json://127.0.0.1:{hook.port}/n")
            made = await client.post("/routines", {"name": "Digest", "instruction": "Write the digest.",
                                                   "schedule": {"every_s": 86400}}, content_type="application/json",
                                     headers=headers)
            rid = made.json()["id"]

            async def run_once() -> dict:
                await client.post(f"/routines/{rid}/run", headers=headers)
                await sch.get_scheduler().idle()
                return (await client.get(f"/routines/{rid}/runs", headers=headers)).json()[0]

            first = await run_once()  # makes the routine's chat; answered by the stand-in
            assert first["status"] == "ok"
            await Session.objects.filter(pk=first["session_id"]).aupdate(model="gone:1b")
            failed = await run_once()
            assert failed["status"] == "failed" and "gone:1b" in failed["error"]
            again = await run_once()
            assert again["status"] == "failed"
            assert again["deliveries"][0]["skipped"] is True and again["deliveries"][0]["ok"] is False
            sent = [r["json"] for r in hook.received]
            alerts = [m for m in sent if m["title"].startswith("Routine failed")]
            assert len(alerts) == 1 and "gone:1b" in alerts[0]["message"] and "Pick a model" in alerts[0]["message"]
            assert "https://navi.example/settings/#connections" in alerts[0]["message"]
            card = (await client.get(f"/routines/{rid}", headers=headers)).json()
            assert card["last_run"]["status"] == "failed" and "gone:1b" in card["last_run"]["error"]
            # Fixed: the chat follows the default again; the next failure is told again.
            await Session.objects.filter(pk=first["session_id"]).aupdate(model="")
            assert (await run_once())["status"] == "ok"
            await Session.objects.filter(pk=first["session_id"]).aupdate(model="gone:1b")
            await run_once()
            alerts = [r["json"] for r in hook.received if r["json"]["title"].startswith("Routine failed")]
            assert len(alerts) == 2


@pytest.mark.usefixtures("knowledge_state")
class TestTheEmbeddingModel:
    def test_one_chosen_in_settings_re_embeds_the_documents_without_a_restart(self, owner_client, embed):
        indexed(owner_client, "a.txt", "I drink a double espresso every morning.")
        assert list(VectorSpace.objects.values_list("model", flat=True)) == ["nomic-embed-text"]
        changed = owner_client.patch("/settings", json.dumps({"embedding_model": "other-embed"}),
                                     content_type="application/json")
        assert changed.status_code == 200 and changed.json()["embedding_model"] == "other-embed"
        assert drain(WAIT_S)
        assert Passage.objects.get().space.model == "other-embed"
        assert "espresso" in results(owner_client, "coffee")[0]["text"]
        assert {e["model"] for e in embed.embeds if e["inputs"]} >= {"other-embed"}


class TestAChatOnTheOwnersOtherServer:
    def test_a_chat_pick_is_asked_of_the_server_the_default_is_on(self, owner_client, llm):
        """The owner's default is on an OpenAI-compatible server: a chat there picks another of its
        models, and the turn asks that server for it (not Ollama)."""
        body = {"connections": {"openai": [{"name": "lab", "base_url": llm.openai_url, "key": ""}]},
                "default_model": "qwen2.5:0.5b", "default_backend": "lab"}
        assert owner_client.patch("/settings", json.dumps(body), content_type="application/json").status_code == 200
        sid = owner_client.post("/sessions", "{}", content_type="application/json").json()["session_id"]
        picked = owner_client.patch(f"/sessions/{sid}", json.dumps({"model": "llama3.2:1b"}),
                                    content_type="application/json")
        assert picked.status_code == 200, picked.content
        answer = owner_client.post(f"/sessions/{sid}/messages", json.dumps({"content": "which server"}),
                                   content_type="application/json")
        assert answer.status_code == 200, answer.content
        assert {(r["path"], r["model"]) for r in llm.requests} == {("/v1/chat/completions", "llama3.2:1b")}
