"""bench/agent_eval.py against the scripted test LLM server: its checkers must see a task that was
solved, one that was not, and calls that were invalid — through a real Navi server."""

from __future__ import annotations

from bench.agent_eval import Options, evaluate, select_tasks, table
from tests.live_server import free_port
from tests.live_ws import planning_rule
from tests.llm_server import LLMServer, Rule, Turn


def _scripted(web: str) -> LLMServer:
    llm = LLMServer().start()
    llm.add_rule(planning_rule())
    # Solved: the todo list ends up with the three tasks.
    todo = {"action": "set", "tasks": ["buy milk", "call the plumber", "pay rent"]}
    llm.add_rule(Rule(match="three tasks: buy milk", turns=[Turn(tool_calls=[{"name": "todo", "arguments": todo}]),
                                                           Turn(content="Your list is ready.")]))
    # Not solved: the file is written with the wrong content, and the model says otherwise.
    wrong = {"action": "write", "path": "shopping.txt", "content": "eggs, milk"}
    llm.add_rule(Rule(match="shopping.txt", turns=[Turn(tool_calls=[{"name": "filesystem", "arguments": wrong}]),
                                                   Turn(content="Done: eggs, flour, sugar.")]))
    # Solved after two invalid calls (a wrong argument name, then an unknown tool).
    llm.add_rule(Rule(match="zorblax.html", turns=[
        Turn(tool_calls=[{"name": "web_view", "arguments": {"link": "http://127.0.0.1/zorblax.html"}}]),
        Turn(tool_calls=[{"name": "open_page", "arguments": {"url": "zorblax"}}]),
        Turn(tool_calls=[{"name": "web_view", "arguments": {"url": f"{web}/zorblax.html"}}]),
        Turn(content="The tower is 347 metres tall.", prompt_tokens=100, eval_tokens=9),
    ]))
    return llm


def test_it_checks_end_states_and_counts_calls_and_llm_requests():
    web_port = free_port()
    llm = _scripted(f"http://127.0.0.1:{web_port}")
    tasks = select_tasks(None, "todo_create,file_write,web_fact")
    options = Options(backend="ollama", url=llm.url, model="fake-llm", modes=("plain",), timeout=30,
                      web_port=web_port, verbose=False)
    try:
        report = evaluate(options, tasks)
    finally:
        llm.stop()

    by_task = {r["task"]: r for r in report["results"]}
    assert by_task["todo_create"]["success"], by_task["todo_create"]
    assert not by_task["file_write"]["success"]
    assert "eggs, milk" in by_task["file_write"]["detail"]
    web = by_task["web_fact"]
    assert web["success"], web
    assert [c["valid"] for c in web["tool_calls"]] == [False, False, True]
    assert web["tool_calls"][1]["problem"] == "unknown tool"
    assert web["llm_calls"] == 4 and web["prompt_tokens"] == 3 * 10 + 100

    summary = report["summary"]["plain"]
    assert summary["succeeded"] == 2 and summary["tasks"] == 3
    assert summary["tool_calls"] == 5 and summary["valid_calls"] == 3
    assert summary["llm_calls_per_task"] == round((2 + 2 + 4) / 3, 2)
    printed = table(report["summary"], report["results"])
    assert "2/3 (67%)" in printed and "3/5 (60%)" in printed


def test_the_proxy_can_play_a_server_that_parses_hermes_tool_calls():
    """--server-parses-hermes: well-formed <tool_call> blocks become native calls, the rest of the
    text stays text, and a block a real parser would refuse (arguments not an object) stays too."""
    import json

    from bench._llm_proxy import hermes_native

    pieces = ["Sure.\n<tool_", 'call>\n{"name": "todo", "arguments": {"action": "read"}}\n</tool_call>',
              ' <tool_call>{"name": "x", "arguments": "s"}</tool_call>']
    sse = b"".join(
        b"data: " + json.dumps({"id": "c1", "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}).encode() + b"\n\n"
        for p in pieces
    ) + b'data: {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    lines = [line[6:] for line in hermes_native(sse).decode().split("\n\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line)["choices"][0] for line in lines[:-1]]
    assert chunks[0]["delta"]["content"] == 'Sure.\n <tool_call>{"name": "x", "arguments": "s"}</tool_call>'
    call = chunks[1]["delta"]["tool_calls"][0]["function"]
    assert call == {"name": "todo", "arguments": '{"action": "read"}'}
    assert chunks[-1]["finish_reason"] == "tool_calls"
