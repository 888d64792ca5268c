"""User tools changed in one worker process are offered by every worker from the next run."""

from __future__ import annotations

import pytest

from agent.frames.events import to_frame
from agent.models import Profile
from agent.registry import build_default_registries
from tests.llm_server import Rule, Turn
from tools_app.models import UserTool

pytestmark = pytest.mark.django_db(transaction=True)

CODE = '''name = "greet"
description = "Greets someone."
parameters = {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}


async def execute(params: dict) -> str:
    return "hello " + params["who"]
'''


def offered(llm) -> set[str]:
    """The tools the last call offered: sent natively, or (the default step) its schema's branches."""
    request = llm.requests[-1]
    branches = {b["properties"]["name"]["const"] for b in (request.get("format") or {}).get("anyOf", [])}
    return {t["function"]["name"] for t in request.get("tools") or []} | (branches - {"answer"})


async def run(agent, session, text):
    return [to_frame(e) async for e in agent.run_stream(str(session.id), text)]


async def test_a_tool_written_through_one_worker_is_offered_by_another(llm, session, host_tools_allowed):
    await Profile.objects.aupdate(planning_enabled=False)
    worker_a, worker_b = build_default_registries(), build_default_registries()
    llm.add_rule(Rule(match="learn to greet", turns=[
        Turn(tool_calls=[{"name": "write_tool", "arguments": {"name": "greet", "code": CODE}}]),
        Turn(content="I can greet now."),
    ]))
    frames = await run(worker_a, session, "learn to greet")
    assert [f["success"] for f in frames if f["type"] == "tool_call"] == [True]

    llm.add_rule(Rule(match="greet Ann", turns=[
        Turn(tool_calls=[{"name": "greet", "arguments": {"who": "Ann"}}]),
        Turn(content="Done."),
    ]))
    frames = await run(worker_b, session, "greet Ann")
    assert [f["result"] for f in frames if f["type"] == "tool_call"] == ["hello Ann"]

    # Disabled in the admin (another process): no worker offers it from the next run on.
    await UserTool.objects.filter(name="greet").aupdate(enabled=False)
    await run(worker_b, session, "anything else")
    assert "greet" not in offered(llm)
    await run(worker_a, session, "and now?")
    assert "greet" not in offered(llm) and "todo" in offered(llm)
