"""ToolRegistry: builtins plus hot-reloadable user tools, and the one safe way to call a tool.

`call()` is where a bad tool call turns into a readable tool result instead of a crash:
unknown tool, arguments that are not JSON or fail the schema, a tool that raises, a timeout.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from asgiref.sync import sync_to_async
from django.conf import settings

from navi_project import jsonsafe
from navi_project.lazy import lazy_module
from navi_project.redact import server_paths

from .base import Tool, ToolResult
from .repair import ArgumentsUnreadable, coerce, example, explain, fold_enums, parse_lenient
from .workspace import workspace_for

jsonschema = lazy_module("jsonschema")  # ~65 ms of boot; first needed at the first tool call

log = logging.getLogger(__name__)


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._builtin_names: set[str] = set()
        # Set by the user-tool loader: () -> LoadResult-like with `.loaded` and `.errors`.
        self.user_tool_loader: Callable[[], Any] | None = None
        # () -> a value that changes when user tools change on disk or in the table (sync).
        self.user_tool_fingerprint: Callable[[], Any] | None = None
        self._fingerprint: Any = None
        # What the last reload returned (failed files and their errors, for list_tools).
        self.last_user_load: Any = None
        # Sources of tools that depend on the run's user (MCP servers: tools_app.mcp.tools.MCPProvider):
        # `load(user_id)` (sync ORM), `async prepare(user_id)`, `tools(user_id, profile_id)`, `lookup(name)`.
        self.providers: list[Any] = []

    # --- registration -----------------------------------------------------------------
    def register(self, tool: Tool, *, builtin: bool = True) -> None:
        self._tools[tool.name] = tool
        if builtin:
            self._builtin_names.add(tool.name)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def lookup(self, name: str) -> Tool | None:
        """A registered tool, else a provider's tool of that name for the run's user."""
        tool = self._tools.get(name)
        for provider in self.providers if tool is None else ():
            tool = provider.lookup(name)
            if tool is not None:
                break
        return tool

    def load_provided(self, user_id: int | None) -> None:
        """Which provided tools the user may have (sync; the start of a turn's thread hop)."""
        for provider in self.providers:
            provider.load(user_id)

    def provided_pending(self, user_id: int | None) -> bool:
        """Whether `prepare_provided` has anything to do (most turns: no; then a turn does not
        pay for awaiting it). A provider that cannot tell is asked to prepare."""
        return any(getattr(p, "pending", lambda _u: True)(user_id) for p in self.providers)

    async def prepare_provided(self, user_id: int | None) -> None:
        """Make the user's provided tools ready (MCP: connect on first use, bounded)."""
        for provider in self.providers:
            await provider.prepare(user_id)

    def is_builtin(self, name: str) -> bool:
        return name in self._builtin_names

    @property
    def builtin_names(self) -> set[str]:
        return set(self._builtin_names)

    def user_tool_names(self) -> list[str]:
        return sorted(n for n in self._tools if n not in self._builtin_names)

    def all(self) -> list[Tool]:
        return [self._tools[n] for n in sorted(self._tools)]

    async def refresh_user_tools(self) -> None:
        """Reload when user tools changed since the last load — possibly in another worker
        process (write_tool there, or an admin toggle): every run starts with the current set."""
        if self.user_tool_fingerprint is not None:
            # sync_to_async: the ORM work runs where Django's async ORM calls run.
            await sync_to_async(self.refresh_user_tools_now)()

    def refresh_user_tools_now(self) -> None:
        """`refresh_user_tools` in the calling thread (sync)."""
        if self.user_tool_fingerprint is not None and self.user_tool_fingerprint() != self._fingerprint:
            self.reload_user_tools()

    def reload_user_tools(self) -> Any:
        """Drop every non-builtin tool and load user tools again (hot reload)."""
        # Load first, then swap: a slow reload never leaves a window without user tools.
        result = self.user_tool_loader() if self.user_tool_loader is not None else None
        if self.user_tool_fingerprint is not None:
            self._fingerprint = _call_off_loop(self.user_tool_fingerprint)
        for name in self.user_tool_names():
            self._tools.pop(name, None)
        if result is None:
            return None
        self.last_user_load = result
        for tool in getattr(result, "loaded", []):
            if tool.name in self._builtin_names:
                log.warning("user tool %r ignored: a builtin has that name", tool.name)
                errors = getattr(result, "errors", None)
                if isinstance(errors, dict):
                    errors[tool.name] = "a built-in tool has this name; rename the tool and its file"
                continue
            self._tools[tool.name] = tool
        return result

    # --- what the model is offered -------------------------------------------------------
    def tools_for(self, enabled: Iterable[str], user_id: int | None = None, profile_id: str | None = None) -> list[Tool]:
        """A profile's tools: its enabled list plus every loaded (enabled) user tool, plus the
        provided tools of `user_id` for `profile_id` (never one shadowing a registered name)."""
        names = [n for n in enabled if n in self._tools]
        names += [n for n in self.user_tool_names() if n not in names]
        tools = [self._tools[n] for n in names]
        for provider in self.providers:
            tools += [t for t in provider.tools(user_id, profile_id) if t.name not in self._tools]
        return tools

    # --- calling -------------------------------------------------------------------------
    def prepare(self, name: str, arguments: Any, *, repair: bool = False, offered: Iterable[str] | None = None) -> PreparedCall:
        """Read, repair (with `repair`), fold enums and validate a call's arguments, once: the
        policy, the permission check and the tool all get `params` of the result. A bad call
        (unknown tool, unreadable arguments, a value no enum allows) carries its `problem`
        result instead and must never run. `offered`: names listed when the tool is unknown."""
        tool = self.lookup(name)
        if tool is None:
            names = offered if offered is not None else self._tools
            return PreparedCall(name, None, jsonsafe.finite(_readable(arguments)), _unknown(name, names))
        schema = tool.parameters or {}
        repaired = False
        if repair:
            try:
                params, repaired = parse_lenient(arguments)
            except ArgumentsUnreadable as exc:
                return PreparedCall(name, tool, arguments, _bad_arguments(f"arguments for '{name}' {exc}. {_example_line(tool)}"))
            params, coerced = coerce(params, schema)
            repaired = repaired or coerced
        else:
            params, problem = _parse_arguments(arguments)
            if problem:
                return PreparedCall(name, tool, arguments, _bad_arguments(f"arguments for '{name}' {problem}"))
        if (where := jsonsafe.non_finite(params)) is not None:  # 1e309, NaN: no tool gets them
            return PreparedCall(name, tool, jsonsafe.finite(params), _bad_arguments(
                f"arguments for '{name}': {jsonsafe.describe(where)}. {_example_line(tool)}"))
        params, folded = fold_enums(params, schema)
        errors = _schema_errors(tool, params)
        if errors:
            if repair:
                message = explain(name, schema, errors)
            else:
                problem = "; ".join(_describe(e) for e in errors[:5])
                message = f"invalid arguments for '{name}': {problem}. Call tool_manual('{name}') for the parameters."
            return PreparedCall(name, tool, params, _bad_arguments(message))
        return PreparedCall(name, tool, params, repaired=repaired or (repair and folded))

    async def run(self, prepared: PreparedCall, allowed: Iterable[str] | None = None) -> ToolResult:
        """Run a prepared call safely. Never raises (except CancelledError): errors become results,
        told without the server's paths or process ids (navi_project.redact)."""
        result = await self._run(prepared, allowed)
        if result.error:
            result.error = server_paths(result.error, own_root=str(workspace_for()))
        return result

    async def _run(self, prepared: PreparedCall, allowed: Iterable[str] | None) -> ToolResult:
        name, tool = prepared.name, prepared.tool
        if prepared.problem is not None or tool is None:
            return prepared.problem or ToolResult(False, error=f"unknown tool '{name}'")
        if allowed is not None and name not in set(allowed):
            return _unknown(name, allowed)  # not offered to this run: as if it did not exist
        timeout = tool.timeout if tool.timeout is not None else settings.TOOL_TIMEOUT_S
        try:
            result = await asyncio.wait_for(tool.execute(prepared.params), timeout=timeout)
        except asyncio.TimeoutError:
            return ToolResult(False, error=f"tool '{name}' timed out after {timeout:g} s and was stopped")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("tool %s raised", name, exc_info=True)
            return ToolResult(False, error=f"tool '{name}' failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, ToolResult):
            result = ToolResult(True, output=str(result))
        if prepared.repaired:
            result.metadata["repaired"] = True
        return result

    async def call(
        self, name: str, arguments: Any, allowed: Iterable[str] | None = None, *, repair: bool = False
    ) -> ToolResult:
        """Prepare and run a call (`prepare`, then `run`). Never raises (except CancelledError).

        With `repair`, almost-valid arguments are fixed first (tools_app.repair) and the result's
        metadata says so (`repaired`); `problem` names what went wrong for the reliability stats."""
        if allowed is not None and name not in set(allowed):
            return _unknown(name, allowed)
        return await self.run(self.prepare(name, arguments, repair=repair, offered=allowed), allowed)


@dataclass
class PreparedCall:
    """A call read and validated once (`ToolRegistry.prepare`): what every later step judges."""

    name: str
    tool: Tool | None
    params: Any  # the validated dict; for a bad call, the best reading of what was sent
    problem: ToolResult | None = None  # set for a bad call: its result, and it never runs
    repaired: bool = False

    @property
    def ok(self) -> bool:
        return self.problem is None


def _unknown(name: str, names: Iterable[str]) -> ToolResult:
    names = sorted(names)
    close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ToolResult(
        False, error=f"unknown tool '{name}'.{hint} Available tools: {', '.join(names)}",
        metadata={"problem": "unknown_tool"},
    )


def _readable(arguments: Any) -> Any:
    """The arguments as a dict when they can be read at all (for the record and the frame)."""
    try:
        return parse_lenient(arguments)[0]
    except ArgumentsUnreadable:
        return arguments


def _call_off_loop(fn: Callable[[], Any]) -> Any:
    """Call a sync (ORM-using) function, in a worker thread when on the event loop's thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    from concurrent.futures import ThreadPoolExecutor

    def closing() -> Any:
        from django.db import connections

        try:
            return fn()
        finally:
            connections.close_all()  # this thread ends now; so does its connection

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(closing).result()


def _parse_arguments(arguments: Any) -> tuple[dict, str | None]:
    if arguments is None or arguments == "":
        return {}, None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            return {}, f"are not valid JSON ({exc}); send a JSON object"
    if not isinstance(arguments, dict):
        return {}, f"must be a JSON object, got {type(arguments).__name__}"
    return arguments, None


def _bad_arguments(message: str) -> ToolResult:
    return ToolResult(False, error=message, metadata={"problem": "bad_arguments"})


def _example_line(tool: Tool) -> str:
    return f"A valid call looks like: {tool.name}({json.dumps(example(tool.parameters or {}), ensure_ascii=False)})"


def _schema_errors(tool: Tool, params: dict) -> list:
    schema = tool.parameters or {"type": "object"}
    try:
        validator = jsonschema.Draft202012Validator(schema)
        return sorted(validator.iter_errors(params), key=lambda e: list(e.path))
    except jsonschema.SchemaError as exc:  # a user tool with a broken schema: don't block it
        log.warning("tool %s has an invalid JSON schema: %s", tool.name, exc.message)
        return []


def _describe(error) -> str:
    return (f"{'/'.join(map(str, error.path))}: " if error.path else "") + error.message


def _schema_problem(tool: Tool, params: dict) -> str | None:
    """One line listing what is wrong with `params` (None when they fit the schema)."""
    errors = _schema_errors(tool, params)
    return "; ".join(_describe(e) for e in errors[:5]) or None
