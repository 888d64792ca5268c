"""Tests for the fake LLM server, driven through the real ollama client and raw httpx (no Django needed)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from tests.llm_server import LLMServer, Rule, Turn

USER = [{"role": "user", "content": "hi there"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as s:
        yield s


def _sse(lines: Iterator[str]) -> list[dict | str]:
    """Parse SSE ``data:`` payloads the way OpenAI clients do."""
    out: list[dict | str] = []
    for line in lines:
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


@pytest.mark.asyncio
async def test_ollama_async_stream_chunks_and_counts(server: LLMServer) -> None:
    server.script(Turn(content="The quick brown fox jumps", chunk_size=5, prompt_tokens=42, eval_tokens=7))
    parts = [p async for p in await ollama.AsyncClient(host=server.url).chat("m", messages=USER, stream=True)]
    texts = [p.message.content for p in parts if not p.done]
    assert len(texts) == 5 and "".join(texts) == "The quick brown fox jumps"
    final = parts[-1]
    assert final.done and final.done_reason == "stop"
    assert (final.prompt_eval_count, final.eval_count) == (42, 7)
    assert server.requests[0]["path"] == "/api/chat" and server.requests[0]["stream"] is True


@pytest.mark.asyncio
async def test_ollama_thinking_then_tool_call(server: LLMServer) -> None:
    server.script(Turn(thinking="I should call the tool", content="Let me check.",
                       tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}]))
    stream = await ollama.AsyncClient(host=server.url).chat("m", messages=USER, tools=TOOLS, think=True, stream=True)
    parts = [p async for p in stream]
    assert "".join(p.message.thinking or "" for p in parts) == "I should call the tool"
    assert "".join(p.message.content or "" for p in parts) == "Let me check."
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Oslo"}
    assert parts[-2].message.tool_calls and parts[-1].done  # tool calls in one chunk right before done
    assert server.requests[0]["tools"][0]["function"]["name"] == "get_weather"


def test_ollama_sync_non_stream_images_and_think_false(server: LLMServer) -> None:
    server.script(Turn(content="a cat", thinking="hidden"))
    resp = ollama.Client(host=server.url).chat(
        "m", messages=[{"role": "user", "content": "what is this?", "images": [b"\x89PNG fake"]}], think=False)
    assert resp.done and resp.message.content == "a cat" and resp.message.thinking is None
    assert server.requests[0]["messages"][0]["images"] == ["iVBORyBmYWtl"]  # base64 of the bytes


@pytest.mark.asyncio
async def test_unknown_model_is_404() -> None:
    with LLMServer(models=["llama3:latest"]) as s:
        client = ollama.AsyncClient(host=s.url)
        with pytest.raises(ollama.ResponseError) as exc:
            await client.chat("nope", messages=USER)
        assert exc.value.status_code == 404 and exc.value.error == 'model "nope" not found, try pulling it first'
        with pytest.raises(ollama.ResponseError) as exc:
            [p async for p in await client.chat("nope", messages=USER, stream=True)]
        assert exc.value.status_code == 404
        assert (await client.chat("llama3", messages=USER)).message.content == "echo: hi there"
        assert [m.model for m in (await client.list()).models] == ["llama3:latest"]
        r = httpx.post(s.openai_url + "/chat/completions", json={"model": "nope", "messages": USER})
        assert r.status_code == 404 and "not found" in r.json()["error"]["message"]


def test_metadata_endpoints(server: LLMServer) -> None:
    client = ollama.Client(host=server.url)
    assert client.show("any").capabilities
    assert httpx.get(server.url + "/api/version").json()["version"]
    assert httpx.get(server.openai_url + "/models").json()["data"][0]["object"] == "model"


def test_rules_k_indexing_and_system(server: LLMServer) -> None:
    server.add_rule(Rule(match="weather", system="pirate", turns=[Turn(content="Arr")]))
    server.add_rule(Rule(match="weather", turns=[
        Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}]), Turn(content="It is sunny.")]))
    client = ollama.Client(host=server.url)
    msgs: list = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "weather in Oslo?"}]
    first = client.chat("m", messages=msgs)
    assert first.message.tool_calls[0].function.name == "get_weather"
    msgs += [first.message, {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    assert client.chat("m", messages=msgs).message.content == "It is sunny."
    assert client.chat("m", messages=msgs).message.content == "It is sunny."  # deterministic replay
    msgs += [{"role": "assistant", "content": "x"}]
    assert client.chat("m", messages=msgs).message.content == "It is sunny."  # k past end → last turn
    pirate = [{"role": "system", "content": "you are a pirate"}, {"role": "user", "content": "weather?"}]
    assert client.chat("m", messages=pirate).message.content == "Arr"
    assert client.chat("m", messages=[{"role": "user", "content": "other"}]).message.content == "echo: other"


def test_fifo_has_priority_then_reset(server: LLMServer) -> None:
    server.add_rule(Rule(match="", turns=[Turn(content="rule")]))
    server.script("one", Turn(content="two"))
    client = ollama.Client(host=server.url)
    assert [client.chat("m", messages=USER).message.content for _ in range(3)] == ["one", "two", "rule"]
    assert server.wait_for_requests(3, timeout=1)
    server.reset()
    assert server.requests == [] and client.chat("m", messages=USER).message.content == "echo: hi there"


def test_error_status_turn(server: LLMServer) -> None:
    server.script(Turn(status=500, error="boom"), Turn(status=429, error="slow down"))
    with pytest.raises(ollama.ResponseError) as exc:
        list(ollama.Client(host=server.url).chat("m", messages=USER, stream=True))
    assert (exc.value.status_code, exc.value.error) == (500, "boom")
    r = httpx.post(server.openai_url + "/chat/completions", json={"model": "m", "messages": USER, "stream": True})
    assert r.status_code == 429 and r.json()["error"]["message"] == "slow down"


@pytest.mark.asyncio
async def test_drop_after_breaks_stream(server: LLMServer) -> None:
    server.script(Turn(content="x" * 80, chunk_size=4, drop_after=3), Turn(content="abcdef", drop_after=5))
    got: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        async for p in await ollama.AsyncClient(host=server.url).chat("m", messages=USER, stream=True):
            got.append(p.message.content or "")
    assert got == ["xxxx"] * 3
    with pytest.raises(httpx.RemoteProtocolError):  # fewer chunks than drop_after: still no done line
        httpx.post(server.openai_url + "/chat/completions", json={"model": "m", "messages": USER, "stream": True})
    assert server.disconnects == 0  # server-side drops are not client disconnects


@pytest.mark.asyncio
async def test_client_disconnect_detected_while_sleeping(server: LLMServer) -> None:
    server.script(Turn(content="slow " * 20, chunk_size=5, delay=0.3))
    async with httpx.AsyncClient() as client:
        async with client.stream("POST", server.url + "/api/chat", json={"model": "m", "messages": USER}) as r:
            async for line in r.aiter_lines():
                assert json.loads(line)["message"]["content"] == "slow "
                break
    t0 = time.monotonic()
    assert await asyncio.to_thread(server.wait_for_disconnect, 3)
    assert time.monotonic() - t0 < 2.0 and server.disconnects == 1  # seen at once, not after the 6 s script


@pytest.mark.asyncio
async def test_disconnect_detected_during_first_delay(server: LLMServer) -> None:
    server.script(Turn(content="late", first_delay=5))
    async with httpx.AsyncClient(timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(server.openai_url + "/chat/completions",
                              json={"model": "m", "messages": USER, "stream": True})
    assert await asyncio.to_thread(server.wait_for_disconnect, 2)


def test_openai_sse_tool_fragments_and_usage(server: LLMServer) -> None:
    args = {"city": "Reykjavík", "days": 3, "units": "metric"}
    server.script(Turn(thinking="hmm", content="Checking", chunk_size=4,
                       tool_calls=[{"name": "get_weather", "arguments": args}, {"name": "bad", "arguments": "{oops"}]))
    body = {"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.openai_url + "/chat/completions", json=body,
                      headers={"Authorization": "Bearer sk-test"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _sse(r.iter_lines())
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "hmm"
    assert "".join(d.get("content", "") for d in deltas) == "Checking"
    calls: dict[int, dict] = {}
    frags = 0
    for d in deltas:
        for tc in d.get("tool_calls", []):
            slot = calls.setdefault(tc["index"], {"id": tc.get("id"), "name": "", "arguments": ""})
            slot["name"] += tc.get("function", {}).get("name", "")
            slot["arguments"] += tc["function"].get("arguments", "")
            frags += 1
    assert frags > 6 and calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == args and calls[1]["arguments"] == "{oops"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {
        "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert server.requests[0]["authorization"] == "Bearer sk-test"


def test_openai_non_stream_and_api_key() -> None:
    with LLMServer(api_key="sk-good") as s:
        s.script(Turn(tool_calls=[{"name": "f", "arguments": {"a": 1}}]))
        url, body = s.openai_url + "/chat/completions", {"model": "m", "messages": USER}
        bad = httpx.post(url, json=body, headers={"Authorization": "Bearer wrong"})
        assert bad.status_code == 401 and bad.json()["error"]["message"]
        data = httpx.post(url, json=body, headers={"Authorization": "Bearer sk-good"}).json()
        choice = data["choices"][0]
        assert data["object"] == "chat.completion" and choice["finish_reason"] == "tool_calls"
        assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"a": 1}
        assert data["usage"]["total_tokens"] == 15
        assert [r["authorization"] for r in s.requests] == ["Bearer wrong", "Bearer sk-good"]


@pytest.mark.asyncio
async def test_fifty_concurrent_streams_route_by_rule(server: LLMServer) -> None:
    for i in range(50):
        server.add_rule(Rule(match=f"session-{i}:", turns=[Turn(content=f"reply {i} " * 10, chunk_size=3, delay=0.002)]))
    client = ollama.AsyncClient(host=server.url)

    async def one(i: int) -> str:
        msgs = [{"role": "user", "content": f"session-{i}: hello"}]
        return "".join([p.message.content async for p in await client.chat("m", messages=msgs, stream=True)])

    results = await asyncio.gather(*(one(i) for i in range(50)))
    assert results == [f"reply {i} " * 10 for i in range(50)]


def test_cli_serves_rules_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"match": "ping", "turns": [{"content": "pong"}, "second"]}]))
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "tests.llm_server", "--port", "0", "--rules", str(rules),
                             "--schemas", "format"],
                            cwd=root, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line.startswith("LISTENING http://127.0.0.1:")
        client = ollama.Client(host=line.split()[1])
        assert client.chat("m", messages=[{"role": "user", "content": "ping"}]).message.content == "pong"
        msgs = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
        assert client.chat("m", messages=msgs).message.content == "second"
        httpx.post(line.split()[1] + "/_fake/script", json=["scripted"])
        assert client.chat("m", messages=USER).message.content == "scripted"
        assert len(httpx.get(line.split()[1] + "/_fake/state").json()["requests"]) == 3
        # --schemas format: a JSON schema in `format` is honoured, as Ollama does.
        shaped = client.chat("m", messages=[{"role": "user", "content": "ping"}], format=STEP).message.content
        assert json.loads(shaped) == {"name": "answer", "text": "pong"}
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


def _openai_stream(server: LLMServer, **extra) -> list[dict | str]:
    body = {"model": "m", "messages": USER, "stream": True, **extra}
    with httpx.stream("POST", server.openai_url + "/chat/completions", json=body) as r:
        return _sse(r.iter_lines())


def test_real_server_quirks_over_openai(server: LLMServer) -> None:
    server.script(
        Turn(tool_calls=[{"name": "todo", "arguments": {"action": "read"}}], chunk_size=4, repeat_tool_name=True),
        Turn(content="Paris is", stream_error={"message": "Requested tokens (4327) exceed context window of 4096"}),
        Turn(content="cut", no_finish=True),
        Turn(content="word ", chunk_size=5, endless=True),
    )
    names = [tc["function"].get("name") for e in _openai_stream(server) if isinstance(e, dict) and e["choices"]
             for tc in e["choices"][0]["delta"].get("tool_calls", [])]
    assert len(names) > 2 and set(names) == {"todo"}  # the name in every chunk, as llama-cpp-python does
    events = _openai_stream(server)
    assert events[-1] == {"error": {"message": "Requested tokens (4327) exceed context window of 4096"}}
    assert not any(isinstance(e, dict) and e.get("choices") and e["choices"][0]["finish_reason"] for e in events)
    events = _openai_stream(server)
    assert "[DONE]" not in events and events[-1]["choices"][0]["finish_reason"] is None
    events = _openai_stream(server, max_tokens=7)  # endless, but capped: one piece per token
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if isinstance(e, dict) and e["choices"])
    assert text == "word " * 7 and events[-2]["choices"][0]["finish_reason"] == "length"
    assert server.requests[-1]["max_tokens"] == 7


def test_real_server_quirks_over_ollama(server: LLMServer) -> None:
    server.model_show["small"] = {"capabilities": ["completion"], "context_length": 2048}
    client = ollama.Client(host=server.url)
    shown = client.show("small")
    assert shown.capabilities == ["completion"] and shown.modelinfo["llama.context_length"] == 2048
    assert server.shows == ["small"] and server.requests == []  # show calls are kept apart
    with pytest.raises(ollama.ResponseError) as exc:
        client.chat("small", messages=USER, think=True)
    assert exc.value.status_code == 400 and "does not support thinking" in exc.value.error
    server.script(Turn(content="x", stream_error="boom"), Turn(content="abcdefgh" * 10, chunk_size=2))
    with pytest.raises(ollama.ResponseError, match="boom"):
        list(client.chat("small", messages=USER, stream=True))
    parts = list(client.chat("small", messages=USER, stream=True, options={"num_predict": 3}))
    assert "".join(p.message.content for p in parts) == "abcdef" and parts[-1].done_reason == "length"
    assert server.max_active == 1


# --- a request's JSON schema, honoured as a real server's grammar would ------------------------------
STEP = {"anyOf": [
    {"type": "object", "properties": {"name": {"const": "answer"}, "text": {"type": "string"}},
     "required": ["name"], "additionalProperties": False},
    {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city", "days"], "additionalProperties": False}},
     "required": ["name", "arguments"], "additionalProperties": False},
]}


def _ollama_json(server: LLMServer, text: str, schema: dict = STEP) -> tuple[list[str], dict]:
    parts = [p.message.content for p in ollama.Client(host=server.url).chat(
        "m", messages=[{"role": "user", "content": text}], format=schema, stream=True) if not p.done]
    return parts, json.loads("".join(parts))


def test_an_enforced_schema_gets_the_answer_text_streamed_inside_its_json() -> None:
    with LLMServer(schemas={"format"}) as server:
        server.script(Turn(content="Paris, on the Seine.", chunk_size=4))
        parts, value = _ollama_json(server, "capital of France?")
        assert value == {"name": "answer", "text": "Paris, on the Seine."}
        assert len(parts) == 5 and parts[0] == '{"name":"answer","text":"Pari'  # the text piece by piece
        # Without a script: the echo, as an answer.
        assert _ollama_json(server, "hello")[1] == {"name": "answer", "text": "echo: hello"}


def test_the_answer_text_is_written_as_json_spells_it_its_escapes_cut_between_pieces() -> None:
    text = 'a\nb "q" é 😀'
    with LLMServer(schemas={"format"}) as server:
        server.script(Turn(content=text, chunk_size=3))
        parts, value = _ollama_json(server, "x")
    assert value == {"name": "answer", "text": text}
    assert parts == ['{"name":"answer","text":"a\\n', 'b \\', '"q\\', '" \\', 'u00', 'e9 ', '\\ud', '83d', '\\ud', 'e00"}']
    # `\` ends one piece and `"` starts the next; `\u00e9` and the surrogate pair `\ud83d\ude00` are cut


def test_a_tool_named_by_the_user_or_scripted_becomes_the_call_with_valid_arguments() -> None:
    with LLMServer(schemas={"format"}) as server:
        assert _ollama_json(server, "use get_weather for Oslo")[1] == {
            "name": "get_weather", "arguments": {"city": "", "days": 1}}  # the minimal valid value
        # Navi's own step note after a --- line names tools too: not the user's words.
        assert _ollama_json(server, "hi\n\n---\n[next step] best: get_weather")[1]["name"] == "answer"
        server.script(Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}]))
        assert _ollama_json(server, "weather?")[1] == {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}
        server.script(Turn(tool_calls=[{"name": "get_weather", "arguments": {"town": "Oslo"}}]))  # off-schema
        assert _ollama_json(server, "weather?")[1] == {"name": "get_weather", "arguments": {"city": "", "days": 1}}
        # A scripted reply that already follows the schema is sent as it is.
        server.script(Turn(content='{"name": "answer"}'))
        assert _ollama_json(server, "x")[1] == {"name": "answer"}


def test_openai_response_format_is_honoured_and_unknown_fields_ignored() -> None:
    with LLMServer(schemas={"response_format"}) as server:
        server.script(Turn(content="Rome."), Turn(content="Rome."))
        body = {"model": "m", "messages": [{"role": "user", "content": "Italy?"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": STEP}}}
        resp = httpx.post(server.openai_url + "/chat/completions", json=body).json()
        assert json.loads(resp["choices"][0]["message"]["content"]) == {"name": "answer", "text": "Rome."}
        # A field this server does not enforce (Ollama's `format` on the OpenAI path) changes nothing.
        resp = httpx.post(server.openai_url + "/chat/completions", json={**body, "response_format": None,
                                                                          "format": STEP}).json()
        assert resp["choices"][0]["message"]["content"] == "Rome."



def test_by_default_the_server_enforces_what_ollama_does_and_answers_navis_probe() -> None:
    probe = {"title": "navi_probe", "type": "object", "required": ["probe"],
             "properties": {"probe": {"type": "string", "enum": ["navi-7q"]}}}
    with LLMServer() as server:
        reply = ollama.Client(host=server.url).chat("m", messages=USER, format=probe).message.content
        assert json.loads(reply) == {"probe": "navi-7q"}
        assert len(server.probes) == 1 and server.requests == []
    with LLMServer(schemas=set()) as server:  # the opt-out: a server that ignores `format` just talks
        reply = ollama.Client(host=server.url).chat("m", messages=USER, format=probe).message.content
        assert not reply.startswith("{") and len(server.probes) == 1


def test_a_text_the_schema_has_no_room_for_waits_for_the_next_free_call() -> None:
    answer_only = {"anyOf": [{"type": "object", "properties": {"name": {"const": "answer"}}, "required": ["name"],
                              "additionalProperties": False}, STEP["anyOf"][1]]}
    with LLMServer() as server:
        server.script(Turn(content="It is sunny."))
        assert _ollama_json(server, "weather?", answer_only)[1] == {"name": "answer"}
        client = ollama.Client(host=server.url)
        assert client.chat("m", messages=[{"role": "user", "content": "weather?"}]).message.content == "It is sunny."


def test_scripted_arguments_keep_what_the_schema_allows_and_a_named_tool_only_before_a_result() -> None:
    with LLMServer() as server:
        server.script(Turn(tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo", "days": 0}}]))
        assert _ollama_json(server, "weather?")[1] == {"name": "get_weather", "arguments": {"city": "Oslo", "days": 1}}
        after = [{"role": "user", "content": "use get_weather for Oslo"},
                 {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {}}}]},
                 {"role": "tool", "content": "12 C"}, {"role": "user", "content": "[image from get_weather]"}]
        parts = [p.message.content for p in ollama.Client(host=server.url).chat(
            "m", messages=after, format=STEP, stream=True) if not p.done]
        assert json.loads("".join(parts))["name"] == "answer"  # the result is in: the model answers
