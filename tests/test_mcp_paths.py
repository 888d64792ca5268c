"""Issue 35 item 6: an owner's stdio MCP server may not be shown Navi's own data. `paths` of `/`,
the database file, the checkout, the key files, session files, user tools or another user's
workspace are refused (400, nothing saved); a row that holds one anyway never starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from navi_project import places
from tests.mcp_support import patch_json, post_json, wait_state
from tools_app.mcp import client as mcp_client
from tools_app.mcp.config import ServerConfig
from tools_app.models import MCPServer
from tools_app.workspace import workspace_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_hub")]


def _add(client, paths: list[str], name: str = "files"):
    body = {"name": name, "transport": "stdio", "command": "cat", "paths": paths}
    return post_json(client, "/mcp/servers", body)


def _refused_paths(owner, other_user, tmp_path) -> list[str]:
    base = Path(django_settings.BASE_DIR)
    link = tmp_path / "innocent"
    link.symlink_to(base)
    return [
        "/", str(base), str(base / ".env"), str(base / ".navi_secret_key"), str(base / ".navi_vapid_key"),
        str(django_settings.SESSION_FILES_DIR), str(Path(django_settings.SESSION_FILES_DIR) / "abc"),
        str(django_settings.TOOLS_DIR), str(django_settings.NAVI_WORKSPACE), str(workspace_for(other_user.pk)),
        str(link), f"{base}/../{base.name}", "relative/folder",
    ]


def test_paths_holding_navis_data_secrets_or_checkout_are_refused(owner, owner_client, other_user, tmp_path):
    for path in _refused_paths(owner, other_user, tmp_path):
        answer = _add(owner_client, ["/tmp", path])
        assert answer.status_code == 400, (path, answer.content)
        error = answer.json()["error"]
        assert "paths:" in error and ("Give a folder" in error or "absolute path" in error), error
    assert not MCPServer.objects.exists()


def test_a_patch_cannot_add_them_either(owner, owner_client, other_user, tmp_path):
    mine = tmp_path / "mine"
    created = _add(owner_client, [str(mine)])
    assert created.status_code == 201, created.content
    server_id = created.json()["id"]
    for path in _refused_paths(owner, other_user, tmp_path):
        answer = patch_json(owner_client, f"/mcp/servers/{server_id}", {"paths": [path]})
        assert answer.status_code == 400, (path, answer.content)
    assert MCPServer.objects.get(pk=server_id).paths == [str(mine)]


def test_a_folder_of_the_owner_their_own_workspace_and_code_in_the_checkout_are_fine(owner, owner_client, tmp_path):
    mine = workspace_for(owner.pk) / "notes"
    code = Path(django_settings.BASE_DIR) / "node_modules"  # e.g. a server installed by npm
    answer = _add(owner_client, [str(tmp_path / "notes"), str(mine), str(code)])
    assert answer.status_code == 201, answer.content


def test_the_database_file_outside_the_checkout_is_refused_with_its_folders(owner, owner_client, monkeypatch,
                                                                          tmp_path):
    # Where a deployment keeps it (DB_PATH=/var/lib/navi/navi.db); the test database is in memory
    # (or PostgreSQL), and overriding DATABASES would point later tests' connections elsewhere.
    database = tmp_path / "var" / "navi" / "navi.db"
    monkeypatch.setattr(places, "database_files", lambda: [str(database), f"{database}-wal", f"{database}-shm"])
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm"), database.parent, tmp_path / "var"):
        answer = _add(owner_client, [str(path)])
        assert answer.status_code == 400 and "Navi's database" in answer.json()["error"], answer.content
    assert _add(owner_client, [str(tmp_path / "var" / "other")]).status_code == 201


def test_a_row_saved_with_the_checkout_anyway_never_starts(owner):
    checkout = str(django_settings.BASE_DIR)
    server = MCPServer.objects.create(owner=owner, name="sneaky", transport="stdio", command="cat", paths=[checkout])
    hub = mcp_client.get_hub()
    hub.run_sync(hub.ensure(ServerConfig.from_row(server), 10), 30)
    server = wait_state(server)
    assert server.state == "failed" and "Navi's checkout" in server.last_error
