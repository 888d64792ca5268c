"""Error texts a tool or the API gives never spell out the server's folders or process ids
(issue #26, item 7): the model, and whoever steers it, reads them."""

from __future__ import annotations

import os
import sys

import pytest
from django.conf import settings

from agent.registry import get_agent
from navi_project.redact import server_paths
from tools_app.context import current_user_id

pytestmark = pytest.mark.django_db(transaction=True)


def _assert_no_server_insides(text: str) -> None:
    for folder in (settings.BASE_DIR, settings.NAVI_WORKSPACE, settings.TOOLS_DIR, sys.prefix):
        for form in {str(folder), os.path.realpath(folder)}:
            assert form not in text, (form, text)
    assert str(os.getpid()) not in text, text


@pytest.mark.parametrize(
    ("tool", "params", "expected"),
    [
        ("filesystem", {"action": "read", "path": "nofile.txt"}, "not found: nofile.txt"),
        ("filesystem", {"action": "list", "path": "sub/dir"}, "not found: sub"),
        ("filesystem", {"action": "read", "path": "/etc/shadow"}, "outside the allowed paths (your workspace)"),
        ("filesystem", {"action": "write", "path": "../../x.txt", "content": "x"}, "outside the allowed paths"),
    ],
)
async def test_tool_errors_name_paths_as_the_owner_sees_them(owner, tool, params, expected):
    token = current_user_id.set(owner.id)
    try:
        result = await get_agent().tools.call(tool, params)
    finally:
        current_user_id.reset(token)
    assert not result.success
    assert expected in result.error, result.error
    _assert_no_server_insides(result.error)


def test_server_folders_and_pids_are_named_not_spelled(settings, tmp_path):
    own = tmp_path / "workspace" / "7"
    text = (
        f"[Errno 2] No such file: '{own}/notes/a.txt' in {own}; see {settings.TOOLS_DIR}/greet.py, "
        f"{settings.BASE_DIR}/navi.db, {sys.prefix}/lib/python3.11/x.py (pid {os.getpid()}, process 1234)"
    )
    shown = server_paths(text, own_root=str(own))
    assert "'notes/a.txt' in your workspace" in shown
    assert "<user_tools>/greet.py" in shown and "<navi>/navi.db" in shown and "<python>/lib" in shown
    assert "pid …" in shown and "process …" in shown
    _assert_no_server_insides(shown)
    assert server_paths(None) is None and server_paths("plain words 12345") == "plain words 12345"
