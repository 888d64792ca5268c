"""Self-extension tools: write_tool, reload_tools, list_tools, tool_manual, delete_tool, test_tool.

File and DB work runs in a worker thread (sync_to_async): isolated imports start child
processes, and the ORM must not be used on the event loop.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from tools_app import user_tools
from tools_app.base import Tool, ToolResult
from tools_app.loader import read_metadata, run_user_tool
from tools_app.registry import ToolRegistry, _schema_problem
from tools_app.repair import fold_enums

_NAME = {"type": "string", "description": "tool name (the file is user_tools/<name>.py)"}
# The tools that change Navi's own tools (write, delete, reload, test a plugin) are offered by the
# word fallback only when the request names that subject: ranked on words alone, "write it to a
# file" matches write_tool as well as filesystem, and a small model offered both has created
# plugins for file writes. A structural rule (the subject is Navi itself), not a task's wording;
# selection by meaning does without it.
TOOLS_SUBJECT = "tool tools plugin plugins"


def _first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _RegistryTool(Tool):
    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def reload(self):
        return await sync_to_async(self.registry.reload_user_tools)()


class WriteToolTool(_RegistryTool):
    name = "write_tool"
    keywords = "new tool plugin ability create make build define function"
    examples = (
        "make yourself a new tool that converts currencies",
        "give yourself the ability to fetch the weather forecast",
        "write a plugin that turns text into morse code",
        "build a tool for rolling dice",
    )
    offer_when = TOOLS_SUBJECT
    description = (
        "Create or replace a user tool (a Python plugin that gives you a new ability; not for ordinary "
        "files: use filesystem): writes user_tools/<name>.py, enables it and reloads. "
        "The code defines name, description, parameters and `async def execute(params) -> str`, or is one "
        "plain function named like the tool (its arguments become the parameters). "
        "Call tool_manual('write_tool') first. The new tool is usable from the next message."
    )
    code_argument = "code"
    code_brief = (
        "Write one Python function named {name} that does what my request asks of the new tool: typed "
        "parameters, a one-line docstring, and it returns the result."
    )
    parameters = {
        "type": "object",
        "properties": {"name": _NAME, "code": {"type": "string", "description": "the full Python source"}},
        "required": ["name", "code"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        name, code = params["name"], params["code"]
        wrapped = user_tools.wrap_function(name, code) if user_tools.check_source(name, code) else None
        code = wrapped or code
        problem = user_tools.check_name(name, self.registry.builtin_names) or user_tools.check_source(name, code)
        if not problem:
            problem = await sync_to_async(user_tools.check_in_child)(name, code)
        if problem:
            return ToolResult(False, error=f"write_tool rejected {name}.py, nothing was written: {problem}")
        await sync_to_async(self._commit)(name, code)
        result = self.registry.last_user_load
        error = getattr(result, "errors", {}).get(name)
        if error:
            return ToolResult(False, error=f"{name}.py was written but did not load: {error}")
        added = " (a plain function: write_tool added name, description, parameters and execute around it)" if wrapped else ""
        return ToolResult(
            True,
            f"Tool '{name}' written to user_tools/{name}.py{added}, enabled and loaded. It is offered from the "
            f"next message; you can try it now with test_tool(name='{name}', params={{...}}).",
        )

    def _commit(self, name: str, code: str) -> None:
        user_tools.save_tool(name, code)
        user_tools.mark_written(name, "agent")
        self.registry.reload_user_tools()


class ReloadToolsTool(_RegistryTool):
    name = "reload_tools"
    keywords = "reload tools refresh restart"
    examples = (
        "reload your tools, I just edited one",
        "refresh the plugins without restarting",
    )
    offer_when = TOOLS_SUBJECT
    description = "Reload all user tools from user_tools/ without a restart; reports what loaded and what failed."
    parameters = {"type": "object", "properties": {}}

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        result = await self.reload()
        loaded = sorted(t.name for t in getattr(result, "loaded", []))
        lines = [f"Loaded {len(loaded)} user tool(s): {', '.join(loaded) or 'none'}."]
        if getattr(result, "disabled", None):
            lines.append(f"Disabled by the owner: {', '.join(result.disabled)}.")
        for stem, error in sorted(getattr(result, "errors", {}).items()):
            lines.append(f"FAILED {stem}: {_first_line(error, 300)}")
        return ToolResult(True, "\n".join(lines))


class ListToolsTool(_RegistryTool):
    name = "list_tools"
    keywords = "tools list available have"
    examples = (
        "what tools do you have?",
        "what can you do for me?",
        "list your abilities",
    )
    description = "List the tools you really have right now (built-in and user tools), and user tools that failed to load."
    parameters = {"type": "object", "properties": {}}

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        reg = self.registry
        lines = ["Built-in tools:"]
        lines += [f"- {n}: {_first_line(reg.get(n).description)}" for n in sorted(reg.builtin_names)]
        user = reg.user_tool_names()
        lines.append("User tools:" if user else "User tools: none yet (create one with write_tool).")
        lines += [f"- {n}: {_first_line(reg.get(n).description)}" for n in user]
        result = reg.last_user_load
        if getattr(result, "disabled", None):
            lines.append("Disabled user tools (the owner can enable them in the admin): " + ", ".join(result.disabled))
        errors = getattr(result, "errors", {})
        if errors:
            lines.append("User tools that failed to load (fix with write_tool):")
            lines += [f"- {stem}: {_first_line(err, 300)}" for stem, err in sorted(errors.items())]
        lines.append("Call tool_manual(name) for a tool's parameters.")
        return ToolResult(True, "\n".join(lines))


class ToolManualTool(_RegistryTool):
    name = "tool_manual"
    keywords = "manual help documentation docs explain usage"
    examples = (
        "how do I use the filesystem tool?",
        "show me the manual for a tool",
        "what arguments does that tool take?",
    )
    description = "Read the manual of a tool (manuals/<name>.md, or one generated from its parameters)."
    parameters = {"type": "object", "properties": {"name": {"type": "string", "description": "tool name"}}, "required": ["name"]}
    tool_name_argument = "name"

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        name = params["name"]
        if name.isidentifier():
            path = Path(settings.MANUALS_DIR) / f"{name}.md"
            if path.is_file():
                return ToolResult(True, path.read_text(encoding="utf-8"))
        tool = self.registry.lookup(name)  # MCP tools of this run's user too
        if tool is None:
            known = ", ".join(sorted(t.name for t in self.registry.all()))
            return ToolResult(False, error=f"no tool named '{name}'. Known tools: {known}")
        return ToolResult(True, generate_manual(tool))


def generate_manual(tool: Tool) -> str:
    """A manual from the JSON schema, for tools without a hand-written one."""
    schema = tool.parameters or {}
    required = set(schema.get("required", []))
    lines = [f"# {tool.name} — Manual", "", "## What it does", tool.description or "(no description)", "", "## Parameters"]
    props = schema.get("properties", {})
    for key, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}  # `true` is a valid schema too (an MCP server's)
        kind = spec.get("type", "any")
        extra = f" one of {spec['enum']}" if "enum" in spec else ""
        need = "required" if key in required else "optional"
        lines.append(f"- `{key}` ({kind}, {need}){extra} — {spec.get('description', '')}".rstrip(" —"))
    if not props:
        lines.append("(none)")
    return "\n".join(lines)


class DeleteToolTool(_RegistryTool):
    name = "delete_tool"
    keywords = "delete remove tool uninstall"
    examples = (
        "remove the plugin you wrote yesterday",
        "uninstall the dice tool",
    )
    offer_when = TOOLS_SUBJECT
    description = "Delete a user tool (a copy is kept in the history so the owner can restore it)."
    parameters = {"type": "object", "properties": {"name": _NAME}, "required": ["name"]}

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        name = params["name"]
        if self.registry.is_builtin(name):
            return ToolResult(False, error=f"'{name}' is a built-in tool and cannot be deleted")
        try:
            version = await sync_to_async(user_tools.delete_tool_file)(name)
        except user_tools.ToolFileError as exc:
            return ToolResult(False, error=str(exc))
        await self.reload()
        return ToolResult(True, f"Deleted user tool '{name}'. Saved as history version {version}; the owner can restore it in the admin.")


class TestToolTool(_RegistryTool):
    __test__ = False  # not a pytest class
    name = "test_tool"
    keywords = "test try run user tool output"
    examples = (
        "try out the new tool with a sample input",
        "run my plugin once to check that it works",
    )
    offer_when = TOOLS_SUBJECT
    description = "Run a user tool once with the given params and return its output or its traceback."
    parameters = {
        "type": "object",
        "properties": {"name": _NAME, "params": {"type": "object", "description": "arguments for the tool"}},
        "required": ["name"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        name, args = params["name"], params.get("params") or {}
        try:
            path = user_tools.tool_path(name)
        except user_tools.ToolFileError as exc:
            return ToolResult(False, error=str(exc))
        if not path.is_file():
            return ToolResult(False, error=f"there is no user tool {path.name}; call list_tools to see the user tools")
        meta = await sync_to_async(read_metadata)(path)
        if not meta.get("ok"):
            return ToolResult(False, error=f"{path.name} does not load: {meta.get('error')}")
        info = meta["tools"][0]
        probe = SimpleNamespace(name=info["name"], parameters=info.get("parameters") or {})
        args, _ = fold_enums(args, probe.parameters)  # as a real call of the tool would get them
        problem = _schema_problem(probe, args)
        if problem:
            return ToolResult(False, error=f"params do not match {name}'s parameters: {problem}")
        return await run_user_tool(path, args, cls=info.get("cls", ""), name=info["name"])
