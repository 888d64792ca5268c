"""The default path's cost before the first word: a message that needs no tool is one streaming
model call (its answer read out of the constrained step's JSON as it grows), and the prompt's
prefix stays byte-identical from turn to turn and chat to chat so a server's prompt cache serves
it — over a real WebSocket run against the protocol-level test LLM, which enforces a request's
JSON schema as Ollama and llama.cpp do."""

from __future__ import annotations

import pytest

from agent.models import Profile
from agent.toolcalling import prompts
from agent.turn.titles import TITLE_PROMPT
from tests.llm_server import Turn
from tests.test_constrained import schema_of
from tests.test_small_models import of, run, shown

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Paris is the capital of France. It sits on the Seine."


@pytest.fixture(autouse=True)
def _plain_secretary(profiles):
    Profile.objects.update(planning_enabled=False)


def answer_calls(llm) -> list[dict]:
    """The chat's own calls (the title call after a new chat's first answer left out)."""
    return [r for r in llm.requests if r["messages"][0]["content"] != TITLE_PROMPT]


class TestOneCall:
    @pytest.mark.parametrize("backend,way", [("ollama", "format"), ("openai", "response_format")])
    async def test_a_plain_message_on_the_default_profile_is_one_streamed_call(
        self, llm, session, owner_token, backend, way
    ):
        from sessions_app.models import Message

        if backend == "openai":
            await Profile.objects.filter(pk="secretary").aupdate(llm_backend="openai", model="m")
        llm.schemas = {way}
        llm.script(Turn(content=ANSWER, chunk_size=4))
        frames = await run(session, owner_token, "What is the capital of France?")
        (call,) = answer_calls(llm)
        # The step may answer in words: its answer branch carries the text, which is shown as it comes.
        answer_branch = schema_of(call)["anyOf"][0]
        assert answer_branch["properties"]["name"] == {"const": "answer"} and "text" in answer_branch["properties"]
        assert shown(frames) == ANSWER
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == ANSWER
        stored = [m async for m in Message.objects.filter(session=session).order_by("seq").values_list("role", "content")]
        assert stored == [("user", "What is the capital of France?"), ("assistant", ANSWER)]
        # The next message of the chat: one call, nothing else.
        llm.script(Turn(content="Rome.", chunk_size=2))
        frames = await run(session, owner_token, "And the capital of Italy?")
        assert len(answer_calls(llm)) == 2 and shown(frames) == "Rome."

    async def test_the_answer_is_shown_before_its_json_is_closed(self, llm, session, owner_token):
        # The stream breaks after five pieces (the JSON never closed): what came is shown and kept.
        from sessions_app.models import Message

        llm.schemas = {"format"}
        llm.script(Turn(content=ANSWER, chunk_size=4, drop_after=5))
        frames = await run(session, owner_token, "What is the capital of France?")
        assert shown(frames) == ANSWER[:20] and frames[-1]["type"] == "error"
        row = await Message.objects.filter(session=session, role="assistant").aget()
        assert row.content == ANSWER[:20] and row.status == "interrupted"

    async def test_a_step_that_chooses_answer_without_words_still_gets_its_answer(self, llm, session, owner_token):
        llm.schemas = {"format"}
        llm.script(Turn(content='{"name": "answer"}'), Turn(content="Hello!"))
        frames = await run(session, owner_token, "hi")
        first, second = answer_calls(llm)
        assert schema_of(first) is not None and schema_of(second) is None
        assert frames[-1]["content"] == "Hello!"

    async def test_a_tool_the_owner_names_is_still_called(self, llm, session, owner_token):
        llm.schemas = {"format"}
        frames = await run(session, owner_token, "run list_tools please")
        assert [c["tool"] for c in of(frames, "tool_call")] == ["list_tools"]
        assert frames[-1]["type"] == "stream_end"

    async def test_a_small_models_profile_keeps_its_separate_answer_call(self, llm, session, owner_token):
        # A capped profile's step was tuned on a 0.5B model with a plain "answer" choice: unchanged.
        await Profile.objects.filter(pk="secretary").aupdate(max_tools=3)
        llm.schemas = {"format"}
        llm.script(Turn(content='{"name": "answer"}'), Turn(content="Hello!"))
        # Not a plain question (those are one call: tests/test_plain_questions.py).
        frames = await run(session, owner_token, "hello there, can you help me?")
        decide = answer_calls(llm)[0]
        assert "text" not in schema_of(decide)["anyOf"][0]["properties"]
        assert prompts.DECIDE_NOTE in decide["messages"][-1]["content"] and frames[-1]["content"] == "Hello!"


class TestStepAnswerStreams:
    async def test_each_piece_of_a_step_answer_is_a_frame_the_moment_it_arrives(
        self, llm, session, owner_token, monkeypatch
    ):
        """The server writes the step's JSON a few characters a piece, its escapes cut anywhere,
        in lockstep with this client: a piece is written only once the page has what the one before
        it completed. Every piece that completes characters is one stream_delta of exactly those
        characters, and the reader never waits on a tick or a timer for more."""
        import json
        import threading

        from channels.testing import WebsocketCommunicator

        from agent.llm import ndjson
        from navi_project.asgi import application
        from tests.test_jsonstring import _known
        from tests.test_small_models import TIMEOUT

        waits = []
        real_read, real_hold = ndjson._Ticks.read, ndjson._hold
        monkeypatch.setattr(ndjson._Ticks, "read", lambda *a: waits.append("tick") or real_read(*a))

        async def counted_hold(*args):
            waits.append("hold")
            await real_hold(*args)

        monkeypatch.setattr(ndjson, "_hold", counted_hold)
        text = 'Line one\nsays "hi" \\ café, 😀 and 𝄞 — done.'
        llm.schemas, llm.piece_gate = {"format"}, threading.Semaphore(0)
        llm.script(Turn(content=text, chunk_size=3))
        # As the server writes it: the text as JSON spells it, 3 characters a piece, the head
        # with the first piece; escapes cut between pieces.
        inside = json.dumps(text)[1:-1]
        pieces = [inside[i:i + 3] for i in range(0, len(inside), 3)]
        pieces[0], pieces[-1] = '{"name":"answer","text":"' + pieces[0], pieces[-1] + '"}'
        assert sum(p.endswith("\\") for p in pieces) >= 2  # `\` ends a piece, its escape's letter starts the next
        expected, done, fed = [], "", ""
        for piece in pieces:
            fed += piece
            so_far = _known(fed[len('{"name":"answer","text":"'):len(inside) + 25])
            expected.append(so_far[len(done):])
            done = so_far

        comm = WebsocketCommunicator(application, f"/ws/sessions/{session.id}",
                                     headers=[(b"authorization", f"Bearer {owner_token}".encode())])
        assert (await comm.connect(timeout=TIMEOUT))[0]
        try:
            await comm.send_json_to({"type": "message", "content": "Tell me something."})
            deltas = []
            for shows in expected:
                if shows:  # this piece completes characters: they come as one frame, before the next piece exists
                    while (frame := json.loads(await comm.receive_from(timeout=TIMEOUT)))["type"] != "stream_delta":
                        assert frame["type"] in ("stream_start", "thinking_end"), frame
                    deltas.append(frame["delta"])
                    assert frame["delta"] == shows
                llm.piece_gate.release()  # now the server writes the next piece
            while (frame := json.loads(await comm.receive_from(timeout=TIMEOUT)))["type"] != "stream_end":
                assert frame["type"] != "stream_delta", frame  # nothing was held back to come later
        finally:
            await comm.disconnect()
        assert "".join(deltas) == text and frame["content"] == text
        assert len(deltas) == sum(1 for e in expected if e) > 10
        assert waits == []  # no piece waited for a tick or a timer


class TestFieldText:
    def test_the_text_is_decoded_piece_by_piece_escapes_and_all(self):
        import json

        from agent.toolcalling.partial_json import FieldText

        text = 'He said "hi"\n\tthen left \\ é 😀 /'
        for ascii_only in (True, False):
            written = json.dumps({"name": "answer", "text": text}, ensure_ascii=ascii_only)
            for size in (1, 2, 3, 5):
                reader = FieldText()
                pieces = [reader.feed(written[i:i + size]) for i in range(0, len(written), size)]
                assert "".join(pieces) == text and reader.ended
                assert sum(1 for p in pieces if p) > 3  # shown as it came, not at the end

    def test_a_text_field_inside_a_calls_arguments_is_not_an_answer(self):
        from agent.toolcalling.partial_json import FieldText

        reader = FieldText()
        assert reader.feed('{"name": "memory_save", "arguments": {"text": "not an answer"}}') == ""
        assert not reader.started

    def test_broken_escapes_from_a_server_never_fail_the_answer(self):
        from agent.toolcalling.partial_json import FieldText

        reader = FieldText()
        shown = reader.feed('{"name": "answer", "text": "a\\uZZZZb \\ud83d') + reader.feed("x and \\q end")
        assert shown == "a\\uZZZZb \ufffdx and q end" and not reader.ended  # a lone surrogate: U+FFFD


class TestCachedPrefix:
    @pytest.mark.parametrize("tool_calling,schemas", [("auto", {"format"}), ("native", set())])
    async def test_the_prompt_prefix_is_the_same_bytes_turn_to_turn_and_chat_to_chat(
        self, llm, session, owner, owner_token, monkeypatch, tool_calling, schemas
    ):
        # A minute passes between every call: the clock must not sit before the tools or the history.
        from datetime import datetime
        from zoneinfo import ZoneInfo

        from agent.context import clock
        from sessions_app.models import Session

        minutes = iter(range(60))
        monkeypatch.setattr(clock, "now", lambda: datetime(2026, 11, 25, 9, next(minutes), tzinfo=ZoneInfo("UTC")))
        await Profile.objects.filter(pk="secretary").aupdate(tool_calling=tool_calling)
        llm.schemas = schemas
        other = await Session.objects.acreate(owner=owner, profile_id="secretary")
        llm.script(Turn(content="Paris."), Turn(content="Rome."), Turn(content="Hello."))
        await run(session, owner_token, "What is the capital of France?")
        await run(session, owner_token, "And the capital of Italy?")
        await run(other, owner_token, "hi")
        first, second, elsewhere = answer_calls(llm)
        # System prompt (persona, profile, catalogue, memory) and the tools sent: identical everywhere.
        prefix = {(r["messages"][0]["content"], str(r.get("tools"))) for r in (first, second, elsewhere)}
        assert len(prefix) == 1
        # The next turn re-sends the first one's request as it was read, up to where its clock began.
        assert second["messages"][1]["role"] == "user" and second["messages"][1]["content"] == "What is the capital of France?"
        assert first["messages"][1]["content"].startswith(second["messages"][1]["content"] + "\n\n---\nCurrent date and time: ")
        assert "09:01" in second["messages"][-1]["content"] or "09:02" in second["messages"][-1]["content"]
