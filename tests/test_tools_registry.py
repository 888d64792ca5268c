"""User-tool loading and isolation: every broken file or call only hurts itself."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import pytest

from agent.registry import get_agent
from tools_app import loader
from tools_app.models import UserTool

GOOD = '''
name = "{name}"
description = "Echo the text back. Use it to test things."
parameters = {{"type": "object", "properties": {{"text": {{"type": "string"}}}}, "required": ["text"]}}

async def execute(params: dict) -> str:
    return "echo: " + params["text"]
'''

CLASS_FORMAT = '''
from tools_app.base import Tool, ToolResult

class Shout(Tool):
    name = "shout"
    description = "Upper-case the text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    async def execute(self, params):
        return ToolResult(True, output=params["text"].upper())
'''


def write(tools_dir: Path, stem: str, code: str) -> Path:
    path = tools_dir / f"{stem}.py"
    path.write_text(textwrap.dedent(code))
    return path


def good(tools_dir: Path, stem: str = "echo") -> Path:
    return write(tools_dir, stem, GOOD.format(name=stem))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def fast_limits(settings):
    settings.TOOL_TIMEOUT_S = 2
    settings.USER_TOOL_IMPORT_TIMEOUT_S = 2


@pytest.mark.django_db
def test_it_loads_module_and_class_formats_and_ignores_underscore_files(settings):
    good(settings.TOOLS_DIR)
    write(settings.TOOLS_DIR, "shout", CLASS_FORMAT)
    write(settings.TOOLS_DIR, "_template", GOOD.format(name="_template"))
    registry = get_agent().tools
    assert registry.user_tool_names() == ["echo", "shout"]
    result = asyncio.run(registry.call("echo", {"text": "hi"}))
    assert (result.success, result.output) == (True, "echo: hi")
    result = asyncio.run(registry.call("shout", '{"text": "hi"}'))
    assert (result.success, result.output) == (True, "HI")


@pytest.mark.django_db
def test_it_never_imports_user_code_into_the_server(settings):
    marker = settings.NAVI_WORKSPACE / "imported_by.txt"
    write(settings.TOOLS_DIR, "spy", GOOD.format(name="spy") + f"\nimport os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n")
    assert "spy" in get_agent().tools.user_tool_names()
    # The import ran in a sandboxed child whose workspace is a throwaway tmpfs.
    assert not marker.exists()
    assert not [m for m in sys.modules if m.startswith("navi_user_tool_")]


@pytest.mark.django_db
def test_one_broken_file_never_stops_the_others(settings, fast_limits):
    good(settings.TOOLS_DIR)
    write(settings.TOOLS_DIR, "syntax", "name = 'syntax'\ndef oops(:\n")
    write(settings.TOOLS_DIR, "hangs", GOOD.format(name="hangs") + "\nwhile True:\n    pass\n")
    write(settings.TOOLS_DIR, "exits", "import os\nos._exit(3)\n")
    write(settings.TOOLS_DIR, "segfault", "import ctypes\nctypes.string_at(0)\n")
    write(settings.TOOLS_DIR, "half", "name = 'half'\ndescription = 'x'\n")
    write(settings.TOOLS_DIR, "chatty", "print('hello from import')\n" + GOOD.format(name="chatty"))
    registry = get_agent().tools
    assert registry.user_tool_names() == ["chatty", "echo"]
    errors = registry.last_user_load.errors
    assert "SyntaxError" in errors["syntax"] and "line 2" in errors["syntax"]
    assert "longer than 2 s" in errors["hangs"] and "inside execute()" in errors["hangs"]
    assert "exited with code 3" in errors["exits"]
    assert "SIGSEGV" in errors["segfault"]
    assert errors["half"].endswith("parameters, execute")
    rows = {r.name: r for r in UserTool.objects.all()}
    assert set(rows) == {"chatty", "echo", "syntax", "hangs", "exits", "segfault", "half"}
    assert "SyntaxError" in rows["syntax"].last_error and rows["echo"].last_error == ""
    assert rows["echo"].description.startswith("Echo the text back")


@pytest.mark.django_db
def test_a_crashing_or_slow_call_only_fails_that_call(settings, fast_limits):
    write(settings.TOOLS_DIR, "bad", '''
        import os, ctypes, time
        name = "bad"
        description = "misbehaves on purpose"
        parameters = {"type": "object", "properties": {"how": {"type": "string"}}, "required": ["how"]}

        async def execute(params):
            how = params["how"]
            print("noise on stdout")
            if how == "exit":
                os._exit(5)
            if how == "segv":
                ctypes.string_at(0)
            if how == "loop":
                while True:
                    pass
            if how == "raise":
                raise KeyError("note 'x' not found")
            return "fine"
    ''')
    registry = get_agent().tools
    call = lambda how: asyncio.run(registry.call("bad", {"how": how}))  # noqa: E731
    assert call("ok").output == "fine"
    exited = call("exit")
    assert not exited.success and "exited with code 5" in exited.error and "write_tool" in exited.error
    assert "SIGSEGV" in call("segv").error
    looped = call("loop")
    assert not looped.success and "longer than 2 s" in looped.error
    raised = call("raise")
    assert "KeyError" in raised.error and "Traceback" in raised.error and "bad.py\", line" in raised.error and "runner" not in raised.error
    assert call("ok").output == "fine"


def _pids_running(token: str) -> list[int]:
    """Host pids whose command line contains `token` (sandboxed pids differ from the host's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and token in (entry / "cmdline").read_bytes().decode(errors="replace") and _alive(int(entry.name)):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


async def test_cancelling_a_user_tool_kills_its_process_group(settings):
    token = "61.4242"  # a unique sleep duration to find the grandchild on the host
    write(settings.TOOLS_DIR, "sleeper", f'''
        import subprocess, time
        name = "sleeper"
        description = "sleeps"
        parameters = {{"type": "object", "properties": {{}}}}

        async def execute(params):
            subprocess.Popen(["sleep", "{token}"])
            open("started.txt", "w").write("yes")
            time.sleep(60)
            return "never"
    ''')
    tool = loader.UserToolProcess("sleeper", "", {}, settings.TOOLS_DIR / "sleeper.py")
    task = asyncio.create_task(tool.execute({}))
    for _ in range(1000):
        if (settings.NAVI_WORKSPACE / "started.txt").exists() and _pids_running(token):
            break
        await asyncio.sleep(0.01)
    pids = _pids_running(token)
    assert pids
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):  # the pid namespace dies with bwrap; the kernel reaps it asynchronously
        if not any(_alive(p) for p in pids):
            break
        await asyncio.sleep(0.01)
    assert not any(_alive(p) for p in pids)


@pytest.mark.django_db
def test_disabled_tools_are_not_offered_and_stale_rows_go(settings):
    good(settings.TOOLS_DIR, "echo")
    gone = good(settings.TOOLS_DIR, "gone")
    registry = get_agent().tools
    assert registry.user_tool_names() == ["echo", "gone"]
    UserTool.objects.filter(name="echo").update(enabled=False)
    gone.unlink()
    result = registry.reload_user_tools()
    assert registry.user_tool_names() == [] and result.disabled == ["echo"]
    assert "echo" not in [t.name for t in registry.tools_for(["filesystem"])]
    assert list(UserTool.objects.values_list("name", flat=True)) == ["echo"]


@pytest.mark.django_db
def test_enabled_user_tools_join_every_profile(settings, profiles):
    good(settings.TOOLS_DIR)
    registry = get_agent().tools
    for profile in profiles:
        assert "echo" in [t.name for t in registry.tools_for(profile.enabled_tools)]


def test_metadata_is_cached_by_mtime(settings, monkeypatch):
    path = good(settings.TOOLS_DIR)
    calls = []
    real = loader._import_in_child
    monkeypatch.setattr(loader, "_import_in_child", lambda p, t: calls.append(p) or real(p, t))
    first = loader.read_metadata(path)
    assert loader.read_metadata(path) == first and len(calls) == 1
    path.write_text(GOOD.format(name="echo").replace("Echo the text back", "Repeat"))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert loader.read_metadata(path)["tools"][0]["description"].startswith("Repeat")
    assert len(calls) == 2


@pytest.mark.django_db(transaction=True)
async def test_it_loads_from_async_code_without_blocking_the_orm(settings):
    good(settings.TOOLS_DIR)
    registry = get_agent().tools  # first use inside a running event loop (as in a consumer)
    assert registry.user_tool_names() == ["echo"]
    assert await UserTool.objects.filter(name="echo").aexists()
    result = await registry.call("echo", {"text": "async"})
    assert result.output == "echo: async"


@pytest.mark.django_db
def test_a_user_tool_cannot_shadow_a_builtin(settings):
    write(settings.TOOLS_DIR, "filesystem", GOOD.format(name="filesystem"))
    write(settings.TOOLS_DIR, "todo", GOOD.format(name="todo"))
    registry = get_agent().tools
    assert registry.is_builtin("todo")
    assert "built-in" in registry.last_user_load.errors["todo"]
