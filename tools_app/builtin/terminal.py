"""terminal: run a command in the workspace. With an allowlist (TERMINAL_ALLOWED_COMMANDS) the
command is parsed with shlex and run without a shell; only pipes between allowed commands are
kept (every word re-quoted). `*` runs the command through /bin/sh as typed."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from tools_app.base import Tool, ToolResult
from tools_app.sandbox import run_process, safe_env

if TYPE_CHECKING:
    from agent.loop import Agent

_OPERATORS = {";", "&", "&&", "||", "|&", ">", ">>", "<", "<<", "<<<", "&>", ">&", "(", ")", ";;"}


class CommandRefused(ValueError):
    """Not allowed under TERMINAL_ALLOWED_COMMANDS; the message says what is."""


def output_cap() -> int:
    return int(getattr(settings, "TOOL_OUTPUT_MAX_BYTES", 100_000))


def allowed_commands() -> list[str]:
    return [c.strip() for c in str(settings.TERMINAL_ALLOWED_COMMANDS).split(",") if c.strip()]


def plan_command(command: str, allowed: list[str]) -> list[str]:
    """argv to run: `sh -c` as typed when unrestricted; otherwise checked and safely quoted."""
    if "*" in allowed:
        return ["/bin/sh", "-c", command]
    if "\n" in command or "\r" in command:
        raise CommandRefused("one command per call (no newlines)")
    if "`" in command or "$(" in command or "${" in command:
        raise CommandRefused("command substitution (`...`, $(...), ${...}) is not allowed")
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise CommandRefused(f"could not parse the command ({exc}); check the quotes") from exc
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            segments.append([])
        elif token in _OPERATORS or (token and set(token) <= set(";&|<>()")):
            raise CommandRefused(f"'{token}' is not allowed; run one command (pipes between allowed commands are fine)")
        else:
            segments[-1].append(token)
    for argv in segments:
        if not argv:
            raise CommandRefused("empty command around '|'")
        if argv[0] not in allowed:
            raise CommandRefused(f"'{argv[0]}' is not an allowed command; allowed: {', '.join(allowed)}")
    if len(segments) == 1:
        return segments[0]
    return ["/bin/sh", "-c", " | ".join(shlex.join(argv) for argv in segments)]


class TerminalTool(Tool):
    name = "terminal"
    description = (
        "Run a shell command on this machine in the workspace folder and return its output. "
        "Commands are limited to the owner's allowlist; long output is truncated."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "the command line, e.g. 'ls -la'"},
            "timeout": {"type": "number", "minimum": 1, "description": "seconds (at most TOOL_TIMEOUT_S)"},
        },
        "required": ["command"],
    }

    @property
    def timeout(self) -> float:  # our own limit fires first and kills the process group
        return float(settings.TOOL_TIMEOUT_S) + 5.0

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        allowed = allowed_commands()
        try:
            argv = plan_command(params["command"], allowed)
        except CommandRefused as exc:
            return ToolResult(False, error=f"refused: {exc}")
        limit = min(float(params.get("timeout") or settings.TOOL_TIMEOUT_S), float(settings.TOOL_TIMEOUT_S))
        workspace = Path(settings.NAVI_WORKSPACE)
        workspace.mkdir(parents=True, exist_ok=True)
        try:
            outcome = await run_process(argv, cwd=workspace, env=safe_env(workspace), timeout=limit, output_cap=output_cap())
        except FileNotFoundError:
            return ToolResult(False, error=f"command not found: {argv[0]}; check the name (is it installed?)")
        except PermissionError:
            return ToolResult(False, error=f"permission denied running {argv[0]}")
        return ToolResult(outcome.ok, output=outcome.format(), error=None if outcome.ok else outcome.describe_exit())


def tools(agent: "Agent") -> list[Tool]:
    return [TerminalTool()]
