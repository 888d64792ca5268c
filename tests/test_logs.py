"""Structured logs: LOG_FORMAT=json prints one JSON object per line, run lines carry the run and
session ids, HTTP lines the request id (X-Request-ID, echoed in the response)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re

import httpx
import pytest
import websockets

from navi_project.logs import ContextFilter, JsonFormatter, bind_run, current_request_id
from tests.live_server import LiveNavi
from tests.live_ws import recv_run
from tests.llm_server import LLMServer, Rule, Turn
from tests.test_settings import load


@pytest.fixture
def json_lines():
    """A JSON handler on the root logger, as LOG_FORMAT=json configures it; yields the lines."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in buffer.getvalue().splitlines()]
    root.removeHandler(handler)
    root.setLevel(old_level)


def test_a_line_is_one_json_object_with_extras_and_the_traceback(json_lines):
    try:
        raise ValueError("bad value")
    except ValueError:
        logging.getLogger("navi.test").warning("tool %s failed", "x", extra={"tool": "x", "ms": 12}, exc_info=True)
    [line] = json_lines()
    assert line["level"] == "WARNING" and line["logger"] == "navi.test" and line["message"] == "tool x failed"
    assert (line["tool"], line["ms"]) == ("x", 12)
    assert "ValueError: bad value" in line["exc_info"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", line["time"])
    assert "run_id" not in line and "request_id" not in line  # logged outside a run and a request


async def test_every_line_of_a_run_carries_its_run_and_session(json_lines):
    async def run():
        bind_run("r1", "s1")
        logging.getLogger("agent.x").info("in the run")
        await asyncio.to_thread(logging.getLogger("tools_app.x").info, "in a tool thread")

    await asyncio.create_task(run())
    logging.getLogger("agent.x").info("after the run")
    lines = json_lines()
    assert [(x["message"], x.get("run_id"), x.get("session_id")) for x in lines] == [
        ("in the run", "r1", "s1"),
        ("in a tool thread", "r1", "s1"),
        ("after the run", None, None),
    ]


@pytest.mark.django_db
def test_a_sane_request_id_is_kept_logged_and_echoed(owner_client, json_lines):
    response = owner_client.get("/sessions/not-a-session-id", HTTP_X_REQUEST_ID="req-42.abc")
    assert response.status_code == 404 and response["X-Request-ID"] == "req-42.abc"
    [line] = [x for x in json_lines() if x["logger"] == "django.request"]
    assert line["message"] == "Not Found: /sessions/not-a-session-id" and line["request_id"] == "req-42.abc"
    assert current_request_id.get() == ""  # not left behind for unrelated lines


@pytest.mark.django_db
@pytest.mark.parametrize("given", ["", "two words", "x" * 200, "a\nb", "ünïcode"])
def test_a_missing_or_odd_request_id_is_replaced_by_a_new_one(anon_client, given):
    response = anon_client.get("/health", HTTP_X_REQUEST_ID=given)
    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-ID"])
    assert response["X-Request-ID"] != anon_client.get("/health")["X-Request-ID"]


def test_log_format_json_switches_the_console_handler(tmp_path, monkeypatch):
    from tests import test_settings

    code = "import json; from django.conf import settings as s; print(json.dumps(s.LOGGING['handlers']['console']))"
    monkeypatch.setattr(test_settings, "PRINT", code)
    assert load(tmp_path)["formatter"] == "plain"  # the default stays as it was
    assert load(tmp_path, LOG_FORMAT="json")["formatter"] == "json"


@pytest.mark.live
def test_a_live_server_logs_json_with_run_and_request_ids():
    """A real daphne with LOG_FORMAT=json: every line of its log is JSON (daphne's access log
    too); the planner's line (logged inside the run) names the run and session; the HTTP lines
    name their request."""
    with LLMServer() as llm:
        llm.add_rule(Rule(match="", system="planning step", turns=[Turn(content="no plan, just chatting")]))
        llm.add_rule(Rule(match="hello logs", turns=[Turn(content="hi")]))
        with LiveNavi(env={"OLLAMA_HOST": llm.url, "LOG_FORMAT": "json", "LOG_LEVEL": "INFO"}) as navi:
            navi._manage("shell", "-c", "from agent.models import Profile; Profile.objects.update(planning='always')")
            session_id = navi.create_session()

            async def chat() -> list[dict]:
                async with websockets.connect(navi.ws_url(session_id), additional_headers=navi.headers) as ws:
                    await ws.send(json.dumps({"type": "message", "content": "hello logs"}))
                    return await recv_run(ws)

            frames = asyncio.run(chat())
            assert frames[-1]["type"] == "stream_end", frames
            response = httpx.get(f"{navi.url}/no-such-page", headers={"X-Request-ID": "live-1"})
            assert response.status_code == 404 and response.headers["X-Request-ID"] == "live-1"
            navi.stop()
            lines = [json.loads(line) for line in navi.log().splitlines() if line.strip()]
    [planner] = [x for x in lines if x["message"].startswith("planning: not a usable plan")]
    assert (planner["run_id"], planner["session_id"]) == (frames[-1]["run_id"], session_id)
    [not_found] = [x for x in lines if x["logger"] == "django.request"]
    assert not_found["request_id"] == "live-1" and not_found["message"] == "Not Found: /no-such-page"
    access = [x for x in lines if x["logger"] == "navi_project.access" and x.get("method")]
    assert access and all(re.fullmatch(r"[\w.-]+", x["request_id"]) for x in access)  # every HTTP line has one
    [(status, request_id)] = [(x["status"], x["request_id"]) for x in access if x["path"] == "/no-such-page"]
    assert (status, request_id) == (404, "live-1")
