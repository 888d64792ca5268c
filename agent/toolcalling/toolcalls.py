"""Tool calls a model wrote as text, recovered and run as real calls.

Small models often print the call instead of emitting a native one: Hermes/Qwen
`<tool_call>{…}</tool_call>`, Llama-3 `{"name": …, "parameters"/"arguments": …}` (maybe after
`<|python_tag|>`), Mistral `[TOOL_CALLS][…]`, a fenced ```json block, or a Python-style
`tool_name(arg=…)` line. `extract_calls` finds them: for tools that were offered (prose that
merely mentions a tool is not a call), and inside an explicit call marker (`<tool_call>`,
`[TOOL_CALLS]`, `<|python_tag|>`) for any name, so a misspelt or invented tool gets the usual
"unknown tool, did you mean …" result instead of being shown as text. `CallTextFilter`
(agent.toolcalling.callfilter) sits on the stream: it holds back text that may be the start of a
call instead of showing it and retracting it later.

`offered` is the set of tool names, or a mapping of each name to its parameter names: then a
flat `{"name": "switch_profile", "profile_id": "x"}` (the arguments beside the name, as small
models write them) is a call too when every other key is a parameter of that tool. A JSON
call that lacks only its closing brackets (the model stopped one `}` short) is closed.

A small model often goes on to write the call's result itself (an `"output"` key beside the
arguments, `Output: …`, a fenced block, `<tool_response>…`). No tool has run yet: that invented
result is dropped, and so is everything written after the last call; the real result comes next.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from agent.llm.messages import ToolCall
from tools_app.repair import _lenient

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```([\w-]*)[ \t]*\n(.*?)\n?```", re.S | re.I)
_PY_LINE = re.compile(r"^[ \t]*([A-Za-z_]\w*)\((.*)\)[ \t]*;?[ \t]*$", re.M)
FENCE_LANGS = {"", "json", "tool_call", "tool_code", "tool"}
PREFIX_MARKERS = ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "```", "[{")
_TOOL_NAME = re.compile(r"[A-Za-z_][\w.-]{0,63}")
# Keys a model invents beside a call's arguments for the result it imagines: dropped, never shown.
_RESULT_KEYS = frozenset({
    "output", "outputs", "result", "results", "response", "return", "returns", "return_value",
    "observation", "stdout", "tool_output", "tool_result", "tool_response",
})
_RESULT_WORDS = r"(?:output|outputs|result|results|response|returns?|returned|return value|observation|stdout)"
# A result written as text right after a call: a result tag, a labelled line, a fenced block.
_INVENTED = (
    re.compile(r"\s*<(tool_response|tool_result|tool_output|function_results?|observation|output|result)>.*?(?:</\1>|\Z)", re.S | re.I),
    re.compile(
        rf"\s*(?:[*_#>]+\s*)?(?:(?:tool|function|the)\s+)?{_RESULT_WORDS}[*_]*\s*(?::|=>?|->)[^\n]*"
        r"(?:\n(?![ \t]*(?:\n|```))[^\n]*)*",  # its paragraph, up to a blank line or a fence
        re.I,
    ),
    re.compile(r"\s*```[^\n]*\n.*?(?:```|\Z)", re.S),
)


@dataclass
class Recovered:
    calls: list[ToolCall] = field(default_factory=list)
    text: str = ""  # what remains to show


def extract_calls(text: str, offered: set[str] | frozenset[str], after_call: bool = False) -> Recovered:
    """The calls written in `text` (offered tools only) and the prose before them; `after_call`:
    `text` follows a call already recovered, so a result it starts with is invented too."""
    if not text or not offered:
        return Recovered(text=text)
    for finder in (_tagged, _mistral, _python_tag, _fenced, _leading_json, _python_lines):
        calls, spans = finder(text, offered)
        if calls:
            return Recovered(calls, _tidy(_prose(text, spans, after_call)))
    return Recovered(text=text)


def _prose(text: str, spans: list[tuple[int, int]], after_call: bool) -> str:
    """What precedes each call, less a result invented for the call before it. What follows the
    last call is dropped: it was written before any tool ran (a result, or an answer built on one)."""
    parts, at = [], 0
    for start, end in sorted(spans):
        gap = text[at:start]
        parts.append(without_invented_result(gap) if after_call else gap)
        at, after_call = end, True
    return "".join(parts)


def without_invented_result(text: str) -> str:
    """`text` (written right after a call) without the result the model made up at its start."""
    while True:
        match = next((m for m in (p.match(text) for p in _INVENTED) if m), None)
        if not match or not match.group(0).strip():
            return text
        text = text[match.end():]


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _call(obj: object, offered, any_name: bool = False) -> ToolCall | None:
    """A ToolCall from {"name", "arguments"|"parameters"} (or OpenAI's {"function": {...}});
    `any_name`: inside an explicit call marker, a name that was not offered is still a call."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not (name in offered or (any_name and _TOOL_NAME.fullmatch(name))):
        return None
    if _is_schema_echo(obj):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        parsed = _lenient(args) if args.strip() else {}
        args = parsed if isinstance(parsed, dict) else args
    if not isinstance(args, (dict, str)):
        return None
    extra = set(obj) - {"name", "arguments", "parameters", "id", "type"}
    if "arguments" in obj or "parameters" in obj:
        extra -= _RESULT_KEYS  # {"name", "arguments", "output": "HELLO"}: the output is invented
    if extra and not ("arguments" not in obj and "parameters" not in obj and extra <= _parameters(offered, name)):
        return None  # {"name": "todo", "priority": 2} is data that happens to have a name, not a call
    if extra:  # the flat form: the arguments beside the name
        args = {key: obj[key] for key in obj if key in extra}
    return ToolCall(id=f"recovered_{uuid.uuid4().hex[:12]}", name=name, arguments=args, recovered=True)


def _parameters(offered, name: str) -> frozenset[str]:
    if isinstance(offered, Mapping):
        return frozenset(offered.get(name) or ())
    return frozenset()


def _is_schema_echo(obj: dict) -> bool:
    """The tool's own schema repeated back ({"type": "function", "name": …} or parameters that
    are a JSON schema) is not a call: running it would call a tool nobody asked for."""
    if "type" in obj and "arguments" not in obj and "parameters" not in obj:
        return True
    params = obj.get("parameters")
    return isinstance(params, dict) and params.get("type") == "object" and isinstance(params.get("properties"), dict)


def _calls_from(value: object, offered, any_name: bool = False) -> list[ToolCall]:
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, offered, any_name) for item in items]
    return calls if calls and all(calls) else []


def _parse(text: str) -> object:
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        value = _lenient(text)
    if value is None and text.startswith(("{", "[")) and (closed := _closed(text)) != text:
        value = _lenient(closed)
    return value


def _closed(text: str) -> str:
    """`text` with the brackets it left open closed, unless it stops inside a string (a cut
    answer: its last value is incomplete, and running it would act on half an argument)."""
    brackets, in_string = _structure(text)
    stack = []
    for char in brackets:
        if char in "{[":
            stack.append("}" if char == "{" else "]")
        elif not stack or stack.pop() != char:
            return text
    if in_string or not stack:
        return text
    return text.rstrip().rstrip(",") + "".join(reversed(stack))


def _tagged(text: str, offered):
    calls, spans = [], []
    for match in _TAGGED.finditer(text):
        found = _calls_from(_parse(match.group(1)), offered, any_name=True)
        if not found and (end := _value_end(match.group(1))):  # {call} then an invented result
            found = _calls_from(_parse(match.group(1)[:end]), offered, any_name=True)
        if not found:
            return [], []
        calls += found
        spans.append(match.span())
    return calls, spans


def _mistral(text: str, offered):
    index = text.find("[TOOL_CALLS]")
    if index < 0:
        return [], []
    body = text[index + len("[TOOL_CALLS]"):].strip()
    named = re.match(r"([A-Za-z_]\w*)\s*\[ARGS\]\s*(.*)$", body, re.S)  # newer: name[ARGS]{...}
    if named:
        value = {"name": named.group(1), "arguments": _parse(named.group(2))}
    else:
        value = _parse(body)
    calls = _calls_from(value, offered, any_name=True)
    return (calls, [(index, len(text))]) if calls else ([], [])


def _python_tag(text: str, offered):
    index = text.find("<|python_tag|>")
    if index < 0:
        return [], []
    body = text[index + len("<|python_tag|>"):].replace("<|eom_id|>", "").replace("<|eot_id|>", "")
    calls = []
    for part in [p for p in re.split(r";\s*(?=\{)", body.strip()) if p.strip()]:
        found = _calls_from(_parse(part), offered, any_name=True)
        if not found:
            return [], []
        calls += found
    return (calls, [(index, len(text))]) if calls else ([], [])


def _fenced(text: str, offered):
    calls, spans = [], []
    for match in _FENCED.finditer(text):
        if (match.group(1) or "").lower() not in FENCE_LANGS:
            continue
        found = _calls_from(_parse(match.group(2)), offered) or _call_then_result(match.group(2), offered)
        if not found and (match.group(1) or "").lower() != "json":  # ```tool_code\nname(arg=...)
            found, lines = _python_lines(match.group(2), offered, fences=False)
            found = found if not _cut(match.group(2), lines).strip() else []
        if found:
            calls += found
            spans.append(match.span())
    return calls, spans


def _leading_json(text: str, offered):
    """A JSON call the answer starts with (maybe followed by a result it invented)."""
    start = len(text) - len(text.lstrip())
    if not text[start:].startswith(("{", "[")):
        return [], []
    calls = _calls_from(_parse(text[start:]), offered)
    if calls:
        return calls, [(start, len(text))]
    end = _value_end(text[start:])
    calls = _calls_from(_parse(text[start:start + end]), offered) if end else []
    return (calls, [(start, start + end)]) if calls else ([], [])


def _call_then_result(body: str, offered) -> list[ToolCall]:
    """A block holding a call and then only an invented result (`Output: HELLO`): the call."""
    end = _value_end(body.lstrip())
    if not end:
        return []
    body = body.lstrip()
    if without_invented_result(body[end:]).strip():
        return []
    return _calls_from(_parse(body[:end]), offered)


def _python_lines(text: str, offered, fences: bool = True):
    calls, spans = [], []
    code = [m.span() for m in _FENCED.finditer(text)] if fences else []
    for match in _PY_LINE.finditer(text):
        if match.group(1) not in offered or any(a <= match.start() < b for a, b in code):
            continue
        args = _python_arguments(match.group(2))
        if args is None:
            continue
        calls.append(ToolCall(id=f"recovered_{uuid.uuid4().hex[:12]}", name=match.group(1), arguments=args, recovered=True))
        spans.append(match.span())
    return calls, spans


def _python_arguments(source: str) -> dict | None:
    """Keyword arguments of literal values only: `web_search(query="cats", max_results=3)`."""
    try:
        node = ast.parse(f"f({source})", mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or node.args:
        return None
    args = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return None
        try:
            args[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, SyntaxError):
            return None
    return args


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + text[end:]
    return text


# --- the structure of a JSON text -------------------------------------------------------------
def balanced(text: str) -> bool:
    """Whether the first bracket of `text` has closed."""
    depth = 0
    for char in _structure(text)[0]:
        depth += 1 if char in "{[" else -1
        if depth == 0:
            return True
    return False


def _brackets(text: str) -> Iterator[tuple[int, str]]:
    """(index, bracket) of each bracket of `text` outside strings (JSON or Python quotes); the
    last item is (-1, quote) when the text ends inside a string."""
    quote, escaped = "", False
    for index, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "{[]}":
            yield index, char
    if quote:
        yield -1, quote


def _value_end(text: str) -> int | None:
    """Where the bracketed value `text` starts with ends (after its closing bracket), if it does."""
    if not text.startswith(("{", "[")):
        return None
    depth = 0
    for index, char in _brackets(text):
        if index < 0:
            return None
        depth += 1 if char in "{[" else -1
        if depth == 0:
            return index + 1
    return None


def _structure(text: str) -> tuple[list[str], bool]:
    """The brackets of `text` outside strings (JSON or Python quotes), in order, and whether it
    ends inside a string."""
    found = list(_brackets(text))
    inside = bool(found) and found[-1][0] < 0
    return [char for index, char in found if index >= 0], inside
