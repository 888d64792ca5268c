"""A REST message whose client goes away (issue #35 item 6): `curl -m 3` on a turn that waits for
an approval failed the run with "CurrentThreadExecutor already quit or is broken" and left an
empty assistant message. The run belongs to the server, not to the request that started it."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.live_server import LiveNavi
from tests.live_ws import planning_rule
from tests.llm_server import LLMServer, Rule, Turn


@pytest.fixture(scope="module")
def llm():
    with LLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def navi(llm):
    with LiveNavi(env={"OLLAMA_HOST": llm.url, "TERMINAL_ALLOWED_COMMANDS": "echo"}) as server:
        server._manage("shell", "-c", "from agent.models import Profile; "
                       "Profile.objects.update(tool_policy={'terminal': 'ask'}, planning_enabled=False)")
        yield server


def _until(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.1)


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_rest_message_whose_client_left_during_an_approval_still_finishes(navi, llm, decision):
    llm.reset()
    llm.add_rule(planning_rule())
    llm.add_rule(Rule(match="check the disk", turns=[
        Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "echo disk-ok"}}]), Turn(content="The disk is fine.")]))
    session_id = navi.create_session()
    with pytest.raises(httpx.TimeoutException):  # curl -m 3: the client gives up while the run waits
        httpx.post(f"{navi.url}/sessions/{session_id}/messages", json={"content": "check the disk"},
                   headers=navi.headers, timeout=3)
    approval_id = _until(lambda: navi.sql(  # the previous test's approval is answered: only this one waits
        "SELECT approval_id FROM agent_toolcallrecord WHERE decision = %s", ("pending",)))[0][0]
    answer = httpx.post(f"{navi.url}/sessions/{session_id}/approvals/{approval_id}", json={"decision": decision},
                        headers=navi.headers, timeout=10)
    assert answer.status_code == 200, answer.text

    def finished():
        body = httpx.get(f"{navi.url}/sessions/{session_id}", headers=navi.headers, timeout=10).json()
        return body if body["messages"] and body["messages"][-1]["role"] == "assistant" and body["messages"][-1]["content"] else None

    body = _until(finished)
    roles = [(m["role"], m["content"]) for m in body["messages"]]
    assert roles[0] == ("user", "check the disk") and roles[-1] == ("assistant", "The disk is fine."), roles
    assert not [m for m in body["messages"] if m["role"] == "assistant" and not m["content"] and not m.get("tool_calls")], roles
    tool_rows = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    assert ("disk-ok" in tool_rows[0]) == (decision == "approve"), tool_rows
    assert "CurrentThreadExecutor" not in navi.log() and "ThreadSensitiveContext" not in navi.log()
