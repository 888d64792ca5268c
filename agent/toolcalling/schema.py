"""The constrained tool step's schema (profile `tool_calling`): the model decides under a JSON
schema the server enforces, so a tool call cannot be malformed.

The deciding call may write only `{"name": "answer"}` or `{"name": <an offered tool>,
"arguments": <that tool's arguments>}` (one `anyOf` branch per tool, its argument schema
inside). The answer itself then streams unconstrained, as with any other call. `parse_decision`
reads what the step wrote.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass
from typing import Any

from agent.llm.messages import ToolCall

ANSWER = "answer"
STEP_TITLE = "navi_step"
ANSWER_TEXT = "text"  # the answer's own field in a step that may carry it
_DROPPED_KEYS = ("description", "title", "examples", "default", "$schema")


def step_schema(
    tools: list, *, answer: bool = True, without: tuple[str, str] | None = None, text: bool = False,
    known: tuple[str, ...] = (), request: str | None = None,
) -> dict[str, Any]:
    """`answer` (unless `answer` is off), or one of `tools` with arguments valid for its schema
    (one branch each); `without` = (tool, action): that action of that tool is not offered.
    `text`: the answer may carry the reply itself (ANSWER_TEXT), so a turn that needs no tool
    is one call. `known`: the names of the profile's tools, the only values of an argument that
    names a tool (Tool.tool_name_argument). `request` (a small model's step): the actions
    that change something elsewhere which the request never asks for are not offered
    (Tool.unasked_actions: a POST to a page it was asked to read)."""
    answering = {"name": {"const": ANSWER}, **({ANSWER_TEXT: {"type": "string"}} if text else {})}
    branches: list[dict[str, Any]] = [_object(answering, ["name"])] if answer else []
    for tool in tools:
        dropped = {without[1]} if without is not None and without[0] == tool.name else set()
        if request is not None and (unasked := getattr(tool, "unasked_actions", None)) is not None:
            dropped |= unasked(request)
        branch = _branch(tool, frozenset(dropped) if dropped else None)
        branches.append(_naming(branch, tool, known))
    return {"title": STEP_TITLE, "anyOf": branches}


def _naming(branch: dict[str, Any], tool, known: tuple[str, ...]) -> dict[str, Any]:
    """The branch with its tool-naming argument limited to `known` (a copy; the cached branch is shared)."""
    argument = getattr(tool, "tool_name_argument", "")
    spec = branch["properties"]["arguments"].get("properties", {}).get(argument) if argument and known else None
    if not isinstance(spec, dict):
        return branch
    out = copy.deepcopy(branch)
    out["properties"]["arguments"]["properties"][argument] = {"type": "string", "enum": list(known)}
    return out


_EMPTY = {"type": "object", "properties": {}}
_NO_ACTIONS: dict[str, str] = {}
_branches: dict[tuple, tuple[Any, Any, dict]] = {}
BRANCHES_KEPT = 1024


def _branch(tool, dropped: frozenset[str] | None) -> dict[str, Any]:
    """A tool's branch of the step schema (shared: never changed by its users). Built once per
    tool version and process: cleaning every schema cost ~2 ms of each constrained step."""
    params, actions = tool.parameters or _EMPTY, getattr(tool, "actions", None) or _NO_ACTIONS
    key = (tool.name, id(params), id(actions), dropped)
    hit = _branches.get(key)
    if hit is not None and hit[0] is params and hit[1] is actions:
        return hit[2]
    kept = {k: v for k, v in actions.items() if k not in (dropped or ())} or actions
    arguments = _by_action(_clean(params), kept, getattr(tool, "action_parameter", "action"))
    branch = _object({"name": {"const": tool.name}, "arguments": arguments}, ["name", "arguments"])
    if len(_branches) >= BRANCHES_KEPT:
        _branches.clear()
    _branches[key] = (params, actions, branch)  # the objects themselves kept: an id is never reused meanwhile
    return branch


def _object(properties: dict, required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _by_action(schema: dict[str, Any], actions: dict[str, str], key: str = "action") -> dict[str, Any]:
    """A tool's arguments as one branch per action (the value of its `key` parameter), each with
    only that action's parameters (Tool.actions), the action written first: a small model
    otherwise fills every field it sees (a `status` on a new list, `content` on a read) and the
    tool ignores what it meant."""
    properties = schema.get("properties") or {}
    if not actions or key not in properties:
        return schema
    branches = []
    for action, spec in actions.items():
        names = spec.split()
        props = {key: {"type": "string", "const": action}}
        props.update({n.rstrip("?"): properties[n.rstrip("?")] for n in names if n.rstrip("?") in properties})
        required = [key] + [n for n in names if not n.endswith("?") and n in properties]
        branches.append(_object(props, required))
    return {"anyOf": branches}


def _clean(schema: Any) -> Any:
    """The argument schema as a grammar needs it: no prose, and objects with declared
    properties closed (a small model otherwise invents keys)."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        for key in _DROPPED_KEYS:
            if not isinstance(node.get(key), dict) or key == "default":
                node.pop(key, None)
        props = node.get("properties")
        if isinstance(props, dict):
            for spec in props.values():
                walk(spec)
            if props:
                node.setdefault("additionalProperties", False)
        for key in ("items", "anyOf", "oneOf", "allOf"):
            if key in node:
                walk(node[key])

    walk(out)
    if isinstance(out, dict) and "type" not in out:
        out["type"] = "object"
    return out


@dataclass
class Decision:
    answer: bool = False
    call: ToolCall | None = None
    repeated: bool = False  # the model chose a call that already succeeded: it has nothing new to do
    text: str = ""  # the answer itself, written in the step (already shown and saved)


def parse_decision(text: str, offered: set[str]) -> Decision | None:
    """The step the model chose; None when the output is not a step (a server that did not
    enforce the schema after all, or a reply cut by the token cap)."""
    try:
        data = json.loads((text or "").strip())
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    name = data.get("name")
    if name == ANSWER:
        return Decision(answer=True)
    arguments = data.get("arguments")
    if name in offered and isinstance(arguments, dict):
        return Decision(call=ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=name, arguments=arguments, constrained=True))
    return None
