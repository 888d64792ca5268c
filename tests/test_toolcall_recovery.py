"""Tool calls written as text (every known shape) and almost-valid arguments, as small models
produce them: recovered, repaired, or refused with what to fix."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest
from channels.testing import WebsocketCommunicator

from agent.toolcalling.callfilter import CallTextFilter
from agent.toolcalling.toolcalls import extract_calls
from sessions_app.models import Message
from tests.llm_server import Turn
from tools_app.repair import ArgumentsUnreadable, coerce, explain, parse_lenient

OFFERED = {"web_search", "todo", "memory_save", "code_exec"}


@pytest.fixture
def llm(llm):
    """The subject is calls written as text: a server that ignores `format`, where Navi falls
    back to recovering them (on one that enforces it the step cannot write text)."""
    llm.schemas = set()
    return llm
CORPUS = Path(__file__).with_name("data") / "small_model_outputs.json"

SHAPES = [
    ("hermes", '<tool_call>\n{"name": "web_search", "arguments": {"query": "cats"}}\n</tool_call>', ""),
    ("hermes after text", 'Let me look.\n<tool_call>{"name": "web_search", "arguments": {"query": "cats"}}</tool_call>', "Let me look."),
    ("hermes unterminated", '<tool_call>\n{"name": "web_search", "arguments": {"query": "cats"}}', ""),
    ("llama3 parameters", '{"name": "web_search", "parameters": {"query": "cats"}}', ""),
    ("llama3 python_tag", '<|python_tag|>{"name": "web_search", "parameters": {"query": "cats"}}<|eom_id|>', ""),
    ("mistral list", '[TOOL_CALLS][{"name": "web_search", "arguments": {"query": "cats"}}]', ""),
    ("mistral args", '[TOOL_CALLS]web_search[ARGS]{"query": "cats"}', ""),
    ("fenced json", 'Searching now:\n```json\n{"name": "web_search", "arguments": {"query": "cats"}}\n```', "Searching now:"),
    ("python line", 'web_search(query="cats")', ""),
    ("python line after text", 'I will search.\nweb_search(query="cats")\n', "I will search."),
    ("openai function shape", '{"type": "function", "function": {"name": "web_search", "arguments": "{\\"query\\": \\"cats\\"}"}}', ""),
    ("single quotes", "{'name': 'web_search', 'arguments': {'query': 'cats'}}", ""),
]


@pytest.mark.parametrize("label,text,rest", SHAPES, ids=[s[0] for s in SHAPES])
def test_every_known_shape_is_recovered(label, text, rest):
    found = extract_calls(text, OFFERED)
    assert [(c.name, c.arguments, c.recovered) for c in found.calls] == [("web_search", {"query": "cats"}, True)]
    assert found.text == rest


@pytest.mark.parametrize(
    "text",
    [
        "You could use web_search to look that up, or ask me to.",
        "The todo tool keeps a list. Call it like todo with an action.",
        '{"name": "Rex", "breed": "collie"}',  # data with a name is not a call
        '{"name": "unknown_tool", "arguments": {}}',  # not offered
        "```python\nweb_search(query='cats')\n```",  # code in another language is shown as code
        "print(web_search)",
        "web_search(query=some_variable)",  # not literal arguments
        '```\n{"type": "function", "name": "todo"}\n```',  # the schema echoed back (seen on SmolLM2)
        '{"name": "web_search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}',
    ],
)
def test_text_that_only_mentions_a_tool_is_not_a_call(text):
    found = extract_calls(text, OFFERED)
    assert found.calls == [] and found.text == text


def test_several_calls_in_one_answer():
    text = (
        '<tool_call>{"name": "todo", "arguments": {"action": "list"}}</tool_call>\n'
        '<tool_call>{"name": "memory_save", "arguments": {"category": "pets", "key": "dog", "value": "Rex"}}</tool_call>'
    )
    assert [c.name for c in extract_calls(text, OFFERED).calls] == ["todo", "memory_save"]


def stream(text: str, size: int, offered=OFFERED) -> tuple[list[str], str, list]:
    filt = CallTextFilter(offered)
    shown = [filt.feed(text[i:i + size]) for i in range(0, len(text), size)]
    rest, calls = filt.finish()
    return shown, "".join(shown) + rest, calls


@pytest.mark.parametrize("size", [1, 3, 7, 64])
@pytest.mark.parametrize("label,text,rest", SHAPES, ids=[s[0] for s in SHAPES])
def test_the_stream_never_shows_a_call(label, text, rest, size):
    shown, total, calls = stream(text, size)
    assert [c.name for c in calls] == ["web_search"]
    assert "web_search" not in "".join(shown) and "cats" not in total
    assert total.strip() == rest


@pytest.mark.parametrize("size", [1, 5])
def test_ordinary_text_streams_without_waiting_for_the_end(size):
    text = "Hello there! Here is a plan:\n1. Wake up\n- web access is fine\nweb pages load fast\n"
    shown, total, calls = stream(text, size)
    assert total == text and calls == []
    # Everything but (at most) the start of the last line was shown before finish().
    assert len("".join(shown)) >= len(text) - 1


def test_code_blocks_stream_and_stay_code():
    text = "Example:\n```python\n{'a': 1}\nweb_search(query='x')\n```\nDone."
    shown, total, calls = stream(text, 4)
    assert total == text and calls == []


def test_json_data_that_is_not_a_call_is_shown_once_complete():
    text = 'Your record:\n{"name": "Rex", "age": 3}\nNice dog.'
    shown, total, calls = stream(text, 2)
    assert total == text and calls == []


# --- arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw,expected",
    [
        ('{"query": "cats",}', {"query": "cats"}),
        ("{'query': 'cats'}", {"query": "cats"}),
        ('{"flag": True, "none": None}', {"flag": True, "none": None}),
        ('{query: "cats", max_results: 3}', {"query": "cats", "max_results": 3}),
        ('"{\\"query\\": \\"cats\\"}"', {"query": "cats"}),
        ('```json\n{"query": "cats"}\n```', {"query": "cats"}),
        ('{"flag": true, "items": [1, 2,],}', {"flag": True, "items": [1, 2]}),
    ],
)
def test_almost_json_is_repaired(raw, expected):
    value, repaired = parse_lenient(raw)
    assert value == expected and repaired


def test_valid_json_is_not_marked_repaired():
    assert parse_lenient('{"a": 1}') == ({"a": 1}, False)


@pytest.mark.parametrize("raw", ["not json at all", "[1, 2]", '{"a": ', "__import__('os').system('id')"])
def test_unreadable_arguments_are_refused(raw):
    with pytest.raises(ArgumentsUnreadable):
        parse_lenient(raw)


SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "label": {"type": "string"},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "inner": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
    "required": ["count"],
}


def test_types_are_coerced_by_the_schema():
    value, changed = coerce(
        {"count": "3", "ratio": "0.5", "flag": "true", "tags": "urgent", "label": 42, "mode": "FAST", "inner": '{"n": "2"}'},
        SCHEMA,
    )
    assert changed
    assert value == {"count": 3, "ratio": 0.5, "flag": True, "tags": ["urgent"], "label": "42", "mode": "fast", "inner": {"n": 2}}
    jsonschema.validate(value, SCHEMA)


def test_what_still_fails_is_explained_with_the_schema_and_an_example():
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors({"count": "many"}))
    message = explain("counter", SCHEMA, errors)
    assert "'count'" in message and "not of type 'integer'" in message
    assert '"count": {"type": "integer"}' in message
    assert 'counter({"count": 1})' in message
    missing = explain("counter", SCHEMA, list(jsonschema.Draft202012Validator(SCHEMA).iter_errors({})))
    assert "'count' is a required property" in missing and '"count": {"type": "integer"}' in missing


WITH_PARAMETERS = {"switch_profile": frozenset({"profile_id"}), "todo": frozenset({"action", "tasks", "index", "status"})}


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"name": "switch_profile", "profile_id": "smart_home"}', [("switch_profile", {"profile_id": "smart_home"})]),
        ('```json\n{"name": "todo", "tasks": ["2"], "status": "done"}\n```', [("todo", {"tasks": ["2"], "status": "done"})]),
        ('{"name": "todo", "priority": 2}', []),  # a key the tool does not have: data, not a call
        ('{"name": "todo", "action": "read", "arguments": {"action": "read"}}', []),  # both forms: unclear
    ],
)
def test_arguments_written_beside_the_name_are_a_call_when_they_are_the_tools_parameters(text, expected):
    found = extract_calls(text, WITH_PARAMETERS)
    assert [(c.name, c.arguments) for c in found.calls] == expected
    assert [(c.name, c.arguments) for c in stream(text, 3, WITH_PARAMETERS)[2]] == expected
    assert extract_calls(text, set(WITH_PARAMETERS)).calls == []  # without the parameters: never


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"name": "todo", "arguments": {"action": "read"}', [("todo", {"action": "read"})]),
        ('{"name": "todo", "arguments": {"action": "set", "tasks": ["a", "b"', [("todo", {"action": "set", "tasks": ["a", "b"]})]),
        ('{"name": "todo", "arguments": {"action": "set", "tasks": ["a", "b', []),  # cut inside a string
    ],
)
def test_a_call_one_bracket_short_is_closed_unless_cut_inside_a_value(text, expected):
    assert [(c.name, c.arguments) for c in extract_calls(text, OFFERED).calls] == expected
    assert [(c.name, c.arguments) for c in stream(text, 5)[2]] == expected


@pytest.mark.skipif(not CORPUS.exists(), reason="no corpus of real small-model outputs yet")
def test_the_corpus_of_real_small_model_outputs():
    entries = json.loads(CORPUS.read_text())
    assert entries
    for entry in entries:
        offered = entry.get("offered_tools") or OFFERED  # names, or names with their parameters
        offered = {k: frozenset(v) for k, v in offered.items()} if isinstance(offered, dict) else set(offered)
        found = extract_calls(entry["output"], offered)
        expected = entry["expected"]
        got = [{"name": c.name, "arguments": parse_lenient(c.arguments)[0] if isinstance(c.arguments, str) else c.arguments} for c in found.calls]
        assert got == expected["calls"], f"{entry['model']}: {entry['output'][:200]!r}"
        if "text" in expected:
            assert found.text.strip() == expected["text"].strip(), entry["model"]
        _, total, calls = stream(entry["output"], 3, offered)
        assert [c.name for c in calls] == [c["name"] for c in expected["calls"]], entry["model"]
        if "text" in expected:  # the stream shows the same text (blank lines aside)
            assert total.split() == expected["text"].split(), entry["model"]


# --- results the model invents for its own call (issue #31) ------------------------------
INVENTED = "HELLO-INVENTED"
SEARCH = '{"name": "web_search", "arguments": {"query": "cats"}}'
WRITTEN_RESULTS = [
    ("output key", f'```json\n{{"name": "web_search", "arguments": {{"query": "cats"}}, "output": "{INVENTED}"}}\n```', ""),
    ("result key, parameters", f'{{"name": "web_search", "parameters": {{"query": "cats"}}, "result": ["{INVENTED}"]}}', ""),
    ("results key in a tag", f'<tool_call>{{"name": "web_search", "arguments": {{"query": "cats"}}, "results": "{INVENTED}"}}</tool_call>', ""),
    ("Output: line", f"Searching.\n```json\n{SEARCH}\n```\nOutput: {INVENTED}", "Searching."),
    ("bold Result: then a fence", f"```json\n{SEARCH}\n```\n**Result:**\n```\n{INVENTED}\n```", ""),
    ("bare fence", f"<tool_call>\n{SEARCH}\n</tool_call>\n```\n{INVENTED}\n```", ""),
    ("tool_response", f"<tool_call>\n{SEARCH}\n</tool_call>\n<tool_response>\n{INVENTED}\n</tool_response>", ""),
    ("Observation then prose", f"{SEARCH}\nObservation: {INVENTED}\nThought: cats are nice.\nCats are {INVENTED}.", ""),
    ("answer built on it", f"web_search(query=\"cats\")\nThe search found {INVENTED}.", ""),
    ("inside the tag", f"<tool_call>\n{SEARCH}\nResponse: {INVENTED}\n</tool_call>", ""),
    ("inside the fence", f"```json\n{SEARCH}\nReturns: {INVENTED}\n```", ""),
]


@pytest.mark.parametrize("label,text,rest", WRITTEN_RESULTS, ids=[r[0] for r in WRITTEN_RESULTS])
def test_a_result_written_with_the_call_is_dropped_and_the_call_runs(label, text, rest):
    found = extract_calls(text, OFFERED)
    assert [(c.name, c.arguments) for c in found.calls] == [("web_search", {"query": "cats"})]
    assert found.text == rest and INVENTED not in found.text


@pytest.mark.parametrize("size", [1, 3, 7, 64])
@pytest.mark.parametrize("label,text,rest", WRITTEN_RESULTS, ids=[r[0] for r in WRITTEN_RESULTS])
def test_the_stream_never_shows_an_invented_result(label, text, rest, size):
    shown, total, calls = stream(text, size)
    assert [c.name for c in calls] == ["web_search"]
    assert INVENTED not in total and total.strip() == rest


def test_between_two_calls_the_invented_result_goes_and_the_prose_stays():
    text = (
        "First I look.\n<tool_call>{\"name\": \"todo\", \"arguments\": {\"action\": \"read\"}}</tool_call>\n"
        f"Result:\n```\n{INVENTED}\n```\nNow I add the task.\n"
        "<tool_call>{\"name\": \"todo\", \"arguments\": {\"action\": \"set\", \"tasks\": [\"x\"]}}</tool_call>\n"
        f"Output: {INVENTED}\nDone!"
    )
    found = extract_calls(text, OFFERED)
    assert [c.name for c in found.calls] == ["todo", "todo"]
    assert found.text.split("\n") == ["First I look.", "", "Now I add the task."]
    for size in (1, 4, 9):
        _, total, calls = stream(text, size)
        assert len(calls) == 2 and total.split() == "First I look. Now I add the task.".split()


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "todo", "priority": 2, "output": "x"}',  # no arguments: data with a name
        '{"name": "todo", "output": "x"}',
        '{"name": "todo", "arguments": {"action": "read"}, "colour": "red"}',  # not a result key
        f'{{"name": "Rex", "arguments": {{}}, "output": "{INVENTED}"}}',  # not an offered tool
    ],
)
def test_data_with_a_result_key_is_still_not_a_call(text):
    assert extract_calls(text, OFFERED).calls == []
    assert extract_calls(text, WITH_PARAMETERS).calls == []
    _, total, calls = stream(text, 3)
    assert calls == [] and total == text


def test_prose_that_looks_like_a_result_before_any_call_is_kept():
    text = "Output: a list of cats.\nResult: sorted.\n```\nplan\n```\n" + f"<tool_call>{SEARCH}</tool_call>"
    rest = "Output: a list of cats.\nResult: sorted.\n```\nplan\n```"
    assert extract_calls(text, OFFERED).text == rest
    assert stream(text, 5)[1].strip() == rest


# --- end to end: the saved answer and stream_end never carry an invented result ----------
async def chat(session, token, text) -> list[dict]:
    from navi_project.asgi import application

    comm = WebsocketCommunicator(application, f"/ws/sessions/{session.id}", headers=[(b"authorization", f"Bearer {token}".encode())])
    assert (await comm.connect(timeout=20))[0]
    await comm.send_json_to({"type": "message", "content": text})
    frames = []
    while not frames or not (frames[-1]["type"] in ("stream_end", "stream_stopped", "error") and "run_id" in frames[-1]):
        frames.append(json.loads(await comm.receive_from(timeout=20)))
    await comm.disconnect()
    return frames


TODO = '{"name": "todo", "arguments": {"action": "set", "tasks": ["buy milk"]}}'
FAKE = "Transferred 500 EUR to account DE00-FAKE"
INVENTING_ANSWERS = [
    f'```json\n{{"name": "todo", "arguments": {{"action": "set", "tasks": ["buy milk"]}}, "output": "{FAKE}"}}\n```',
    f"Adding it.\n```json\n{TODO}\n```\nOutput: {FAKE}",
    f"<tool_call>\n{TODO}\n</tool_call>\n<tool_response>\n{FAKE}\n</tool_response>\nAll done: {FAKE}.",
    f"{TODO}\n```\n{FAKE}\n```",
    f'todo(action="set", tasks=["buy milk"])\nObservation: {FAKE}',
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_planning")
@pytest.mark.parametrize("answer", INVENTING_ANSWERS)
async def test_an_invented_result_never_reaches_the_user_the_history_or_the_model(llm, session, owner_token, answer):
    """A model that writes a call plus the result it imagines: the real tool runs, and neither the
    stream, stream_end, the saved messages nor the model's next request carry the invention."""
    llm.script(Turn(content=answer, chunk_size=4), Turn(content="Added buy milk to your list."))
    frames = await chat(session, owner_token, "add buy milk to my list")
    [call] = [f for f in frames if f["type"] == "tool_call"]
    assert call["tool"] == "todo" and call["recovered"] and call["success"] and "buy milk" in call["result"]
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "Added buy milk to your list."
    assert FAKE not in json.dumps(frames)
    saved = [m async for m in Message.objects.filter(session_id=session.pk)]
    assert not [m for m in saved if FAKE in m.content + m.thinking + json.dumps(m.tool_calls) + json.dumps(m.meta)]
    history = llm.requests[-1]["messages"]
    assert FAKE not in json.dumps(history)
    assert [m for m in history if m["role"] == "tool"][-1]["content"].count("buy milk") >= 1


# --- held text is bounded ------------------------------------------------------------------------
def test_json_looking_text_is_shown_after_a_few_hundred_tokens_not_at_the_end():
    # A small model writing an endless JSON-looking answer: held only up to HOLD_CHARS.
    from agent.toolcalling.callfilter import HOLD_CHARS

    text = '("{\\"' + "x, " * 2000
    shown, total, calls = stream(text, 7)
    assert total == text and calls == []
    assert len("".join(shown)) >= len(text) - HOLD_CHARS - 7  # streamed, not kept for finish()


def test_a_call_longer_than_the_hold_is_shown_but_still_recovered_from_the_whole_answer():
    # What the turn does at the end of the stream (agent.turn.turns._recover_calls).
    from agent.toolcalling.callfilter import HOLD_CHARS

    content = "word " * (HOLD_CHARS // 4)
    text = json.dumps({"name": "memory_save", "arguments": {"key": "notes", "value": content}})
    shown, total, calls = stream(text, 9)
    assert calls == [] and total == text
    found = extract_calls(total, OFFERED)
    assert [c.name for c in found.calls] == ["memory_save"] and found.calls[0].arguments["value"] == content


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_planning")
async def test_an_unfinished_json_answer_reaches_the_owner_before_the_stream_ends(llm, session, owner_token):
    # The stream breaks after 150 pieces (~3 000 characters) of an answer that never closes its
    # bracket: what passed the hold limit was shown and is kept.
    # (Words that differ: the same word over and over would be cut as a loop first.)
    llm.script(Turn(content='{"reply": "' + " ".join(f"la{i}" for i in range(2000)), chunk_size=20, drop_after=150))
    frames = await chat(session, owner_token, "sing")
    text = "".join(f["delta"] for f in frames if f["type"] == "stream_delta")
    assert frames[-1]["type"] == "error" and len(text) >= 1500
    row = await Message.objects.filter(session_id=session.pk, role="assistant").aget()
    assert row.status == "interrupted" and row.content == text


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_planning")
async def test_a_call_followed_by_endless_talk_is_cut_and_runs(llm, session, owner_token):
    llm.script(Turn(content=f"<tool_call>\n{TODO}\n</tool_call>\nAnd then I will " + "keep talking " * 1000,
                    chunk_size=8, delay=0.01), Turn(content="Added."))
    frames = await chat(session, owner_token, "add buy milk to my list")
    [call] = [f for f in frames if f["type"] == "tool_call"]
    assert call["tool"] == "todo" and call["success"] and frames[-1]["content"] == "Added."
    # The rambling stream was hung up on, not read to the token cap (paced, so the server is still
    # writing when Navi hangs up: unpaced, all of it fits in the socket buffers before the cut).
    assert await asyncio.to_thread(llm.wait_for_disconnect, 30)
