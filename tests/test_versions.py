"""Versions of a turn: an edit or a regenerate keeps the replaced turns as another version, the
owner switches between them (REST), and the model's context follows the version shown."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from sessions_app.models import ApiToken, Message, Session
from tests.llm_server import Rule, Turn
from tests.test_chat_edit import _say, _socket
from tests.test_consumer import TIMEOUT, TokenClient, receive_until

pytestmark = pytest.mark.django_db(transaction=True)


async def _edit(comm, message_id: int, text: str) -> list[dict]:
    await comm.send_json_to({"type": "edit", "message_id": message_id, "content": text})
    return await receive_until(comm)


async def _detail(http: TokenClient, session, query: str = "") -> dict:
    response = await http.client.get(f"/sessions/{session.id}{query}", headers=http.headers)
    assert response.status_code == 200, response.content
    return response.json()


async def _select(http: TokenClient, session, message_id, n):
    return await http.post(f"/sessions/{session.id}/messages/{message_id}/versions/{n}/select")


def _shown(detail: dict) -> list[str]:
    return [m["content"] for m in detail["messages"]]


def _message(detail: dict, content: str) -> dict:
    return next(m for m in detail["messages"] if m["content"] == content)


def _user_texts(request: dict) -> list[str]:
    """The user messages the model read, as the owner wrote them (the clock under the turn's
    request and the default step's note under that left out)."""
    from agent.context.prompts import without_clock

    return [without_clock(m["content"].split("\n\n---\n[next step]")[0]) for m in request["messages"]
            if m["role"] == "user"]


async def _edited_three_times(llm, session, owner_token) -> TokenClient:
    """first/A1, second/A2; then "second" edited twice: three versions of the second turn."""
    llm.script(Turn(content="A1"), Turn(content="A2"), Turn(content="B2"), Turn(content="C2"))
    comm = await _socket(session, owner_token)
    await _say(comm, "first")
    await _say(comm, "second")
    http = TokenClient(owner_token)
    await _edit(comm, _message(await _detail(http, session), "second")["id"], "second, take two")
    frames = await _edit(comm, _message(await _detail(http, session), "second, take two")["id"], "second, take three")
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "C2"
    await comm.disconnect()
    return http


class TestEditVersions:
    async def test_edit_twice_gives_three_versions_and_switching_shows_each_branch(self, llm, session, owner_token, no_planning):
        http = await _edited_three_times(llm, session, owner_token)
        detail = await _detail(http, session)
        assert _shown(detail) == ["first", "A1", "second, take three", "C2"]
        versions = _message(detail, "second, take three")["versions"]
        assert versions["index"] == 3 and versions["count"] == 3 and len(versions["ids"]) == 3
        assert "versions" not in _message(detail, "first") and "versions" not in _message(detail, "C2")

        response = await _select(http, session, _message(detail, "second, take three")["id"], 1)
        assert response.status_code == 200, response.content
        detail = response.json()
        assert _shown(detail) == ["first", "A1", "second", "A2"]
        assert _message(detail, "second")["versions"]["index"] == 1
        assert detail["session_id"] == str(session.id)  # the session detail again

        detail = (await _select(http, session, _message(detail, "second")["id"], 2)).json()
        assert _shown(detail) == ["first", "A1", "second, take two", "B2"]
        assert (await _detail(http, session))["messages"] == detail["messages"]  # stored, not just answered
        # Nothing was deleted: every row of every version is kept.
        assert await Message.objects.filter(session_id=session.pk).acount() == 8

    async def test_the_context_sent_to_the_model_follows_the_version_shown(self, llm, session, owner_token, no_planning):
        http = await _edited_three_times(llm, session, owner_token)
        detail = await _detail(http, session)
        await _select(http, session, _message(detail, "second, take three")["id"], 1)
        llm.script(Turn(content="A3"))
        comm = await _socket(session, owner_token)
        await _say(comm, "third")
        assert _user_texts(llm.requests[-1]) == ["first", "second", "third"]
        assistant = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "assistant"]
        assert assistant == ["A1", "A2"]
        # The branch keeps its later turn; the other versions keep theirs (none).
        detail = (await _select(http, session, _message(await _detail(http, session), "second")["id"], 3)).json()
        assert _shown(detail) == ["first", "A1", "second, take three", "C2"]
        detail = (await _select(http, session, _message(detail, "second, take three")["id"], 1)).json()
        assert _shown(detail) == ["first", "A1", "second", "A2", "third", "A3"]
        await comm.disconnect()

    async def test_versions_of_an_earlier_turn_keep_the_choice_made_inside_them(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A1"), Turn(content="A2"), Turn(content="A2b"), Turn(content="A1b"))
        comm = await _socket(session, owner_token)
        await _say(comm, "one")
        await _say(comm, "two")
        http = TokenClient(owner_token)
        await _edit(comm, _message(await _detail(http, session), "two")["id"], "two b")
        await _edit(comm, _message(await _detail(http, session), "one")["id"], "one b")
        assert _shown(await _detail(http, session)) == ["one b", "A1b"]
        detail = (await _select(http, session, _message(await _detail(http, session), "one b")["id"], 1)).json()
        # Back on the first version of turn one, its second turn is still at version 2.
        assert _shown(detail) == ["one", "A1", "two b", "A2b"]
        assert _message(detail, "two b")["versions"] == {**_message(detail, "two b")["versions"], "index": 2, "count": 2}
        await comm.disconnect()


class TestRegenerateVersions:
    async def test_regenerated_answers_are_versions_of_the_answer(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A1"), Turn(content="A1, again"), Turn(content="A1, third try"))
        comm = await _socket(session, owner_token)
        await _say(comm, "hi")
        for _ in range(2):
            await comm.send_json_to({"type": "regenerate"})
            frames = await receive_until(comm)
            assert frames[0]["type"] == "history_rewound" and frames[-1]["type"] == "stream_end"
        http = TokenClient(owner_token)
        detail = await _detail(http, session)
        assert _shown(detail) == ["hi", "A1, third try"]
        assert "versions" not in _message(detail, "hi")  # the message itself was not edited
        page = await _detail(http, session, "?limit=1")  # a page that starts after the message
        assert _shown(page) == ["A1, third try"] and page["messages"][0]["versions"]["count"] == 3
        answer = _message(detail, "A1, third try")
        assert answer["versions"]["index"] == 3 and answer["versions"]["count"] == 3
        detail = (await _select(http, session, answer["id"], 1)).json()
        assert _shown(detail) == ["hi", "A1"]
        assert _message(detail, "A1")["versions"]["index"] == 1
        llm.script(Turn(content="A2"))
        await _say(comm, "next")
        assistant = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "assistant"]
        assert assistant == ["A1"]
        await comm.disconnect()

    async def test_an_edited_message_remembers_which_answer_was_shown(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A"), Turn(content="A again"), Turn(content="B"))
        comm = await _socket(session, owner_token)
        await _say(comm, "q")
        await comm.send_json_to({"type": "regenerate"})
        await receive_until(comm)
        http = TokenClient(owner_token)
        detail = (await _select(http, session, _message(await _detail(http, session), "A again")["id"], 1)).json()
        assert _shown(detail) == ["q", "A"]
        await _edit(comm, _message(detail, "q")["id"], "q2")
        detail = await _detail(http, session)
        assert _shown(detail) == ["q2", "B"]
        detail = (await _select(http, session, _message(detail, "q2")["id"], 1)).json()
        assert _shown(detail) == ["q", "A"]  # the answer chosen before the edit, not the newest
        assert _message(detail, "A")["versions"] == {**_message(detail, "A")["versions"], "index": 1, "count": 2}
        await comm.disconnect()


class TestSelectIsRefused:
    async def test_bad_requests(self, llm, session, owner_token, other_user, no_planning):
        http = await _edited_three_times(llm, session, owner_token)
        detail = await _detail(http, session)
        edited, first = _message(detail, "second, take three")["id"], _message(detail, "first")["id"]
        hidden = await Message.objects.filter(session_id=session.pk, content="second").values_list("id", flat=True).afirst()
        cases = [
            (edited, 4, 400, "pick a number from 1 to 3"),
            (edited, 0, 400, "pick a number from 1 to 3"),
            (edited, "x", 400, "whole number"),
            (first, 1, 400, "no other versions"),
            (hidden, 1, 404, "no message"),  # a row of a version not shown
            (424242, 1, 404, "no message"),
            ("abc", 1, 404, "no message"),
        ]
        for message_id, n, status, text in cases:
            response = await _select(http, session, message_id, n)
            assert response.status_code == status, (message_id, n, response.content)
            assert text in response.json()["error"]
        assert _shown(await _detail(http, session)) == _shown(detail)
        _, other_token = await sync_to_async(ApiToken.issue)(other_user)
        response = await _select(TokenClient(other_token), session, edited, 1)
        assert response.status_code == 404
        get = await http.client.get(f"/sessions/{session.id}/messages/{edited}/versions/1/select", headers=http.headers)
        assert get.status_code == 405
        assert _shown(await _detail(http, session)) == _shown(detail)

    async def test_409_during_a_run(self, llm, session, owner_token, no_planning):
        http = await _edited_three_times(llm, session, owner_token)
        edited = _message(await _detail(http, session), "second, take three")["id"]
        llm.script(Turn(content="slow " * 40, chunk_size=5, delay=0.03))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "go"})
        assert json.loads(await comm.receive_from(timeout=TIMEOUT))["type"] == "stream_start"
        response = await _select(http, session, edited, 1)
        assert response.status_code == 409 and "wait for it to finish" in response.json()["error"]
        await receive_until(comm)
        assert _shown(await _detail(http, session))[:4] == ["first", "A1", "second, take three", "C2"]
        assert (await _select(http, session, edited, 1)).status_code == 200  # after the run it works
        await comm.disconnect()

    async def test_versions_older_than_the_compression_point(self, llm, session, owner_token, no_planning, settings):
        http = await _edited_three_times(llm, session, owner_token)
        # A long answer fills the window: the post-turn compression summarises all but the last turn.
        settings.CONTEXT_KEEP_RECENT = 1
        llm.script(Turn(content="D3", prompt_tokens=7000, eval_tokens=10))
        llm.add_rule(Rule(match="", system="You compress", turns=[Turn(content="- they talked")]))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "third"})
        await receive_until(comm, last_type="context_compressed")  # post-turn: after stream_end
        await comm.disconnect()
        context_before = [m.content async for m in Message.objects.filter(session_id=session.pk, in_context=True).order_by("-is_summary", "seq")]
        assert context_before[0].endswith("- they talked") and context_before[1:] == ["third", "D3"]
        edited = _message(await _detail(http, session), "second, take three")["id"]
        response = await _select(http, session, edited, 1)
        assert response.status_code == 400 and "older than the summary" in response.json()["error"]
        assert _shown(await _detail(http, session)) == ["first", "A1", "second, take three", "C2", "third", "D3"]
        context = [m.content async for m in Message.objects.filter(session_id=session.pk, in_context=True).order_by("-is_summary", "seq")]
        assert context == context_before  # nothing compressed came back, nothing parked went in
        # A turn after the summary still switches, and its context keeps the summary.
        llm.script(Turn(content="D3 again"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "regenerate"})
        await receive_until(comm)
        await comm.disconnect()
        detail = (await _select(http, session, _message(await _detail(http, session), "D3 again")["id"], 1)).json()
        assert _shown(detail)[-2:] == ["third", "D3"]
        context = [m.content async for m in Message.objects.filter(session_id=session.pk, in_context=True).order_by("-is_summary", "seq")]
        assert context == context_before


class TestPagingAndSearch:
    async def test_versions_on_paged_history_and_search_sees_only_shown_rows(self, llm, session, owner_token, no_planning):
        http = await _edited_three_times(llm, session, owner_token)
        page = await _detail(http, session, "?limit=2")
        assert _shown(page) == ["second, take three", "C2"] and page["has_more"]
        assert page["messages"][0]["versions"]["count"] == 3
        older = await _detail(http, session, f"?limit=2&before={page['older_than']}")
        assert _shown(older) == ["first", "A1"] and not older["has_more"]
        found = await http.client.get("/sessions?q=take", headers=http.headers)
        assert [s["session_id"] for s in found.json()["sessions"]] == [str(session.id)]
        await _select(http, session, page["messages"][0]["id"], 1)
        found = await http.client.get("/sessions?q=take", headers=http.headers)
        assert found.json()["sessions"] == []  # the versions not shown are not searched


class TestExportImport:
    async def test_export_then_import_keeps_the_versions(self, llm, session, owner_token, no_planning):
        http = await _edited_three_times(llm, session, owner_token)
        exported = await http.client.get(f"/sessions/{session.id}/export?format=json", headers=http.headers)
        body = exported.json()
        assert len(body["messages"]) == 8
        assert {m["version_of"] for m in body["messages"] if m["role"] == "user"} == {0, 3}
        markdown = (await http.client.get(f"/sessions/{session.id}/export?format=md", headers=http.headers)).content.decode()
        assert "second, take three" in markdown and "take two" not in markdown and "A2" not in markdown
        response = await http.post("/sessions/import", json.dumps(body))
        assert response.status_code == 201, response.content
        copy = await Session.objects.aget(pk=response.json()["session_id"])
        detail = await _detail(http, copy)
        assert _shown(detail) == ["first", "A1", "second, take three", "C2"]
        assert _message(detail, "second, take three")["versions"]["count"] == 3
        detail = (await _select(http, copy, _message(detail, "second, take three")["id"], 2)).json()
        assert _shown(detail) == ["first", "A1", "second, take two", "B2"]
        again = (await http.client.get(f"/sessions/{copy.id}/export?format=json", headers=http.headers)).json()
        assert len(again["messages"]) == 8

    async def test_an_import_with_a_broken_version_reference_is_refused(self, owner_token):
        body = {
            "format": "navi.session", "version": 1, "session": {},
            "messages": [{"seq": 1, "role": "user", "content": "x"}, {"seq": 2, "role": "user", "content": "y", "version_of": 7}],
        }
        response = await TokenClient(owner_token).post("/sessions/import", json.dumps(body))
        assert response.status_code == 400
        assert "messages[1].version_of names no message" in response.json()["error"]


class TestNothingIsLost:
    async def test_an_edit_whose_run_cannot_save_the_message_shows_the_old_version_again(
        self, llm, session, owner_token, no_planning, monkeypatch
    ):
        from agent.registry import get_agent

        llm.script(Turn(content="A1"))
        comm = await _socket(session, owner_token)
        await _say(comm, "first")
        agent = get_agent()

        def failing(*args, **kwargs):
            raise RuntimeError("the database is read-only")

        monkeypatch.setattr(agent, "begin_turn", failing)  # the fault, as tests/test_consumer.py injects it
        first = (await Message.objects.aget(session_id=session.pk, content="first")).id
        frames = await _edit(comm, first, "first, edited")
        assert frames[-1]["type"] == "error" and "read-only" in frames[-1]["message"]
        shown = [m.content async for m in Message.objects.filter(session_id=session.pk, in_display=True).order_by("seq")]
        assert shown[:2] == ["first", "A1"] and "first, edited" not in shown
        context = [m.content async for m in Message.objects.filter(session_id=session.pk, in_context=True).order_by("seq")]
        assert context == ["first", "A1"]
        await comm.disconnect()
