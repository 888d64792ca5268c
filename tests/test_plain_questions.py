"""A small model on the default profile (issue 57): the server says how big the model is, and a
profile that caps no tools runs as a small model's on it; a plain question of a small model's
profile is answered in one streamed call with no tools sent (the ledger's `plain` group), while
a request that gives a tool something to do is still a constrained step — over a real WebSocket
run against the protocol-level test LLM."""

from __future__ import annotations

import json

import pytest

from agent.llm.messages import ChatMessage, ToolCall
from agent.models import Profile
from agent.toolcalling.guards import plain
from agent.turn.setup import fit_to_model
from sessions_app.models import Message
from tests.llm_server import Turn
from tests.test_small_models import of, run, shown

pytestmark = pytest.mark.django_db(transaction=True)

FRANCE = "What is the capital of France? Answer in one short sentence."
HALF_A_BILLION = 494_032_768  # Qwen2.5-0.5B, as Ollama's /api/show and llama.cpp's /v1/models say


@pytest.fixture(autouse=True)
def _secretary(profiles):
    Profile.objects.update(planning_enabled=False)


async def _profile(max_tools: int, calling: str = Profile.ToolCalling.AUTO) -> None:
    await Profile.objects.filter(pk="secretary").aupdate(max_tools=max_tools, tool_calling=calling)


def _chat_requests(llm) -> list[dict]:
    return [r for r in llm.requests if r.get("path") in ("/api/chat", "/v1/chat/completions")]


async def _guards(session) -> dict | None:
    last = await Message.objects.filter(session=session, role="assistant").order_by("-seq").afirst()
    return last.meta.get("guards")


class TestAPlainQuestionOfASmallModelsProfile:
    async def test_is_answered_in_one_call_with_no_tools_and_so_is_the_follow_up(self, llm, session, owner_token):
        await _profile(3)
        llm.script(Turn(content="Paris is the capital of France."), Turn(content="Rome."))
        frames = await run(session, owner_token, FRANCE)
        assert frames[-1]["type"] == "stream_end" and shown(frames) == "Paris is the capital of France."
        first = _chat_requests(llm)
        assert len(first) == 1  # the first word comes from the first call
        assert not first[0].get("format") and not first[0].get("tools")  # no step, no tools
        assert await _guards(session) == {"plain": 1}
        frames = await run(session, owner_token, "And Italy?")
        assert shown(frames) == "Rome." and len(_chat_requests(llm)) == 2
        # The second call's prompt starts as the first one did: the server's cache serves it.
        second = _chat_requests(llm)[1]["messages"]
        assert second[0] == first[0]["messages"][0] and second[1]["content"] == FRANCE

    async def test_a_request_with_work_for_a_tool_is_still_a_constrained_step(self, llm, session, owner_token):
        await _profile(3)
        call = json.dumps({"name": "todo", "arguments": {"action": "set", "tasks": ["buy milk"]}})
        llm.script(Turn(content=call), Turn(content=json.dumps({"name": "answer"})), Turn(content="Added."))
        frames = await run(session, owner_token, "Put buy milk on my todo list.")
        assert of(frames, "tool_call")[0]["tool"] == "todo"
        assert _chat_requests(llm)[0].get("format")  # the step's schema
        assert "plain" not in (await _guards(session) or {})

    async def test_a_follow_up_to_a_turn_that_used_tools_is_the_models_to_choose(self, llm, session, owner_token):
        await _profile(3)
        call = json.dumps({"name": "todo", "arguments": {"action": "set", "tasks": ["buy milk"]}})
        llm.script(Turn(content=call), Turn(content=json.dumps({"name": "answer"})), Turn(content="Added."),
                   Turn(content=json.dumps({"name": "answer"})), Turn(content="It is on the list."))
        await run(session, owner_token, "Put buy milk on my todo list.")
        seen = len(_chat_requests(llm))
        frames = await run(session, owner_token, "And why?")
        assert frames[-1]["type"] == "stream_end"
        assert _chat_requests(llm)[seen].get("format")  # "And why?" may be about what the tool did

    async def test_switched_off_the_model_decides_as_before(self, llm, session, owner_token, settings):
        await _profile(3)
        settings.NAVI_GUARDS_OFF = ["plain"]
        llm.script(Turn(content=json.dumps({"name": "answer"})), Turn(content="Paris."))
        frames = await run(session, owner_token, FRANCE)
        assert shown(frames) == "Paris." and _chat_requests(llm)[0].get("format")

    async def test_a_big_models_profile_decides_as_before(self, llm, session, owner_token):
        await _profile(0)
        llm.script(Turn(content=json.dumps({"name": "answer", "text": "Paris."})))
        frames = await run(session, owner_token, FRANCE)
        assert shown(frames) == "Paris." and _chat_requests(llm)[0].get("format")
        assert await Message.objects.filter(session=session, meta__has_key="guards").acount() == 0


class TestWhatAsksNothing:
    @pytest.mark.parametrize("request_", [
        FRANCE, "And Italy?", "Tell me a joke.", "Explain recursion in two sentences.", "Why is the sky blue?",
        "Translate 'good morning' into Spanish.", "Hi!",
    ])
    def test_plain_questions(self, request_):
        assert plain.asks_nothing(request_, [ChatMessage(role="user", content=request_)], [])

    @pytest.mark.parametrize("request_", [
        "What's my gym locker code again?",  # the owner's own things
        "Note that the dentist moved to Friday.", "Keep in mind that the boiler was serviced.",
        "Read notes.txt and tell me what it says.",  # a file
        "What does https://example.org say about kiwis?",  # an address
        "What is 17 percent of 2350?",  # numbers to work with
        "What's the weather in Lisbon tomorrow?", "Any news about the election today?",  # only a search knows
        "Use code_exec to print hello.",  # a tool named
        "Search the web for the best pizza in Naples.", "Put eggs on the to-do list.",
        " ".join(["word"] * 31) + "?",  # a task described at length
        "",
    ])
    def test_requests_that_give_a_tool_work(self, request_):
        from agent.registry import get_agent

        tools = get_agent().tools.tools_for(["code_exec", "filesystem", "todo"])
        assert not plain.asks_nothing(request_, [ChatMessage(role="user", content=request_)], tools)

    def test_a_follow_up_after_a_tool_turn_or_with_an_image_is_not_plain(self):
        call = ToolCall(name="todo", arguments={"action": "list"}, id="c1")
        history = [ChatMessage(role="user", content="What is on the list?"),
                   ChatMessage(role="assistant", content="", tool_calls=[call]),
                   ChatMessage(role="tool", content="1. eggs", tool_call_id="c1"),
                   ChatMessage(role="assistant", content="Eggs."),
                   ChatMessage(role="user", content="And why?")]
        assert not plain.asks_nothing("And why?", history, [])
        assert plain.asks_nothing("And why?", history[3:], [])  # the same words after a plain turn
        pictured = [ChatMessage(role="user", content="What is this?", images=["a.png"])]
        assert not plain.asks_nothing("What is this?", pictured, [])


class TestTheServerSaysTheModelIsSmall:
    async def test_the_default_profile_on_a_half_billion_model_runs_as_a_small_models(self, llm, session, owner_token):
        await _profile(0)
        profile = await Profile.objects.aget(pk="secretary")
        llm.model_show[profile.resolved_model().removesuffix(":latest")] = {"parameter_count": HALF_A_BILLION}
        llm.script(Turn(content="Paris."))
        frames = await run(session, owner_token, FRANCE)
        assert shown(frames) == "Paris." and len(_chat_requests(llm)) == 1  # the plain path: a small model's
        assert await _guards(session) == {"plain": 1}
        assert (await Profile.objects.aget(pk="secretary")).max_tools == 0  # the turn's copy only: nothing saved

    async def test_sizes_from_each_kind_of_server_and_what_changes_nothing(self, llm, settings):
        from agent.llm.ollama_backend import OllamaBackend
        from agent.llm.openai_backend import OpenAIBackend

        settings.SMALL_MODEL_MAX_TOOLS = 8
        tiny = (await Profile.objects.aget(pk="secretary")).resolved_model()
        llm.model_show[tiny.removesuffix(":latest")] = {"parameter_count": HALF_A_BILLION}
        llm.openai_model_meta = {"meta": {"n_ctx": 8192, "n_params": HALF_A_BILLION}}
        ollama, openai = OllamaBackend(host=llm.url), OpenAIBackend(base_url=llm.openai_url, api_key="test-key")
        assert await ollama.model_parameters(tiny) == HALF_A_BILLION
        assert await ollama.model_parameters("other") is None  # the server does not say: unknown
        assert await openai.model_parameters(tiny) == HALF_A_BILLION

        async def fitted(max_tools=0, calling=Profile.ToolCalling.AUTO, model=tiny, backend=ollama) -> int:
            profile = Profile(id="p", name="p", max_tools=max_tools, tool_calling=calling, model=model)
            await fit_to_model(profile, backend)
            return profile.max_tools

        assert await fitted() == 8 and await fitted(backend=openai) == 8
        assert await fitted(max_tools=3) == 3  # the owner's own cap stands
        assert await fitted(model="other") == 0  # size unknown
        assert await fitted(calling=Profile.ToolCalling.NATIVE) == 0  # native: every tool, as set
        llm.model_show[tiny.removesuffix(":latest")] = {"parameter_count": 7_600_000_000}
        assert await fitted(backend=OllamaBackend(host=llm.url)) == 0  # a 7.6B model is no small one
        settings.SMALL_MODEL_MAX_TOOLS = 0
        assert await fitted(backend=openai) == 0  # switched off

    async def test_a_server_that_cannot_be_reached_changes_nothing(self):
        from agent.llm.openai_backend import OpenAIBackend

        profile = Profile(id="p", name="p", max_tools=0, model="tiny")
        await fit_to_model(profile, OpenAIBackend(base_url="http://127.0.0.1:9/v1", api_key="k"))
        assert profile.max_tools == 0
