"""terminal: run a command in the user's workspace, inside the bubblewrap sandbox code_exec
uses (workspace writable, system folders read-only, no host /proc, empty environment, no
network unless TERMINAL_NETWORK).

With an allowlist (TERMINAL_ALLOWED_COMMANDS) the command is parsed with shlex and run without
a shell; only pipes between allowed commands are kept (every word re-quoted). Programs that can
run other programs (git, env, xargs, interpreters, editors...) are refused even when listed:
they would turn the allowlist into a shell. `*` runs the command through /bin/sh as typed.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from django.conf import settings

from tools_app.base import Tool, ToolResult
from tools_app.sandbox import (
    Limits,
    bwrap_argv,
    bwrap_binary,
    missing_bwrap,
    run_process,
    safe_env,
    sandbox_disabled,
    sandbox_env,
)
from tools_app.workspace import workspace_for

MISSING_BWRAP = missing_bwrap("terminal")
_OPERATORS = {";", "&", "&&", "||", "|&", ">", ">>", "<", "<<", "<<<", "&>", ">&", "(", ")", ";;"}


_AS_SHELL = "runs other programs"
# Programs that run other programs or read config that does: listing one equals allowing `*`.
SHELL_EQUIVALENT = {
    "git": "aliases, hooks, pagers and core.fsmonitor from -c options or .git/config run commands",
    "env": _AS_SHELL, "xargs": _AS_SHELL, "nice": _AS_SHELL, "nohup": _AS_SHELL, "timeout": _AS_SHELL,
    "watch": _AS_SHELL, "setsid": _AS_SHELL, "stdbuf": _AS_SHELL, "chroot": _AS_SHELL, "ionice": _AS_SHELL,
    "taskset": _AS_SHELL, "flock": _AS_SHELL, "unshare": _AS_SHELL, "nsenter": _AS_SHELL, "time": _AS_SHELL,
    "busybox": "contains a shell", "sudo": _AS_SHELL, "su": _AS_SHELL, "doas": _AS_SHELL, "runuser": _AS_SHELL,
    "pkexec": _AS_SHELL, "script": _AS_SHELL, "expect": _AS_SHELL, "parallel": _AS_SHELL, "strace": _AS_SHELL,
    "ltrace": _AS_SHELL, "gdb": _AS_SHELL, "systemd-run": _AS_SHELL, "at": _AS_SHELL, "batch": _AS_SHELL,
    "crontab": _AS_SHELL, "make": "Makefiles run commands", "awk": "system() runs commands",
    "gawk": "system() runs commands", "mawk": "system() runs commands", "nawk": "system() runs commands",
    "sed": "GNU sed's `e` command runs commands", "ed": "`!` runs commands", "vi": "`:!` runs commands",
    "vim": "`:!` runs commands", "nvim": "`:!` runs commands", "view": "`:!` runs commands",
    "ex": "`:!` runs commands", "emacs": "runs commands", "nano": "runs commands", "less": "`!` runs commands",
    "more": "`!` runs commands", "most": "runs commands", "man": "its pager runs commands",
    "tar": "--to-command and --use-compress-program run commands", "zip": "-TT runs commands",
    "rsync": "-e runs commands", "ssh": "runs commands (ProxyCommand, remote shells)",
    "scp": "runs ssh with any options", "sftp": "runs ssh with any options", "socat": "EXEC: runs commands",
    "nc": "-e runs commands", "ncat": "-e runs commands", "docker": _AS_SHELL, "podman": _AS_SHELL,
    "kubectl": _AS_SHELL, "find": "-exec, -execdir, -ok, -okdir and -delete run commands or delete",
    "sort": "--compress-program runs commands", "split": "--filter runs commands",
}
_SHELLS_AND_INTERPRETERS = re.compile(
    r"^(sh|bash|dash|zsh|ksh|mksh|csh|tcsh|fish|ash|rbash|python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*"
    r"|node|nodejs|deno|bun|php[0-9.]*|lua[0-9.]*|luajit|tclsh[0-9.]*|wish[0-9.]*|Rscript|R|julia|guile|irb)$"
)
# Arguments that make an otherwise plain program run commands (GNU long options may be
# abbreviated, hence the prefixes).
_DANGEROUS_ARGS = {
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"),
    "sort": ("--com",),
    "split": ("--fi",),
}
DEFAULT_ALLOWED = "ls,cat,head,tail,wc,grep,sort,uniq,cut,tr,du,df,free,uptime,date,stat,file,pwd,echo,whoami,uname"


class CommandRefused(ValueError):
    """Not allowed under TERMINAL_ALLOWED_COMMANDS; the message says what is."""


def shell_equivalent(argv: list[str]) -> str | None:
    """Why this command is as powerful as a shell, or None. A program with a harmless use
    (find, sort, split) is only refused with the arguments that run commands."""
    program = os.path.basename(argv[0])
    if _SHELLS_AND_INTERPRETERS.match(program):
        return "it is a shell or an interpreter"
    dangerous = _DANGEROUS_ARGS.get(program)
    if dangerous is not None:
        bad = [a for a in argv[1:] if a.startswith(dangerous)]
        return f"{SHELL_EQUIVALENT[program]}; refused here because of {bad[0]}" if bad else None
    return SHELL_EQUIVALENT.get(program)


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
        reason = shell_equivalent(argv)
        if reason:
            raise CommandRefused(
                f"'{argv[0]}' is as powerful as a shell ({reason}), so it is only available with "
                "TERMINAL_ALLOWED_COMMANDS=* (the owner's choice in .env)"
            )
    if len(segments) == 1:
        return segments[0]
    return ["/bin/sh", "-c", " | ".join(shlex.join(argv) for argv in segments)]


class TerminalTool(Tool):
    name = "terminal"
    keywords = "terminal shell command bash console wc ls grep cat lines count"
    examples = (
        "run ls in the workspace and show me the output",
        "use the shell to count the lines in a text file",
        "grep the server log for the word error",
        "what does the command df -h print?",
        "run a bash command for me",
    )
    description = (
        "Run a shell command in a sandbox in the workspace folder and return its output. "
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
        bwrap = None if sandbox_disabled() else bwrap_binary()
        if bwrap is None and not sandbox_disabled():
            return ToolResult(False, error=MISSING_BWRAP)
        try:
            argv = plan_command(params["command"], allowed_commands())
        except CommandRefused as exc:
            return ToolResult(False, error=f"refused: {exc}")
        limit = min(float(params.get("timeout") or settings.TOOL_TIMEOUT_S), float(settings.TOOL_TIMEOUT_S))
        workspace = workspace_for()
        if bwrap is None:
            env = safe_env(workspace)
        else:
            network = bool(getattr(settings, "TERMINAL_NETWORK", False))
            argv = bwrap_argv(bwrap, workspace, network=network) + argv
            env = sandbox_env(workspace)
        try:
            outcome = await run_process(
                argv, cwd=workspace, env=env, timeout=limit, output_cap=output_cap(), limits=Limits.for_tools()
            )
        except FileNotFoundError:
            return ToolResult(False, error=f"command not found: {argv[0]}; check the name (is it installed?)")
        except PermissionError:
            return ToolResult(False, error=f"permission denied running {argv[0]}")
        text = outcome.format()
        if bwrap is not None and ("bwrap: execvp" in outcome.stderr or "setpriv: failed to execute" in outcome.stderr):
            text += "\n[the program is not installed, or not in /usr/bin, /bin or /usr/local/bin]"
        return ToolResult(outcome.ok, output=text, error=None if outcome.ok else outcome.describe_exit())
