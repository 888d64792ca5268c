"""A server's `tools/list` turned into what Navi can offer: names sanitised to [A-Za-z0-9_-],
schemas checked, collisions refused — each skipped tool with the reason the page shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from navi_project.lazy import lazy_module
from tools_app.mcp.config import offered_name

jsonschema = lazy_module("jsonschema")

DESCRIPTION_CAP = 1000


@dataclass(frozen=True)
class ToolSpec:
    """One tool of a server as the model is offered it."""

    name: str  # `<server>__<tool>`
    remote: str  # the name the server knows it by
    description: str  # as the model reads it (naming the server)
    parameters: dict[str, Any]
    summary: str = ""  # the server's own description, for the page
    read_only: bool = False  # annotations.readOnlyHint (a hint from the server)
    destructive: bool = False  # annotations.destructiveHint (the spec's default is true; only an explicit true counts)


def schema_problem(schema: Any) -> str | None:
    """Why a tool's input schema cannot be offered (None when it is a usable object schema)."""
    if not isinstance(schema, dict):
        return "its input schema is not a JSON object"
    if schema.get("type", "object") != "object":
        return f"its input schema has type {schema.get('type')!r}; tool arguments must be an object"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"its input schema is invalid: {exc.message}"
    return None


def build(server: str, tools: Iterable[Any], reserved: set[str]) -> tuple[list[ToolSpec], dict[str, str]]:
    """The offerable tools and, by the server's tool name, why the others were skipped."""
    specs: list[ToolSpec] = []
    problems: dict[str, str] = {}
    taken: set[str] = set()
    for tool in tools:
        remote = str(tool.name)
        name = offered_name(server, remote)
        schema = tool.input_schema if tool.input_schema is not None else {"type": "object", "properties": {}}
        problem = schema_problem(schema)
        execution = getattr(tool, "execution", None)
        if problem is None and getattr(execution, "task_support", None) == "required":
            problem = "it can only be called as a task (taskSupport: required), which Navi does not support yet"
        if problem is None and name in reserved:
            problem = f"its name {name!r} is already a built-in tool's; rename the server"
        if problem is None and name in taken:
            problem = f"its name becomes {name!r} like another of its tools (only A-Z a-z 0-9 _ - are kept)"
        if problem:
            problems[remote] = problem
            continue
        taken.add(name)
        schema = dict(schema)
        schema.setdefault("type", "object")
        description = (tool.description or tool.title or remote).strip()[:DESCRIPTION_CAP]
        hints = getattr(tool, "annotations", None)
        read_only = getattr(hints, "read_only_hint", None) is True
        destructive = getattr(hints, "destructive_hint", None) is True and not read_only
        specs.append(ToolSpec(name, remote, f"[MCP server {server}] {description}", schema, description,
                              read_only=read_only, destructive=destructive))
    return specs, problems
