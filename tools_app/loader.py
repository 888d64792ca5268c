"""User tools: discovered in TOOLS_DIR, described and executed in sandboxed child processes.

User code is never imported into the server: `user_tool_runner.py` imports it in a fresh
`python -I` child inside bubblewrap (tools_app.sandbox), once to read the metadata (cached by
file mtime) and once per call. A syntax error, a hanging import, a print, a crash or a timeout
only affects that file or that call.

The sandbox sees read-only system folders, the interpreter and its site-packages, the runner
and tools_app/base.py — never the project folder (database, secret key, .env), the server's
environment or the host's /proc. A call gets the calling user's workspace (writable) and the
tool's data folder `TOOLS_DIR/.data/<tool>/<user id>/`, mounted as the folder of the tool file so
`os.path.dirname(__file__)` is a writable place for data (also in $NAVI_TOOL_DATA). Network only
for tools that say `network = True`. Reading the metadata imports the file with a throwaway
workspace and data folder and no network: import-time code leaves no trace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import site
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from navi_project import fstree, hotsql

from .base import Tool, ToolResult
from .context import current_user_id
from .models import UserTool
from .sandbox import (
    Limits,
    bwrap_argv,
    bwrap_binary,
    missing_bwrap,
    python_dirs,
    run_process,
    safe_env,
    sandbox_disabled,
    sandbox_env,
    signal_of,
)
from .workspace import workspace_for

log = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("user_tool_runner.py")
# Inside the sandbox: the runner and tools_app.base (class-format tools import it) under LIB,
# the tool file in TOOL_HOME, which is its writable data folder during a call.
LIB = "/run/navi/lib"
TOOL_HOME = "/run/navi/tool"
_LIB_FILES = ("__init__.py", "base.py", "user_tool_runner.py")
_meta_cache: dict[str, tuple[tuple[int, int], dict]] = {}
_cache_lock = threading.Lock()


@dataclass
class LoadResult:
    loaded: list[Tool] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # file stem -> what went wrong
    disabled: list[str] = field(default_factory=list)


def import_timeout() -> float:
    return float(getattr(settings, "USER_TOOL_IMPORT_TIMEOUT_S", 10.0))


def tools_dir() -> Path:
    return Path(settings.TOOLS_DIR)


def tool_files(directory: Path | None = None) -> list[Path]:
    """`*.py` files directly in TOOLS_DIR; `_`-prefixed files (the template) are not tools."""
    directory = directory or tools_dir()
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.py") if p.is_file() and not p.name.startswith(("_", ".")))


class SandboxMissing(RuntimeError):
    """bwrap is not installed and CODE_EXEC_SANDBOX is not `none`."""


@dataclass
class ChildCommand:
    """How to start the runner for one file: argv, environment and folder."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    sandboxed: bool


def site_dirs() -> list[str]:
    """The server's site-packages (real paths), so user tools can import what is installed."""
    found = []
    for path in site.getsitepackages():
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in found:
            found.append(real)
    return found


def tool_data_dir(stem: str, user_id: int | None) -> Path:
    """The tool's own writable folder for this user (or `shared` outside a run)."""
    folder = tools_dir() / ".data" / stem / (str(user_id) if user_id is not None else "shared")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _plain_mount_point(folder, f"{stem}.py")
    return folder


def _plain_mount_point(folder: Path, name: str) -> None:
    """bwrap mounts the tool file over `folder/name` and creates it when missing; make sure it is
    a plain file, never a symlink that would make bwrap create a file elsewhere on the host."""
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if stat.S_ISDIR(mode):
            fstree.rmtree(name, dir_fd=dir_fd)
        elif not stat.S_ISREG(mode):
            os.unlink(name, dir_fd=dir_fd)
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd))
    finally:
        os.close(dir_fd)


def child_command(mode: str, path: Path, cls: str = "", *, network: bool = False) -> ChildCommand:
    """The runner for `path` in the sandbox. mode "meta" imports with nothing persistent
    writable and no network; mode "run" gets the user's workspace and the tool's data folder."""
    workspace = workspace_for()
    args = [mode, f"{TOOL_HOME}/{path.name}"] + ([cls] if cls else [])
    if sandbox_disabled():
        argv = [sys.executable, "-I", str(RUNNER), mode, str(path)] + ([cls] if cls else [])
        return ChildCommand(argv, safe_env(workspace, {"NAVI_WORKSPACE": str(workspace)}), workspace, False)
    bwrap = bwrap_binary()
    if bwrap is None:
        raise SandboxMissing(missing_bwrap("user tools"))
    python = os.path.realpath(sys.executable)
    sites = site_dirs()
    ro_binds = [(d, d) for d in sites if not any(d.startswith(p + "/") for p in python_dirs(python))]
    ro_binds += [(str(RUNNER.with_name(f)), f"{LIB}/tools_app/{f}") for f in _LIB_FILES]
    ro_binds.append((str(path), f"{TOOL_HOME}/{path.name}"))
    if mode == "meta":
        binds, tmpfs = [], [TOOL_HOME]
    else:
        binds, tmpfs = [(str(tool_data_dir(path.stem, current_user_id.get())), TOOL_HOME)], []
    env = {
        "NAVI_WORKSPACE": str(workspace), "NAVI_TOOL_DATA": TOOL_HOME, "NAVI_SITE_PACKAGES": ":".join(sites),
        "PYTHONIOENCODING": "utf-8", "TMPDIR": "/tmp",
    }
    prefix = bwrap_argv(
        bwrap, workspace, network=network and mode == "run", throwaway_workspace=mode == "meta",
        python=python, binds=binds, ro_binds=ro_binds, tmpfs=tmpfs, env=env,
    )
    # -B: no __pycache__ in the tool's data folder.
    argv = prefix + [python, "-I", "-B", f"{LIB}/tools_app/user_tool_runner.py", *args]
    return ChildCommand(argv, sandbox_env(workspace), workspace, True)


def _parse_answer(stdout: bytes | str, stderr: str, returncode: int | None, sandboxed: bool = False) -> dict:
    """The runner's JSON, or a description of how the child died without answering."""
    text = stdout.decode("utf-8", "replace") if isinstance(stdout, bytes) else stdout
    try:
        answer = json.loads(text)
        if isinstance(answer, dict):
            return _with_read_hint(answer)
    except ValueError:
        pass
    signum = signal_of(returncode, sandboxed)
    if signum is not None:
        try:
            how = f"was killed by {signal.Signals(signum).name}"
        except ValueError:
            how = f"was killed by signal {signum}"
    else:
        how = f"exited with code {returncode} without an answer (os._exit or sys.exit at import?)"
    tail = stderr.strip()[-2000:]
    return {"ok": False, "error": f"the tool's process {how}" + (f"\n{tail}" if tail else "")}


def _with_read_hint(answer: dict) -> dict:
    """A tool file the sandbox user may not read (a server running as root): say how to fix it."""
    error = str(answer.get("error") or "")
    if error.startswith("PermissionError") and f"'{TOOL_HOME}/" in error:
        answer["error"] = error + (
            "\n(tools run as the unprivileged SANDBOX_UID, which must be able to read the file: "
            "`chmod 644` it in the user tools folder)"
        )
    return answer


# --- metadata (sync: reloads happen outside the event loop) -------------------------------
def read_metadata(path: Path, timeout: float | None = None) -> dict:
    """Isolated import of one file: {"ok", "tools": [...]} or {"ok": False, "error"}; cached."""
    stat = path.stat()
    key = (stat.st_mtime_ns, stat.st_size)
    with _cache_lock:
        cached = _meta_cache.get(str(path))
    if cached and cached[0] == key:
        return cached[1]
    meta = _import_in_child(path, timeout or import_timeout())
    with _cache_lock:
        _meta_cache[str(path)] = (key, meta)
    return meta


def _import_in_child(path: Path, timeout: float) -> dict:
    try:
        command = child_command("meta", path)
    except SandboxMissing as exc:
        return {"ok": False, "error": str(exc)}
    proc = subprocess.Popen(
        command.argv,
        cwd=command.cwd,
        env=command.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid)
        proc.communicate()
        return {
            "ok": False,
            "error": f"importing the file took longer than {timeout:g} s and was stopped; "
            "do not run long work or loops at import time — put it inside execute()",
        }
    finally:
        _killpg(proc.pid)  # nothing the import started may outlive it
    answer = _parse_answer(out, err.decode("utf-8", "replace")[-4000:], proc.returncode, command.sandboxed)
    if not answer.get("ok") and answer.get("traceback"):
        answer["error"] = f"{answer['error']}\n{answer['traceback']}"
    return answer


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def check_file(path: Path) -> dict:
    """Fresh (uncached) isolated import, used by write_tool before a file is accepted."""
    return _import_in_child(path, import_timeout())


# --- the Tool the registry sees ------------------------------------------------------------
class UserToolProcess(Tool):
    """A user tool whose every call runs in its own child process."""

    def __init__(
        self, name: str, description: str, parameters: dict, path: Path, cls: str = "", network: bool = False
    ) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters or {"type": "object", "properties": {}}
        self.path = path
        self.cls = cls
        self.network = network

    @property
    def timeout(self) -> float:  # the child's own limit fires first and says more
        return float(settings.TOOL_TIMEOUT_S) + 5.0

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        return await run_user_tool(self.path, params, cls=self.cls, name=self.name, network=self.network)


async def run_user_tool(path: Path, params: dict, *, cls: str = "", name: str = "", network: bool = False) -> ToolResult:
    """Run one call in a sandboxed child; killed (whole group) on timeout or when the task is
    cancelled."""
    name = name or path.stem
    timeout = float(settings.TOOL_TIMEOUT_S)
    try:
        command = await asyncio.to_thread(child_command, "run", path, cls, network=network)
    except SandboxMissing as exc:
        return ToolResult(False, error=str(exc))
    outcome = await run_process(
        command.argv,
        cwd=command.cwd,
        env=command.env,
        timeout=timeout,
        output_cap=4_000_000,
        stdin_data=json.dumps(params).encode(),
        limits=Limits.for_tools(),
    )
    if outcome.timed_out:
        return ToolResult(False, error=f"user tool '{name}' ran longer than {timeout:g} s and was stopped; "
                          "make it faster or fix the loop, then rewrite it with write_tool")
    answer = _parse_answer(outcome.stdout, outcome.stderr, outcome.returncode, command.sandboxed)
    if not answer.get("ok"):
        detail = answer.get("traceback", "")
        return ToolResult(
            False,
            error=f"user tool '{name}' failed: {answer.get('error')}\n{detail}".rstrip()
            + f"\nFix {path.name} with write_tool (the previous version is kept) and check it with test_tool.",
        )
    return ToolResult(
        bool(answer.get("success", True)),
        output=answer.get("output", ""),
        error=answer.get("error"),
        metadata=answer.get("metadata") or {},
    )


# --- discovery -----------------------------------------------------------------------------
def discover() -> tuple[dict[str, dict], dict[str, Path]]:
    """Metadata of every tool file (in parallel), keyed by file stem."""
    files = tool_files()
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(files)))) as pool:
        metas = list(pool.map(read_metadata, files))
    return {p.stem: m for p, m in zip(files, metas)}, {p.stem: p for p in files}


def build_tools(stem: str, path: Path, meta: dict) -> tuple[list[Tool], str]:
    """Tools of one file, or the reason it cannot be loaded."""
    if not meta.get("ok"):
        return [], meta.get("error", "unknown error")
    tools: list[Tool] = []
    for info in meta.get("tools", []):
        if meta.get("format") == "module" and info["name"] != stem:
            return [], f"name = {info['name']!r} does not match the file name {path.name}; make them equal"
        tools.append(
            UserToolProcess(
                info["name"], info.get("description", ""), info.get("parameters"), path, info.get("cls", ""),
                network=bool(info.get("network")),
            )
        )
    return tools, ""


def load_user_tools() -> LoadResult:
    """The registry's `user_tool_loader`: discover, sync the UserTool table, keep enabled ones."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _load()
    # Called from async code (first get_agent() in a consumer): sync ORM is not allowed on the
    # event loop thread, so do the work in a worker thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_load_closing_db).result()


def _file_states(directory: Path) -> list[tuple[str, int, int]]:
    """(name, mtime, size) of the files `tool_files` lists, by one scandir: pathlib's glob and
    a stat per file took ~65 of the fingerprint's ~115 us, on every run start."""
    try:
        entries = os.scandir(directory)
    except OSError:  # no folder (yet): no user tools
        return []
    states = []
    with entries:
        for entry in entries:
            name = entry.name
            if name.endswith(".py") and not name.startswith(("_", ".")) and entry.is_file():
                info = entry.stat()
                states.append((name, info.st_mtime_ns, info.st_size))
    return states


def fingerprint() -> tuple:
    """What user tools look like now (files and UserTool rows): another worker's write_tool,
    delete or an admin enable/disable changes it, so each process knows to reload."""
    files = tuple(sorted(_file_states(tools_dir())))
    try:
        # Read on every run start: plain SQL (navi_project.hotsql), compared only with itself.
        rows = tuple(hotsql.values(f"SELECT name, enabled, updated_at FROM {hotsql.table(UserTool)} ORDER BY name"))
    except Exception:  # no table yet: files alone decide
        rows = ()
    return files, rows


def _load_closing_db() -> LoadResult:
    from django.db import connections

    try:
        return _load()
    finally:
        connections.close_all()


def sync_rows(files: dict[str, tuple[Path, list, str]]) -> dict[str, bool]:
    """One row per file (stale rows removed); returns stem -> enabled. DB trouble never blocks
    loading: without a table every tool counts as enabled."""
    try:
        rows = {row.name: row for row in UserTool.objects.all()}
        for stem, (path, tools, error) in files.items():
            description = tools[0].description if tools else ""
            row = rows.get(stem)
            if row is None:
                row = UserTool.objects.create(name=stem, path=str(path), description=description, last_error=error)
                rows[stem] = row
            elif (row.path, row.description, row.last_error) != (str(path), description, error):
                row.path, row.description, row.last_error = str(path), description, error
                row.save(update_fields=["path", "description", "last_error", "updated_at"])
        stale = [n for n in rows if n not in files]
        if stale:
            UserTool.objects.filter(name__in=stale).delete()
        return {stem: rows[stem].enabled for stem in files}
    except Exception as exc:  # no table yet (migrate not run), or DB access blocked
        log.warning("UserTool table not synced (%s); all user tools count as enabled", exc)
        return {}


def _load() -> LoadResult:
    metas, paths = discover()
    result = LoadResult()
    per_file: dict[str, tuple[list[Tool], str]] = {}
    for stem, meta in metas.items():
        per_file[stem] = build_tools(stem, paths[stem], meta)
    enabled = sync_rows({s: (paths[s], t, e) for s, (t, e) in per_file.items()})
    for stem, (tools, error) in per_file.items():
        if error:
            result.errors[stem] = error
            log.warning("user tool %s not loaded: %s", paths[stem].name, error.splitlines()[0])
        elif not enabled.get(stem, True):
            result.disabled.append(stem)
        else:
            result.loaded.extend(tools)
    return result
