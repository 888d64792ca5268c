"""What real model servers do that broke Navi (issue #15: llama-cpp-python / llama-server with
SmolLM2 and Gemma, recent Ollama), reproduced by the protocol-level test server."""

from __future__ import annotations

import time

import pytest

from agent.frames.events import to_frame
from agent.llm.base import learned_context_windows
from agent.models import Profile
from agent.registry import get_agent
from sessions_app.models import Message, Session
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.django_db(transaction=True)

OVERFLOW = "Requested tokens (4327) exceed context window of 4096"


@pytest.fixture
def openai_profile(no_planning):
    Profile.objects.filter(pk="secretary").update(llm_backend="openai", model="smollm2")


@pytest.fixture(autouse=True)
def _forget_learned_windows():
    learned_context_windows.clear()
    yield
    learned_context_windows.clear()


async def frames_of(session_id, text) -> list[dict]:
    return [to_frame(e) async for e in get_agent().run_stream(str(session_id), text)]


async def rows(session) -> list[tuple]:
    return [
        (m.role, m.content, m.status)
        async for m in Message.objects.filter(session_id=session.pk, in_display=True).order_by("seq")
    ]


class TestToolCallNames:
    async def test_a_name_repeated_in_every_chunk_is_not_concatenated(self, llm, session, openai_profile):
        llm.add_rule(Rule(match="list", turns=[
            Turn(tool_calls=[{"name": "todo", "arguments": {"action": "read"}}], chunk_size=3, repeat_tool_name=True),
            Turn(content="Nothing to do."),
        ]))
        frames = await frames_of(session.id, "list my todos")
        call = next(f for f in frames if f["type"] == "tool_call")
        assert call["tool"] == "todo" and call["success"] is True
        assert frames[-1]["content"] == "Nothing to do."


class TestIncompleteStreams:
    async def test_an_error_object_in_a_200_stream_is_an_error_that_says_the_context_was_too_long(
        self, llm, session, openai_profile
    ):
        llm.script(Turn(content="Paris is", chunk_size=4, stream_error={"code": 500, "message": OVERFLOW}))
        frames = await frames_of(session.id, "capital of France?")
        assert frames[-1]["type"] == "error"
        message = frames[-1]["message"]
        assert "too long for the model's context window" in message and "4327" in message and "4096" in message
        assert "partial answer was kept" in message
        assert await rows(session) == [
            ("user", "capital of France?", "complete"),
            ("assistant", "Paris is", "interrupted"),
        ]
        # The next turn compresses (the server's real window is now known) and answers.
        llm.script(Turn(content="- asked about France"), Turn(content="Paris."))
        frames = await frames_of(session.id, "again?")
        assert [f["type"] for f in frames if f["type"] in ("context_compressed", "stream_end")] == [
            "context_compressed",
            "stream_end",
        ]
        assert frames[-1]["content"] == "Paris."

    async def test_a_stream_that_just_stops_is_not_an_empty_success(self, llm, session, openai_profile):
        # The server's streams stop: the default step's call and the plain call it falls back to.
        llm.script(Turn(content="", no_finish=True), Turn(content="", no_finish=True))
        frames = await frames_of(session.id, "hello?")
        assert frames[-1]["type"] == "error" and "without finishing it" in frames[-1]["message"]
        assert await rows(session) == [("user", "hello?", "complete")]  # no empty "complete" answer
        llm.script(Turn(content="Hi!"))
        frames = await frames_of(session.id, "hello?")
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Hi!"

    async def test_ollama_too(self, llm, session, no_planning):
        llm.script(Turn(content="Half", stream_error="an error was encountered while running the model"))
        frames = await frames_of(session.id, "hi")
        assert frames[-1]["type"] == "error" and "model" in frames[-1]["message"]
        llm.script(Turn(content="Half", no_finish=True))
        frames = await frames_of(session.id, "hi")
        assert frames[-1]["type"] == "error" and "without finishing it" in frames[-1]["message"]
        assert [r[2] for r in await rows(session)] == ["complete", "interrupted", "complete", "interrupted"]


class TestLimits:
    async def test_every_call_has_an_output_cap(self, llm, session, openai_profile):
        await Profile.objects.filter(pk="secretary").aupdate(max_answer_tokens=300, planning_enabled=True)
        llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="DIRECT")]))
        await frames_of(session.id, "hi")
        assert [r["max_tokens"] for r in llm.requests] == [200, 300]  # planning, answer (per profile)

    async def test_a_steady_stream_is_stopped_by_the_wall_clock_limit(self, llm, session, no_planning, settings):
        settings.LLM_CALL_MAX_S = 0.6
        llm.script(Turn(content="story ", endless=True, delay=0.02))
        started = time.monotonic()
        frames = await frames_of(session.id, "tell me a story")
        assert time.monotonic() - started < 5
        assert frames[-1]["type"] == "error" and "LLM_CALL_MAX_S" in frames[-1]["message"]
        assert llm.wait_for_disconnect(timeout=5)  # the server stops generating
        assert (await rows(session))[-1][2] == "interrupted"

    async def test_a_server_that_never_answers_is_stopped_too(self, llm, session, openai_profile, settings):
        settings.LLM_CALL_MAX_S = 0.5
        llm.script(Turn(content="late", first_delay=30))
        started = time.monotonic()
        frames = await frames_of(session.id, "hi")
        assert time.monotonic() - started < 5 and "LLM_CALL_MAX_S" in frames[-1]["message"]
        assert await rows(session) == [("user", "hi", "complete")]

    async def test_an_answer_cut_by_its_cap_ends_normally(self, llm, session, no_planning):
        await Profile.objects.filter(pk="secretary").aupdate(max_answer_tokens=3)
        llm.script(Turn(content="one two three four five", chunk_size=4))
        frames = await frames_of(session.id, "count")
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "one two thre"


class TestOllamaCapabilities:
    async def test_think_is_sent_only_to_models_that_can_think(self, llm, session, no_planning):
        llm.model_show["gemma4:e2b-it-q8_0"] = {"capabilities": ["completion", "tools"]}
        llm.script(Turn(content="Hello."))
        frames = await frames_of(session.id, "hi")  # the server answers 400 to `think`
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Hello."
        assert "think" not in llm.requests[-1]
        assert llm.shows == ["gemma4:e2b-it-q8_0"]
        await frames_of(session.id, "again")
        assert llm.shows == ["gemma4:e2b-it-q8_0"]  # cached

    async def test_num_ctx_is_no_larger_than_the_model_supports(self, llm, session, no_planning, settings):
        settings.OLLAMA_NUM_CTX = 65536
        llm.model_show["gemma4:e2b-it-q8_0"] = {"context_length": 4096}
        await frames_of(session.id, "hi")
        assert llm.requests[-1]["options"]["num_ctx"] == 4096

    async def test_without_the_capability_ollama_itself_refuses_think(self, llm, session, no_planning, settings):
        """What happened before: the 400 reaches the owner as an error (the test server is faithful)."""
        import httpx

        llm.model_show["m"] = {"capabilities": ["completion"]}
        response = httpx.post(f"{llm.url}/api/chat", json={"model": "m", "messages": [], "think": True})
        assert response.status_code == 400 and "does not support thinking" in response.json()["error"]

    @pytest.mark.parametrize(
        "arguments,success,told",
        [
            ('{"action": "read"', False, "not valid JSON"),  # malformed: an error the model sees
            ('{"action": "read"}', True, ""),  # a JSON string (ollama-python#484): parsed
        ],
    )
    async def test_string_arguments_from_ollama(self, llm, session, no_planning, arguments, success, told):
        # `native`: arguments as a string come with Ollama's native tool calls (ollama-python#484).
        await Profile.objects.filter(pk="secretary").aupdate(tool_calling="native")
        llm.add_rule(Rule(match="go", turns=[
            Turn(tool_calls=[{"name": "todo", "arguments": arguments}]), Turn(content="done"),
        ]))
        frames = await frames_of(session.id, "go")
        call = next(f for f in frames if f["type"] == "tool_call")
        assert call["success"] is success and told in call["result"]
        assert frames[-1]["content"] == "done"


class TestPromptCache:
    async def test_the_planning_call_shares_the_answer_calls_prefix(self, llm, session, openai_profile):
        await Profile.objects.filter(pk="secretary").aupdate(planning_enabled=True)
        llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="DIRECT")]))
        llm.add_rule(Rule(match="", turns=[Turn(content="Hi.")]))
        await frames_of(session.id, "hello")
        planning, answer = llm.requests
        # Same system message and tools, and the answer's messages are a prefix of the planning
        # call's up to the user's text: a prefix cache holds everything but the instruction.
        assert planning["messages"][:-1] == answer["messages"][:-1]
        assert planning.get("tools") == answer.get("tools")
        request = answer["messages"][-1]["content"].split("\n\n---\n[next step]")[0]  # the step's own instruction
        assert planning["messages"][-1]["content"].startswith(request)
        assert len([m for m in answer["messages"] if m["role"] == "system"]) == 1


async def test_the_session_stays_usable_after_an_overflow_on_a_long_single_turn(llm, session, openai_profile):
    """A window full of a few long turns: compression keeps only the current one."""
    for i in range(3):
        llm.script(Turn(content=f"long answer {i} " * 20))
        await frames_of(session.id, f"question {i}")
    llm.script(Turn(stream_error={"message": OVERFLOW}))
    assert (await frames_of(session.id, "one more"))[-1]["type"] == "error"
    assert (await Session.objects.aget(pk=session.pk)).context_token_count == 4327
    llm.script(Turn(content="- earlier questions"), Turn(content="OK."))
    frames = await frames_of(session.id, "still there?")
    assert frames[-1]["content"] == "OK."
    assert any(f["type"] == "context_compressed" for f in frames)
