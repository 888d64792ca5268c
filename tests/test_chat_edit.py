"""Edit & resend and regenerate, over WebSocket frames and REST: the replaced turns leave the
display and the context (never deleted, seq append-only), and a new run answers."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from sessions_app.models import ApiToken, Message, Session
from tests.llm_server import Turn
from tests.test_consumer import TIMEOUT, TokenClient, connect, receive_until

pytestmark = pytest.mark.django_db(transaction=True)


async def _socket(session, token):
    comm = connect(session.id, token=token)
    assert (await comm.connect(timeout=TIMEOUT))[0]
    return comm


async def _say(comm, text: str) -> list[dict]:
    await comm.send_json_to({"type": "message", "content": text})
    return await receive_until(comm)


async def _display(session) -> list[tuple[str, str]]:
    rows = Message.objects.filter(session_id=session.pk, in_display=True).order_by("seq")
    return [(m.role, m.content) async for m in rows]


async def _context(session) -> list[str]:
    rows = Message.objects.filter(session_id=session.pk, in_context=True).order_by("seq")
    return [m.content async for m in rows]


async def _id_of(session, content: str) -> int:
    return (await Message.objects.aget(session_id=session.pk, content=content, in_display=True)).id


def _user_texts(request: dict) -> list[str]:
    """The user messages the model read, as the owner wrote them (the clock under the turn's
    request and the default step's note under that left out)."""
    from agent.context.prompts import without_clock

    return [without_clock(m["content"].split("\n\n---\n[next step]")[0]) for m in request["messages"]
            if m["role"] == "user"]


async def _error(comm) -> str:
    frame = json.loads(await comm.receive_from(timeout=TIMEOUT))
    assert frame["type"] == "error" and "run_id" not in frame, frame
    return frame["message"]


class TestEditOverWebSocket:
    async def test_edit_drops_the_later_turns_and_answers_the_edited_text(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A1"), Turn(content="A2"), Turn(content="A1 edited"))
        comm = await _socket(session, owner_token)
        await _say(comm, "first")
        await _say(comm, "second")
        first_id = await _id_of(session, "first")
        old_ids = [m.id async for m in Message.objects.filter(session_id=session.pk).order_by("seq")]
        await comm.send_json_to({"type": "edit", "message_id": first_id, "content": "first, edited"})
        frames = await receive_until(comm)
        assert frames[0] == {**frames[0], "type": "history_rewound", "mode": "edit", "removed_ids": old_ids}
        assert frames[1]["type"] == "stream_start" and frames[1]["user_message"] == "first, edited"
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "A1 edited"
        assert await _display(session) == [("user", "first, edited"), ("assistant", "A1 edited")]
        assert await _context(session) == ["first, edited", "A1 edited"]
        assert _user_texts(llm.requests[-1]) == ["first, edited"]
        # Nothing deleted, seq append-only.
        rows = [m async for m in Message.objects.filter(session_id=session.pk).order_by("seq")]
        assert [m.seq for m in rows] == list(range(1, 7))
        assert all(not m.in_display and not m.in_context for m in rows[:4])
        await comm.disconnect()

    async def test_an_edited_message_keeps_its_images(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="a picture"), Turn(content="still a picture"))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "what is this", "images": ["aGVsbG8="]})
        await receive_until(comm)
        await comm.send_json_to(
            {"type": "edit", "message_id": await _id_of(session, "what is this"), "content": "and now?"}
        )
        await receive_until(comm)
        assert llm.requests[-1]["messages"][-1]["images"] == ["aGVsbG8="]
        await comm.disconnect()

    async def test_regenerate_replaces_the_last_answer(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A1"), Turn(content="A2"), Turn(content="A2, again"))
        comm = await _socket(session, owner_token)
        await _say(comm, "one")
        await _say(comm, "two")
        await comm.send_json_to({"type": "regenerate"})
        frames = await receive_until(comm)
        assert frames[0]["type"] == "history_rewound" and frames[0]["mode"] == "regenerate"
        assert frames[-1]["content"] == "A2, again"
        assert await _display(session) == [
            ("user", "one"),
            ("assistant", "A1"),
            ("user", "two"),
            ("assistant", "A2, again"),
        ]
        assert _user_texts(llm.requests[-1]) == ["one", "two"]
        await comm.disconnect()

    async def test_regenerate_drops_the_tool_rows_of_the_last_turn(self, llm, session, owner_token, no_planning):
        llm.script(
            Turn(tool_calls=[{"name": "todo", "arguments": {"action": "list"}}]),
            Turn(content="nothing to do"),
            Turn(content="plain answer"),
        )
        comm = await _socket(session, owner_token)
        await _say(comm, "todos?")
        assert await Message.objects.filter(session_id=session.pk, role="tool").aexists()
        await comm.send_json_to({"type": "regenerate"})
        await receive_until(comm)
        assert await _display(session) == [("user", "todos?"), ("assistant", "plain answer")]
        assert await _context(session) == ["todos?", "plain answer"]
        await comm.disconnect()

    async def test_regenerate_after_an_error_answers_again(self, llm, session, owner_token, no_planning):
        # The server fails every call of the turn: the default step's call and the plain call it falls back to.
        llm.script(Turn(status=500, error="boom"), Turn(status=500, error="boom"), Turn(content="better now"))
        comm = await _socket(session, owner_token)
        frames = await _say(comm, "try")
        assert frames[-1]["type"] == "error"
        await comm.send_json_to({"type": "regenerate"})
        frames = await receive_until(comm)
        assert frames[-1]["content"] == "better now"
        assert await _display(session) == [("user", "try"), ("assistant", "better now")]
        await comm.disconnect()


class TestEditIsRefused:
    async def test_a_summarised_message(self, session, owner_token):
        await Message.objects.acreate(session=session, seq=1, role="user", content="old", in_context=False)
        await Message.objects.acreate(session=session, seq=2, role="assistant", content="old answer", in_context=False)
        await Message.objects.acreate(
            session=session, seq=3, role="user", content="[Summary]", is_summary=True, in_display=False
        )
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "edit", "message_id": await _id_of(session, "old"), "content": "new"})
        assert "summarised" in await _error(comm)
        assert await _display(session) == [("user", "old"), ("assistant", "old answer")]
        assert (await Session.objects.aget(pk=session.pk)).active_run_id == ""  # the claim was given back
        await comm.disconnect()

    async def test_during_an_active_run(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A1"), Turn(content="slow " * 40, chunk_size=5, delay=0.03))
        comm = await _socket(session, owner_token)
        await _say(comm, "first")
        await comm.send_json_to({"type": "message", "content": "second"})
        first = json.loads(await comm.receive_from(timeout=TIMEOUT))
        assert first["type"] == "stream_start"
        await comm.send_json_to({"type": "edit", "message_id": await _id_of(session, "first"), "content": "x"})
        frames = await receive_until(comm)
        errors = [f for f in frames if f["type"] == "error"]
        assert len(errors) == 1 and "wait for it to finish or press Stop" in errors[0]["message"]
        assert frames[-1]["type"] == "stream_end"
        assert [c for _, c in await _display(session)] == ["first", "A1", "second", "slow " * 40]
        await comm.disconnect()

    @pytest.mark.parametrize(
        "frame,expected",
        [
            ({"type": "edit", "message_id": "abc", "content": "x"}, "integer id"),
            ({"type": "edit", "message_id": 99999, "content": "x"}, "no message 99999"),
            ({"type": "edit", "message_id": None, "content": "x"}, "integer id"),
            ({"type": "edit", "message_id": "ASSISTANT", "content": "x"}, "only your own messages"),
            ({"type": "edit", "message_id": "USER", "content": "  "}, "non-empty"),
            ({"type": "edit", "message_id": "OTHER", "content": "x"}, "no message"),
            ({"type": "regenerate", "session": "EMPTY"}, "nothing to regenerate"),
        ],
    )
    async def test_bad_edits(self, session, owner, owner_token, other_user, frame, expected):
        if frame.get("session") == "EMPTY":
            frame = {"type": "regenerate"}
        else:
            await Message.objects.acreate(session=session, seq=1, role="user", content="mine")
            await Message.objects.acreate(session=session, seq=2, role="assistant", content="answer")
            foreign = await Session.objects.acreate(owner=other_user, profile_id="secretary")
            theirs = await Message.objects.acreate(session=foreign, seq=1, role="user", content="theirs")
            ids = {
                "USER": await _id_of(session, "mine"),
                "ASSISTANT": await _id_of(session, "answer"),
                "OTHER": theirs.id,
            }
            frame = {**frame, "message_id": ids.get(frame["message_id"], frame["message_id"])}
        comm = await _socket(session, owner_token)
        await comm.send_json_to(frame)
        assert expected in await _error(comm)
        await comm.send_json_to({"type": "ping"})
        assert await comm.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}
        await comm.disconnect()
        if frame["type"] == "edit":
            assert (await Message.objects.aget(session=session, content="mine")).in_display


class TestEditOverRest:
    async def test_edit_waits_for_the_new_answer(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A1"), Turn(content="A1 again"))
        http = TokenClient(owner_token)
        assert (await http.post(f"/sessions/{session.id}/messages", {"content": "hi"})).status_code == 200
        message_id = await _id_of(session, "hi")
        response = await http.post(f"/sessions/{session.id}/messages/{message_id}/edit", {"content": "hello"})
        assert response.status_code == 200, response.content
        assert set(response.json()) == {"content", "context_tokens", "run_id"}
        assert response.json()["content"] == "A1 again"
        assert await _display(session) == [("user", "hello"), ("assistant", "A1 again")]

    async def test_regenerate_waits_for_the_new_answer(self, llm, session, owner_token, no_planning):
        llm.script(Turn(content="A1"), Turn(content="A1 again"))
        http = TokenClient(owner_token)
        await http.post(f"/sessions/{session.id}/messages", {"content": "hi"})
        response = await http.post(f"/sessions/{session.id}/regenerate")
        assert response.status_code == 200 and response.json()["content"] == "A1 again"
        assert await _display(session) == [("user", "hi"), ("assistant", "A1 again")]

    async def test_errors(self, session, owner_token, other_user):
        await Message.objects.acreate(session=session, seq=1, role="user", content="old", in_context=False)
        await Message.objects.acreate(session=session, seq=2, role="assistant", content="answer")
        http = TokenClient(owner_token)
        base = f"/sessions/{session.id}"
        old, answer = await _id_of(session, "old"), await _id_of(session, "answer")
        cases = [
            (f"{base}/messages/{old}/edit", {"content": "x"}, 400, "summarised"),
            (f"{base}/messages/{answer}/edit", {"content": "x"}, 400, "only your own"),
            (f"{base}/messages/424242/edit", {"content": "x"}, 404, "no message"),
            (f"{base}/messages/abc/edit", {"content": "x"}, 404, "integers"),
            (f"{base}/messages/{old}/edit", {"content": ""}, 400, "non-empty"),
            (f"{base}/messages/{old}/edit", "[1]", 400, "JSON object"),
        ]
        for path, body, status, text in cases:
            response = await http.post(path, body if isinstance(body, dict) else body)
            assert response.status_code == status, (path, body, response.content)
            assert text in response.json()["error"]
        _, other_token = await sync_to_async(ApiToken.issue)(other_user)
        intruder = TokenClient(other_token)
        assert (await intruder.post(f"{base}/messages/{old}/edit", {"content": "x"})).status_code == 404
        assert (await intruder.post(f"{base}/regenerate")).status_code == 404
        assert (await http.client.get(f"{base}/regenerate", headers=http.headers)).status_code == 405

    async def test_edit_is_409_during_a_run(self, llm, session, owner_token, no_planning):
        await Message.objects.acreate(session=session, seq=1, role="user", content="hi")
        llm.script(Turn(content="slow " * 40, chunk_size=5, delay=0.03))
        comm = await _socket(session, owner_token)
        await comm.send_json_to({"type": "message", "content": "go"})
        await comm.receive_from(timeout=TIMEOUT)
        http = TokenClient(owner_token)
        response = await http.post(
            f"/sessions/{session.id}/messages/{await _id_of(session, 'hi')}/edit", {"content": "x"}
        )
        assert response.status_code == 409 and "press Stop" in response.json()["error"]
        response = await http.post(f"/sessions/{session.id}/regenerate")
        assert response.status_code == 409
        await receive_until(comm)
        await comm.disconnect()
