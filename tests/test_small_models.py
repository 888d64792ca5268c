"""An agent that works on a small model: the clock, tool calls written as text, repaired
arguments, loops broken, the server's real context window, fewer and smaller tools, planning
only when it pays, and per-model reliability — over a real WebSocket run against the
protocol-level test LLM."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from agent.models import ModelReliability, Profile
from navi_project.asgi import application
from tests.llm_server import Rule, Turn
from tools_app.models import ScratchpadSection, TodoList

pytestmark = pytest.mark.django_db(transaction=True)
TIMEOUT = 20


@pytest.fixture(autouse=True)
def _plain_secretary(profiles):
    Profile.objects.update(planning_enabled=False)


async def run(session, token, text) -> list[dict]:
    comm = WebsocketCommunicator(application, f"/ws/sessions/{session.id}", headers=[(b"authorization", f"Bearer {token}".encode())])
    assert (await comm.connect(timeout=TIMEOUT))[0]
    await comm.send_json_to({"type": "message", "content": text})
    frames = []
    while not frames or not (frames[-1]["type"] in ("stream_end", "stream_stopped", "error") and "run_id" in frames[-1]):
        frames.append(json.loads(await comm.receive_from(timeout=TIMEOUT)))
    await comm.disconnect()
    return frames


def of(frames, kind):
    return [f for f in frames if f["type"] == kind]


def shown(frames) -> str:
    return "".join(f["delta"] for f in of(frames, "stream_delta"))


def offered(request) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


async def todo_items(session) -> list[str]:
    row = await TodoList.objects.filter(scope=str(session.id)).afirst()
    return [item["task"] for item in (row.items if row else [])]


class TestClock:
    async def test_every_turn_knows_the_date_weekday_time_and_zone(self, llm, session, owner_token, settings):
        settings.TIME_ZONE = "Europe/Lisbon"
        llm.script(Turn(content="It is today."))
        await run(session, owner_token, "what day is it?")
        # Under the turn's request (the system prompt before it stays the same every minute).
        system = llm.requests[-1]["messages"][-1]["content"]
        now = datetime.now(ZoneInfo("Europe/Lisbon"))
        assert system.startswith("what day is it?\n\n---\nCurrent date and time: ")
        assert f"{now:%A, %d %B %Y}" in system and "Europe/Lisbon" in system
        clock_part = system.split("\n\n---\n[next step]")[0]  # the default step's note comes after it
        assert clock_part.rstrip().endswith("Use them for 'today', 'tomorrow', 'next Friday' and other dates.")
        # The coming week spelled out, so "next Friday" needs no weekday arithmetic.
        week = [now + timedelta(days=n) for n in range(1, 8)]
        assert f"The next seven days: {', '.join(f'{d:%a %d %b}' for d in week)}." in system
        assert sum(f"Fri {d:%d %b}" in system for d in week if d.weekday() == 4) == 1

    async def test_every_call_of_a_turn_sends_the_same_clock(self, llm, session, owner_token, monkeypatch):
        # Chat templates put the tools after the system message: a clock that moved between the
        # planning call and the answer calls would make the server re-read the whole tool block.
        from agent.context import clock

        minutes = iter(range(60))
        monkeypatch.setattr(clock, "now", lambda: datetime(2026, 11, 22, 9, next(minutes), tzinfo=ZoneInfo("UTC")))
        await Profile.objects.filter(pk="secretary").aupdate(planning_enabled=True, planning="always")
        llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="1. Read the list\n2. Add milk to it")]))
        llm.add_rule(Rule(match="", turns=[Turn(tool_calls=[{"name": "todo", "arguments": {"action": "list"}}]), Turn(content="ok")]))
        await run(session, owner_token, "read my list, then add milk")
        systems = {r["messages"][0]["content"] for r in llm.requests}
        clocks = {next(m["content"] for m in r["messages"] if m["role"] == "user").split("(time zone")[0]
                  for r in llm.requests}
        # planning, the step that calls, the step that answers, the answer
        assert len(llm.requests) == 4 and len(systems) == 1 and len(clocks) == 1
        assert clocks.pop().endswith("09:00 ")  # the turn's start, not a later minute
        await run(session, owner_token, "thanks")
        last = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        assert "09:01" in last[-1] and "09:0" not in last[0]  # a new turn reads the clock again; the last one's is gone
        assert llm.requests[-1]["messages"][0]["content"] in systems  # the system prompt did not move

    def test_the_default_time_zone_is_the_hosts(self, monkeypatch):
        from navi_project.settings import _host_time_zone

        monkeypatch.setenv("TZ", "America/New_York")
        assert _host_time_zone() == "America/New_York"
        monkeypatch.setenv("TZ", "Not/AZone")
        assert _host_time_zone()  # falls back to the host's files or UTC, never crashes


class TestToolCallsWrittenAsText:
    @pytest.fixture(autouse=True)
    def _server_ignores_schemas(self, llm):
        """The subject: calls written as text, which only a server that ignores `format` leaves to recover."""
        llm.schemas = set()

    CALL = '<tool_call>\n{"name": "todo", "arguments": {"action": "set", "tasks": ["buy milk"]}}\n</tool_call>'

    async def test_a_call_written_as_text_runs_and_is_never_shown(self, llm, session, owner_token):
        llm.script(Turn(content="Sure, adding it.\n" + self.CALL, chunk_size=3), Turn(content="Added buy milk."))
        frames = await run(session, owner_token, "add buy milk to my list")
        call = of(frames, "tool_call")[0]
        assert call["tool"] == "todo" and call["success"] and call["recovered"] is True
        assert of(frames, "tool_started")[0]["recovered"] is True
        assert "tool_call" not in shown(frames) and "buy milk" not in shown(frames).split("Added")[0]
        assert await todo_items(session) == ["buy milk"]
        assert frames[-1]["content"] == "Added buy milk."
        # The model sees its own call as a real call, followed by the result.
        history = llm.requests[-1]["messages"]
        assistant = [m for m in history if m["role"] == "assistant"][0]
        assert assistant["tool_calls"][0]["function"]["name"] == "todo" and "<tool_call>" not in assistant["content"]

    @pytest.mark.parametrize(
        "text",
        [
            '{"name": "todo", "parameters": {"action": "set", "tasks": ["buy milk"]}}',
            '[TOOL_CALLS][{"name": "todo", "arguments": {"action": "set", "tasks": ["buy milk"]}}]',
            '```json\n{"name": "todo", "arguments": {"action": "set", "tasks": ["buy milk"]}}\n```',
            'todo(action="set", tasks=["buy milk"])',
        ],
    )
    async def test_other_shapes_run_too(self, llm, session, owner_token, text):
        llm.script(Turn(content=text, chunk_size=5), Turn(content="Done."))
        frames = await run(session, owner_token, "add buy milk")
        assert [c["recovered"] for c in of(frames, "tool_call")] == [True]
        assert await todo_items(session) == ["buy milk"]
        assert "buy milk" not in shown(frames)

    async def test_a_call_marker_naming_an_unknown_tool_is_answered_not_shown(self, llm, session, owner_token):
        # A small model invents a name inside <tool_call>: it hears the closest offered names.
        call = '<tool_call>\n{"name": "todos", "arguments": {"action": "list"}}\n</tool_call>'
        llm.script(Turn(content=call, chunk_size=4), Turn(content="Your list is empty."))
        frames = await run(session, owner_token, "what is on my list?")
        [tool_call] = of(frames, "tool_call")
        assert tool_call["recovered"] is True and not tool_call["success"]
        assert "Did you mean 'todo'" in tool_call["result"]
        assert "<tool_call>" not in shown(frames) and frames[-1]["content"] == "Your list is empty."
        assert (await ModelReliability.objects.aget()).unknown_tools == 1

    async def test_a_profile_can_switch_recovery_off(self, llm, session, owner_token):
        await Profile.objects.filter(pk="secretary").aupdate(recover_tool_calls=False)
        llm.script(Turn(content=self.CALL))
        frames = await run(session, owner_token, "add buy milk")
        assert not of(frames, "tool_call") and "<tool_call>" in shown(frames)
        assert await todo_items(session) == []

    async def test_text_that_mentions_a_tool_is_shown_as_is(self, llm, session, owner_token):
        text = "I can use the todo tool for that, or web_search if you prefer."
        llm.script(Turn(content=text, chunk_size=4))
        frames = await run(session, owner_token, "what can you do?")
        assert shown(frames) == text and not of(frames, "tool_call")


class TestArguments:
    @pytest.fixture(autouse=True)
    def _server_ignores_schemas(self, llm):
        """The subject: almost-valid arguments, which only a server that ignores `format` lets a model write."""
        llm.schemas = set()

    async def test_almost_valid_arguments_are_repaired_and_counted(self, llm, session, owner_token):
        broken = "{'action': 'set', 'tasks': 'buy milk',}"  # single quotes, trailing comma, a lone value
        llm.script(Turn(tool_calls=[{"name": "todo", "arguments": broken}]), Turn(content="ok"))
        frames = await run(session, owner_token, "add milk")
        assert of(frames, "tool_call")[0]["success"]
        assert await todo_items(session) == ["buy milk"]
        stats = await ModelReliability.objects.aget()
        assert (stats.native_calls, stats.repaired_arguments) == (1, 1)

    async def test_an_optional_field_sent_as_null_counts_as_not_given(self, llm, session, owner_token):
        args = {"action": "set", "tasks": ["buy milk"], "index": None, "status": None}
        llm.script(Turn(tool_calls=[{"name": "todo", "arguments": args}]), Turn(content="ok"))
        frames = await run(session, owner_token, "add milk")
        assert of(frames, "tool_call")[0]["success"], of(frames, "tool_call")[0]["result"]
        assert await todo_items(session) == ["buy milk"]
        assert (await ModelReliability.objects.aget()).repaired_arguments == 1

    async def test_what_cannot_be_repaired_is_explained_with_schema_and_example(self, llm, session, owner_token):
        llm.script(Turn(tool_calls=[{"name": "todo", "arguments": {"tasks": ["x"]}}]), Turn(content="sorry"))
        frames = await run(session, owner_token, "add x")
        result = of(frames, "tool_call")[0]["result"]
        assert "'action' is a required property" in result
        assert "Schema of the fields involved" in result and '"enum"' in result
        assert "A valid call looks like: todo({" in result
        assert (await ModelReliability.objects.aget()).refused_calls == 1

    async def test_without_repair_the_arguments_are_refused(self, llm, session, owner_token):
        await Profile.objects.filter(pk="secretary").aupdate(repair_arguments=False)
        llm.script(Turn(tool_calls=[{"name": "todo", "arguments": "{'action': 'list'}"}]), Turn(content="sorry"))
        frames = await run(session, owner_token, "list")
        assert not of(frames, "tool_call")[0]["success"]

    async def test_an_unknown_tool_gets_the_closest_names(self, llm, session, owner_token):
        llm.script(Turn(tool_calls=[{"name": "todos", "arguments": {}}]), Turn(content="sorry"))
        frames = await run(session, owner_token, "list")
        assert "Did you mean 'todo'" in of(frames, "tool_call")[0]["result"]
        assert (await ModelReliability.objects.aget()).unknown_tools == 1

    async def test_the_same_failing_call_twice_ends_the_loop(self, llm, session, owner_token):
        bad = Turn(tool_calls=[{"name": "todo", "arguments": {"action": "fly"}}])
        llm.script(bad, bad, Turn(content="I could not update the list."))
        frames = await run(session, owner_token, "do it")
        results = [c["result"] for c in of(frames, "tool_call")]
        assert len(results) == 2 and "failed twice in a row" in results[1]
        assert "todo" not in offered(llm.requests[-1])  # taken away for the rest of the turn
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "I could not update the list."
        assert (await ModelReliability.objects.aget()).broken_loops == 1

    async def test_the_same_successful_call_again_is_not_run_twice(self, llm, session, owner_token):
        # A small model that repeats itself would append (or send, or save) the same thing again.
        append = Turn(tool_calls=[{"name": "scratchpad", "arguments": {"action": "append", "section": "log", "content": "done"}}])
        llm.script(append, append, Turn(content="Noted."))
        frames = await run(session, owner_token, "note done")
        first, second = of(frames, "tool_call")
        assert first["success"] and not second["success"] and "Not run again" in second["result"]
        section = await ScratchpadSection.objects.aget(scope=str(session.id), section="log")
        assert section.content.count("done") == 1
        assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Noted."
        assert (await ModelReliability.objects.aget()).repeated_calls == 1

    async def test_arguments_as_a_string_cannot_sneak_past_the_policy(self, llm, other_user, profiles):
        """A JSON string hides the filesystem action from a naive check: it is read first."""
        from sessions_app.models import ApiToken, Session

        session = await Session.objects.acreate(owner=other_user, profile_id="secretary")
        token = (await sync_to_async(ApiToken.issue)(other_user))[1]
        raw = json.dumps({"action": "write", "path": "x.txt", "content": "x"})
        llm.script(Turn(tool_calls=[{"name": "filesystem", "arguments": raw}]), Turn(content="no"))
        frames = await run(session, token, "write")
        assert "run host tools" in of(frames, "tool_call")[0]["result"]


    async def test_a_call_written_flat_as_text_meets_the_same_policy(self, llm, other_user, profiles):
        """Injected text that makes the model write {"name": "filesystem", "action": …} is read as
        a call, and refused like any other for a user who may not run host tools."""
        from sessions_app.models import ApiToken, Session

        session = await Session.objects.acreate(owner=other_user, profile_id="secretary")
        token = (await sync_to_async(ApiToken.issue)(other_user))[1]
        text = json.dumps({"name": "filesystem", "action": "write", "path": "x.txt", "content": "x"})
        llm.script(Turn(content=text), Turn(content="no"))
        frames = await run(session, token, "write")
        call = of(frames, "tool_call")[0]
        assert call["recovered"] and not call["success"] and "run host tools" in call["result"]
        assert text not in frames[-1]["content"]

class TestContextWindow:
    async def test_the_gauge_shows_ollamas_real_window(self, llm, session, owner_token, settings):
        settings.OLLAMA_NUM_CTX = 65536
        llm.model_show["gemma4:e2b-it-q8_0"] = {"context_length": 4096}
        llm.script(Turn(content="hi"))
        frames = await run(session, owner_token, "hello")
        assert frames[-1]["max_context_tokens"] == 4096
        assert llm.requests[-1]["options"]["num_ctx"] == 4096

    @pytest.mark.parametrize(
        "meta,props,expected",
        [
            ({"max_model_len": 4096}, None, 4096),  # vLLM
            ({"meta": {"n_ctx": 2048, "n_ctx_train": 8192}}, None, 2048),  # llama.cpp
            ({}, {"default_generation_settings": {"n_ctx": 3072}}, 3072),  # llama.cpp /props
            ({}, None, 5000),  # nothing said: the profile's setting
        ],
    )
    async def test_openai_compatible_servers_say_their_window(self, llm, session, owner_token, meta, props, expected):
        llm.openai_model_meta, llm.props = meta, props
        llm.models = ["fake-llm"]  # the one model the server lists
        await Profile.objects.filter(pk="secretary").aupdate(llm_backend="openai", context_window=5000, model="fake-llm")
        llm.script(Turn(content="hi", prompt_tokens=0, eval_tokens=0))
        frames = await run(session, owner_token, "hello there")
        assert frames[-1]["max_context_tokens"] == expected
        assert frames[-1]["context_tokens"] > 0  # no usage reported: counted locally

    async def test_a_request_that_cannot_fit_is_cut_down_then_refused(self, llm, session, owner_token):
        await Profile.objects.filter(pk="secretary").aupdate(context_window=1500, llm_backend="openai", model="fake-llm")
        llm.script(Turn(content="short answer"))
        frames = await run(session, owner_token, "hi")
        assert frames[-1]["type"] == "stream_end"
        assert len(json.dumps(llm.requests[-1].get("tools") or [])) < 2500  # fewer, compact tools
        frames = await run(session, owner_token, "word " * 3000)
        assert frames[-1]["type"] == "error" and "no longer fits" in frames[-1]["message"]
        assert len(llm.requests) == 1  # never sent to overflow


class TestFewerTools:
    async def test_a_cap_offers_the_most_relevant_tools_and_the_core(self, llm, session, owner_token):
        # `native`: the tools sent with a native call (the default step's capped choice, with no
        # fixed core, is offering.choose, tested in test_constrained).
        await Profile.objects.filter(pk="secretary").aupdate(max_tools=5, tool_calling="native")
        llm.script(Turn(content="ok"))
        await run(session, owner_token, "search the web for the weather in Lisbon")
        names = offered(llm.requests[-1])
        assert len(names) == 5 and "web_search" in names and {"list_tools", "tool_manual", "memory_search"} <= set(names)

    @pytest.mark.parametrize(
        "message, wanted",
        [
            ("Rename the file draft.txt to final.txt.", "filesystem"),
            ("Which file in the docs folder mentions kiwi?", "filesystem"),
            ("Create a file config.json containing a JSON object with debug set to true.", "filesystem"),
            ("Read the page http://example.org/a.html: what is the capital?", "web_view"),
            ("Fetch http://example.org/api/stock.json", "http_request"),
            ("Forget what you know about my dog's name.", "memory_forget"),
            ("Mark the second task as done.", "todo"),
        ],
    )
    async def test_the_tool_a_user_asks_for_in_plain_words_is_offered(self, llm, session, owner_token, message, wanted):
        # Ranked on the tool's name, description and keywords, with plurals and -ed/-ing folded.
        await Profile.objects.filter(pk="secretary").aupdate(max_tools=6)
        llm.script(Turn(content="ok"))
        await run(session, owner_token, message)
        assert wanted in offered(llm.requests[0])  # the first step's offer (a plain first call: that tool alone)

    async def test_the_planning_call_offers_the_answer_calls_tools(self, llm, session, owner_token):
        # Same tools, same form, same system message: the answer call reuses the planning
        # call's prompt cache instead of re-reading every schema.
        # `native`: the subject is the tools sent with the native answer call.
        await Profile.objects.filter(pk="secretary").aupdate(
            max_tools=5, compact_schemas=True, planning_enabled=True, planning="always", tool_calling="native"
        )
        llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="DIRECT")]))
        llm.add_rule(Rule(match="", turns=[Turn(content="ok")]))
        await run(session, owner_token, "search the web for the weather in Lisbon")
        plan_call, answer_call = llm.requests
        assert len(plan_call["tools"]) == 5 and plan_call["tools"] == answer_call["tools"]
        assert plan_call["messages"][0] == answer_call["messages"][0]

    async def test_compact_schemas_drop_parameter_descriptions(self, llm, session, owner_token):
        # `native`: the schemas sent as tools (the default step describes them in a catalogue).
        await Profile.objects.filter(pk="secretary").aupdate(compact_schemas=True, tool_calling="native")
        llm.script(Turn(content="ok"))
        await run(session, owner_token, "hi")
        tools = llm.requests[-1]["tools"]
        for tool in tools:
            for spec in tool["function"]["parameters"].get("properties", {}).values():
                assert "description" not in spec

    def test_profiles_list_their_prompt_size(self, owner_client):
        profiles = owner_client.get("/agents/profiles").json()["profiles"]
        sizes = {p["id"]: p["prompt_tokens"] for p in profiles}
        assert sizes["secretary"]["tools"] > sizes["secretary"]["tools_compact"] > 0
        assert sizes["secretary"]["system"] > 0 and sizes["secretary"]["total"] >= sizes["secretary"]["tools"]


class TestPlanningAuto:
    @pytest.fixture
    def auto(self, profiles):
        Profile.objects.update(planning_enabled=True, planning="auto")

    async def test_a_short_single_request_skips_the_planning_call(self, llm, session, owner_token, auto):
        llm.script(Turn(content="Paris."))
        await run(session, owner_token, "What is the capital of France?")
        assert len(llm.requests) == 1

    async def test_a_multi_step_request_is_planned(self, llm, session, owner_token, auto):
        llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="1. Look up available connections online\n2. Reserve the least expensive option")]))
        llm.add_rule(Rule(match="", turns=[Turn(content="Done.")]))
        frames = await run(session, owner_token, "Find flights to Lisbon for May, then compare prices and finally book the cheapest one.")
        assert of(frames, "plan_ready") and len(llm.requests) == 2


class TestDebugFigures:
    async def test_each_message_lists_its_llm_calls_and_what_they_were_for(self, llm, session, owner_token, other_user):
        from django.test import AsyncClient

        await Profile.objects.filter(pk="secretary").aupdate(planning_enabled=True, planning="always")
        llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="DIRECT")]))
        llm.add_rule(Rule(match="", turns=[Turn(tool_calls=[{"name": "todo", "arguments": {"action": "list"}}]), Turn(content="ok")]))
        await run(session, owner_token, "what is on my list")
        client = AsyncClient()
        body = (await client.get(f"/agents/llm_calls/{session.id}", headers={"Authorization": f"Bearer {owner_token}"})).json()
        [message] = body["runs"]
        # The default step: a step that calls, a step that chooses to answer, the answer.
        assert [c["purpose"] for c in message["calls"]] == ["planning", "decide", "decide", "answer"]
        assert all(c["outcome"] == "ok" and c["prompt_tokens"] == 10 for c in message["calls"])
        other_token = (await sync_to_async(__import__("sessions_app.models", fromlist=["ApiToken"]).ApiToken.issue)(other_user))[1]
        foreign = await client.get(f"/agents/llm_calls/{session.id}", headers={"Authorization": f"Bearer {other_token}"})
        assert foreign.status_code == 404
        assert (await client.get(f"/agents/llm_calls/{session.id}")).status_code == 401
        models = (await client.get("/agents/reliability", headers={"Authorization": f"Bearer {owner_token}"})).json()["models"]
        assert models[0]["constrained_calls"] == 1 and models[0]["model"] == "gemma4:e2b-it-q8_0"
        # The counters add up every user's runs: a plain user (mallory) is refused them.
        refused = await client.get("/agents/reliability", headers={"Authorization": f"Bearer {other_token}"})
        assert refused.status_code == 403 and "only staff" in refused.json()["error"]
