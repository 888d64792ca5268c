"""Earlier versions of the files the filesystem tool changed: before a write over a file, a
delete of one or a move onto one, its old content is kept here, so a wrong call (a model that
overwrote the owner's file with invented content) is undone in one step: `filesystem
action=restore`, or the Restore button on the call's card (`POST /files/versions/<id>/restore`).

Each user's versions live in `NAVI_WORKSPACE/.versions/<user id>/` — beside the workspaces, not
in one, so the model's own file listing never shows them. Bounded: a file over
FILE_VERSION_MAX_BYTES is not kept (the result says so), and a user keeps the newest
FILE_VERSIONS_KEPT versions. Folders are not kept (a recursive delete says so).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from tools_app.safe_paths import PathRefused, check_writable, locate, open_regular
from tools_app.workspace import Root

VERSION_ID = re.compile(r"^\d{19}-[0-9a-f]{6}$")
MARK = "[previous version kept: {id}]"  # the chat page finds the id here for its Restore button
MARK_RE = re.compile(r"\[previous version kept: (\d{19}-[0-9a-f]{6})\]")


def max_bytes() -> int:
    return int(getattr(settings, "FILE_VERSION_MAX_BYTES", 10_000_000))


def kept_count() -> int:
    return int(getattr(settings, "FILE_VERSIONS_KEPT", 200))


def store_for(user_id: int | None) -> Path:
    """The user's version folder (0700), created on demand."""
    folder = Path(settings.NAVI_WORKSPACE).resolve() / ".versions" / str(int(user_id or 0))
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


@dataclass
class Kept:
    """The outcome of keeping a file before a change: its version id, or why none was kept."""

    version_id: str = ""
    skipped: str = ""  # e.g. "it is over 10 MB"

    def note(self, shown: str) -> str:
        if self.version_id:
            return (f" (its previous content is kept: filesystem action=restore path={shown} brings it back) "
                    f"{MARK.format(id=self.version_id)}")
        if self.skipped:
            return f" (no earlier version of {shown} was kept: {self.skipped})"
        return ""


def keep_open_file(fd: int, real: str, shown: str, action: str, user_id: int | None) -> Kept:
    """Copy the regular file open at `fd` (positioned anywhere) into the user's store."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        return Kept()  # nothing to lose
    if info.st_size > max_bytes():
        return Kept(skipped=f"it is over {max_bytes() // 1_000_000} MB")
    store = store_for(user_id)
    version_id = f"{time.time_ns():019d}-{secrets.token_hex(3)}"
    data_path = store / f"{version_id}.bin"
    with open(data_path, "xb") as out:
        os.lseek(fd, 0, os.SEEK_SET)
        while chunk := os.read(fd, 1 << 20):
            out.write(chunk)
    meta = {"path": real, "shown": shown, "action": action, "size": info.st_size, "kept_at": time.time()}
    (store / f"{version_id}.json").write_text(json.dumps(meta), encoding="utf-8")
    _prune(store)
    return Kept(version_id=version_id)


def keep(root: Root, real: str, shown: str, action: str, user_id: int | None) -> Kept:
    """Keep the file at `real` if it is a regular file (opened through the checked root)."""
    try:
        fd = open_regular(root, real)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PathRefused):
        return Kept()
    try:
        return keep_open_file(fd, real, shown, action, user_id)
    finally:
        os.close(fd)


def _prune(store: Path) -> None:
    ids = sorted(p.stem for p in store.glob("*.json"))
    for old in ids[: max(0, len(ids) - kept_count())]:
        for suffix in (".json", ".bin"):
            (store / f"{old}{suffix}").unlink(missing_ok=True)


def versions(user_id: int | None, real: str | None = None) -> list[dict]:
    """The user's kept versions, newest first (of one path when `real` is given)."""
    store = store_for(user_id)
    out = []
    for meta_path in sorted(store.glob("*.json"), reverse=True):
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if real is None or meta.get("path") == real:
            out.append({"id": meta_path.stem, **meta})
    return out


class NoVersion(LookupError):
    """No kept version matches; the message says what to do."""


def restore(version_id: str, user_id: int | None, roots: list[Root], base: str) -> str:
    """Write a kept version back to its path (checked again against today's roots). What is
    there now is kept first, so a restore can itself be undone. Returns the result line."""
    if not VERSION_ID.match(version_id or ""):
        raise NoVersion(f"no kept version {version_id!r}")
    store = store_for(user_id)
    meta_path, data_path = store / f"{version_id}.json", store / f"{version_id}.bin"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise NoVersion(f"no kept version {version_id!r}: it may have been pruned (the newest "
                        f"{kept_count()} are kept)") from None
    root, real = locate(meta["path"], roots, base)
    check_writable(root, real)
    shown = meta.get("shown") or real
    before = keep(root, real, shown, "restore", user_id)
    fd = open_regular(root, real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_parents=True)
    with os.fdopen(fd, "wb") as out, open(data_path, "rb") as src:
        shutil.copyfileobj(src, out)
    note = f" What was there before is kept too. {MARK.format(id=before.version_id)}" if before.version_id else ""
    return f"Restored {shown} to its version from before the {meta.get('action', 'change')} ({meta['size']} bytes).{note}"


def latest_for(user_id: int | None, real: str) -> str:
    """The newest kept version of a path, or NoVersion saying so."""
    found = versions(user_id, real)
    if not found:
        raise NoVersion(f"no earlier version of {real} is kept; only files changed by the filesystem tool are")
    return found[0]["id"]
