"""Error texts without the server's insides: absolute paths of Navi's folders and process ids.

A tool error or an HTTP error is read by the model (and so by whoever steers it) and by other
users: `/srv/navi/workspace/3/notes.txt` tells them where Navi lives, who else has a workspace,
and `pid 4711` which process to aim at. The owner loses nothing: paths in their workspace become
relative (the form the tools take), the other folders get their names.
"""

from __future__ import annotations

import os
import re
import sys

from django.conf import settings

PID = re.compile(r"\b(pid|process id|process)([\s:=#]*)\d{2,}\b", re.IGNORECASE)


def _forms(path: object) -> set[str]:
    """The path as configured and as resolved (a /tmp symlink, a relative setting)."""
    text = str(path).rstrip("/")
    if not text:
        return set()
    return {text, os.path.realpath(text).rstrip("/")} - {"", "/"}


def _server_folders() -> tuple[tuple[str, str], ...]:
    named = [
        (settings.TOOLS_DIR, "user_tools"),
        (getattr(settings, "SESSION_FILES_DIR", ""), "session_files"),
        (settings.NAVI_WORKSPACE, "workspace"),
        (sys.prefix, "python"),
        (settings.BASE_DIR, "navi"),
    ]
    pairs = {(form, f"<{label}>") for folder, label in named for form in _forms(folder)}
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def server_paths(text: str | None, own_root: str | None = None) -> str | None:
    """`text` with Navi's folders named instead of spelled out; paths in `own_root` (the
    caller's workspace) relative to it, as the tools read them. None stays None."""
    if not text:
        return text
    for root in sorted(_forms(own_root), key=len, reverse=True) if own_root else ():
        text = re.sub(re.escape(root) + r"/(?=\S)", "", text)
        text = re.sub(re.escape(root) + r"(?![\w.-])", "your workspace", text)
    for folder, label in _server_folders():
        text = re.sub(re.escape(folder) + r"(?=/|\b|$)", label, text)
    return PID.sub(lambda m: f"{m.group(1)}{m.group(2)}…", text)
