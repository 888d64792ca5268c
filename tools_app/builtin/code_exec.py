"""code_exec: run Python in a bubblewrap sandbox.

Read-only system folders, the workspace as the only writable place, a private /tmp, no network
unless CODE_EXEC_NETWORK, and resource limits (address space, processes, file size) set inside
the sandbox before the code runs. The kernel ignores RLIMIT_NPROC for real root, so when the
server runs as root the process limit comes from a `pids` cgroup when one is writable.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from tools_app.base import Tool, ToolResult
from tools_app.sandbox import (
    PidsCgroup,
    bwrap_argv,
    bwrap_binary,
    missing_bwrap,
    run_process,
    safe_env,
    sandbox_disabled,
    sandbox_env,
)
from tools_app.workspace import workspace_for

log = logging.getLogger(__name__)

CODE_PATH = "/run/navi/main.py"
# Sets the limits, then runs the user's file as __main__. Runs inside the sandbox. procs 0: the
# pids cgroup counts them instead.
BOOT = (
    "import resource,runpy,sys\n"
    "mem,procs,fsize=(int(x) for x in sys.argv[1:4])\n"
    "resource.setrlimit(resource.RLIMIT_AS,(mem,mem))\n"
    "procs and resource.setrlimit(resource.RLIMIT_NPROC,(procs,procs))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE,(fsize,fsize))\n"
    "resource.setrlimit(resource.RLIMIT_CORE,(0,0))\n"
    "path=sys.argv[4]; sys.argv=[path]\n"
    "runpy.run_path(path,run_name='__main__')\n"
)
MISSING_BWRAP = missing_bwrap("code_exec")


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def limits() -> tuple[int, int, int]:
    """(address space bytes, processes, file size bytes) from settings."""
    mb = 1024 * 1024
    return (
        int(_setting("CODE_EXEC_MEMORY_MB", 512) * mb),
        int(_setting("CODE_EXEC_MAX_PROCS", 64)),
        int(_setting("CODE_EXEC_MAX_FILE_MB", 64) * mb),
    )


def python_binary() -> str:
    configured = getattr(settings, "CODE_EXEC_PYTHON", "")
    if configured:
        return configured
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else os.path.realpath(sys.executable)


def code_exec_argv(bwrap: str, workspace: Path, code_file: Path, python: str, network: bool) -> list[str]:
    """The sandbox of tools_app.sandbox plus the program file, read-only at CODE_PATH."""
    return bwrap_argv(
        bwrap, workspace, network=network, python=python,
        ro_binds=[(str(code_file), CODE_PATH)], env={"TMPDIR": "/tmp", "PYTHONIOENCODING": "utf-8"},
    )


def show_last_value(code: str) -> str:
    """A program ending in a bare expression (`sum(range(1, 12346))`) prints its value, as the
    Python prompt would (a small model often writes it so); everything before it is unchanged,
    so line numbers in a traceback still match."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # the run reports it
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.If) and "__name__" in (ast.get_source_segment(code, last.test) or "") and last.body:
        last = last.body[-1]  # `if __name__ == "__main__": main_work()`
    if not isinstance(last, ast.Expr) or _is_print(last.value) or last.end_lineno is None:
        return code
    lines = code.splitlines(keepends=True)
    before = lines[last.lineno - 1][: last.col_offset]
    indent = before if not before.strip() else ""
    head = "".join(lines[: last.lineno - 1]) + before
    segment = ast.get_source_segment(code, last) or ""
    tail = "".join(lines[last.end_lineno:])
    return f"{head}__value = ({segment})\n{indent}if __value is not None: print(repr(__value))\n{tail}"


def _is_print(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"


class CodeExecTool(Tool):
    name = "code_exec"
    keywords = ("python code program script run execute compute calculate count sum total average math csv data area "
                "divide multiply split share percent convert")
    examples = (
        "what is 2 to the power of 100?",
        "calculate the average of these numbers: 4, 8, 15, 16",
        "run this python snippet and tell me the output",
        "how many days are there between 1 March and 25 December?",
        "convert 37 degrees Celsius to Fahrenheit with a small program",
        "compute the compound interest on 1000 at 5% for 10 years",
        "how many hours are there in a leap year?",
    )
    description = (
        "Run a Python 3 program in a sandbox and return its output (stdout, stderr, exit code). "
        "Only the workspace (the current folder) is writable; no network unless the owner allows it; "
        "memory, processes, file size and run time are limited. print() what you want to see."
    )
    code_argument = "code"
    code_runs_as_is = True
    code_brief = (
        "Write a short Python 3 program that does my request. It runs in the folder that holds my files "
        "(open them by name) and must print() the answer."
    )
    parameters = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "the complete Python program"},
            "timeout": {"type": "number", "minimum": 1, "description": "seconds (at most TOOL_TIMEOUT_S)"},
        },
        "required": ["code"],
    }

    @property
    def timeout(self) -> float:  # our own limit fires first and kills the sandbox
        return float(settings.TOOL_TIMEOUT_S) + 5.0

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        bwrap = None if sandbox_disabled() else bwrap_binary()
        if bwrap is None and not sandbox_disabled():
            return ToolResult(False, error=MISSING_BWRAP)
        workspace = workspace_for()
        limit = min(float(params.get("timeout") or settings.TOOL_TIMEOUT_S), float(settings.TOOL_TIMEOUT_S))
        with tempfile.TemporaryDirectory(prefix="navi-code-") as tmp:
            code_file = Path(tmp) / "main.py"
            code_file.write_text(show_last_value(params["code"]), encoding="utf-8")
            code_file.chmod(0o644)  # as root the program runs as the sandbox user, who must read it
            return await self._run(bwrap, workspace, code_file, limit)

    async def _run(self, bwrap: str | None, workspace: Path, code_file: Path, limit: float) -> ToolResult:
        memory, procs, fsize = limits()
        python = python_binary()
        cgroup = None
        if bwrap is None:
            argv = [python, "-I", "-c", BOOT, str(memory), str(procs), str(fsize), str(code_file)]
        else:
            prefix = code_exec_argv(bwrap, workspace, code_file, python, bool(getattr(settings, "CODE_EXEC_NETWORK", False)))
            cgroup = PidsCgroup.for_root(procs)
            # As root the program runs as SANDBOX_UID, whose RLIMIT_NPROC would count every
            # sandbox of every user at once: with a cgroup, that alone caps this program.
            nproc = 0 if cgroup is not None else procs
            argv = prefix + [python, "-I", "-c", BOOT, str(memory), str(nproc), str(fsize), CODE_PATH]
            if cgroup is not None:
                argv = cgroup.wrap(argv)
        env = safe_env(workspace) if bwrap is None else sandbox_env(workspace)
        try:
            outcome = await run_process(
                argv, cwd=workspace, env=env, timeout=limit, output_cap=int(_setting("TOOL_OUTPUT_MAX_BYTES", 100_000))
            )
        finally:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.remove)
        text = outcome.format()
        if outcome.returncode == 1 and "MemoryError" in outcome.stderr:
            text += f"\n[the program ran out of memory: the limit is {memory // (1024 * 1024)} MB]"
        return ToolResult(outcome.ok, output=text, error=None if outcome.ok else f"the program did not finish cleanly {outcome.describe_exit()}")
