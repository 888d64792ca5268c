"""GET /metrics: who may read it (staff, the METRICS_TOKEN bearer; everyone else 404), and that
a run through the scripted LLM moves the counters it should."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, Client
from prometheus_client.parser import text_string_to_metric_families

from agent.models import Profile
from agent.runs.manager import get_run_manager
from navi_project.asgi import application
from sessions_app.models import ApiToken, Session
from tests.llm_server import Rule, Turn

TIMEOUT = 10
METRICS_TOKEN = "scrape-me-0123456789"


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} of a text exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(table: dict[tuple, float], name: str, **labels) -> float:
    return table.get((name, tuple(sorted(labels.items()))), 0.0)


# --- access ---------------------------------------------------------------------------------
@pytest.mark.django_db
class TestAccess:
    @pytest.fixture(autouse=True)
    def _token(self, settings):
        settings.METRICS_TOKEN = METRICS_TOKEN

    def test_it_hides_from_anonymous_callers(self, anon_client):
        response = anon_client.get("/metrics")
        assert response.status_code == 404
        assert response.json() == {"error": "nothing at /metrics"}

    def test_it_hides_from_signed_in_non_staff_users(self, other_user):
        client = Client()
        client.force_login(other_user)
        assert client.get("/metrics").status_code == 404
        token = ApiToken.issue(other_user, name="t")[1]
        assert Client().get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 404

    def test_it_hides_from_wrong_or_malformed_bearers(self, anon_client):
        for header in (f"Bearer {METRICS_TOKEN}x", "Bearer nope", f"Basic {METRICS_TOKEN}", "Bearer"):
            assert anon_client.get("/metrics", headers={"Authorization": header}).status_code == 404, header

    def test_staff_users_read_it_by_session_or_api_token(self, owner, owner_client, owner_token):
        response = owner_client.get("/metrics")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain")
        assert "navi_runs_started_total" in response.content.decode()
        response = Client().get("/metrics", headers={"Authorization": f"Bearer {owner_token}"})
        assert response.status_code == 200

    def test_the_metrics_token_reads_it_without_an_account(self, anon_client):
        response = anon_client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert response.status_code == 200
        names = {family.name for family in text_string_to_metric_families(response.content.decode())}
        assert {"navi_runs_active", "navi_llm_call_duration_seconds", "navi_tool_calls", "navi_websocket_connections",
                "navi_relay_lag_seconds", "navi_llm_tokens"} <= names

    def test_the_metrics_token_opens_nothing_else(self, anon_client):
        response = anon_client.get("/sessions", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert response.status_code == 401

    def test_an_unset_token_matches_nothing(self, settings, anon_client):
        settings.METRICS_TOKEN = ""
        assert anon_client.get("/metrics", headers={"Authorization": "Bearer "}).status_code == 404
        assert anon_client.get("/metrics", headers={"Authorization": "Bearer  x"}).status_code == 404


# --- a run moves the counters -----------------------------------------------------------------
async def scrape() -> dict[tuple, float]:
    response = await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200
    return samples(response.content.decode())


async def run_once(session_id: str, token: str, content: str) -> list[dict]:
    comm = WebsocketCommunicator(
        application, f"/ws/sessions/{session_id}", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    connected, _ = await comm.connect(timeout=TIMEOUT)
    assert connected
    await comm.send_json_to({"type": "message", "content": content})
    frames = []
    while not frames or frames[-1]["type"] not in ("stream_end", "error", "stream_stopped"):
        frames.append(json.loads(await comm.receive_from(timeout=TIMEOUT)))
    run = get_run_manager().by_id[frames[-1]["run_id"]]
    await run.done.wait()  # the run's bookkeeping (and its metrics) ends after the last frame
    await comm.disconnect()
    return frames


@pytest.mark.django_db(transaction=True)
async def test_a_run_with_a_tool_call_moves_the_counters(settings, llm, owner, owner_token):
    settings.METRICS_TOKEN = METRICS_TOKEN
    # `native`: the run counts a call of an unknown tool, which only a native caller can make.
    await Profile.objects.aupdate(planning_enabled=False, tool_calling="native")
    session = await Session.objects.acreate(owner=owner, profile_id="secretary")
    llm.add_rule(Rule(match="add milk", turns=[
        Turn(tool_calls=[{"name": "todo", "arguments": {"action": "set", "tasks": ["milk"]}}]),
        Turn(tool_calls=[{"name": "no_such_tool", "arguments": {}}]),
        Turn(content="Milk is on your list."),
    ]))
    model = settings.OLLAMA_DEFAULT_MODEL
    before = await scrape()

    frames = await run_once(str(session.id), owner_token, "add milk please")
    assert frames[-1]["type"] == "stream_end", frames[-1]
    after = await scrape()

    def moved(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("navi_runs_started_total") == 1
    assert moved("navi_runs_active") == 0  # up and down again (other tests' runs share the process)
    assert moved("navi_runs_failed_total") == 0
    answer = {"backend": "ollama", "model": model, "purpose": "answer"}
    assert moved("navi_llm_calls_total", outcome="ok", **answer) == 3
    assert moved("navi_llm_call_duration_seconds_count", **answer) == 3
    assert moved("navi_llm_tokens_total", backend="ollama", model=model, kind="prompt") > 0
    assert moved("navi_llm_tokens_total", backend="ollama", model=model, kind="completion") > 0
    assert moved("navi_tool_calls_total", tool="todo", outcome="success") == 1
    assert moved("navi_tool_calls_total", tool="(unknown)", outcome="error") == 1
    assert moved("navi_websocket_accepted_total") == 1
    assert value(after, "navi_websocket_connections") == value(before, "navi_websocket_connections")
    assert moved("navi_relay_lag_seconds_count") >= len(frames)  # deltas may be merged on the way out


@pytest.mark.django_db(transaction=True)
async def test_a_failed_run_counts_as_failed(settings, llm, owner, owner_token):
    settings.METRICS_TOKEN = METRICS_TOKEN
    await Profile.objects.aupdate(planning_enabled=False)
    session = await Session.objects.acreate(owner=owner, profile_id="secretary")
    llm.add_rule(Rule(match="break", turns=[Turn(stream_error="model exploded")]))
    before = await scrape()

    frames = await run_once(str(session.id), owner_token, "break please")
    assert frames[-1]["type"] == "error", frames[-1]
    after = await scrape()
    assert value(after, "navi_runs_failed_total") - value(before, "navi_runs_failed_total") == 1
    assert value(after, "navi_runs_active") == value(before, "navi_runs_active")
    calls = {k: v for k, v in after.items() if k[0] == "navi_llm_calls_total" and dict(k[1])["outcome"] != "ok"}
    assert sum(calls.values()) - sum(v for k, v in before.items() if k in calls) >= 1
