"""`manage.py navi_chat`: a real terminal session against the test LLM, in a subprocess."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.live_server import PYTHON, ROOT, LiveNavi
from tests.llm_server import LLMServer, Rule, Turn, talk


@pytest.fixture
def navi_env():
    with LLMServer() as llm:
        llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="DIRECT")]))
        navi = LiveNavi(env={"OLLAMA_HOST": llm.url})
        navi.prepare()
        yield llm, navi
        import shutil

        shutil.rmtree(navi.data_dir, ignore_errors=True)


def chat(navi, *args):
    return subprocess.Popen(
        [PYTHON, "manage.py", "navi_chat", "--no-color", *args],
        cwd=ROOT,
        env=navi.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_it_streams_thinking_tools_and_the_answer(navi_env):
    llm, navi = navi_env
    llm.add_rule(Rule(match="plan", turns=[
        Turn(thinking="list it", tool_calls=[{"name": "todo", "arguments": {"action": "set", "tasks": ["a"]}}]),
        Turn(content="Your list is ready."),
    ]))
    proc = chat(navi)
    out, _ = proc.communicate("plan my day\n", timeout=60)
    assert proc.returncode == 0, out
    assert "(thinking) list it" in out
    assert "[todo] ok: 1. [ ] a (pending)" in out
    assert "Your list is ready." in out
    assert "/8192 tokens]" in out


def test_ctrl_c_stops_the_run_and_keeps_the_partial_answer(navi_env):
    llm, navi = navi_env
    llm.add_rule(Rule(match="talk", turns=[Turn(content=talk(400, "blah"), chunk_size=5, delay=0.02)]))
    proc = chat(navi)
    proc.stdin.write("talk\n")
    proc.stdin.flush()
    seen = ""
    deadline = time.monotonic() + 30
    while "blah0 blah1" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.read(1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate("", timeout=30)
    assert "[stopped — the partial answer is kept]" in seen + out
    assert proc.returncode == 0


def test_it_asks_yes_or_no_before_a_host_tool(navi_env):
    llm, navi = navi_env
    llm.add_rule(Rule(match="run two", turns=[
        Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "echo first-approved"}}]),
        Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "echo second-denied"}}]),
        Turn(content="Finished."),
    ]))
    proc = chat(navi)
    out, _ = proc.communicate("run two\ny\nn\n", timeout=60)
    assert proc.returncode == 0, out
    assert out.count("Approve terminal?") == 2 and "[y]es / [n]o / [a]lways in this chat" in out
    assert '"command": "echo first-approved"' in out
    assert "[approval approve]" in out and "[approval deny]" in out
    assert "[terminal] ok: first-approved" in out
    assert "[terminal] FAILED: ERROR: the owner declined" in out
    assert "Finished." in out
