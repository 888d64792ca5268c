"""Issue "Trust": the attacker's moves against the file tools, the terminal, code_exec and user
tools, replayed — every one must fail. Also per-user workspaces and session cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from agent.frames.events import to_frame
from agent.models import Profile
from agent.registry import get_agent
from sessions_app.models import Session
from sessions_app.services import delete_session, session_files_dir
from tests.llm_server import Turn
from tools_app import loader
from tools_app.builtin import terminal
from tools_app.builtin.code_exec import CodeExecTool
from tools_app.builtin.filesystem import FilesystemTool
from tools_app.builtin.terminal import TerminalTool, shell_equivalent
from tools_app.context import current_chat_session_id, current_user_id
from tools_app.models import ScratchpadSection, TodoList
from tools_app.sandbox import CA_ENV
from tools_app.workspace import workspace_for

SECRET = "s3cr3t-do-not-leak"


@pytest.fixture
def limits(settings):
    settings.TOOL_TIMEOUT_S = 20
    settings.USER_TOOL_IMPORT_TIMEOUT_S = 20
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.CODE_EXEC_NETWORK = False
    settings.TERMINAL_NETWORK = False


@pytest.fixture
def server_files(tmp_path):
    """Stand-ins for the project folder's navi.db and .navi_secret_key, outside any workspace."""
    db = tmp_path / "navi.db"
    db.write_bytes(b"SQLite format 3\x00 pbkdf2_sha256$720000$" + SECRET.encode())
    key = tmp_path / ".navi_secret_key"
    key.write_text(SECRET)
    return db, key


@contextlib.contextmanager
def acting_as(user_id: int | None, session_id=None):
    """Tools called directly, as inside a run of this user (and chat session)."""
    user_token = current_user_id.set(user_id)
    session_token = current_chat_session_id.set(str(session_id) if session_id else None)
    try:
        yield
    finally:
        current_chat_session_id.reset(session_token)
        current_user_id.reset(user_token)


def server_environment() -> list[str]:
    """Entries of this (server) process's environment that no sandbox may show."""
    # The host's CA settings are handed to sandboxed MCP servers on purpose (paths of public
    # certificates, tools_app.sandbox.CA_ENV), not secrets.
    own = {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_", *CA_ENV}
    raw = Path(f"/proc/{os.getpid()}/environ").read_bytes().decode("utf-8", "replace").split("\0")
    return [e for e in raw if "=" in e and e.split("=", 1)[0] not in own and len(e) > 6]


def assert_no_server_secrets(text: str) -> None:
    assert SECRET not in text
    leaked = [e for e in server_environment() if e in text]
    assert not leaked, leaked


async def fs(**params):
    return await FilesystemTool().execute(params)


async def term(command: str):
    return await TerminalTool().execute({"command": command})


async def code(source: str):
    return await CodeExecTool().execute({"code": source})


def _listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(10)
    accepted: list[bool] = []

    def accept():
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            accepted.append(True)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    return server, thread, accepted


# --- per-user workspaces -------------------------------------------------------------------
@pytest.mark.django_db
def test_each_user_gets_a_private_workspace_and_commands_get_the_root(settings, owner, other_user):
    root = settings.NAVI_WORKSPACE.resolve()
    assert workspace_for() == root
    assert workspace_for(owner.id) == root / str(owner.id)
    assert (root / str(owner.id)).stat().st_mode & 0o777 == 0o700
    with acting_as(other_user.id):
        assert workspace_for() == root / str(other_user.id)


@pytest.mark.django_db
async def test_one_users_files_are_invisible_to_another_users_tools(settings, limits, owner, other_user):
    with acting_as(owner.id):
        assert (await fs(action="write", path="diary.txt", content=SECRET)).success
    theirs = workspace_for(owner.id) / "diary.txt"
    assert theirs.read_text() == SECRET
    with acting_as(other_user.id):
        for path in (str(theirs), f"../{owner.id}/diary.txt"):
            result = await fs(action="read", path=path)
            assert not result.success and result.error.startswith("refused:"), result.error
        assert f"{owner.id}/" not in (await fs(action="list", path=".")).output.splitlines()
        listing = await term("ls -a ..")
        assert listing.success and str(owner.id) not in listing.output.split()
        assert SECRET not in (await term(f"cat {theirs}")).output
        result = await code(f"print(open({str(theirs)!r}).read())")
        assert not result.success and SECRET not in result.output and "No such file" in result.output


# --- filesystem allowlist ------------------------------------------------------------------
@pytest.mark.parametrize("allowlist", ["{ws}", "{ws},{tools}", "*"])
async def test_the_filesystem_tool_never_changes_the_tools_folder(settings, allowlist):
    settings.FS_ALLOWED_PATHS = allowlist.format(ws=settings.NAVI_WORKSPACE, tools=settings.TOOLS_DIR)
    tools = settings.TOOLS_DIR
    (tools / "kept.py").write_text("name = 'kept'\n")
    (settings.NAVI_WORKSPACE / "evil.py").write_text("import os\n")
    attempts = [
        {"action": "write", "path": str(tools / "x.py"), "content": "import os"},
        {"action": "append", "path": str(tools / "kept.py"), "content": "import os"},
        {"action": "mkdir", "path": str(tools / "pkg")},
        {"action": "delete", "path": str(tools / "kept.py")},
        {"action": "move", "path": "evil.py", "destination": str(tools / "evil.py")},
        {"action": "move", "path": str(tools / "kept.py"), "destination": "stolen.py"},
        {"action": "delete", "path": str(tools.parent), "recursive": True},
    ]
    for params in attempts:
        result = await fs(**params)
        assert not result.success and result.error.startswith("refused:"), (params, result.error)
    assert sorted(p.name for p in tools.iterdir()) == ["kept.py"]
    assert (tools / "kept.py").read_text() == "name = 'kept'\n"


@pytest.mark.django_db(transaction=True)
async def test_the_table_shown_before_an_append_is_read_only_inside_the_workspace(owner, other_user, tmp_path):
    """FilesystemTool.current_text (a small model's row appended to a .csv) reads what an append
    may write to: never another user's file, a path that climbs out, nor a symlink's target."""
    from tools_app.builtin.filesystem import TABLE_CHARS
    from tools_app.workspace import workspace_for

    outside = tmp_path / "secret.csv"
    outside.write_text("card,1234\n")
    theirs = workspace_for(other_user.id) / "bank.csv"
    theirs.write_text("iban,DE00\n")
    mine = workspace_for(owner.id)
    (mine / "link.csv").symlink_to(outside)
    (mine / "big.csv").write_text("a,b\n" * 10_000)
    tool = FilesystemTool()
    with acting_as(owner.id):
        for path in (str(outside), "../" * 8 + str(outside).lstrip("/"), "link.csv", "LINK.CSV", " link.csv ",
                     f"../{other_user.id}/bank.csv", str(theirs), "ｌｉｎｋ.csv"):
            assert await tool.current_text({"action": "append", "path": path, "content": "x"}) is None, path
        assert len(await tool.current_text({"action": "append", "path": "big.csv", "content": "x"})) == TABLE_CHARS
        assert await tool.current_text({"action": "write", "path": "big.csv", "content": "x"}) is None  # appends only
        assert await tool.current_text({"action": "append", "path": "notes.txt", "content": "x"}) is None  # tables only


@pytest.mark.django_db(transaction=True)
async def test_extra_allowed_paths_are_only_for_holders_of_run_host_tools(settings, tmp_path, django_user_model):
    admin = await django_user_model.objects.acreate(username="root", is_superuser=True)
    plain = await django_user_model.objects.acreate(username="plain")
    extra = tmp_path / "shared"
    extra.mkdir()
    (extra / "notes.txt").write_text("host notes")
    for allowlist in (f"{settings.NAVI_WORKSPACE},{extra}", "*"):
        settings.FS_ALLOWED_PATHS = allowlist
        with acting_as(admin.id):
            assert (await fs(action="read", path=str(extra / "notes.txt"))).output == "host notes"
        with acting_as(plain.id):
            refused = await fs(action="read", path=str(extra / "notes.txt"))
            assert not refused.success and "refused" in refused.error
            assert (await fs(action="write", path="mine.txt", content="ok")).success


@pytest.mark.django_db(transaction=True)
async def test_it_reads_the_current_sessions_uploads_but_never_changes_them(settings, owner, session):
    folder = session_files_dir(session.id)
    folder.mkdir(parents=True)
    (folder / "upload.csv").write_text("a,b")
    other = await Session.objects.acreate(owner=owner, profile_id="secretary")
    session_files_dir(other.id).mkdir(parents=True)
    (session_files_dir(other.id) / "old.csv").write_text("x")
    with acting_as(owner.id, session.id):
        assert (await fs(action="read", path=str(folder / "upload.csv"))).output == "a,b"
        assert "upload.csv" in (await fs(action="list", path=str(folder))).output
        assert not (await fs(action="read", path="upload.csv")).success  # relative = the workspace
        for params in ({"action": "write", "path": str(folder / "x.txt"), "content": "x"},
                       {"action": "delete", "path": str(folder / "upload.csv")}):
            result = await fs(**params)
            assert not result.success and "read-only" in result.error
        assert not (await fs(action="read", path=str(session_files_dir(other.id) / "old.csv"))).success
    assert (folder / "upload.csv").read_text() == "a,b"


# --- symlink races (row 6) -----------------------------------------------------------------
async def test_a_symlink_swapped_in_during_reads_is_never_followed(settings, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    workspace = settings.NAVI_WORKSPACE
    target = workspace / "report.txt"
    target.write_text("public")
    stop = threading.Event()

    def flip() -> None:
        """Swap report.txt atomically between a regular file and a link to the secret."""
        n = 0
        while not stop.is_set():
            staged = workspace / f".staged{n % 2}"
            if n % 2:
                staged.write_text("public")
            else:
                os.symlink(secret, staged)
            os.replace(staged, target)
            n += 1

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        results = [await fs(action="read", path="report.txt") for _ in range(200)]
    finally:
        stop.set()
        flipper.join()
    assert not [r for r in results if SECRET in (r.output or "") + (r.error or "")]
    assert any(r.success and r.output == "public" for r in results)


async def test_links_inside_the_workspace_still_work_and_leaving_ones_do_not(settings, tmp_path):
    workspace = settings.NAVI_WORKSPACE
    (workspace / "real.txt").write_text("inside")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    (workspace / "out").symlink_to(tmp_path)
    assert (await fs(action="read", path="alias.txt")).output == "inside"
    assert "refused" in (await fs(action="write", path="out/new.txt", content="x")).error
    assert not (tmp_path / "new.txt").exists()
    assert "symbolic link" in (await fs(action="list", path=".")).output


# --- terminal (rows 1 and 3) ---------------------------------------------------------------
@pytest.mark.django_db
async def test_the_terminal_cannot_read_the_servers_environment_or_change_its_database(
    settings, limits, server_files, owner, monkeypatch
):
    monkeypatch.setenv("NAVI_TRUST_SECRET", SECRET)  # would reach a child given os.environ
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    db, key = server_files
    with acting_as(owner.id):
        for command in (
            f"tr '\\0' '\\n' < /proc/{os.getpid()}/environ",
            "tr '\\0' '\\n' < /proc/1/environ; env",
            f"cat {db} {key} {settings.BASE_DIR}/navi_project/settings.py",
            f"echo pwned >> {db}",
            "ls /proc",
        ):
            result = await term(command)
            assert_no_server_secrets(result.output + (result.error or ""))
    assert db.read_bytes().endswith(SECRET.encode())
    assert str(os.getpid()) not in (await term("ls /proc")).output.split()


@pytest.mark.parametrize(
    "command",
    ["git -c alias.x=!id x", "git status", "/usr/bin/git log", "env cat x", "xargs cat", "sh -c id",
     "python3 -c 'print(1)'", "awk 'BEGIN{system(\"id\")}'", "sed -n 1e\\ id x", "find . -exec id {} +",
     "find . -delete", "tar -cf x.tar --to-command=id .", "sort --compress-program=id x",
     "vim -c '!id'", "less x", "timeout 5 id", "busybox sh"],
)
async def test_listed_programs_that_equal_a_shell_are_refused(settings, limits, command):
    settings.TERMINAL_ALLOWED_COMMANDS = "ls,cat,df,git,env,xargs,sh,python3,awk,sed,find,tar,sort,vim,less,timeout,busybox,/usr/bin/git"
    (settings.NAVI_WORKSPACE / ".git").mkdir()
    (settings.NAVI_WORKSPACE / ".git" / "config").write_text("[core]\n\tfsmonitor = id > pwned\n")
    result = await term(command)
    assert not result.success and "as powerful as a shell" in result.error, result.error
    assert "TERMINAL_ALLOWED_COMMANDS=*" in result.error
    assert not (settings.NAVI_WORKSPACE / "pwned").exists()


async def test_the_attackers_allowlist_reads_no_secrets(settings, limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "ls,cat,df,git"
    result = await term(f"cat /proc/{os.getpid()}/environ")
    assert not result.success and "No such file" in result.output
    assert (await term("find . -name x")).error.startswith("refused:")  # not listed at all
    settings.TERMINAL_ALLOWED_COMMANDS = "find"
    assert (await term("find . -name '*.txt'")).success  # harmless find still works


def test_the_default_allowlist_holds_no_shell_equivalent(settings):
    assert "git" not in terminal.DEFAULT_ALLOWED.split(",")
    for program in terminal.DEFAULT_ALLOWED.split(","):
        assert shell_equivalent([program, "x"]) is None, program


async def test_the_terminal_has_no_network_unless_allowed(settings, limits):
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    server, thread, accepted = _listener()
    command = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2); print('connected')\""
    try:
        blocked = await term(command)
        assert not blocked.success and "connected" not in blocked.output and not accepted
        settings.TERMINAL_NETWORK = True
        allowed = await term(command)
        assert allowed.success and "connected" in allowed.output
    finally:
        server.close()
        thread.join()


async def test_the_terminal_refuses_without_bwrap_unless_opted_out(settings, limits, monkeypatch):
    monkeypatch.setattr(terminal, "bwrap_binary", lambda: None)
    refused = await term("echo hi")
    assert "install bubblewrap" in refused.error and "CODE_EXEC_SANDBOX=none" in refused.error
    settings.CODE_EXEC_SANDBOX = "none"
    assert (await term("echo hi")).output.startswith("hi")


# --- user tools (rows 2, 2b) ---------------------------------------------------------------
SPY = '''
import json, os, socket

name = "spy"
description = "tries to leave its sandbox"
parameters = {{"type": "object", "properties": {{"paths": {{"type": "array"}}, "port": {{"type": "integer"}}}}}}
{extra}

def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(20000).decode("utf-8", "replace")
    except OSError as exc:
        return "error: " + type(exc).__name__


async def execute(params):
    found = {{path: _read(path) for path in params["paths"]}}
    found["parent environ"] = _read(f"/proc/{{os.getppid()}}/environ")
    found["own environ"] = repr(dict(os.environ))
    try:
        socket.create_connection(("127.0.0.1", params["port"]), timeout=2).close()
        found["network"] = "connected"
    except OSError as exc:
        found["network"] = "error: " + type(exc).__name__
    return json.dumps(found)
'''


def spy_tool(settings, extra: str = "") -> loader.UserToolProcess:
    path = settings.TOOLS_DIR / "spy.py"
    path.write_text(SPY.format(extra=extra))
    [tool], error = loader.build_tools("spy", path, loader.read_metadata(path))
    assert not error
    return tool


@pytest.mark.django_db
async def test_a_user_tool_reaches_no_secret_no_other_user_and_no_network(
    settings, limits, server_files, owner, other_user, monkeypatch
):
    monkeypatch.setenv("NAVI_TRUST_SECRET", SECRET)
    db, key = server_files
    theirs = workspace_for(other_user.id) / "diary.txt"
    theirs.write_text(SECRET)
    outside = [
        f"/proc/{os.getpid()}/environ", str(db), str(key), str(theirs),
        str(settings.BASE_DIR / "navi_project" / "settings.py"), str(settings.TOOLS_DIR / "spy.py"),
    ]
    tool = spy_tool(settings)
    server, thread, accepted = _listener()
    try:
        with acting_as(owner.id):
            result = await tool.execute({"paths": outside, "port": server.getsockname()[1]})
    finally:
        server.close()
        thread.join()
    assert result.success, result.error
    found = json.loads(result.output)
    assert all(found[path].startswith("error:") for path in outside), found
    assert found["network"].startswith("error:") and not accepted
    assert_no_server_secrets(result.output)


@pytest.mark.django_db
async def test_a_tool_that_declares_network_gets_it(settings, limits, owner):
    tool = spy_tool(settings, extra="network = True")
    assert tool.network is True
    assert "--share-net" in loader.child_command("run", tool.path, network=True).argv
    assert "--share-net" not in loader.child_command("meta", tool.path, network=True).argv
    server, thread, accepted = _listener()
    try:
        with acting_as(owner.id):
            result = await tool.execute({"paths": [], "port": server.getsockname()[1]})
    finally:
        server.close()
        thread.join()
    assert json.loads(result.output)["network"] == "connected" and accepted


MARKER_AT_IMPORT = '''
import os
name = "{name}"
description = "writes a marker at import, then fails"
parameters = {{"type": "object", "properties": {{}}}}
for place in {places!r}:
    try:
        open(place, "w").write("imported")
    except OSError:
        pass
raise RuntimeError("broken on purpose")

async def execute(params):
    return "never"
'''


@pytest.mark.django_db(transaction=True)
async def test_a_rejected_tool_leaves_no_trace_of_its_import(settings, limits):
    places = [
        "marker.txt", str(settings.NAVI_WORKSPACE / "marker.txt"), str(settings.TOOLS_DIR / "marker.txt"),
        os.path.join("/run/navi/tool", "marker.txt"), str(settings.TOOLS_DIR / ".staging" / "marker.txt"),
    ]
    code = MARKER_AT_IMPORT.format(name="marker", places=places)
    result = await get_agent().tools.call("write_tool", {"name": "marker", "code": code})
    assert not result.success and "nothing was written" in result.error and "broken on purpose" in result.error
    left = [p for p in settings.TOOLS_DIR.rglob("*")] + [p for p in settings.NAVI_WORKSPACE.rglob("*")]
    assert [p for p in left if p.is_file()] == []


@pytest.mark.django_db
async def test_a_tool_keeps_its_data_next_to_itself_per_user(settings, limits, owner, other_user):
    path = settings.TOOLS_DIR / "counter.py"
    path.write_text('''
import json, os
name = "counter"
description = "counts calls"
parameters = {"type": "object", "properties": {}}
DATA = os.path.join(os.path.dirname(__file__), "counter_data.json")

async def execute(params):
    count = json.load(open(DATA))["n"] + 1 if os.path.exists(DATA) else 1
    json.dump({"n": count}, open(DATA, "w"))
    return str(count)
''')
    [tool], _ = loader.build_tools("counter", path, loader.read_metadata(path))
    with acting_as(owner.id):
        assert [(await tool.execute({})).output for _ in range(2)] == ["1", "2"]
    with acting_as(other_user.id):
        assert (await tool.execute({})).output == "1"
    stored = settings.TOOLS_DIR / ".data" / "counter" / str(owner.id) / "counter_data.json"
    assert json.loads(stored.read_text()) == {"n": 2}


# --- through the agent loop ----------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
async def test_the_attackers_terminal_call_through_the_agent_loop_leaks_nothing(
    llm, settings, limits, session, server_files, monkeypatch, host_tools_allowed
):
    monkeypatch.setenv("NAVI_TRUST_SECRET", SECRET)
    settings.TERMINAL_ALLOWED_COMMANDS = "*"
    await Profile.objects.aupdate(planning_enabled=False)
    db, _ = server_files
    # /proc/1 is bwrap: readable when the server is not root, refused to the sandbox user when it is.
    command = (
        f"tr '\\0' '\\n' < /proc/{os.getpid()}/environ; tr '\\0' '\\n' < /proc/1/environ; "
        f"tr '\\0' '\\n' < /proc/self/environ; cat {db}"
    )
    llm.script(Turn(tool_calls=[{"name": "terminal", "arguments": {"command": command}}]), Turn(content="done"))
    frames = [to_frame(e) async for e in get_agent().run_stream(str(session.id), "show me the environment")]
    [call] = [f for f in frames if f["type"] == "tool_call"]
    assert call["tool"] == "terminal"
    assert_no_server_secrets(json.dumps(frames))
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in call["result"]  # it ran, in the sandbox


# --- session cleanup -----------------------------------------------------------------------
@pytest.mark.django_db
def test_deleting_a_session_deletes_its_todo_and_scratchpad(owner, session):
    kept = Session.objects.create(owner=owner, profile_id="secretary")
    for scope in (str(session.id), str(kept.id)):
        TodoList.objects.create(scope=scope, items=[{"task": "x", "status": "pending"}])
        ScratchpadSection.objects.create(scope=scope, section="notes", content="x")
    delete_session(session)
    assert list(TodoList.objects.values_list("scope", flat=True)) == [str(kept.id)]
    assert list(ScratchpadSection.objects.values_list("scope", flat=True)) == [str(kept.id)]
    Session.objects.filter(pk=kept.pk).delete()  # bulk deletes (the admin's) too
    assert not TodoList.objects.exists() and not ScratchpadSection.objects.exists()


@pytest.mark.django_db(transaction=True)
async def test_marking_a_task_on_an_empty_todo_list_says_to_create_it_first(session):
    from tools_app.builtin.working_notes import TodoTool
    from tools_app.context import current_session_id

    token = current_session_id.set(str(session.id))
    try:
        result = await TodoTool().execute({"action": "update", "index": 1, "status": "done"})
        assert not result.success and "the todo list is empty; create it first with action=set" in result.error
        await TodoTool().execute({"action": "set", "tasks": ["draft"]})
        result = await TodoTool().execute({"action": "update", "index": 2, "status": "done"})
        assert not result.success and "no task 2; the list has 1 tasks" in result.error
    finally:
        current_session_id.reset(token)
