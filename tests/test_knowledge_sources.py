"""An answer that used the owner's documents keeps its sources (issue #42): the passages its
knowledge_search returned, narrowed to those it names, in the stream_end frame, in the stored
message (a reload shows them) and in the REST reply; each opens through
GET /knowledge/passages/<id>, the owner's only."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from agent.context.citations import cited_sources
from agent.llm.messages import ChatMessage
from agent.models import Profile
from knowledge_app.tools import CITE_NOTE
from sessions_app.models import Message
from tests.test_approvals import frames_until, run_ended, script_tool, start, tool_messages
from tests.test_knowledge import indexed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("knowledge_state")]


# Sections long enough to be passages of their own (a shorter one joins its neighbour).
BOILER = ("# Heating\n\nThe boiler service is every October, booked with the same engineer as last year.\n\n"
          "# Garden\n\nThe hedge is cut in June, once the birds have finished nesting in it.")
TRAVEL = "# Travel\n\nPassports are in the blue folder."


@pytest.fixture
def searcher(profiles):
    Profile.objects.update(planning_enabled=False)
    profile = Profile.objects.get(pk="secretary")
    profile.enabled_tools = [*profile.enabled_tools, "knowledge_search"]
    profile.save()


async def _ask(llm, session, token, text: str, query: str, answer: str) -> list[dict]:
    script_tool(llm, text, ("knowledge_search", {"query": query}), answer=answer)
    comm = await start(session, token, text)
    frames = await frames_until(comm, run_ended)
    await comm.disconnect()
    return frames


class TestSourcesOfAnAnswer:
    async def test_the_answer_keeps_the_passage_it_cites_and_a_reload_shows_it(
            self, llm, embed, searcher, owner_client, session, owner_token):
        await sync_to_async(indexed)(owner_client, "boiler.md", BOILER)
        await sync_to_async(indexed)(owner_client, "travel.md", TRAVEL)
        frames = await _ask(llm, session, owner_token, "when is the boiler serviced", "boiler service",
                            "Every October (boiler.md, section “Heating”).")
        end = frames[-1]
        assert end["type"] == "stream_end"
        assert [(s["name"], s["location"]["heading"]) for s in end["sources"]] == [("boiler.md", "Heating")]
        assert end["sources"][0]["where"] == "Heating (line 1)"
        assert end["sources"][0]["location"]["section"] == "Heating" and end["sources"][0]["query"] == "boiler service"
        # The model read the passages as data, and the request to cite them outside that data.
        seen = tool_messages(llm.requests[-1])[-1]
        assert seen.startswith("[UNTRUSTED DATA") and f"[END UNTRUSTED DATA {seen.split()[2]}]\n{CITE_NOTE}" in seen
        row = await Message.objects.filter(session=session, role="assistant").order_by("-seq").afirst()
        assert row.meta["sources"] == end["sources"]
        shown = (await sync_to_async(owner_client.get)(f"/sessions/{session.pk}")).json()["messages"][-1]
        assert shown["sources"] == end["sources"] and shown["meta"]["sources"] == end["sources"]
        exported = (await sync_to_async(owner_client.get)(f"/sessions/{session.pk}/export?format=md")).content.decode()
        assert f"Sources: `boiler.md` (`{end['sources'][0]['where']}`)" in exported
        opened = (await sync_to_async(owner_client.get)(f"/knowledge/passages/{end['sources'][0]['passage_id']}")).json()
        assert opened["name"] == "boiler.md" and opened["where"] == end["sources"][0]["where"]
        assert "every October" in opened["text"] and "hedge" not in opened["text"]

    async def test_an_answer_that_names_no_document_keeps_what_the_search_returned(
            self, llm, embed, searcher, owner_client, session, owner_token):
        await sync_to_async(indexed)(owner_client, "travel.md", TRAVEL)
        frames = await _ask(llm, session, owner_token, "where are the passports", "passports",
                            "In the blue folder.")
        assert [s["name"] for s in frames[-1]["sources"]] == ["travel.md"]

    async def test_a_plain_answer_has_no_sources(self, llm, searcher, session, owner_token):
        from tests.llm_server import Turn

        llm.script(Turn(content="Hello."))
        comm = await start(session, owner_token, "hi")
        frames = await frames_until(comm, run_ended)
        await comm.disconnect()
        assert frames[-1]["type"] == "stream_end" and "sources" not in frames[-1]  # the frame as it always was
        row = await Message.objects.filter(session=session, role="assistant").afirst()
        assert "sources" not in row.meta and "sources" not in row.as_dict()

    def test_the_rest_reply_carries_the_sources(self, llm, embed, searcher, owner_client, session):
        indexed(owner_client, "boiler.md", BOILER)
        script_tool(llm, "hedge", ("knowledge_search", {"query": "hedge"}), answer="In June (boiler.md, section “Garden”).")
        reply = owner_client.post(f"/sessions/{session.pk}/messages", json.dumps({"content": "when is the hedge cut"}),
                                  content_type="application/json")
        assert reply.status_code == 200, reply.content
        assert [s["location"]["heading"] for s in reply.json()["sources"]] == ["Garden"]


class TestOnlyTheOwner:
    async def test_another_user_sees_neither_the_answer_nor_its_passages_even_through_an_import(
            self, llm, embed, searcher, owner_client, other_user, session, owner_token):
        await sync_to_async(indexed)(owner_client, "boiler.md", BOILER)
        frames = await _ask(llm, session, owner_token, "when is the boiler serviced", "boiler service",
                            "Every October (boiler.md, section “Heating”).")
        passage_id = frames[-1]["sources"][0]["passage_id"]
        mallory = Client()
        await sync_to_async(mallory.force_login)(other_user)
        assert (await sync_to_async(mallory.get)(f"/sessions/{session.pk}")).status_code == 404
        # A chat export carrying the owner's passage ids, imported by another user: the chips come
        # with it, but what they point at stays the owner's.
        exported = (await sync_to_async(owner_client.get)(f"/sessions/{session.pk}/export?format=json")).content
        imported = await sync_to_async(mallory.post)("/sessions/import", exported, content_type="application/json")
        assert imported.status_code == 201, imported.content
        copy = (await sync_to_async(mallory.get)(f"/sessions/{imported.json()['session_id']}")).json()
        assert copy["messages"][-1]["sources"][0]["passage_id"] == passage_id
        refused = await sync_to_async(mallory.get)(f"/knowledge/passages/{passage_id}")
        assert refused.status_code == 404 and "boiler" not in refused.content.decode()


class TestOpeningAPassage:
    def test_only_the_owner_opens_a_passage(self, embed, owner_client, other_user, anon_client):
        document = indexed(owner_client, "boiler.md", BOILER)
        passage_id = owner_client.get("/knowledge/search?q=boiler").json()["results"][0]["passage_id"]
        assert owner_client.get(f"/knowledge/passages/{passage_id}").status_code == 200
        mallory = Client()
        mallory.force_login(other_user)
        refused = mallory.get(f"/knowledge/passages/{passage_id}")
        assert refused.status_code == 404 and "error" in refused.json()
        assert anon_client.get(f"/knowledge/passages/{passage_id}").status_code == 401
        owner_client.delete(f"/knowledge/{document['id']}")
        gone = owner_client.get(f"/knowledge/passages/{passage_id}")
        assert gone.status_code == 404 and "deleted" in gone.json()["error"]

    @pytest.mark.parametrize("raw", ["abc", "-1", "0", "99999999999999999999999", "1%20OR%201=1", "x" * 500])
    def test_a_malformed_id_is_a_clear_404(self, owner_client, raw):
        response = owner_client.get(f"/knowledge/passages/{raw}")
        assert response.status_code == 404 and "search the Knowledge page" in response.json()["error"]


class TestWhichSourcesCount:
    @staticmethod
    def _context(*sources: dict) -> list[ChatMessage]:
        return [ChatMessage(role="user", content="old"),
                ChatMessage(role="tool", content="x", meta={"sources": [{"passage_id": 99, "document_id": "d0", "name": "old.md"}]}),
                ChatMessage(role="user", content="q"),
                ChatMessage(role="tool", content="x", meta={"sources": list(sources)})]

    def test_the_named_document_and_place_win_and_earlier_turns_do_not_count(self):
        a1 = {"passage_id": 1, "document_id": "a", "name": "notes.md", "location": {"heading": "Travel"}, "where": "section “Travel”"}
        a2 = {"passage_id": 2, "document_id": "a", "name": "notes.md", "location": {"heading": "Food"}, "where": "section “Food”"}
        b = {"passage_id": 3, "document_id": "b", "name": "report.pdf", "location": {"page": 3}, "where": "page 3"}
        context = self._context(a1, a2, b, a1)
        assert [s["passage_id"] for s in cited_sources(context, "Go by train (notes, section Travel).")] == [1]
        assert [s["passage_id"] for s in cited_sources(context, "See notes.md.")] == [1, 2]
        assert [s["passage_id"] for s in cited_sources(context, "As report.pdf says on page 3.")] == [3]
        assert [s["passage_id"] for s in cited_sources(context, "I found it.")] == [1, 2, 3]

    def test_anything_else_a_tool_put_there_is_dropped_or_bounded(self):
        junk = [None, "x", {"passage_id": "1", "document_id": "a"}, {"passage_id": True, "document_id": "a"},
                {"passage_id": 5}, {"passage_id": 6, "document_id": "a", "name": "n" * 5000, "where": "w" * 5000,
                                    "location": {"heading": "h", "script": "<img onerror=x>"}, "extra": 1}]
        [kept] = cited_sources(self._context(*junk), "answer")
        assert kept == {"passage_id": 6, "document_id": "a", "name": "n" * 255, "where": "w" * 200,
                        "location": {"heading": "h"}}
