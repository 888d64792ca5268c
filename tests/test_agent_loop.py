"""The agent loop against the protocol-level test LLM: event sequences (seeds' "typical event
sequences"), persistence order, bad tool calls, limits, errors and stop."""

from __future__ import annotations

import asyncio

import pytest

from agent.frames.events import to_frame
from agent.models import Profile
from agent.registry import get_agent
from agent.turn.loop import RunFailed
from sessions_app.models import Message, Session
from tests.llm_server import Rule, Turn, talk
from tools_app.base import Tool, ToolResult
from tools_app.context import current_stop_event
from tools_app.models import ScratchpadSection

pytestmark = pytest.mark.django_db(transaction=True)

PLANNING = "planning step"


async def frames_of(session_id, text, **kwargs) -> list[dict]:
    return [to_frame(e) async for e in get_agent().run_stream(str(session_id), text, **kwargs)]


def types(frames: list[dict]) -> list[str]:
    """Frame types with runs of deltas collapsed (the seeds write them as `× N`)."""
    out: list[str] = []
    for f in frames:
        if f["type"] in ("thinking_delta", "stream_delta") and out and out[-1] == f["type"]:
            continue
        out.append(f["type"])
    return out


async def rows(session) -> list[tuple]:
    return [
        (m.role, m.content, m.status)
        async for m in Message.objects.filter(session_id=session.pk, in_display=True).order_by("seq")
    ]


class RaisingTool(Tool):
    name = "explode"
    description = "always fails"
    parameters = {"type": "object", "properties": {}}

    async def execute(self, params):
        raise ValueError("kaboom")


class SlowTool(Tool):
    name = "slow"
    description = "sleeps"
    parameters = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
    cancelled = False

    async def execute(self, params):
        try:
            await asyncio.sleep(params["seconds"])
        except asyncio.CancelledError:
            SlowTool.cancelled = True
            raise
        return ToolResult(True, "slept")


class TestSequences:
    async def test_simple_question(self, llm, session, no_planning):
        llm.script(Turn(thinking="The owner greets me.", content="Hello! How can I help?", chunk_size=4))
        frames = await frames_of(session.id, "hi")
        assert types(frames) == ["stream_start", "thinking_delta", "thinking_end", "stream_delta", "stream_end"]
        assert "".join(f["delta"] for f in frames if f["type"] == "stream_delta") == "Hello! How can I help?"
        assert "".join(f["delta"] for f in frames if f["type"] == "thinking_delta") == "The owner greets me."
        end = frames[-1]
        assert end["content"] == "Hello! How can I help?"
        assert end["context_tokens"] == 15 and end["max_context_tokens"] == 8192
        assert await rows(session) == [("user", "hi", "complete"), ("assistant", "Hello! How can I help?", "complete")]
        saved = await Message.objects.aget(session_id=session.pk, role="assistant")
        assert saved.thinking == "The owner greets me."
        stored = await Session.objects.aget(pk=session.pk)
        assert (stored.context_token_count, stored.context_window) == (15, 8192)  # the meter after a reload

    async def test_an_answer_saved_in_parts_ends_complete_with_the_contexts_size(self, llm, session, no_planning, monkeypatch):
        from agent.context import conversation

        monkeypatch.setattr(conversation, "FLUSH_INTERVAL_S", 0.0)  # a partial save at every delta
        llm.script(Turn(content="one two three four", chunk_size=4, delay=0.02))
        frames = await frames_of(session.id, "count")
        assert frames[-1]["type"] == "stream_end" and frames[-1]["context_tokens"] == 15
        assert await rows(session) == [("user", "count", "complete"), ("assistant", "one two three four", "complete")]
        assert (await Session.objects.aget(pk=session.pk)).context_token_count == 15

    async def test_planning_and_tools(self, llm, session):
        llm.add_rule(Rule(system=PLANNING, match="", turns=[Turn(content="1. Write the list\n2. Read it back")]))
        llm.add_rule(
            Rule(
                match="plan my day",
                turns=[
                    Turn(
                        thinking="I should make a list.",
                        tool_calls=[{"name": "todo", "arguments": {"action": "set", "tasks": ["gym", "mail"]}}],
                    ),
                    Turn(tool_calls=[{"name": "todo", "arguments": {"action": "read"}}]),
                    Turn(thinking="All set.", content="Your day: gym, then mail."),
                ],
            )
        )
        frames = await frames_of(session.id, "plan my day")
        assert types(frames) == [
            "stream_start",
            "plan_ready",
            "thinking_delta",
            "turn_thinking",
            "tool_started",
            "tool_call",
            "tool_started",
            "tool_call",
            "thinking_delta",
            "thinking_end",
            "stream_delta",
            "stream_end",
        ]
        assert frames[1]["plan"] == "1. Write the list\n2. Read it back"
        calls = [f for f in frames if f["type"] == "tool_call"]
        assert calls[0]["tool"] == "todo" and calls[0]["success"] is True and calls[0]["is_subagent"] is False
        assert "gym" in calls[1]["result"] and "mail" in calls[1]["result"]
        planning_call, first_answer = [r for r in llm.requests if r["path"] == "/api/chat"][:2]
        # The planning call is the answer call plus an instruction: same system prompt and tools
        # (a prefix cache stays warm), capped, no thinking.
        assert planning_call["messages"][0] == first_answer["messages"][0]
        assert planning_call.get("tools") == first_answer.get("tools")
        assert planning_call["options"]["num_predict"] == 200 and planning_call["think"] is False
        assert PLANNING in planning_call["messages"][-1]["content"]
        # The plan guides this turn's answer calls from the user's message, not as an assistant turn.
        last = first_answer["messages"][-1]
        assert last["role"] == "user" and last["content"].startswith("plan my day\n\n---\n")
        # (the default step's own instruction follows it, after a --- line of its own)
        assert last["content"].split("\n\n---\n[next step]")[0].endswith("1. Write the list\n2. Read it back")
        assert not any(m["role"] == "assistant" for m in first_answer["messages"])
        # Rows were saved as they happened; the plan row is shown but never in the context.
        rows_ = [
            (r.role, r.name, r.in_context)
            async for r in Message.objects.filter(session_id=session.pk).order_by("seq")
        ]
        assert [r[0] for r in rows_] == ["user", "assistant", "assistant", "tool", "assistant", "tool", "assistant"]
        assert rows_[1] == ("assistant", "plan", False)
        assert all(r[2] for r in rows_ if r[1] != "plan")

    async def test_plans_stay_out_of_later_turns(self, llm, session):
        llm.add_rule(Rule(system=PLANNING, match="", turns=[Turn(content="1. Look up the weather\n2. Summarise it")]))
        llm.add_rule(Rule(match="", turns=[Turn(content="Sunny.")]))
        await frames_of(session.id, "weather?")
        await frames_of(session.id, "and tomorrow?")
        chats = [r for r in llm.requests if r["path"] == "/api/chat"]
        answer = [r for r in chats if PLANNING not in r["messages"][-1]["content"]][-1]
        contents = [m["content"] for m in answer["messages"]]
        assert contents[1] == "weather?"  # the first turn's message, without its plan
        assert not any("Look up the weather" in c for c in contents[:-1])

    @pytest.mark.parametrize(
        "reply",
        [
            "1. France 2. Capital 3. Paris",  # one-word "steps"
            "1. What is the capital of France",  # one step
            "1. the capital of France\n2. what is the capital",  # an echo of the request
            "1. Check the map\n2. Check the map",  # not distinct
            "Sure, I will do it.",  # not numbered
        ],
    )
    async def test_junk_plans_are_ignored(self, llm, session, reply):
        llm.add_rule(Rule(system=PLANNING, match="", turns=[Turn(content=reply)]))
        llm.add_rule(Rule(match="", turns=[Turn(content="Paris.")]))
        frames = await frames_of(session.id, "what is the capital of France?")
        assert "plan_ready" not in types(frames) and frames[-1]["content"] == "Paris."
        assert await Message.objects.filter(session_id=session.pk, name="plan").acount() == 0
        assert PLANNING not in llm.requests[-1]["messages"][-1]["content"]

    async def test_a_rambling_planning_call_is_cut_and_ignored(self, llm, session):
        llm.add_rule(Rule(system=PLANNING, match="", turns=[Turn(content="Once upon a time ", endless=True)]))
        llm.add_rule(Rule(match="", turns=[Turn(content="Hello.")]))
        frames = await frames_of(session.id, "hi")
        assert "plan_ready" not in types(frames) and frames[-1]["content"] == "Hello."
        assert llm.requests[0]["options"]["num_predict"] == 200  # the server stopped at the cap
        assert llm.requests[1]["options"]["num_predict"] == 4096  # LLM_MAX_ANSWER_TOKENS

    async def test_direct_answers_skip_the_plan(self, llm, session):
        llm.add_rule(Rule(system=PLANNING, match="", turns=[Turn(content="DIRECT")]))
        llm.add_rule(Rule(match="", turns=[Turn(content="Four.")]))
        frames = await frames_of(session.id, "2+2?")
        assert "plan_ready" not in types(frames)
        assert frames[-1]["content"] == "Four."

    async def test_a_plan_without_numbered_steps_is_ignored(self, llm, session):
        llm.add_rule(Rule(system=PLANNING, match="", turns=[Turn(content="Sure, I will do it.")]))
        llm.add_rule(Rule(match="", turns=[Turn(content="Done.")]))
        frames = await frames_of(session.id, "do it")
        assert "plan_ready" not in types(frames)
        assert await Message.objects.filter(session_id=session.pk, name="plan").acount() == 0

    async def test_subagent(self, llm, session, no_planning):
        llm.add_rule(Rule(match="research cats", turns=[
            Turn(tool_calls=[{"name": "spawn_agent", "arguments": {"task": "sub: find cat facts"}}]),
            Turn(content="Cats sleep a lot."),
        ]))
        llm.add_rule(Rule(match="sub: find cat facts", turns=[
            Turn(thinking="Let me note this.", tool_calls=[{"name": "scratchpad", "arguments": {"action": "write", "section": "findings", "content": "cats sleep 16h"}}]),
            Turn(content="Cats sleep 16 hours a day."),
        ]))
        frames = await frames_of(session.id, "research cats")
        assert [(f["type"], f.get("tool"), f.get("is_subagent")) for f in frames if f["type"] not in ("stream_delta",)] == [
            ("stream_start", None, None),
            ("tool_started", "spawn_agent", False),
            ("turn_thinking", None, True),
            ("tool_started", "scratchpad", True),
            ("tool_call", "scratchpad", True),
            ("tool_call", "spawn_agent", False),
            ("stream_end", None, None),
        ]
        spawn = [f for f in frames if f["type"] == "tool_call" and f["tool"] == "spawn_agent"][0]
        assert spawn["result"] == "Cats sleep 16 hours a day." and spawn["success"]
        # The sub-agent's text streams into its card (marked), the parent's answer stays unmarked.
        sub_text = "".join(f["delta"] for f in frames if f["type"] == "stream_delta" and f.get("is_subagent"))
        main_text = "".join(f["delta"] for f in frames if f["type"] == "stream_delta" and "is_subagent" not in f)
        assert sub_text == "Cats sleep 16 hours a day." and main_text == "Cats sleep a lot."
        # The sub-agent wrote to its own scratchpad scope, not the parent's, and no DB session.
        scopes = [s async for s in ScratchpadSection.objects.values_list("scope", flat=True)]
        assert len(scopes) == 1 and scopes[0].startswith("subagent_") and len(scopes[0]) == len("subagent_") + 12
        assert await Session.objects.acount() == 1

    async def test_profile_switch(self, llm, session, no_planning):
        llm.add_rule(Rule(match="check my server", turns=[
            Turn(tool_calls=[{"name": "switch_profile", "arguments": {"profile_id": "server_admin"}}]),
            Turn(content="Now in admin mode."),
        ]))
        frames = await frames_of(session.id, "check my server")
        assert types(frames) == [
            "stream_start", "tool_started", "profile_switched", "tool_call", "stream_delta", "stream_end",
        ]
        switched = frames[2]
        assert switched["profile_id"] == "server_admin" and switched["profile_name"] == "Server Administrator"
        assert (await Session.objects.aget(pk=session.pk)).profile_id == "server_admin"
        # The next LLM call within the same run used the new profile's prompt and temperature.
        last = llm.requests[-1]
        assert "server administrator" in last["messages"][0]["content"].lower()
        assert last["options"]["temperature"] == 0.2


class TestContext:
    async def test_system_prompt_is_persona_then_profile_and_never_stored(self, llm, session, no_planning):
        await frames_of(session.id, "hello")
        system = llm.requests[-1]["messages"][0]
        assert system["role"] == "system"
        assert system["content"].startswith("You are Navi (test persona).\n\n---\n\nMode: personal secretary")
        assert await Message.objects.filter(session_id=session.pk, role="system").acount() == 0

    async def test_ollama_request_options(self, llm, session, no_planning):
        await frames_of(session.id, "hello")
        body = llm.requests[-1]
        assert body["stream"] is True and body["think"] is True
        assert body["options"]["num_ctx"] == 8192 and body["options"]["temperature"] == 0.7
        assert body["keep_alive"] == "30m"
        # The default step (`auto` on a server that enforces `format`): the tools are the schema's branches.
        assert {b["properties"]["name"]["const"] for b in body["format"]["anyOf"]} >= {"todo", "scratchpad", "spawn_agent"}

    async def test_images_reach_the_model(self, llm, session, no_planning):
        await frames_of(session.id, "what is this?", images=["aGVsbG8="])
        assert llm.requests[-1]["messages"][-1]["images"] == ["aGVsbG8="]


class TestBadToolCalls:
    async def _run_with(self, llm, session, call, **rule):
        llm.add_rule(Rule(match="go", turns=[Turn(tool_calls=[call]), Turn(content="recovered")]))
        frames = await frames_of(session.id, "go")
        result = [f for f in frames if f["type"] == "tool_call"][0]
        tool_msg = llm.requests[-1]["messages"][-1]
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "recovered"
        assert tool_msg["role"] == "tool"
        return result, tool_msg["content"]

    # A call that names no tool, fails its schema or is not JSON comes only from a model that calls
    # natively (on a server that enforces schemas the step cannot write one): these run `native`.
    async def test_unknown_tool(self, llm, session, no_planning):
        await Profile.objects.filter(pk="secretary").aupdate(tool_calling="native")
        result, told = await self._run_with(llm, session, {"name": "teleport", "arguments": {}})
        assert result["success"] is False
        assert "unknown tool 'teleport'" in told and "todo" in told

    async def test_arguments_failing_the_schema(self, llm, session, no_planning):
        await Profile.objects.filter(pk="secretary").aupdate(tool_calling="native")
        result, told = await self._run_with(llm, session, {"name": "todo", "arguments": {"action": "dance"}})
        assert result["success"] is False
        assert "invalid arguments for 'todo'" in told and "dance" in told

    async def test_a_tool_that_raises(self, llm, session, no_planning):
        get_agent().tools.register(RaisingTool(), builtin=False)
        result, told = await self._run_with(llm, session, {"name": "explode", "arguments": {}})
        assert result["success"] is False and "ValueError: kaboom" in told

    async def test_a_tool_past_the_timeout(self, llm, session, no_planning, settings):
        settings.TOOL_TIMEOUT_S = 0.2
        get_agent().tools.register(SlowTool(), builtin=False)
        result, told = await self._run_with(llm, session, {"name": "slow", "arguments": {"seconds": 30}})
        assert result["success"] is False and "timed out after 0.2 s" in told

    async def test_malformed_json_arguments_over_openai(self, llm, session, no_planning):
        await Profile.objects.filter(pk="secretary").aupdate(llm_backend="openai", tool_calling="native")
        result, told = await self._run_with(llm, session, {"name": "todo", "arguments": '{"action": "read"'})
        assert result["success"] is False and "not valid JSON" in told

    async def test_max_iterations_ends_with_a_clear_message(self, llm, session, no_planning):
        await Profile.objects.filter(pk="secretary").aupdate(max_iterations=2)
        # Two different calls: the same call twice is a model going round, answered without tools.
        llm.add_rule(Rule(match="loop", turns=[Turn(tool_calls=[{"name": "todo", "arguments": {"action": "read"}}]),
                                               Turn(tool_calls=[{"name": "todo", "arguments": {"action": "set", "tasks": ["a"]}}])]))
        frames = await frames_of(session.id, "loop forever")
        assert types(frames)[-2:] == ["stream_delta", "stream_end"]
        assert "max_iterations" in frames[-1]["content"]
        assert len([f for f in frames if f["type"] == "tool_call"]) == 2


class TestOpenAIBackend:
    async def test_text_reasoning_and_tool_calls(self, llm, session, no_planning):
        await Profile.objects.filter(pk="secretary").aupdate(llm_backend="openai", model="gpt-test")
        llm.add_rule(Rule(match="", turns=[
            Turn(thinking="need the list", tool_calls=[{"name": "todo", "arguments": {"action": "set", "tasks": ["x"]}}]),
            Turn(thinking="done", content="List made.", prompt_tokens=40, eval_tokens=2),
        ]))
        frames = await frames_of(session.id, "make a list")
        assert types(frames) == [
            "stream_start", "thinking_delta", "turn_thinking", "tool_started", "tool_call",
            "thinking_delta", "thinking_end", "stream_delta", "stream_end",
        ]
        assert frames[-1]["content"] == "List made." and frames[-1]["context_tokens"] == 42
        request = llm.requests[-1]
        assert request["path"] == "/v1/chat/completions" and request["model"] == "gpt-test"
        assert request["authorization"] == "Bearer test-key"
        assert request["messages"][-1]["role"] == "tool" and request["messages"][-1]["tool_call_id"]


class TestPersistenceAndErrors:
    async def test_the_user_message_is_saved_even_when_the_llm_is_unreachable(self, session, no_planning):
        frames = await frames_of(session.id, "are you there?")
        assert frames[-1]["type"] == "error"
        assert "cannot reach Ollama at http://127.0.0.1:9" in frames[-1]["message"]
        assert "ollama serve" in frames[-1]["message"]
        assert await rows(session) == [("user", "are you there?", "complete")]

    async def test_a_missing_model_lists_what_ollama_has(self, settings, session, no_planning):
        """A model named on purpose (here the profile's) is asked for as it is; the error says what
        the server has. (A missing *default* is stood in for: tests/test_model_rule.py.)"""
        from tests.llm_server import LLMServer

        await Profile.objects.filter(pk=session.profile_id).aupdate(model="gone:9b")
        with LLMServer(models=["llama3:8b", "qwen3:4b"]) as server:
            settings.OLLAMA_HOST = server.url
            frames = await frames_of(session.id, "hi")
        message = frames[-1]["message"]
        assert "llama3:8b" in message and "qwen3:4b" in message
        assert "ollama pull gone:9b" in message

    async def test_a_dropped_stream_keeps_the_partial_answer(self, llm, session, no_planning):
        llm.script(Turn(content="The answer is forty-two, because", chunk_size=4, drop_after=4))
        frames = await frames_of(session.id, "why?")
        assert frames[-1]["type"] == "error" and "dropped mid-answer" in frames[-1]["message"]
        assert await rows(session) == [("user", "why?", "complete"), ("assistant", "The answer is fo", "interrupted")]
        # The session stays usable.
        llm.script(Turn(content="Again: 42."))
        frames = await frames_of(session.id, "again")
        assert frames[-1]["type"] == "stream_end"

    async def test_partial_answers_are_flushed_while_streaming(self, llm, session, no_planning):
        llm.script(Turn(content="x" * 40, chunk_size=1, delay=0.05))
        seen_partial = asyncio.Event()

        async def watch():
            while True:
                row = await Message.objects.filter(session_id=session.pk, role="assistant").afirst()
                if row and row.status == "partial" and row.content:
                    seen_partial.set()
                    return
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        frames = await frames_of(session.id, "stream slowly")
        await asyncio.wait_for(seen_partial.wait(), 1)
        watcher.cancel()
        assert frames[-1]["type"] == "stream_end"
        assert await rows(session) == [("user", "stream slowly", "complete"), ("assistant", "x" * 40, "complete")]

    async def test_stop_mid_stream_closes_the_llm_connection_and_keeps_the_partial_text(self, llm, session, no_planning):
        llm.script(Turn(content=talk(200), chunk_size=5, delay=0.02))
        stop = asyncio.Event()
        current_stop_event.set(stop)
        frames = []
        async for event in get_agent().run_stream(str(session.id), "talk"):
            frames.append(to_frame(event))
            if sum(f["type"] == "stream_delta" for f in frames) == 5:
                stop.set()
        assert frames[-1]["type"] == "stream_stopped"
        assert llm.wait_for_disconnect(timeout=5)
        content = "".join(f["delta"] for f in frames if f["type"] == "stream_delta")
        assert await rows(session) == [("user", "talk", "complete"), ("assistant", content, "interrupted")]

    async def test_stop_kills_a_running_tool(self, llm, session, no_planning):
        SlowTool.cancelled = False
        get_agent().tools.register(SlowTool(), builtin=False)
        llm.script(Turn(tool_calls=[{"name": "slow", "arguments": {"seconds": 60}}]))
        stop = asyncio.Event()
        current_stop_event.set(stop)
        frames = []
        async for event in get_agent().run_stream(str(session.id), "wait"):
            frames.append(to_frame(event))
            if frames[-1]["type"] == "tool_started":
                asyncio.get_running_loop().call_later(0.1, stop.set)
        assert types(frames)[-3:] == ["tool_started", "tool_call", "stream_stopped"]
        assert frames[-2]["success"] is False and "stopped" in frames[-2]["result"]
        assert SlowTool.cancelled


    async def test_stop_reaches_a_running_sub_agent(self, llm, session, no_planning):
        llm.add_rule(Rule(match="delegate", turns=[
            Turn(tool_calls=[{"name": "spawn_agent", "arguments": {"task": "sub: ramble"}}]),
        ]))
        llm.add_rule(Rule(match="sub: ramble", turns=[Turn(content=talk(500, "la"), chunk_size=3, delay=0.02)]))
        stop = asyncio.Event()
        current_stop_event.set(stop)
        frames = []
        async for event in get_agent().run_stream(str(session.id), "delegate"):
            frames.append(to_frame(event))
            if frames[-1]["type"] == "tool_started":
                asyncio.get_running_loop().call_later(0.3, stop.set)
        rambled = [f for f in frames if f["type"] == "stream_delta"]
        assert rambled and all(f["is_subagent"] for f in rambled)  # its text streamed into its card
        frames = [f for f in frames if f["type"] != "stream_delta"]
        assert types(frames)[-3:] == ["tool_started", "tool_call", "stream_stopped"]
        assert frames[-2]["tool"] == "spawn_agent" and frames[-2]["success"] is False
        assert llm.wait_for_disconnect(timeout=5)  # the sub-agent's LLM stream was closed


class TestEntryPoints:
    async def test_run_returns_text_without_planning(self, llm, session):
        llm.add_rule(Rule(match="", turns=[Turn(content="Plain answer.")]))
        assert await get_agent().run(str(session.id), "question") == "Plain answer."
        assert len(llm.requests) == 1  # no planning call

    async def test_run_raises_with_the_reason(self, session):
        with pytest.raises(RunFailed, match="cannot reach Ollama"):
            await get_agent().run(str(session.id), "question")

    async def test_run_ephemeral_writes_nothing_to_the_database(self, llm, profiles):
        llm.script(Turn(content="ephemeral answer"))
        assert await get_agent().run_ephemeral("do a thing", "secretary") == "ephemeral answer"
        assert await Message.objects.acount() == 0
