"""Where a run's files live, and which folders the file tools may open for it.

Each user gets a private workspace `NAVI_WORKSPACE/<user id>` (filesystem, code_exec, terminal,
user tools, image_view, share_file all start there): one user's tools never see another user's
files. Without a user in context (management commands, direct calls) it is NAVI_WORKSPACE.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings

from sessions_app.services import session_files_dir
from tools_app.permissions import user_has_host_tools

from .context import current_chat_session_id, current_user_id


def workspace_for(user_id: int | None = None) -> Path:
    """The (resolved) workspace of `user_id`, or of the run's user; created on demand."""
    if user_id is None:
        user_id = current_user_id.get()
    root = Path(settings.NAVI_WORKSPACE)
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    if user_id is None:
        return root
    folder = root / str(int(user_id))
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    return folder


@dataclass(frozen=True)
class Root:
    """A folder the file tools may open (a real path), and whether they may change it."""

    path: str
    writable: bool

    def contains(self, real: str) -> bool:
        return real == self.path or real.startswith(self.path.rstrip("/") + "/")


def tools_dir_real() -> str:
    return os.path.realpath(settings.TOOLS_DIR)


def configured_roots() -> list[Root]:
    """FS_ALLOWED_PATHS beyond the workspace ('*' = Root('/')). An entry naming NAVI_WORKSPACE
    means the run's own workspace, never the folder of every user."""
    workspace_root = os.path.realpath(settings.NAVI_WORKSPACE)
    roots = []
    for entry in (e.strip() for e in str(settings.FS_ALLOWED_PATHS).split(",")):
        if not entry:
            continue
        if entry == "*":
            roots.append(Root("/", True))
            continue
        path = Path(entry).expanduser()
        real = os.path.realpath(path if path.is_absolute() else Path(settings.BASE_DIR) / path)
        if real != workspace_root:
            roots.append(Root(real, True))
    return roots


def file_roots(host_tools: bool) -> list[Root]:
    """The folders of this run: its workspace, its session's uploads (read-only) and — for
    holders of run_host_tools, or outside a run — the owner's extra FS_ALLOWED_PATHS."""

    roots = [Root(str(workspace_for()), True)]
    session_id = current_chat_session_id.get()
    if session_id:
        roots.append(Root(os.path.realpath(session_files_dir(session_id)), False))
    if host_tools or current_user_id.get() is None:
        roots += configured_roots()
    return roots


async def current_file_roots() -> list[Root]:
    """file_roots() for the run's user; the permission is only looked up when it matters."""
    user_id = current_user_id.get()
    host_tools = False
    if user_id is not None and configured_roots():

        host_tools = await sync_to_async(user_has_host_tools)(user_id)
    return file_roots(host_tools)
