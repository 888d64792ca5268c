"""filesystem, terminal and code_exec: what they may do, and everything they must refuse or contain."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading

import pytest

from tools_app.builtin import code_exec
from tools_app.builtin.code_exec import CodeExecTool
from tools_app.builtin.filesystem import FilesystemTool
from tools_app.builtin.terminal import TerminalTool


@pytest.fixture
def small_limits(settings):
    settings.TOOL_TIMEOUT_S = 2
    settings.TOOL_OUTPUT_MAX_BYTES = 10_000
    settings.FS_READ_MAX_BYTES = 100
    settings.CODE_EXEC_MEMORY_MB = 256
    settings.CODE_EXEC_MAX_PROCS = 32
    settings.CODE_EXEC_MAX_FILE_MB = 1
    settings.CODE_EXEC_NETWORK = False
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.SANDBOX_MEMORY_MB = 256
    settings.SANDBOX_MAX_FILE_MB = 1
    settings.SANDBOX_MAX_PROCS = 20


async def fs(**params):
    return await FilesystemTool().execute(params)


# --- filesystem ----------------------------------------------------------------------------
async def test_filesystem_actions_in_the_workspace(settings, small_limits):
    ws = settings.NAVI_WORKSPACE
    written = await fs(action="write", path="notes/a.txt", content="hello")
    assert written.output == "Wrote 5 bytes to notes/a.txt"  # relative: the server's folders stay out of the next path
    assert (await fs(action="append", path=str(ws / "notes/a.txt"), content=" world")).output == "Appended 6 bytes to notes/a.txt"
    assert (await fs(action="read", path="notes/a.txt")).output == "hello world"
    assert (await fs(action="mkdir", path=str(ws / "empty"))).output == "Created empty"
    assert (await fs(action="list", path=".")).output == "empty/\nnotes/"
    assert (await fs(action="move", path="notes/a.txt", destination="b.txt")).success
    assert (ws / "b.txt").read_text() == "hello world"
    found = await fs(action="search", path=".", pattern="*.txt", text="world")
    assert found.output == str(ws / "b.txt")
    assert (await fs(action="delete", path="b.txt")).success and not (ws / "b.txt").exists()
    assert "allowed root" in (await fs(action="delete", path=".", recursive=True)).error


async def test_filesystem_read_is_capped_and_says_so(settings, small_limits):
    (settings.NAVI_WORKSPACE / "big.txt").write_text("x" * 250)
    first = (await fs(action="read", path="big.txt")).output
    assert first.startswith("x" * 100) and "[truncated: showed bytes 0–100 of 250; read again with offset=100" in first
    assert (await fs(action="read", path="big.txt", offset=200)).output == "x" * 50


@pytest.mark.parametrize("path", ["../outside.txt", "notes/../../outside.txt", "/etc/passwd", "/tmp", "a\x00b"])
async def test_filesystem_refuses_paths_outside_the_allowlist(settings, path):
    for action in ("read", "write", "list", "delete"):
        result = await fs(action=action, path=path, content="x")
        assert not result.success and result.error.startswith("refused:"), (action, path, result.error)
    assert not (settings.NAVI_WORKSPACE.parent / "outside.txt").exists()


async def test_filesystem_refuses_symlinks_that_leave_the_allowlist(settings, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (settings.NAVI_WORKSPACE / "link.txt").symlink_to(secret)
    (settings.NAVI_WORKSPACE / "linkdir").symlink_to(tmp_path)
    assert "refused" in (await fs(action="read", path="link.txt")).error
    assert "refused" in (await fs(action="write", path="link.txt", content="pwned")).error
    assert "refused" in (await fs(action="read", path="linkdir/secret.txt")).error
    assert "refused" in (await fs(action="move", path="link.txt", destination="x.txt")).error
    assert (await fs(action="search", path=".", text="secret")).output == "no matching files"
    assert secret.read_text() == "top secret"


async def test_a_missing_file_is_answered_with_what_its_folder_holds_and_how_to_search(settings, tmp_path):
    # Asked which file in docs mentions kiwi, a small model read a guessed "docs/kiwi.txt" twice.
    docs = settings.NAVI_WORKSPACE / "docs"
    docs.mkdir()
    for name in ("a.txt", "b.txt"):
        (docs / name).write_text(name)
    (docs / "old").mkdir()
    missed = await fs(action="read", path="docs/kiwi.txt")
    assert not missed.success and missed.error == (
        'not found: docs/kiwi.txt. docs/ holds: a.txt, b.txt, old/. To find the file that contains a text: '
        'action "search", path "docs", text "<the text>"')
    assert (await fs(action="delete", path="gone.txt")).error == "not found: gone.txt. the workspace holds: docs/"
    assert "holds" not in (await fs(action="read", path="nowhere/x.txt")).error  # no folder: the plain error
    # A workspace path written with a leading slash is refused, with the path that was meant.
    assert (await fs(action="read", path="/docs/kiwi.txt")).error.endswith("did you mean 'docs/kiwi.txt' (without the leading /)?")
    assert "did you mean" not in (await fs(action="read", path="/etc/passwd")).error
    for sly in ("/../../etc/passwd", "/docs/../../../etc/passwd", " /docs/kiwi.txt", "/DOCS/../../x", "/ｄｏｃｓ/kiwi.txt"):
        error = (await fs(action="read", path=sly)).error  # climbing out, padding, case, full-width letters
        assert error.startswith(("refused:", "not found:")), (sly, error)
        assert "did you mean" not in error or error.endswith("did you mean 'docs/kiwi.txt' (without the leading /)?"), (sly, error)
        assert "holds:" not in error or "holds: a.txt, b.txt, old/" in error, (sly, error)  # only the docs folder
    # A missing file behind a link that leaves the allowed folders lists nothing of where it leads.
    (tmp_path / "private.txt").write_text("secret")
    (settings.NAVI_WORKSPACE / "out").symlink_to(tmp_path)
    refused = (await fs(action="read", path="out/missing.txt")).error
    assert refused.startswith("refused:") and "private" not in refused


async def test_filesystem_star_means_unrestricted_except_the_user_tools_dir(settings, tmp_path):
    outside = tmp_path / "free.txt"
    assert not (await fs(action="write", path=str(outside), content="x")).success
    settings.FS_ALLOWED_PATHS = "*"
    assert (await fs(action="write", path=str(outside), content="x")).success
    refused = await fs(action="write", path=str(settings.TOOLS_DIR / "data.json"), content="{}")
    assert not refused.success and "write_tool" in refused.error


# --- terminal ------------------------------------------------------------------------------
async def term(command: str, **extra):
    return await TerminalTool().execute({"command": command, **extra})


@pytest.mark.parametrize(
    "command",
    ["ls; rm -rf /", "echo $(id)", "echo `id`", "ls | rm -rf x", "ls > out.txt", "cat < /etc/passwd",
     "ls && rm x", "ls & rm x", "rm -rf /", "/bin/rm x", "ls\nrm x", "echo ${HOME}"],
)
async def test_terminal_refuses_everything_outside_the_allowlist(settings, command):
    settings.TERMINAL_ALLOWED_COMMANDS = "ls,echo,cat,grep,pwd"
    result = await term(command)
    assert not result.success and result.error.startswith("refused:"), result.error
    assert not (settings.NAVI_WORKSPACE / "out.txt").exists()


async def test_terminal_runs_allowed_commands_without_a_shell(settings, small_limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "ls,echo,cat,grep,pwd"
    (settings.NAVI_WORKSPACE / "apple.txt").write_text("a")
    (settings.NAVI_WORKSPACE / "pear.txt").write_text("p")
    assert (await term("pwd")).output.startswith(str(settings.NAVI_WORKSPACE))
    assert (await term("echo 'a;b' 'c|d'")).output.startswith("a;b c|d\n")  # quoted text is data
    assert (await term("ls | grep apple")).output.startswith("apple.txt\n")
    failed = await term("cat missing.txt")
    assert not failed.success and "No such file" in failed.output and "[exit code 1]" in failed.output


async def test_terminal_timeout_and_output_cap(settings, small_limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    slow = await term("sleep 30")
    assert not slow.success and "still running after 2 s" in slow.output
    flood = await term("yes")
    assert "[truncated: output exceeded 10000 bytes" in flood.output and len(flood.output) < 11_000
    assert (await term("echo a && echo b")).output.startswith("a\nb\n")


async def test_terminal_commands_are_limited_in_memory_and_file_size(settings, small_limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    big = await term("head -c 5000000 /dev/zero > big.bin")
    assert not big.success and (settings.NAVI_WORKSPACE / "big.bin").stat().st_size <= 1024 * 1024
    hungry = await term("python3 -c 'x = bytearray(1024 ** 3)'")
    assert not hungry.success and "MemoryError" in hungry.output
    assert (await term("echo still fine")).output.startswith("still fine")


async def test_terminal_commands_are_limited_in_processes_where_a_cgroup_can_be_made(settings, small_limits):
    from tools_app.sandbox import PidsCgroup

    probe = PidsCgroup.for_root(5)
    if probe is None:
        pytest.skip("no writable pids cgroup here (not root, or cgroups not delegated): no process cap to test")
    probe.remove()
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    result = await term("for i in $(seq 60); do sleep 1 & done; wait")
    assert "fork" in result.output.lower() or "resource temporarily unavailable" in result.output.lower()


# --- code_exec -----------------------------------------------------------------------------
async def run(code: str):
    return await CodeExecTool().execute({"code": code})


async def test_code_exec_runs_python_in_the_workspace(settings, small_limits):
    result = await run("import os\nopen('out.txt', 'w').write('42')\nprint(os.getcwd())")
    assert result.success and result.output.startswith(str(settings.NAVI_WORKSPACE.resolve()))
    assert (settings.NAVI_WORKSPACE / "out.txt").read_text() == "42"
    failed = await run("1/0")
    assert not failed.success and "ZeroDivisionError" in failed.output and "[exit code 1]" in failed.output


async def test_a_program_ending_in_a_bare_expression_shows_its_value(settings, small_limits):
    assert (await run("sum(range(1, 12346))")).output.startswith("76205685\n")
    shown = await run("x = 'a'\nx * 3")
    assert "'aaa'" in shown.output  # as the Python prompt shows it
    assert "None" not in (await run("print('hi')\nNone")).output
    failed = await run("x = 1\n\n1/0")
    assert "line 3" in failed.output and "ZeroDivisionError" in failed.output  # the lines still match


def test_only_a_last_bare_expression_is_shown():
    show = code_exec.show_last_value
    assert show("print(3)") == "print(3)" and show("a = 1") == "a = 1" and show("if x: 5") == "if x: 5"
    assert show("def f(:") == "def f(:"  # not Python: the run reports it as written
    main = 'def count():\n    return 3\n\nif __name__ == "__main__":\n    count()\n'
    assert show(main).endswith('if __name__ == "__main__":\n    __value = (count())\n    if __value is not None: print(repr(__value))\n')
    assert show("if x:\n    5\n") == "if x:\n    5\n"  # only the __main__ block
    assert show("x = [1,\n 2]\nlen(x)") == "x = [1,\n 2]\n__value = (len(x))\nif __value is not None: print(repr(__value))\n"


async def test_code_exec_cannot_write_or_read_outside_the_workspace(settings, small_limits, tmp_path):
    target = tmp_path / "escaped.txt"
    await run(f"import os\nos.makedirs({str(tmp_path)!r}, exist_ok=True)\nopen({str(target)!r}, 'w').write('x')")
    assert not target.exists()  # /tmp in the sandbox is private and thrown away
    assert "Read-only file system" in (await run("open('/usr/navi_x', 'w')")).output
    assert "No such file" in (await run("open('/work/main/navi_project/settings.py')")).output


async def test_code_exec_contains_a_fork_bomb(settings, small_limits):
    result = await run("import os\nwhile True:\n    os.fork()")
    assert not result.success
    assert "BlockingIOError" in result.output or "Resource temporarily unavailable" in result.output or "still running" in result.output


async def test_code_exec_contains_a_memory_bomb(settings, small_limits):
    result = await run("x = bytearray(1024 * 1024 * 1024)")
    assert not result.success and "MemoryError" in result.output and "limit is 256 MB" in result.output


async def test_code_exec_stops_an_infinite_loop(settings, small_limits):
    result = await run("while True:\n    pass")
    assert not result.success and "still running after 2 s" in result.output


async def test_code_exec_caps_100_mb_of_output(settings, small_limits):
    result = await run("import sys\nfor _ in range(1600):\n    sys.stdout.write('x' * 65536)")
    assert not result.success and "[truncated: output exceeded 10000 bytes" in result.output
    assert len(result.output) < 11_000


async def test_code_exec_limits_file_size(settings, small_limits):
    result = await run("open('big.bin', 'wb').write(b'x' * 5_000_000)")
    assert not result.success and "File too large" in result.output


def _listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(5)
    accepted: list[bool] = []

    def accept():
        try:
            conn, _ = server.accept()
            accepted.append(True)
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    return server, thread, accepted


async def test_code_exec_has_no_network_unless_allowed(settings, small_limits):
    server, thread, accepted = _listener()
    port = server.getsockname()[1]
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
    try:
        blocked = await run(code)
        assert not blocked.success and "connected" not in blocked.output and not accepted
        settings.CODE_EXEC_NETWORK = True
        allowed = await run(code)
        assert allowed.success and "connected" in allowed.output
    finally:
        server.close()
        thread.join()


async def test_code_exec_refuses_without_bwrap_and_can_opt_out(settings, small_limits, monkeypatch):
    monkeypatch.setattr(code_exec, "bwrap_binary", lambda: None)
    refused = await run("print(1)")
    assert "apt-get install bubblewrap" in refused.error and "CODE_EXEC_SANDBOX=none" in refused.error
    settings.CODE_EXEC_SANDBOX = "none"
    assert (await run("print(6 * 7)")).output.startswith("42")


def test_code_exec_children_get_no_server_secrets(settings, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    from tools_app.sandbox import safe_env

    env = safe_env(settings.NAVI_WORKSPACE)
    assert "OPENAI_API_KEY" not in env and env["HOME"] == str(settings.NAVI_WORKSPACE)
    assert os.environ["OPENAI_API_KEY"] == "sk-secret"


# --- the host's kernel settings (issue #26 item 1) --------------------------------------------
# Each attack is harmless even if it got through: core_pattern gets its own value back, the
# trigger files are only opened, never written.
PROBE = r'''
import errno, json, os


def attempt(path, data=None):
    """Open `path` for writing (and write `data`): the errno's name, or "allowed"."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    try:
        if data is not None:
            os.write(fd, data)
        return "allowed"
    except OSError as exc:
        return errno.errorcode[exc.errno]
    finally:
        os.close(fd)


def probe():
    core = open("/proc/sys/kernel/core_pattern", "rb").read()
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {
        "core_pattern": attempt("/proc/sys/kernel/core_pattern", core),
        "drop_caches": attempt("/proc/sys/vm/drop_caches"),
        "sysrq": attempt("/proc/sysrq-trigger"),
        "sys": attempt("/sys/kernel/mm/transparent_hugepage/enabled"),
        "made": open("made-in-the-sandbox", "w").name,  # its owner, seen from the host, is the real uid
        "caps": {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
        "mounts": {m.split()[4]: m.split()[5] for m in open("/proc/self/mountinfo")},
    }
'''
REFUSED = {"EROFS", "EACCES", "EPERM"}


def core_pattern() -> str:
    return open("/proc/sys/kernel/core_pattern").read()


def assert_made_by_an_unprivileged_host_user(path) -> None:
    """The sandbox's uid as the host sees it (inside, bwrap's nested namespaces may show 0 or any uid)."""
    owner = path.stat().st_uid
    assert owner != 0 and owner == (65534 if os.geteuid() == 0 else os.geteuid())  # SANDBOX_UID as root


def assert_host_is_out_of_reach(seen: dict) -> None:
    assert seen["core_pattern"] in REFUSED and seen["drop_caches"] in REFUSED, seen
    # Kernels without magic SysRq have no trigger file at all.
    assert seen["sysrq"] in (REFUSED if os.path.exists("/proc/sysrq-trigger") else {"ENOENT"}), seen
    assert seen["sys"] in REFUSED | {"ENOENT"} and "/sys" not in seen["mounts"], seen
    assert seen["mounts"]["/proc/sys"].split(",")[0] == "ro"
    assert not any(seen["caps"].values()), seen["caps"]


async def test_code_exec_cannot_write_the_hosts_kernel_settings(settings, small_limits):
    before = core_pattern()
    result = await run(PROBE + "print(json.dumps(probe()))")
    assert result.success, result.output
    assert_host_is_out_of_reach(json.loads(result.output.split("\n[exit code")[0]))
    assert core_pattern() == before
    assert_made_by_an_unprivileged_host_user(settings.NAVI_WORKSPACE / "made-in-the-sandbox")


async def test_a_terminal_command_cannot_write_the_hosts_kernel_settings(settings, small_limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    before = core_pattern()
    result = await term(
        "cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern; "  # its own value back
        "(exec 3>>/proc/sys/vm/drop_caches) && echo drop_caches opened; "  # opened, nothing written
        "(exec 3>>/proc/sysrq-trigger) && echo sysrq opened; "
        "(exec 3>>/sys/kernel/mm/transparent_hugepage/enabled) && echo sys opened; "
        "touch made-in-the-sandbox; grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status"
    )
    assert "cannot create /proc/sys/kernel/core_pattern" in result.output, result.output
    assert "opened" not in result.output and core_pattern() == before
    assert_made_by_an_unprivileged_host_user(settings.NAVI_WORKSPACE / "made-in-the-sandbox")
    for caps in ("CapPrm", "CapEff", "CapBnd"):
        assert f"{caps}:\t0000000000000000" in result.output, result.output


@pytest.mark.django_db
async def test_a_plain_users_tool_cannot_write_the_hosts_kernel_settings(settings, small_limits, other_user):
    from tools_app import loader
    from tools_app.context import current_user_id
    from tools_app.workspace import workspace_for

    path = settings.TOOLS_DIR / "probe.py"
    path.write_text(
        PROBE + 'name = "probe"\ndescription = "probe"\nparameters = {"type": "object", "properties": {}}\n\n\n'
        "async def execute(params: dict) -> str:\n    return json.dumps(probe())\n"
    )
    [tool], error = await asyncio.to_thread(loader.build_tools, "probe", path, loader.read_metadata(path))
    assert not error
    before = core_pattern()
    token = current_user_id.set(other_user.id)  # mallory: no run_host_tools, user tools allowed
    try:
        result = await tool.execute({})
    finally:
        current_user_id.reset(token)
    assert result.success, result.error
    assert_host_is_out_of_reach(json.loads(result.output))
    assert core_pattern() == before
    assert_made_by_an_unprivileged_host_user(workspace_for(other_user.id) / "made-in-the-sandbox")


async def test_files_pass_between_navi_and_the_sandbox_both_ways(settings, small_limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    assert (await fs(action="write", path="in/data.txt", content="from navi")).success
    code = "import os\nopen('in/data.txt', 'a').write(', code')\nos.mkdir('out')\nopen('out/r.txt', 'w').write('made')"
    result = await run(code)
    assert result.success, result.output
    assert (await term("echo ', terminal' >> in/data.txt")).success
    assert (await fs(action="read", path="in/data.txt")).output == "from navi, code, terminal\n"
    assert (await fs(action="read", path="out/r.txt")).output == "made"
    assert (await fs(action="write", path="out/r.txt", content="changed by navi")).success
    assert (await fs(action="delete", path="out", recursive=True)).success


async def test_handing_the_workspace_over_never_follows_links_out_of_it(settings, small_limits, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the workspace is handed to the sandbox user only when the server runs as root")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("root's")
    ws = settings.NAVI_WORKSPACE
    (ws / "dirlink").symlink_to(outside)
    (ws / "filelink").symlink_to(outside / "secret.txt")
    os.link(outside / "secret.txt", ws / "hardlink.txt")
    assert (await run("print('hi')")).success
    assert os.stat(ws).st_uid == 65534
    for path in (outside, outside / "secret.txt"):
        assert os.stat(path).st_uid == 0, path
    assert "Permission denied" in (await run("open('hardlink.txt', 'a').write('x')")).output
    assert (outside / "secret.txt").read_text() == "root's"


async def test_terminal_says_when_a_program_is_missing(settings, small_limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "navi-no-such-program"
    result = await term("navi-no-such-program")
    assert not result.success and "[the program is not installed" in result.output, result.output


def test_a_tool_file_the_sandbox_user_cannot_read_says_how_to_fix_it(settings, small_limits):
    if os.geteuid() != 0:
        pytest.skip("tools run as another user only when the server runs as root")
    from tools_app import loader

    path = settings.TOOLS_DIR / "private.py"
    path.write_text('name = "private"\ndescription = "x"\nparameters = {"type": "object"}\n\n\nasync def execute(p):\n    return ""\n')
    path.chmod(0o600)
    meta = loader.read_metadata(path)
    assert not meta["ok"] and "Permission denied" in meta["error"] and "`chmod 644`" in meta["error"], meta


THREADS = """import os, threading, time
stop = threading.Event()
threading.stack_size(256 * 1024)  # 20 threads well inside the 256 MB address space
for _ in range(20):
    threading.Thread(target=stop.wait, daemon=True).start()
open('{me}-ready', 'w').close()
deadline = time.monotonic() + 15
while not os.path.exists('{other}-ready') and time.monotonic() < deadline:
    time.sleep(0.01)
stop.set()
print('together' if os.path.exists('{other}-ready') else 'alone')
"""


async def test_two_programs_at_once_each_get_the_whole_process_limit(settings, small_limits):
    from tools_app.sandbox import PidsCgroup

    probe = PidsCgroup.for_root(5)
    if probe is None:
        pytest.skip("without a pids cgroup RLIMIT_NPROC is the limit, shared by the sandbox user's programs")
    probe.remove()
    settings.TOOL_TIMEOUT_S = 30  # both must be running at once (CODE_EXEC_MAX_PROCS is 32)
    a, b = await asyncio.gather(run(THREADS.format(me="a", other="b")), run(THREADS.format(me="b", other="a")))
    assert a.success and b.success and a.output.startswith("together") and b.output.startswith("together"), (a, b)
