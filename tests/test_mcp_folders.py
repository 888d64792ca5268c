"""Issue 50 item 1: nothing Navi did not create is ever re-owned. A pasted stdio MCP entry (or a
form, or a row saved by hand) that names Navi's checkout, venv, data or database files, /etc,
/root, /proc, /sys, /dev or another account's home — by name, symlink or `..` — is refused naming
the path and why; the folders it may see wait for the owner's confirmation; a writable folder is
written by its own user, never handed over; Navi's own sandbox folders are walked without
recursion and only what the server wrote there changes hands."""

from __future__ import annotations

import json
import os
import site
import stat
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from navi_project import fstree, places
from tests.mcp_support import patch_json, post_json, wait_state
from tools_app import sandbox
from tools_app.mcp import client as mcp_client
from tools_app.mcp.config import ServerConfig
from tools_app.models import MCPServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_hub")]

ROOT = Path(django_settings.BASE_DIR)
AS_ROOT = os.geteuid() == 0


def snapshot(*paths: Path) -> dict[str, tuple[int, int, int]]:
    """(uid, gid, mode) of each path and of what lies directly in it (a re-own would show)."""
    seen = {}
    for path in paths:
        for item in [path, *(sorted(path.iterdir())[:50] if path.is_dir() and os.access(path, os.R_OK) else [])]:
            try:
                st = os.lstat(item)
            except OSError:
                continue
            seen[str(item)] = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    return seen


@pytest.fixture
def navi_and_host_places(settings, tmp_path, monkeypatch) -> list[str]:
    """Every place the attack named, plus a symlink, a `..` spelling and another account's home."""
    database = tmp_path / "db" / "navi.db"
    database.parent.mkdir()
    for name in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        name.write_bytes(b"")
    monkeypatch.setattr(places, "database_files", lambda: [str(database), f"{database}-wal", f"{database}-shm"])
    bob = tmp_path / "home" / "bob"
    bob.mkdir(parents=True)
    monkeypatch.setattr(places, "other_homes", lambda: [bob])
    knowledge = Path(settings.KNOWLEDGE_DIR)
    knowledge.mkdir(parents=True, exist_ok=True)
    link = tmp_path / "innocent-looking"
    link.symlink_to(ROOT / "navi_project")
    return [
        "/etc", "/root", "/proc", "/sys", "/dev", "/", str(ROOT), str(ROOT / "navi_project"), str(ROOT / "agent"),
        str(ROOT / "navi_project" / "__init__.py"), str(knowledge),
        f"{database}-wal", f"{database}-shm", str(database.parent), str(bob), str(link),
        f"{tmp_path}/../{tmp_path.name}/innocent-looking/../agent", "/etc/../root/.",
    ]


def test_pasted_entries_naming_navis_or_the_hosts_places_are_refused_and_nothing_changes_hands(
        owner, owner_client, navi_and_host_places, tmp_path):
    watched = [Path(p) for p in ("/etc", "/root", ROOT / "navi_project", ROOT / "agent", tmp_path / "home" / "bob")]
    before = snapshot(*watched)
    entries = {}
    for n, path in enumerate(navi_and_host_places):
        # The attack's spellings: the folder alone, as --root=, after other arguments.
        args = [[path], [f"--root={path}"], ["-y", "@modelcontextprotocol/server-filesystem", path]][n % 3]
        entries[f"e{n}"] = {"command": "cat", "args": args}
    answer = post_json(owner_client, "/mcp/servers/import", {"mcpServers": entries})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["servers"] == [], [s["name"] for s in body["servers"]]
    for n, path in enumerate(navi_and_host_places):
        error = body["errors"][f"e{n}"]
        assert "paths:" in error and ("holds" in error or "lies inside" in error), (path, error)
    assert not MCPServer.objects.exists()
    assert snapshot(*watched) == before


@pytest.mark.parametrize("field", ["paths", "writable_paths", "pending_paths"])
def test_the_form_refuses_them_too_in_every_field(owner, owner_client, navi_and_host_places, field):
    for path in navi_and_host_places:
        answer = post_json(owner_client, "/mcp/servers", {"name": "files", "transport": "stdio", "command": "cat",
                                                          field: [path]})
        assert answer.status_code == 400, (path, answer.content)
        assert "paths:" in answer.json()["error"]
    assert not MCPServer.objects.exists()


def test_system_code_navis_python_and_npm_packages_may_be_shown_but_never_written(owner, owner_client):
    code = ("/usr/lib", str(ROOT / "node_modules"), str(ROOT / "node_modules" / ".bin"), sys.prefix,
            site.getsitepackages()[0], os.path.realpath(sys.base_prefix))
    for n, path in enumerate(code):
        shown = post_json(owner_client, "/mcp/servers", {"name": f"code{n}", "transport": "stdio", "command": "cat",
                                                         "paths": [path], "enabled": False})
        assert shown.status_code == 201, shown.content
        written = post_json(owner_client, "/mcp/servers", {"name": f"w{n}", "transport": "stdio", "command": "cat",
                                                           "writable_paths": [path]})
        assert written.status_code == 400, written.content
        assert "holds" in written.json()["error"] or "lies inside" in written.json()["error"], written.content


def test_a_pasted_folder_waits_for_the_owner_and_is_left_as_it_was(owner, owner_client, tmp_path):
    notes = tmp_path / "notes"
    (notes / ".git" / "objects").mkdir(parents=True)
    (notes / "todo.md").write_text("mine")
    before = snapshot(notes, notes / ".git")
    config = {"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                                                 str(notes)]}}}
    answer = post_json(owner_client, "/mcp/servers/import", config)
    assert answer.status_code == 201, answer.content
    [made] = answer.json()["servers"]
    assert made["pending_paths"] == [str(notes)] and made["paths"] == [] and made["writable_paths"] == []
    server = wait_state(MCPServer.objects.get(pk=made["id"]))
    assert server.state == "failed" and str(notes) in server.last_error and "confirm" in server.last_error
    # A PATCH only confirms or drops a pending folder; it cannot slip a new one in as "pending".
    sneaky = patch_json(owner_client, f"/mcp/servers/{made['id']}", {"pending_paths": [str(notes), "/srv/x"]})
    assert sneaky.status_code == 200 and sneaky.json()["pending_paths"] == [str(notes)]
    dropped = patch_json(owner_client, f"/mcp/servers/{made['id']}", {"pending_paths": []})
    assert dropped.json()["pending_paths"] == [] and dropped.json()["paths"] == []
    assert snapshot(notes, notes / ".git") == before


def test_another_account_cannot_confirm_the_owners_folders(owner, owner_client, other_user, tmp_path):
    from tests.mcp_support import logged_in

    notes = tmp_path / "notes"
    notes.mkdir()
    made = post_json(owner_client, "/mcp/servers/import",
                     {"mcpServers": {"files": {"command": "cat", "args": [str(notes)]}}}).json()["servers"][0]
    answer = patch_json(logged_in(other_user), f"/mcp/servers/{made['id']}", {"paths": [str(notes)]})
    assert answer.status_code == 404
    assert MCPServer.objects.get(pk=made["id"]).pending_paths == [str(notes)]


@pytest.mark.skipif(not AS_ROOT, reason="the owner of a writable folder matters only when Navi runs as root")
def test_a_folder_of_roots_is_never_made_writable(owner, owner_client, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    before = snapshot(notes)
    answer = post_json(owner_client, "/mcp/servers", {"name": "files", "transport": "stdio", "command": "cat",
                                                      "writable_paths": [str(notes)]})
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert str(notes) in error and "belongs to root" in error and "read-only" in error
    mixed = tmp_path / "a", tmp_path / "b"
    for n, folder in enumerate(mixed):
        folder.mkdir()
        os.chown(folder, 4242 + n, 4242 + n)  # the test's own folders, of two users
    answer = post_json(owner_client, "/mcp/servers", {"name": "files", "transport": "stdio", "command": "cat",
                                                      "writable_paths": [str(p) for p in mixed]})
    assert answer.status_code == 400 and "different users" in answer.json()["error"]
    assert snapshot(notes) == before and not MCPServer.objects.exists()


def test_a_row_saved_by_hand_with_a_host_place_never_starts(owner, tmp_path):
    before = snapshot(Path("/etc"), ROOT / "navi_project")
    hub = mcp_client.get_hub()
    for writable in (["/etc"], [str(ROOT / "navi_project")]):
        server = MCPServer.objects.create(owner=owner, name=f"sneaky{len(writable[0])}", transport="stdio",
                                          command="cat", writable_paths=writable)
        hub.run_sync(hub.ensure(ServerConfig.from_row(server), 10), 30)
        server = wait_state(server)
        assert server.state == "failed" and writable[0] in server.last_error, server.last_error
    assert snapshot(Path("/etc"), ROOT / "navi_project") == before


# --- the sandbox's own folders ------------------------------------------------------------------
@pytest.mark.skipif(not AS_ROOT, reason="folders change hands only when Navi runs as root")
def test_hand_over_leaves_anything_outside_navis_sandbox_folders_alone(settings, tmp_path):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "file").write_text("x")
    before = snapshot(outside, outside / "deep")
    sandbox.hand_over(outside)
    sandbox.hand_over(ROOT / "navi_project")  # even asked directly
    argv = sandbox.bwrap_argv("/usr/bin/bwrap", settings.NAVI_WORKSPACE, host_binds=[(str(outside), str(outside))],
                              run_as=(4242, 4242))
    assert "--reuid=4242" in argv
    assert snapshot(outside, outside / "deep") == before
    with pytest.raises(ValueError):
        sandbox.bwrap_argv("/usr/bin/bwrap", settings.NAVI_WORKSPACE, run_as=(0, 0))


@pytest.mark.skipif(not AS_ROOT, reason="folders change hands only when Navi runs as root")
def test_in_a_workspace_only_what_the_server_wrote_changes_hands(settings, tmp_path):
    ws = Path(settings.NAVI_WORKSPACE) / "7"
    ws.mkdir(parents=True)
    (ws / "by-navi.txt").write_text("navi")
    (ws / "by-alice.txt").write_text("alice")
    os.chown(ws / "by-alice.txt", 4343, 4343)  # the test's own file, as another account's
    sandbox.hand_over(ws)
    assert (ws / "by-navi.txt").stat().st_uid == 65534
    assert (ws / "by-alice.txt").stat().st_uid == 4343


def _nest(top: Path, depth: int) -> None:
    """`depth` folders inside each other under `top`, with a file at the bottom (no recursion)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


@pytest.mark.skipif(not sandbox.bwrap_binary(), reason="needs bubblewrap")
async def test_a_folder_nested_1100_deep_breaks_no_later_call(settings, tmp_path):
    """Issue 50 item 3: the walk is a loop: a user tool's data folder (or a workspace) nested
    ~1 100 deep no longer makes every later call fail with RecursionError."""
    from tools_app import loader
    from tools_app.builtin.code_exec import CodeExecTool

    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.TOOL_TIMEOUT_S = 20
    path = Path(settings.TOOLS_DIR) / "keeper.py"
    path.write_text('name = "keeper"\ndescription = "keeps"\nparameters = {"type": "object", "properties": {}}\n\n\n'
                    "async def execute(params: dict) -> str:\n    return 'kept'\n")
    data = loader.tool_data_dir("keeper", None)
    _nest(data, 1100)
    _nest(Path(settings.NAVI_WORKSPACE), 1100)
    try:
        [tool], error = loader.build_tools("keeper", path, loader.read_metadata(path))
        assert not error
        for _ in range(2):
            result = await tool.execute({})
            assert result.success and result.output == "kept", result.error
            ran = await CodeExecTool().execute({"code": "print('ok')"})
            assert ran.success and "ok" in ran.output, ran.output
    finally:  # pytest's own clean-up of old temp folders recurses (RecursionError at the session's end)
        fstree.rmtree(data / "d")
        fstree.rmtree(Path(settings.NAVI_WORKSPACE) / "d")


# --- headers of pasted HTTP entries ------------------------------------------------------------
BAD_HEADERS = [
    {"Authorization": "Bearer x\r\nHost: evil.example"}, {"X-Team": "a\nb"}, {"Host": "evil.example"},
    {"host": "evil.example"}, {"Content-Length": "0"}, {"Transfer-Encoding": "chunked"}, {"X-Big": "x" * 9000},
    {"Bad Name": "x"}, {"X-Nul": "a\x00b"}, {f"X-{n}": "v" for n in range(31)},
]


@pytest.mark.usefixtures("loopback_mcp")
def test_pasted_http_headers_are_checked_like_the_forms(owner, owner_client):
    entries = {f"h{n}": {"url": "http://127.0.0.1:9/mcp", "headers": headers} for n, headers in enumerate(BAD_HEADERS)}
    answer = post_json(owner_client, "/mcp/servers/import", {"mcpServers": entries})
    assert answer.status_code == 201 and answer.json()["servers"] == [], answer.content
    for n in range(len(BAD_HEADERS)):
        assert answer.json()["errors"][f"h{n}"].startswith("headers:"), answer.json()["errors"][f"h{n}"]
    for headers in BAD_HEADERS:
        form = post_json(owner_client, "/mcp/servers", {"name": "web", "transport": "http",
                                                        "url": "http://127.0.0.1:9/mcp", "headers": headers})
        assert form.status_code == 400 and form.json()["error"].startswith("headers:"), (headers, form.content)
    assert not MCPServer.objects.exists()
    good = post_json(owner_client, "/mcp/servers", {"name": "web", "transport": "http", "url": "http://127.0.0.1:9/mcp",
                                                    "headers": {"Authorization": "Bearer ok", "X-Team": "blue"}})
    assert good.status_code == 201, good.content
    patched = patch_json(owner_client, f"/mcp/servers/{good.json()['id']}", {"headers": {"Host": "evil"}})
    assert patched.status_code == 400 and json.loads(patched.content)["error"].startswith("headers:")


def test_pasted_env_names_and_values_are_checked(owner, owner_client):
    for env in ({"BAD NAME": "x"}, {"X": "a\x00b"}, {"1X": "y"}):
        answer = post_json(owner_client, "/mcp/servers/import", {"mcpServers": {"t": {"command": "cat", "env": env}}})
        assert answer.json()["errors"]["t"].startswith("env:"), answer.content
    assert not MCPServer.objects.exists()
