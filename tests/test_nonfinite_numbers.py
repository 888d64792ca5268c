"""Numbers JSON cannot hold (issue #35 item 5): 1e309, NaN and Infinity from a model's tool call,
a client's body or a stored field never abort a run nor reach the database as invalid JSON."""

from __future__ import annotations

import math

import pytest

from agent.frames.events import to_frame
from agent.models import Profile, ToolCallRecord
from agent.registry import get_agent
from navi_project import jsonsafe
from sessions_app.models import Message
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.django_db(transaction=True)

RAW_ARGS = [
    '{"action": "update", "index": 1e309, "status": "done"}',
    '{"action": "update", "index": NaN, "status": "done"}',
    '{"action": "update", "index": -Infinity, "status": "done"}',
    '{"action": "set", "tasks": ["a"], "weight": [1, {"deep": Infinity}]}',
]


async def _frames(session_id: str, text: str) -> list[dict]:
    return [to_frame(e) async for e in get_agent().run_stream(session_id, text)]


@pytest.mark.parametrize("backend", ["ollama", "openai"])
@pytest.mark.parametrize("raw", RAW_ARGS)
async def test_a_tool_call_holding_a_number_json_cannot_hold_is_a_bad_call_and_the_run_ends_normally(
    llm, session, no_planning, backend, raw
):
    await Profile.objects.filter(pk="secretary").aupdate(llm_backend=backend)
    # A native tool call carries the model's raw text: NaN and Infinity are no JSON a schema's
    # grammar can write, so the call comes from a server that ignores `format`.
    llm.schemas = set()
    llm.add_rule(Rule(match="go", turns=[Turn(tool_calls=[{"name": "todo", "arguments": raw}]), Turn(content="recovered")]))
    frames = await _frames(str(session.pk), "go")
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "recovered", frames[-3:]
    result = next(f for f in frames if f["type"] == "tool_call")
    assert result["success"] is False
    told = llm.requests[-1]["messages"][-1]
    assert told["role"] == "tool" and "not a finite number" in told["content"], told
    # every message kept: the user's, the call, its result and the answer
    rows = [(m.role, m.status) async for m in Message.objects.filter(session_id=session.pk).order_by("seq")]
    assert [r for r, _ in rows] == ["user", "assistant", "tool", "assistant"], rows
    call_row = await Message.objects.filter(session_id=session.pk, role="assistant").order_by("seq").afirst()
    assert jsonsafe.non_finite(call_row.tool_calls) is None
    record = await ToolCallRecord.objects.filter(session_id=session.pk).alast()
    assert record is not None and jsonsafe.non_finite(record.arguments) is None


def test_every_json_field_is_made_finite_before_the_database(session):
    """The one sanitiser at the database: a value holding NaN or 1e309 is stored as valid JSON."""
    row = Message.objects.create(session=session, seq=1, role="assistant", content="x",
                                 tool_calls=[{"name": "t", "arguments": {"n": float("inf"), "m": [float("nan")]}}],
                                 meta={"score": -math.inf})
    row.refresh_from_db()
    assert row.tool_calls == [{"name": "t", "arguments": {"n": "Infinity", "m": ["NaN"]}}]
    assert row.meta == {"score": "-Infinity"}
    Message.objects.filter(pk=row.pk).update(meta={"again": float("nan")})
    row.refresh_from_db()
    assert row.meta == {"again": "NaN"}


def test_the_sanitiser_names_the_place_and_walks_deep_values_without_recursion():
    deep: object = float("nan")
    for _ in range(5000):
        deep = [deep]
    assert jsonsafe.non_finite(deep) == "[0]" * 5000
    assert jsonsafe.non_finite({"a": [1, {"b": 1e309}]}) == "a[1].b"
    assert jsonsafe.non_finite({"a": [1, 2.5, "NaN"]}) is None
    cleaned = jsonsafe.finite(deep)
    for _ in range(5000):
        cleaned = cleaned[0]
    assert cleaned == "NaN"


@pytest.mark.parametrize("body", ['{"content": "hi", "n": NaN}', '{"content": "hi", "n": 1e309}', '{"content": "hi", "n": -Infinity}'])
def test_a_rest_message_body_holding_one_is_a_400_and_saves_nothing(owner_client, session, body):
    response = owner_client.post(f"/sessions/{session.pk}/messages", body, content_type="application/json")
    assert response.status_code == 400 and "not a finite number" in response.json()["error"]
    assert not Message.objects.filter(session=session).exists()


@pytest.mark.parametrize("path", ["/memory", "/routines", "/settings/notify"])
def test_other_bodies_holding_one_are_a_400(owner_client, path):
    response = owner_client.post(path, '{"category": "a", "key": "b", "value": NaN}', content_type="application/json")
    assert response.status_code == 400 and "not a finite number" in response.json()["error"], response.content
